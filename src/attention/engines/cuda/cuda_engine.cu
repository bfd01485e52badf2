// The portable CUDA engine (sm80+): support checks, split planning, workspace layout and dispatch
// over (dtype, head dim) to the explicit instantiations of launch_attention (inst_*.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention/attention_views.h"
#include "attention/engine_list.h"
#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/host_params.h"
#include "attention/engines/cuda/launch.h"
#include "attention/engines/cuda/mode_switch.h"
#include "attention/engines/cuda/split_planner.h"
#include "core/cuda_runtime_shim.h"
#include "cuda/cuda_check.h"
#include "groupattn/supported.h"

namespace groupattn {
namespace {

using cuda_engine::KernelParams;

// Head dims with a compiled instantiation (a subset of kAttentionHeadDims; D == Dv).
constexpr int64_t kCudaHeadDims[] = {32, 64, 128, 256};
constexpr bool in_supported_head_dims(int64_t d) {
  for (int64_t x : kAttentionHeadDims) {
    if (x == d) return true;
  }
  return false;
}
static_assert(in_supported_head_dims(32) && in_supported_head_dims(64) && in_supported_head_dims(128) &&
                  in_supported_head_dims(256),
              "the cuda engine's head dims must be a subset of supported.h's kAttentionHeadDims");
// Rows are copied in 16-byte chunks: base pointers and row strides must keep that alignment.
constexpr int64_t kVectorBytes = 16;
// Grid y and z limits (KV heads, batch).
constexpr int64_t kMaxGridYZ = 65535;

std::string list_head_dims() {
  std::string s;
  for (int64_t d : kCudaHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

// Every stride but the last (contiguous) one is a whole number of 16-byte chunks, and so is the base.
bool vector_aligned(const TensorView& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorBytes != 0) return false;
  const int64_t chunk = kVectorBytes / static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (t.shape[d] > 1 && t.stride[d] % chunk != 0) return false;
  }
  return true;
}

// Which kernel serves a problem: kAuto is the "cuda" engine's rule (launch.h, use_decode_kernel);
// kTile ("cuda-tile") and kDecode ("cuda-decode") pin one kernel for tests and benchmarks (native
// GQA and its copied-up twin compared on one kernel; both kernels timed at one shape). Automatic
// selection never reaches the pinned names: "cuda" comes first and serves everything they serve.
enum class Form { kAuto, kTile, kDecode };

// The sizes a call is planned with, derived from the params alone (no device reads).
struct Geometry {
  int64_t batch = 0, total_q = 0, max_q = 0, max_k = 0;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  bool q_varlen = false;
  KvLayout layout = KvLayout::kBatched;
  // Packed rows (token x query head of a KV group) of the longest sequence: at most
  // kDecodeMaxPackedRows at a decode head dim runs the decode kernel (launch.h,
  // use_decode_kernel), kDecodeRows packed rows per CTA; more decide the tile-kernel variant (rows
  // per CTA). m_blocks: query tiles per (sequence, KV head) of the kernel used.
  bool decode = false;
  int tile_rows = 0, m_blocks = 0;
};

int decode_ctas_per_sm_for(const AttentionParams& p, int64_t d);

bool is_16bit(const AttentionParams& p) { return p.q.dtype == DType::kBF16 || p.q.dtype == DType::kF16; }

Geometry geometry(const AttentionParams& p, Form form) {
  Geometry g;
  g.q_varlen = q_is_varlen(p);
  g.layout = kv_layout(p);
  g.heads_q = p.q.size(-2);
  g.heads_kv = p.k.size(-2);
  g.head_dim = p.q.size(-1);
  g.head_dim_v = p.v.size(-1);
  if (g.q_varlen) {
    g.batch = p.cu_seqlens_q.size(0) - 1;
    g.total_q = p.q.size(0);
    g.max_q = p.max_seqlen_q;
  } else {
    g.batch = p.q.size(0);
    g.max_q = p.q.size(1);
    g.total_q = g.batch * g.max_q;
  }
  switch (g.layout) {
    case KvLayout::kBatched:
      g.max_k = p.k.size(1);
      break;
    case KvLayout::kVarlen:
      g.max_k = p.max_seqlen_k;
      break;
    case KvLayout::kPaged:
      g.max_k = p.max_seqlen_k > 0 ? p.max_seqlen_k : p.block_table.size(1) * p.k.size(1);
      break;
  }
  const int64_t packed_rows = g.heads_kv > 0 ? g.max_q * (g.heads_q / g.heads_kv) : 0;
  // kDecode: check_support has declined what the decode kernel cannot serve.
  const bool decode_rule =
      form == Form::kDecode ||
      (form == Form::kAuto && cuda_engine::use_decode_kernel(static_cast<int>(g.head_dim), packed_rows));
  g.decode = decode_rule && is_16bit(p) && decode_ctas_per_sm_for(p, g.head_dim) > 0;
  g.tile_rows = g.decode ? cuda_engine::kDecodeRows : cuda_engine::tile_rows(static_cast<int>(g.head_dim), packed_rows);
  g.m_blocks = static_cast<int>((packed_rows + g.tile_rows - 1) / g.tile_rows);
  return g;
}

// CTAs of the decode kernel per SM for p's dtype (bf16 or f16) and head dim `d`; 0: not usable.
int decode_ctas_per_sm_for(const AttentionParams& p, int64_t d) {
  return p.q.dtype == DType::kBF16 ? cuda_engine::decode_ctas_per_sm_for<__nv_bfloat16>(d)
                                   : cuda_engine::decode_ctas_per_sm_for<__half>(d);
}

template <class T>
int ctas_per_sm_for(int64_t d, int tile_rows) {
  switch (d) {
    case 32:
      return cuda_engine::tile_ctas_per_sm<T, 32>(tile_rows);
    case 64:
      return cuda_engine::tile_ctas_per_sm<T, 64>(tile_rows);
    case 128:
      return cuda_engine::tile_ctas_per_sm<T, 128>(tile_rows);
    case 256:
      return cuda_engine::tile_ctas_per_sm<T, 256>(tile_rows);
    default:
      return 1;  // not reached: check_support declines other head dims
  }
}

int num_splits_for(const AttentionParams& p, const Geometry& g, int sm_count) {
  cuda_engine::SplitProblem sp;
  sp.sm_count = sm_count;
  sp.batch = static_cast<int>(g.batch);
  sp.kv_heads = static_cast<int>(g.heads_kv);
  sp.m_blocks = g.m_blocks;
  const int keys = g.decode ? cuda_engine::kDecodeBlockKeys : cuda_engine::tile_keys(static_cast<int>(g.head_dim));
  sp.n_blocks = static_cast<int>((g.max_k + keys - 1) / keys);
  const bool bf16 = p.q.dtype == DType::kBF16;
  if (g.decode) {
    sp.ctas_per_sm = decode_ctas_per_sm_for(p, g.head_dim);
    sp.wave_slack = cuda_engine::kDecodeWaveSlack;
  } else {
    sp.ctas_per_sm = bf16 ? ctas_per_sm_for<__nv_bfloat16>(g.head_dim, g.tile_rows)
                          : ctas_per_sm_for<__half>(g.head_dim, g.tile_rows);
  }
  return cuda_engine::plan_num_splits(sp, p.num_splits);
}

// The decode kernel's work list for batches of mixed lengths (decode_work_list.h; docs/ENGINES.md,
// "Mixed lengths: the work list"), or none (use false). The sm90 engine's conditions (its
// list_plan): the decode kernel with the automatic split count (a forced count keeps its meaning),
// per-sequence lengths the host cannot see (seqlens_k, or paged), no left window (the list balances
// whole sequences), an ordinary plan of at most kListMaxPlanSplits splits, a K/V upper bound of at
// least kListMinKvBytes, and a batch list_plane_wave_for serves (P from the decode kernel's CTAs
// per SM). Depends only on shapes and flags, never on data.
struct ListPlan {
  bool use = false;
  int plane_wave = 0;  // P
  int64_t slots = 0;   // list_slot_bound(P, B): the grid's CTAs per plane and the partials' slots
};

ListPlan list_plan(const AttentionParams& p, const Geometry& g, int num_splits, int sm_count) {
  ListPlan l;
  if (!g.decode || p.num_splits > 0 || g.m_blocks <= 0) return l;
  if (!cuda_engine::cuda_decode_work_list()) return l;
  const KernelParams kp = cuda_engine::kernel_params_from(p);
  if (kp.seqlens_k == nullptr || kp.window_left >= 0) return l;
  if (num_splits > cuda_engine::kListMaxPlanSplits) return l;
  const int64_t kv_bytes =
      2 * g.batch * g.max_k * g.heads_kv * g.head_dim * static_cast<int64_t>(dtype_size(p.k.dtype));
  if (kv_bytes < cuda_engine::kListMinKvBytes) return l;
  // The plan sums the batch's tile counts in 32-bit integers.
  constexpr int64_t kKeys = cuda_engine::kDecodeBlockKeys;
  if (g.batch * ((g.max_k + kKeys - 1) / kKeys) >= std::numeric_limits<int32_t>::max()) return l;
  l.plane_wave = cuda_engine::list_plane_wave_for(sm_count, decode_ctas_per_sm_for(p, g.head_dim), g.heads_kv,
                                                  g.m_blocks, g.batch);
  if (l.plane_wave <= 0) return l;
  l.slots = cuda_engine::list_slot_bound(l.plane_wave, g.batch);
  l.use = l.slots * g.m_blocks <= std::numeric_limits<int32_t>::max();
  return l;
}

size_t list_workspace_bytes(const ListPlan& l, const Geometry& g) {
  return cuda_engine::list_workspace_bytes(l.slots, g.max_q, g.heads_q, g.head_dim_v, g.batch);
}

template <class T>
Status dispatch_decode_head_dim(int64_t d, const KernelParams& kp, cudaStream_t stream, bool use_pdl) {
  switch (d) {
    case 64:
      return cuda_engine::launch_decode<T, 64>(kp, stream, use_pdl);
    case 128:
      return cuda_engine::launch_decode<T, 128>(kp, stream, use_pdl);
    case 256:
      return cuda_engine::launch_decode<T, 256>(kp, stream, use_pdl);
    default:
      return Status(StatusCode::kInternal, "cuda engine: no decode kernel for head dim " + std::to_string(d));
  }
}

template <class T>
Status dispatch_head_dim(int64_t d, const KernelParams& kp, int tile_rows, cudaStream_t stream,
                         bool use_pdl) {
  switch (d) {
    case 32:
      return cuda_engine::launch_attention<T, 32>(kp, tile_rows, stream, use_pdl);
    case 64:
      return cuda_engine::launch_attention<T, 64>(kp, tile_rows, stream, use_pdl);
    case 128:
      return cuda_engine::launch_attention<T, 128>(kp, tile_rows, stream, use_pdl);
    case 256:
      return cuda_engine::launch_attention<T, 256>(kp, tile_rows, stream, use_pdl);
    default:
      return NotSupported("cuda engine: head dim " + std::to_string(d) +
                          " not compiled (accepted: " + list_head_dims() + ")");
  }
}

class CudaAttention final : public AttentionEngine {
 public:
  explicit CudaAttention(Form form) : form_(form) {}
  const char* name() const override {
    switch (form_) {
      case Form::kTile:
        return "cuda-tile";
      case Form::kDecode:
        return "cuda-decode";
      default:
        return "cuda";
    }
  }
  const char* description() const override {
    switch (form_) {
      case Form::kTile:
        return "portable CUDA, every problem on the tile kernel (tests, benchmarks; automatic selection uses cuda), "
               "sm80 and newer";
      case Form::kDecode:
        return "portable CUDA, the decode kernel for up to 16 new tokens at any group (tests, benchmarks; automatic "
               "selection uses cuda), sm80 and newer";
      default:
        return "portable CUDA (mma.sync; decode kernel up to 16 packed token x head rows, tile kernel above), sm80 "
               "and newer";
    }
  }
  std::string supports() const override {
    if (form_ == Form::kDecode) {
      return "device tensors, bf16/f16, head dim 64, 128, 256 (D == Dv) where the decode kernel's shared memory "
             "fits, 16-byte aligned rows; up to " +
             std::to_string(cuda_engine::kDecodePinnedMaxTokens) +
             " query tokens per sequence (batched, varlen, paged K/V), split-KV, partial-output mode (KV shards)";
    }
    return "device tensors, bf16/f16, head dim " + list_head_dims() +
           " (D == Dv), 16-byte aligned rows; prefill and decode (batched, varlen, paged), split-KV, "
           "partial-output mode (KV shards)";
  }
  Status available() const override {
    if (cuda_device_count() <= 0) return NotSupported("no CUDA device visible");
    int sms = 0, cc = 0;
    GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
    if (cc < 80)
      return NotSupported("cuda engine needs compute capability 8.0+ (device has " + std::to_string(cc) +
                          ")");
    return Status::Ok();
  }

