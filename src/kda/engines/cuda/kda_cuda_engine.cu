// The KDA cuda engine: support checks, the path choice (recurrent for short sequences, chunked
// for long ones), the chunked path's workspace, and KdaParams -> DeviceParams.
#include "kda/engines/cuda/kda_cuda_engine.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_cuda_path.h"
#include "kda/reference.h"

namespace groupattn {
namespace {

using kda_cuda::ChunkLayout;
using kda_cuda::DeviceParams;

// Head dims with compiled kernels (a subset of kKdaHeadDims; K and V independently).
constexpr int64_t kCudaKdaHeadDims[] = {64, 128};
constexpr int64_t kMaxGridYZ = 65535;

bool served_dim(int64_t d) {
  for (int64_t x : kCudaKdaHeadDims) {
    if (x == d) return true;
  }
  return false;
}

struct Shape {
  int64_t B, T, H, K, HV, V, N;
  bool varlen;
};

Shape shape_of(const KdaParams& p) {
  Shape s{p.q.shape[0], p.q.shape[1], p.q.shape[2], p.q.shape[3], p.v.shape[2], p.v.shape[3], 0, false};
  s.varlen = p.cu_seqlens.defined();
  s.N = s.varlen ? p.cu_seqlens.shape[0] - 1 : s.B;
  return s;
}

ChunkLayout layout_of(const Shape& s) {
  return kda_cuda::chunk_layout(s.B, s.T, s.N, s.varlen, s.HV, s.K, s.V);
}

// Recurrent when sequences average at most 16 tokens (the decode / fused_recurrent shape): one
// pass over the state, no workspace. Else the fused one-launch chunked kernel for small problems
// (no workspace either), else the two-kernel chunked path. The rules and their cost model:
// kda_cuda_path.h. The SM count is the current device's (cached: one cudaGetDevice per ask);
// workspace_bytes and run ask on the same device, so they agree.
bool use_recurrent(const Shape& s) { return kda_cuda::use_recurrent_path(s.T, s.N, s.varlen); }

KdaCudaPath auto_path(const Shape& s) {
  if (use_recurrent(s)) return KdaCudaPath::kRecurrent;
  // Past the fused path's token bound no SM count admits it: the device is not asked (this runs in
  // both workspace_bytes and run; host cost, issue 11). The same answer as use_fused_path's.
  if (!kda_cuda::within_fused_tokens(s.T)) return KdaCudaPath::kChunked;
  int sms = 0, cc = 0;
  if (cuda_device_properties(&sms, &cc).ok() && kda_cuda::use_fused_path(s.T, s.N, s.varlen, s.HV, s.V, sms) &&
      kda_cuda::fused_path_arch(cc)) {
    return KdaCudaPath::kChunkedFused;
  }
  return KdaCudaPath::kChunked;
}

size_t path_workspace_bytes(const Shape& s, KdaCudaPath path);

DeviceParams device_params(const KdaParams& p) {
  const Shape s = shape_of(p);
  DeviceParams d;
  d.q = p.q.data;
  d.k = p.k.data;
  d.v = p.v.data;
  d.g = static_cast<const float*>(p.g.data);
  d.beta = static_cast<const float*>(p.beta.data);
  d.out = p.out.data;
  d.s_in = static_cast<const float*>(p.initial_state.data);
  d.s_out = static_cast<float*>(p.final_state.data);
  d.cu_seqlens = p.cu_seqlens.data;
  d.cu_i64 = p.cu_seqlens.defined() && p.cu_seqlens.dtype == DType::kI64;
  d.state_indices = static_cast<const int32_t*>(p.state_indices.data);
  d.A_log = static_cast<const float*>(p.A_log.data);
  d.dt_bias = static_cast<const float*>(p.dt_bias.data);
  auto s3 = [](const TensorView& t, int64_t* b, int64_t* tt, int64_t* h) {
    *b = t.stride[0];
    *tt = t.stride[1];
    *h = t.stride[2];
  };
  s3(p.q, &d.q_sb, &d.q_st, &d.q_sh);
  s3(p.k, &d.k_sb, &d.k_st, &d.k_sh);
  s3(p.v, &d.v_sb, &d.v_st, &d.v_sh);
  s3(p.g, &d.g_sb, &d.g_st, &d.g_sh);
  s3(p.beta, &d.b_sb, &d.b_st, &d.b_sh);
  s3(p.out, &d.o_sb, &d.o_st, &d.o_sh);
  if (p.initial_state.defined()) {
    s3(p.initial_state, &d.si_sn, &d.si_sh, &d.si_sr);
    d.pool_in = p.initial_state.shape[0];
  }
  if (p.final_state.defined()) {
    s3(p.final_state, &d.so_sn, &d.so_sh, &d.so_sr);
    d.pool_out = p.final_state.shape[0];
  }
  if (p.dt_bias.defined()) d.dt_sh = p.dt_bias.stride[0];
  d.B = s.B;
  d.T = s.T;
  d.N = s.N;
  d.H = static_cast<int>(s.H);
  d.HV = static_cast<int>(s.HV);
  d.K = static_cast<int>(s.K);
  d.V = static_cast<int>(s.V);
  d.group = static_cast<int>(s.HV / s.H);
  d.gate = p.gate == KdaGate::kSoftplus     ? kda_cuda::kGateSoftplus
           : p.gate == KdaGate::kLowerBound ? kda_cuda::kGateLowerBound
                                            : kda_cuda::kGateLogDecay;
  d.lower_bound = p.lower_bound;
  d.scale = static_cast<float>(kda_effective_scale(p));
  d.l2norm = p.use_qk_l2norm;
  d.beta_sigmoid = p.use_beta_sigmoid;
  d.neg_eig = p.allow_neg_eigval;
  d.v_first = p.state_layout == KdaStateLayout::kVFirst;
  d.pair_anchor_bound = kda_cuda::kda_prep_anchored() ? kda_cuda::kPairAnchorBound : -1.f;
  return d;
}

class CudaKda final : public KdaEngine {
 public:
  const char* name() const override { return "cuda"; }
  const char* description() const override {
    return "portable CUDA, sm80+: exact per-token recurrence for short sequences (decode), 16-token "
           "chunked WY/UT prefill in fp32 for long ones (one fused launch, no workspace, for small ones); "
           "on compute capability 9.0 at K = V = 128 the chunked state pass runs on tf32 wgmma (sm_90a)";
  }
  std::string supports() const override {
    return "device tensors, q/k/v bf16/f16, K and V in {64, 128}; all gates, GVA, varlen (int32/int64), "
           "state pools (V-first and K-first, in place)";
  }
  Status available() const override {
    if (cuda_device_count() <= 0) return NotSupported("no CUDA device visible");
    int sms = 0, cc = 0;
    GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
    if (cc < 80) {
      return NotSupported("kda cuda engine needs compute capability 8.0+ (device has " + std::to_string(cc) + ")");
    }
    return Status::Ok();
  }

  Status check_support(const KdaParams& p) const override {
    const std::pair<const TensorView*, const char*> all[] = {
        {&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.g, "g"}, {&p.beta, "beta"}, {&p.out, "out"},
        {&p.initial_state, "initial_state"}, {&p.final_state, "final_state"}, {&p.cu_seqlens, "cu_seqlens"},
        {&p.state_indices, "state_indices"}, {&p.A_log, "A_log"}, {&p.dt_bias, "dt_bias"}};
    for (const auto& [t, what] : all) {
      if (t->defined() && t->device != Device::kCUDA) {
        return NotSupported(std::string("kda cuda engine takes device (CUDA) tensors only; ") + what +
                            " is in host memory (copy it to the GPU, or use the reference engine)");
      }
    }
    if (p.q.dtype != DType::kBF16 && p.q.dtype != DType::kF16) {
      return NotSupported(std::string("kda cuda engine: q/k/v dtype ") + dtype_name(p.q.dtype) +
                          " not supported (accepted: bf16, f16; f32 runs on the reference engine)");
    }
    const Shape s = shape_of(p);
    if (!served_dim(s.K) || !served_dim(s.V)) {
      return NotSupported("kda cuda engine: head dims K = " + std::to_string(s.K) + ", V = " + std::to_string(s.V) +
                          " not compiled (accepted: K and V each 64 or 128)");
    }
    if (s.HV > kMaxGridYZ) {
      return NotSupported("kda cuda engine: HV = " + std::to_string(s.HV) + " value heads (accepted: <= " +
                          std::to_string(kMaxGridYZ) + ")");
    }
    const int64_t grid_x_max = std::numeric_limits<int32_t>::max();
    // The chunked state pass's grid x is sequence x (V / 16) value tiles.
    if (s.N * (s.V / kda_cuda::kValueTile) > grid_x_max || layout_of(s).max_chunks > grid_x_max) {
      return NotSupported(
          "kda cuda engine: too many sequences or chunks for one grid (accepted: N * V / 16 and chunks < 2^31)");
    }
    return Status::Ok();
  }