  Status check_support(const AttentionParams& p) const override {
    if (!all_views_on_device(p)) return NotSupported("cuda engine takes device (CUDA) tensors only; got a host tensor");
    if (kv_is_fp8(p)) {
      return NotSupported("cuda engine: fp8 (f8e4m3) KV caches are not supported yet (the reference engine serves them)");
    }
    if (p.q.dtype != DType::kBF16 && p.q.dtype != DType::kF16) {
      return NotSupported(std::string("cuda engine: dtype ") + dtype_name(p.q.dtype) +
                          " not supported (accepted: bf16, f16; the tensor-core path is 16-bit)");
    }
    const Geometry g = geometry(p, form_);
    if (g.head_dim != g.head_dim_v) {
      return NotSupported("cuda engine: D (" + std::to_string(g.head_dim) + ") != Dv (" +
                          std::to_string(g.head_dim_v) + ") not supported");
    }
    if (std::find(std::begin(kCudaHeadDims), std::end(kCudaHeadDims), g.head_dim) ==
        std::end(kCudaHeadDims)) {
      return NotSupported("cuda engine: head dim " + std::to_string(g.head_dim) +
                          " not supported (accepted: " + list_head_dims() + ")");
    }
    if (g.q_varlen && p.max_seqlen_q <= 0) {
      return NotSupported(
          "cuda engine: varlen Q needs max_seqlen_q > 0 (it sizes the grid without reading cu_seqlens_q)");
    }
    if (g.layout == KvLayout::kVarlen && p.max_seqlen_k <= 0) {
      return NotSupported("cuda engine: varlen K/V needs max_seqlen_k > 0 (it sizes the split plan)");
    }
    if (g.layout == KvLayout::kVarlen && p.seqlens_k.defined()) {
      return NotSupported(
          "cuda engine: seqlens_k with varlen K/V is not supported (lengths come from cu_seqlens_k)");
    }
    for (const auto& [t, what] :
         {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}}) {
      if (!vector_aligned(*t)) {
        return NotSupported(std::string("cuda engine: ") + what +
                            " must have a 16-byte aligned base and strides that are multiples of 16 bytes");
      }
    }
    const int64_t int_max = std::numeric_limits<int32_t>::max();
    if (g.batch > kMaxGridYZ || g.heads_kv > kMaxGridYZ) {
      return NotSupported("cuda engine: batch and KV heads must be <= " + std::to_string(kMaxGridYZ));
    }
    if (g.max_q * g.heads_q > int_max || g.max_k > int_max || g.total_q * g.heads_q > int_max) {
      return NotSupported("cuda engine: sequence lengths times heads must fit in int32");
    }
    if (form_ == Form::kDecode) {
      if (!cuda_engine::has_decode_kernel(static_cast<int>(g.head_dim))) {
        return NotSupported("cuda-decode engine: no decode kernel for head dim " + std::to_string(g.head_dim) +
                            " (it has 64, 128, 256)");
      }
      if (g.max_q > cuda_engine::kDecodePinnedMaxTokens) {
        return NotSupported("cuda-decode engine: at most " +
                            std::to_string(cuda_engine::kDecodePinnedMaxTokens) + " new tokens per sequence (got " +
                            std::to_string(g.max_q) + ")");
      }
      if (!g.decode) {
        return NotSupported("cuda-decode engine: the device gives a CTA too little shared memory for the decode "
                            "kernel at head dim " + std::to_string(g.head_dim));
      }
    }
    return Status::Ok();
  }

  size_t workspace_bytes(const AttentionParams& p) const override {
    int sms = 0, cc = 0;
    if (!cuda_device_properties(&sms, &cc).ok()) return 0;
    const Geometry g = geometry(p, form_);
    const int splits = num_splits_for(p, g, sms);
    if (const ListPlan l = list_plan(p, g, splits, sms); l.use) return list_workspace_bytes(l, g);
    if (splits <= 1) return 0;
    return cuda_engine::split_workspace_bytes(splits, g.total_q, g.heads_q, g.head_dim_v);
  }

  Status run(const AttentionParams& p, void* workspace, void* stream) const override {
    int sms = 0, cc = 0;
    GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
    const Geometry g = geometry(p, form_);
    KernelParams kp = cuda_engine::kernel_params_from(p);
    kp.m_blocks = g.m_blocks;
    kp.num_splits = num_splits_for(p, g, sms);
    if (g.batch == 0 || g.max_q == 0 || kp.m_blocks == 0) return Status::Ok();  // nothing to compute
    if (const ListPlan list = list_plan(p, g, kp.num_splits, sms); list.use) {
      if (workspace == nullptr)
        return Status(StatusCode::kInternal, "cuda engine: work-list run without workspace");
      kp.num_splits = static_cast<int>(list.slots);
      cuda_engine::set_split_workspace(&kp, workspace, g.max_q, g.head_dim_v);  // partial_rows = max_q x Hq
      auto* counts = static_cast<char*>(workspace) +
                     cuda_engine::list_partials_bytes(list.slots, g.max_q, g.heads_q, g.head_dim_v);
      kp.seq_splits = reinterpret_cast<int32_t*>(counts);
      kp.list_plane_wave = list.plane_wave;
      kp.list_uniform_fast = true;  // equal lengths: the same plan without the search's loads
    } else if (kp.num_splits > 1) {
      if (workspace == nullptr)
        return Status(StatusCode::kInternal, "cuda engine: split-KV run without workspace");
      cuda_engine::set_split_workspace(&kp, workspace, g.total_q, g.head_dim_v);
    }
    const auto s = static_cast<cudaStream_t>(stream);
    const bool use_pdl = cc >= 90;
    if (g.decode) {
      return p.q.dtype == DType::kBF16 ? dispatch_decode_head_dim<__nv_bfloat16>(g.head_dim, kp, s, use_pdl)
                                       : dispatch_decode_head_dim<__half>(g.head_dim, kp, s, use_pdl);
    }
    if (p.q.dtype == DType::kBF16) {
      return dispatch_head_dim<__nv_bfloat16>(g.head_dim, kp, g.tile_rows, s, use_pdl);
    }
    return dispatch_head_dim<__half>(g.head_dim, kp, g.tile_rows, s, use_pdl);
  }