  size_t workspace_bytes(const KdaParams& p) const override {
    const Shape s = shape_of(p);
    return path_workspace_bytes(s, auto_path(s));
  }

  Status run(const KdaParams& p, void* workspace, void* stream) const override {
    const Shape s = shape_of(p);
    const KdaCudaPath path = auto_path(s);
    if (workspace == nullptr) {
      if (const size_t need = path_workspace_bytes(s, path); need > 0) {
        return InvalidArgument("kda cuda engine: the chunked path needs a workspace of " + std::to_string(need) +
                               " bytes (none given)");
      }
    }
    return run_path(p, path, workspace, stream);
  }

  static Status run_path(const KdaParams& p, KdaCudaPath path, void* workspace, void* stream) {
    const DeviceParams d = device_params(p);
    const bool bf16 = p.q.dtype == DType::kBF16;
    auto* st = static_cast<cudaStream_t>(stream);
    host_timing::mark("kda plan (device params)");
    if (path == KdaCudaPath::kRecurrent) return kda_cuda::launch_recurrent(d, bf16, st);
    if (path == KdaCudaPath::kChunkedFused) return kda_cuda::launch_chunked_fused(d, bf16, st);
    return kda_cuda::launch_chunked(d, bf16, workspace, layout_of(shape_of(p)), st);
  }
};

const CudaKda& engine_instance() {
  static const CudaKda engine;
  return engine;
}

size_t path_workspace_bytes(const Shape& s, KdaCudaPath path) {
  if (path == KdaCudaPath::kRecurrent || path == KdaCudaPath::kChunkedFused) return 0;
  return layout_of(s).total_bytes;
}

}  // namespace

const KdaEngine& kda_cuda_engine() { return engine_instance(); }

KdaCudaPath kda_cuda_auto_path(const KdaParams& p) { return auto_path(shape_of(p)); }
void kda_cuda_set_state_stages(int stages) { kda_cuda::set_kda_state_stages(stages); }
void kda_cuda_set_state_cols(int mode) { kda_cuda::set_kda_state_cols(mode); }
void kda_cuda_set_driver_launch(int mode) { kda_cuda::set_kda_driver_launch(mode); }
void kda_cuda_set_prep_pairs(int mode) { kda_cuda::set_kda_prep_pairs(mode); }
void kda_cuda_set_cluster_chunked(int mode) { kda_cuda::set_kda_cluster_chunked(mode); }
bool kda_cuda_last_call_used_cluster_kernel() { return kda_cuda::last_chunked_used_cluster_kernel(); }
void kda_cuda_set_state_sm90(int mode) { kda_cuda::set_kda_state_sm90(mode); }
bool kda_cuda_last_call_used_sm90_state() { return kda_cuda::last_chunked_used_sm90_state(); }
void kda_cuda_set_state_streamed(int mode) { kda_cuda::set_kda_state_streamed(mode); }
bool kda_cuda_last_call_streamed() { return kda_cuda::last_chunked_streamed(); }

Status kda_cuda_run_path(const KdaParams& p, KdaCudaPath path, void* stream) {
  GA_RETURN_IF_ERROR(validate_kda(p));
  GA_RETURN_IF_ERROR(engine_instance().available());
  GA_RETURN_IF_ERROR(engine_instance().check_support(p));
  const Shape s = shape_of(p);
  if (path == KdaCudaPath::kAuto) path = auto_path(s);
  const size_t need = path_workspace_bytes(s, path);
  if (need == 0) return CudaKda::run_path(p, path, nullptr, stream);
  void* ws = nullptr;
  GA_RETURN_IF_ERROR(allocate_workspace(need, stream, &ws));
  const Status r = CudaKda::run_path(p, path, ws, stream);
  const Status f = free_workspace(ws, stream);
  return r.ok() ? f : r;
}

}  // namespace groupattn