 private:
  Form form_;
};

// cuda_engine::set_cuda_decode_work_list_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_cuda_work_list_switch{"GROUPATTN_CUDA_DECODE_WORK_LIST", true};
// cuda_engine::set_cuda_decode_split_v_mode: the same.
std::atomic<int> g_cuda_split_v_mode{-1};
// cuda_engine::set_cuda_prefill_d256_pair_pv_mode: the same.
switches::BoolSwitch g_cuda_pair_pv_switch{"GROUPATTN_CUDA_PREFILL_D256_PAIR_PV", true};

}  // namespace

namespace cuda_engine {

template <class T>
int decode_ctas_per_sm_for(int64_t head_dim) {
  switch (head_dim) {
    case 64:
      return decode_ctas_per_sm<T, 64>();
    case 128:
      return decode_ctas_per_sm<T, 128>();
    case 256:
      return decode_ctas_per_sm<T, 256>();
    default:
      return 0;  // no decode kernel for this head dim
  }
}
template int decode_ctas_per_sm_for<__nv_bfloat16>(int64_t);
template int decode_ctas_per_sm_for<__half>(int64_t);

void set_cuda_decode_work_list_mode(int mode) { g_cuda_work_list_switch.set_mode(mode); }

// The work list is on by default (measured +18 to +46 % on mixed-length rows, -1 to -4 % on equal
// lengths; docs/ENGINES.md, "Mixed lengths: the work list"); GROUPATTN_CUDA_DECODE_WORK_LIST=0 turns
// it off. Read once.
bool cuda_decode_work_list() { return g_cuda_work_list_switch.on(); }

void set_cuda_decode_split_v_mode(int mode) { g_cuda_split_v_mode.store(clamp_mode(mode)); }

// By default on paged K/V only (measured in session 12, docs/ENGINES.md "Session 12: D 256 decode
// rate": paged rows -3.0 to -7.5 %, contiguous -5.0 % at B1 x 128K but +0.9 % at B32 x 4K);
// GROUPATTN_CUDA_DECODE_D256_SPLIT_V=1 everywhere, =0 nowhere. Read once.
bool cuda_decode_split_v(bool paged) {
  static const int from_env = env_mode("GROUPATTN_CUDA_DECODE_D256_SPLIT_V");
  return switch_value_or(g_cuda_split_v_mode, from_env, paged);
}

void set_cuda_prefill_d256_pair_pv_mode(int mode) { g_cuda_pair_pv_switch.set_mode(mode); }

// On by default (measured in session 13, docs/ENGINES.md "Session 12: cuda prefill against FA2":
// -1.7 to -3.3 % on the three D 256 rows); GROUPATTN_CUDA_PREFILL_D256_PAIR_PV=0 turns it off. Read
// once.
bool cuda_prefill_d256_pair_pv() { return g_cuda_pair_pv_switch.on(); }

}  // namespace cuda_engine

const AttentionEngine& attention_cuda_engine() {
  static const CudaAttention engine(Form::kAuto);
  return engine;
}

const AttentionEngine& attention_cuda_tile_engine() {
  static const CudaAttention engine(Form::kTile);
  return engine;
}

const AttentionEngine& attention_cuda_decode_engine() {
  static const CudaAttention engine(Form::kDecode);
  return engine;
}

}  // namespace groupattn
