// `groupattn bench`: see cli_bench.h. The flags are check's problem flags plus --rounds, --calls
// and --wall-calls; the problem defaults are check's. Without a GPU (or in a CPU-only build) it
// prints why and exits with 2: it never reports host timings as if they were GPU figures.
#include "cli_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>  // environ

#include "attention/reference.h"
#if GROUPATTN_WITH_CUDA
#include "attention/engines/sm90/launch.h"  // --launch-cost: the decode's driver-launch switch
#include "kda/engines/cuda/kda_cuda_engine.h"  // --launch-cost: the KDA cluster-kernel switch
#endif
#include "core/host_timing.h"
#include "cli_args.h"
#include "cli_counts.h"
#include "cli_device.h"
#include "cli_problem.h"
#include "common/host_tensor.h"
#include "groupattn/groupattn.h"
#include "kda/reference.h"

#if GROUPATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace groupattn::cli {

using test::HostTensor;

namespace {

const std::vector<FlagSpec>& bench_flags() {
  static const std::vector<FlagSpec> flags = [] {
    std::vector<FlagSpec> f = {
        {"op", true, "prefill | decode | kda (default: implied by the shape flags)"},
        {"engine", true, "GPU engine name (default: the one automatic selection picks)"},
    };
    for (const FlagSpec& s : shape_flags()) f.push_back(s);
    f.push_back({"rounds", true, "timed graph replays; median and p20-p80 over them (default 5, at least 5)"});
    f.push_back({"calls", true, "calls captured in the graph (default: ~25 ms of work, a multiple of the input sets)"});
    f.push_back({"wall-calls", true, "synchronized calls for the per-call wall time (default 100)"});
    f.push_back({"host-breakdown", false,
                 "also time each host stage of a call (validation, selection, planning, tensor maps, each launch): "
                 "median us per stage over --wall-calls calls"});
    f.push_back({"launch-cost", false,
                 "also time one launch of an empty kernel in each launch form the library uses (plain, the sm90 "
                 "decode's parameters, cudaLaunchKernelEx with / without a cluster, the driver's cuLaunchKernelEx): "
                 "median us over --wall-calls launches each; with --host-breakdown, the breakdown again with the sm90 "
                 "decode's cluster launch through cudaLaunchKernelEx and small KDA calls through the prep and state "
                 "kernels, then as set, twice"});
    f.push_back({"seed", true, "random seed, 0..2^64-1 (default 1)"});
    f.push_back({"help", false, "this text"});
    return f;
  }();
  return flags;
}

struct BenchOptions {
  int64_t rounds = 5, calls = 0, wall_calls = 100;
  bool host_breakdown = false;
  bool launch_cost = false;
};

#if GROUPATTN_WITH_CUDA

// The GROUPATTN_SM90_* and GROUPATTN_CUDA_* measurement switches set in the environment (they change
// which kernel form runs: docs/DECODE_SM90.md, docs/PREFILL_SM90.md, docs/ENGINES.md), printed so
// an A/B log says what it measured.
void print_kernel_switches() {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "GROUPATTN_SM90_", 15) == 0 || std::strncmp(*e, "GROUPATTN_CUDA_", 15) == 0)
      std::printf("  switch: %s\n", *e);
  }
}

// Linear-interpolation quantile (bench/harness.py quantile()).
double quantile(std::vector<double> xs, double q) {
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  const double pos = q * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
}

std::string format_bytes(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

// A view of `v` starting at index `start` with shape `shape` (same strides); host memory.
TensorView slice(const TensorView& v, const std::vector<int64_t>& start, const std::vector<int64_t>& shape) {
  TensorView s = v;
  int64_t off = 0;
  for (int i = 0; i < v.rank; ++i) {
    off += start[static_cast<size_t>(i)] * v.stride[i];
    s.shape[i] = shape[static_cast<size_t>(i)];
  }
  s.data = static_cast<char*>(v.data) + off * static_cast<int64_t>(dtype_size(v.dtype));
  return s;
}

// Every element of a contiguous f32/f16/bf16 host tensor is finite (allow_neg_inf: -inf is allowed,
// the LSE of a row that sees no key). Reads the bits; no conversion of the whole tensor.
bool raw_all_finite(const HostTensor& t, bool allow_neg_inf) {
  const TensorView& v = t.view();
  const int64_t n = v.numel();
  if (v.dtype == DType::kF32) {
    const auto* p = static_cast<const uint32_t*>(v.data);
    for (int64_t i = 0; i < n; ++i) {
      if ((p[i] & 0x7F800000u) == 0x7F800000u && !(allow_neg_inf && p[i] == 0xFF800000u)) return false;
    }
    return true;
  }
  const uint16_t mask = v.dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
  const auto* p = static_cast<const uint16_t*>(v.data);
  for (int64_t i = 0; i < n; ++i) {
    if ((p[i] & mask) == mask) return false;
  }
  return true;
}

// The correctness gate's result, with a description of the sample it covered.
struct SampleCheck {
  Status status;
  Comparison cmp;
  std::string what;
};

// Attention on a sample of the (downloaded) set-0 problem (bench/refs.py's choice): the first and
// last sequence, three query heads (first, middle, last) each with its KV head, the last n query
// rows of each (keeping all Sk keys keeps the bottom-right causal alignment); the whole output
// must be finite. The fp64 reference is slow (~0.1 GFLOP/s), so n is sized to ~3e7 multiply-adds
// per (sequence, head), and is at least min(Sq, 4).
SampleCheck sample_check_attention(const AttnData& x, const Options& o, bool decode) {
  SampleCheck r;
  const int64_t B = o.batch, Hq = o.hq, Hkv = o.hkv, G = Hq / Hkv, D = o.d, Dv = o.dv;
  const int64_t Sq = decode ? o.new_tokens : o.seq_len, Sk = decode ? o.kv_len : o.seq_len;
  const double per_row = static_cast<double>(Sk) * static_cast<double>(D + Dv);
  const int64_t n = std::min(Sq, std::max<int64_t>(std::min<int64_t>(Sq, 4), static_cast<int64_t>(3e7 / per_row)));
  std::vector<int64_t> seqs = {0}, heads = {0};
  if (B > 1) seqs.push_back(B - 1);
  for (int64_t h : {Hq / 2, Hq - 1}) {
    if (h != heads.back()) heads.push_back(h);
  }
  // --varlen: the packed [B * S, H, D] tensors seen as the batched [B, S, H, D] they equal (every
  // sequence S tokens), so one slicing serves both; the sliced problem is batched.
  const bool varlen = x.cu_seqlens.defined();
  auto batched = [&](const TensorView& t, int64_t rows) {
    if (!varlen) return t;
    return make_strided_view(t.data, t.dtype, {B, rows, t.shape[1], t.shape[2]},
                             {rows * t.stride[0], t.stride[0], t.stride[1], t.stride[2]}, t.device, t.device_id);
  };
  const TensorView q4 = batched(x.q.view(), Sq), out4 = batched(x.out.view(), Sq);
  const TensorView k4 = batched(x.k.view(), Sk), v4 = batched(x.v.view(), Sk);
  auto out_at = [&](int64_t b, int64_t row, int64_t h, int64_t c) {
    return varlen ? x.out.at({b * Sq + row, h, c}) : x.out.at({b, row, h, c});
  };
  std::vector<double> o_all, ref_o_all, lse_all, ref_lse_all;
  for (int64_t b : seqs) {
    for (int64_t h : heads) {
      const int64_t g = h / G;  // its KV head
      AttentionParams p = x.params;
      p.cu_seqlens_q = p.cu_seqlens_k = TensorView{};
      p.max_seqlen_q = p.max_seqlen_k = 0;
      p.q = slice(q4, {b, Sq - n, h, 0}, {1, n, 1, D});
      p.out = slice(out4, {b, Sq - n, h, 0}, {1, n, 1, Dv});
      p.lse = slice(x.lse.view(), {h, b * Sq + Sq - n}, {1, n});
      if (x.block_table.defined()) {
        const TensorView& k = x.k.view();
        p.k = slice(k, {0, 0, g, 0}, {k.shape[0], k.shape[1], 1, D});
        p.v = slice(x.v.view(), {0, 0, g, 0}, {k.shape[0], k.shape[1], 1, Dv});
        p.block_table = slice(x.block_table.view(), {b, 0}, {1, x.block_table.view().shape[1]});
      } else {
        p.k = slice(k4, {b, 0, g, 0}, {1, Sk, 1, D});
        p.v = slice(v4, {b, 0, g, 0}, {1, Sk, 1, Dv});
      }
      if (x.seqlens_k.defined()) p.seqlens_k = slice(x.seqlens_k.view(), {b}, {1});  // paged, --seqlens
      if (x.k_scale.defined()) {  // fp8 cache: the scales of this sequence (or of every page), KV head g
        const TensorView& ks = x.k_scale.view();
        const int64_t row = p.kv_scale_per_page ? 0 : b, rows = p.kv_scale_per_page ? ks.shape[0] : 1;
        p.k_scale = slice(ks, {row, g}, {rows, 1});
        p.v_scale = slice(x.v_scale.view(), {row, g}, {rows, 1});
      }
      std::vector<double> ref_o, ref_lse;  // [n, 1, Dv], [1, n]
      r.status = reference_attention_fp64(p, 0, std::numeric_limits<int64_t>::max(), &ref_o, &ref_lse);
      if (!r.status.ok()) return r;
      ref_o_all.insert(ref_o_all.end(), ref_o.begin(), ref_o.end());
      ref_lse_all.insert(ref_lse_all.end(), ref_lse.begin(), ref_lse.end());
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < Dv; ++c) o_all.push_back(out_at(b, Sq - n + i, h, c));
        lse_all.push_back(x.lse.at({h, b * Sq + Sq - n + i}));
      }
    }
  }
  r.cmp = compare_attention(o_all, lse_all, ref_o_all, ref_lse_all, o.dtype);
  const bool finite = raw_all_finite(x.out, false) && raw_all_finite(x.lse, true);
  r.cmp.pass = r.cmp.pass && finite;
  std::string seq_list, head_list;
  for (int64_t b : seqs) seq_list.append(seq_list.empty() ? "" : ",").append(std::to_string(b));
  for (int64_t h : heads) head_list.append(head_list.empty() ? "" : ",").append(std::to_string(h));
  r.what = "sequences " + seq_list + " x query heads " + head_list + ", last " + std::to_string(n) + " of " +
           std::to_string(Sq) + " query rows each; whole output " + (finite ? "finite" : "NOT finite");
  return r;
}

// KDA on a sample: the first and last sequence, all heads, the first Ts tokens (the whole sequence
// and its final state when it is short enough); the whole output and final state must be finite.
SampleCheck sample_check_kda(const KdaData& x, const Options& o) {
  SampleCheck r;
  const int64_t B = o.batch, T = o.seq_len, H = o.hq, HV = o.hkv, K = o.d, V = o.dv;
  const double per_token = 7.0 * static_cast<double>(HV) * static_cast<double>(K) * static_cast<double>(V);
  const int64_t Ts = std::min(T, std::max<int64_t>(64, static_cast<int64_t>(5e8 / per_token)));
  const bool whole = Ts == T;
  const bool k_first = x.params.state_layout == KdaStateLayout::kKFirst;
  const std::vector<double> st_all = whole ? kda_state_k_first(x.ht, k_first) : std::vector<double>{};
  std::vector<int64_t> seqs = {0};
  if (B > 1) seqs.push_back(B - 1);
  std::vector<double> o_all, ref_o_all, st, ref_st;
  for (int64_t b : seqs) {
    KdaParams p = x.params;
    p.q = slice(x.q.view(), {b, 0, 0, 0}, {1, Ts, H, K});
    p.k = slice(x.k.view(), {b, 0, 0, 0}, {1, Ts, H, K});
    p.v = slice(x.v.view(), {b, 0, 0, 0}, {1, Ts, HV, V});
    p.g = slice(x.g.view(), {b, 0, 0, 0}, {1, Ts, HV, K});
    p.beta = slice(x.beta.view(), {b, 0, 0}, {1, Ts, HV});
    p.out = slice(x.out.view(), {b, 0, 0, 0}, {1, Ts, HV, V});
    const TensorView& hv = x.ht.view();
    p.final_state = slice(hv, {b, 0, 0, 0}, {1, hv.shape[1], hv.shape[2], hv.shape[3]});
    if (x.h0.defined()) p.initial_state = slice(x.h0.view(), {b, 0, 0, 0}, {1, hv.shape[1], hv.shape[2], hv.shape[3]});
    std::vector<double> ref_o, ref_s;  // [1, Ts, HV, V], [1, HV, K, V]
    r.status = kda_recurrent_fp64(p, &ref_o, &ref_s);
    if (!r.status.ok()) return r;
    ref_o_all.insert(ref_o_all.end(), ref_o.begin(), ref_o.end());
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t h = 0; h < HV; ++h)
        for (int64_t c = 0; c < V; ++c) o_all.push_back(x.out.at({b, t, h, c}));
    if (whole) {
      ref_st.insert(ref_st.end(), ref_s.begin(), ref_s.end());
      const auto first = st_all.begin() + static_cast<std::ptrdiff_t>(b * HV * K * V);
      st.insert(st.end(), first, first + static_cast<std::ptrdiff_t>(HV * K * V));
    }
  }
  r.cmp = compare_kda(o_all, st, ref_o_all, ref_st);
  if (!whole) r.cmp.aux = NAN;  // the final state was not compared (printed as n/a)
  const bool finite = raw_all_finite(x.out, false) && raw_all_finite(x.ht, false);
  r.cmp.pass = r.cmp.pass && finite;
  r.what = "sequences " + std::to_string(seqs.front()) + (seqs.size() > 1 ? "," + std::to_string(seqs.back()) : "") +
           ", all heads, " + (whole ? "all " + std::to_string(T) + " tokens and the final state"
                                    : "the first " + std::to_string(Ts) + " of " + std::to_string(T) + " tokens") +
           "; whole output and final state " + (finite ? "finite" : "NOT finite");
  return r;
}

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)};
}
#define GA_CU(expr) GA_RETURN_IF_ERROR(cuda_status((expr), #expr))

// Device allocations freed together; stream and events likewise.
struct DeviceResources {
  std::vector<void*> ptrs;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~DeviceResources() {
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    if (begin != nullptr) (void)cudaEventDestroy(begin);
    if (end != nullptr) (void)cudaEventDestroy(end);
    for (void* p : ptrs) (void)cudaFree(p);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  Status alloc(size_t bytes, void** out) {
    GA_CU(cudaMalloc(out, std::max<size_t>(bytes, 256)));
    ptrs.push_back(*out);
    return Status::Ok();
  }
};

size_t view_bytes(const TensorView& v) {
  return static_cast<size_t>(std::max<int64_t>(v.span_bytes(), static_cast<int64_t>(dtype_size(v.dtype))));
}

TensorView on_device(TensorView v, void* data, int device_id) {
  v.data = data;
  v.device = Device::kCUDA;
  v.device_id = device_id;
  return v;
}

// A per-set tensor: its host twin (for the set-0 check), the params field it fills, how to fill it.
struct Slot {
  HostTensor* host;
  size_t field;  // index into the params' field list (see fields_of)
  enum Fill { kNone, kNormal, kUniform } fill;
  double a = 0, b = 1;
};

// Shared index tensors / parameters: uploaded once, used by every set.
Status upload_shared(DeviceResources* res, const HostTensor& h, int dev, TensorView* field) {
  if (!h.defined()) return Status::Ok();
  void* p = nullptr;
  GA_RETURN_IF_ERROR(res->alloc(view_bytes(h.view()), &p));
  GA_CU(cudaMemcpy(p, h.view().data, view_bytes(h.view()), cudaMemcpyHostToDevice));
  *field = on_device(h.view(), p, dev);
  return Status::Ok();
}

template <typename P>
struct OpHooks {
  std::function<std::vector<TensorView*>(P&)> fields;  // per-set tensor fields of a params struct
  std::function<Status(const P&, const RunOptions&)> run;
  std::function<Status(const P&, const RunOptions&, size_t*)> workspace;
  std::function<Status(const P&, const RunOptions&, const char**)> engine_for;
  std::function<SampleCheck()> check;  // on the host twins after set 0 is downloaded
  // Work per call for the rate: FLOPs (prefill) or bytes (decode, KDA), and how to print it.
  double work = 0;
  bool work_is_flops = false;
  std::string work_note;
};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// --host-breakdown: the enqueue loop again with the library's stage marks on (core/host_timing.h):
// per stage (the time from the previous mark, or from the call for the first), the median over
// `calls` calls, printed in the order the stages first appear. Marks cost a clock read each (~20-30
// ns), so the whole call is a little slower here than in the enqueue figure above.
template <typename P>
Status print_host_breakdown(const OpHooks<P>& hooks, const std::vector<P>& sets, const RunOptions& ro, int64_t calls,
                            cudaStream_t stream) {
  struct Stage {
    const char* name;
    std::vector<double> us;
  };
  std::vector<Stage> stages;
  std::vector<double> tail, whole;
  host_timing::enabled.store(true);
  Status s;
  for (int64_t i = 0; i < calls && s.ok(); ++i) {
    const int64_t t0 = steady_ns();
    s = hooks.run(sets[static_cast<size_t>(i) % sets.size()], ro);
    const int64_t t1 = steady_ns();
    const host_timing::Marks& m = host_timing::thread_marks();
    int64_t prev = t0;
    for (int k = 0; k < m.count; ++k) {
      auto it = std::find_if(stages.begin(), stages.end(),
                             [&](const Stage& st) { return std::strcmp(st.name, m.names[k]) == 0; });
      if (it == stages.end()) it = stages.insert(stages.end(), Stage{m.names[k], {}});
      it->us.push_back(static_cast<double>(m.ns[k] - prev) / 1e3);
      prev = m.ns[k];
    }
    tail.push_back(static_cast<double>(t1 - prev) / 1e3);
    whole.push_back(static_cast<double>(t1 - t0) / 1e3);
    if (s.ok() && i % 8 == 7) s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  host_timing::enabled.store(false);
  GA_RETURN_IF_ERROR(s);
  GA_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  std::printf("  host breakdown (--host-breakdown): median us per stage over %lld calls, each stage timed from the "
              "previous mark\n",
              static_cast<long long>(calls));
  double sum = 0;
  for (const Stage& st : stages) {
    const double med = quantile(st.us, 0.5);
    sum += med;
    std::printf("    %-58s %7.2f  (in %zu of %lld calls)\n", st.name, med, st.us.size(), static_cast<long long>(calls));
  }
  const double tail_med = quantile(tail, 0.5);
  std::printf("    %-58s %7.2f\n", "(after the last mark, to the call's return)", tail_med);
  std::printf("    %-58s %7.2f  (sum of the stage medians %.2f; marks on)\n", "whole call", quantile(whole, 0.5),
              sum + tail_med);
  return Status::Ok();
}

template <typename P>
int bench_problem(const Options& o, const BenchOptions& bo, const std::string& label, P host_params,
                  const std::vector<Slot>& slots, const OpHooks<P>& hooks, DeviceResources* res) {
  auto fail = [&](const Status& s) {
    std::printf("  %s\n", s.to_string().c_str());
    std::printf("bench: FAIL\n");
    return 1;
  };
  std::printf("%s\n", label.c_str());
  int dev = 0;
  if (Status s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s.ok()) return fail(s);

  // Rotating sets: enough that their total exceeds 1 GiB (at least two).
  size_t set_bytes = 0;
  for (const Slot& sl : slots) set_bytes += view_bytes(sl.host->view());
  const size_t gib = size_t{1} << 30;
  const size_t nsets = std::max<size_t>(2, gib / set_bytes + 1);
  RunOptions ro;
  ro.engine = o.engine.empty() ? nullptr : o.engine.c_str();
  if (Status s = cuda_status(cudaStreamCreateWithFlags(&res->stream, cudaStreamNonBlocking), "cudaStreamCreate");
      !s.ok()) {
    return fail(s);
  }
  ro.stream = res->stream;
  size_t free_b = 0, total_b = 0;
  if (Status s = cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"); !s.ok()) return fail(s);
  const double need = static_cast<double>(nsets * set_bytes);
  if (need > 0.9 * static_cast<double>(free_b)) {
    return fail(InvalidArgument("the " + std::to_string(nsets) + " rotating input sets need " + format_bytes(need) +
                                " of device memory; " + format_bytes(static_cast<double>(free_b)) + " free"));
  }

  // Per-set params: the host params with every per-set field pointing at that set's device memory,
  // filled on the device (fresh random values per set).
  std::vector<P> sets(nsets, host_params);
  std::vector<std::vector<void*>> set_ptrs(nsets);
  for (size_t i = 0; i < nsets; ++i) {
    std::vector<TensorView*> f = hooks.fields(sets[i]);
    for (size_t j = 0; j < slots.size(); ++j) {
      const TensorView& hv = slots[j].host->view();
      void* p = nullptr;
      if (Status s = res->alloc(view_bytes(hv), &p); !s.ok()) return fail(s);
      set_ptrs[i].push_back(p);
      *f[slots[j].field] = on_device(hv, p, dev);
      const int64_t n = static_cast<int64_t>(view_bytes(hv) / dtype_size(hv.dtype));
      const uint64_t seed = (o.seed << 24) + i * 64 + j;
      Status s;
      if (slots[j].fill == Slot::kNone) {
        s = cuda_status(cudaMemsetAsync(p, 0xFF, view_bytes(hv), res->stream), "cudaMemsetAsync");  // NaN
      } else {
        s = device_fill_random(p, hv.dtype, n, seed, slots[j].fill == Slot::kNormal, slots[j].a, slots[j].b,
                               res->stream);
      }
      if (!s.ok()) return fail(s);
    }
  }
  // Engine and workspace for the device problem (asked once; every set has the same shapes). One
  // workspace serves every call: the calls run in order on one stream.
  const char* chosen = nullptr;
  if (Status s = hooks.engine_for(sets[0], ro, &chosen); !s.ok()) return fail(s);
  size_t ws_bytes = 0;
  if (Status s = hooks.workspace(sets[0], ro, &ws_bytes); !s.ok()) return fail(s);
  void* ws = nullptr;
  if (ws_bytes > 0) {
    if (Status s = res->alloc(ws_bytes, &ws); !s.ok()) return fail(s);
    ro.workspace = ws;
    ro.workspace_bytes = ws_bytes;
  }
  if (Status s = cuda_status(cudaStreamSynchronize(res->stream), "fill inputs"); !s.ok()) return fail(s);
  std::printf("  engine: %s\n", chosen != nullptr ? chosen : "?");
  print_kernel_switches();

  // Correct first: set 0 (outputs NaN-poisoned above) against the fp64 reference on a sample.
  if (Status s = hooks.run(sets[0], ro); !s.ok()) return fail(s);
  if (Status s = cuda_status(cudaStreamSynchronize(res->stream), "first call"); !s.ok()) return fail(s);
  for (size_t j = 0; j < slots.size(); ++j) {
    const TensorView& hv = slots[j].host->view();
    if (Status s = cuda_status(cudaMemcpy(hv.data, set_ptrs[0][j], view_bytes(hv), cudaMemcpyDeviceToHost),
                               "download set 0");
        !s.ok()) {
      return fail(s);
    }
  }
  const SampleCheck chk = hooks.check();
  if (!chk.status.ok()) return fail(chk.status);
  char aux[32] = "n/a";
  if (!std::isnan(chk.cmp.aux)) std::snprintf(aux, sizeof aux, "%.2e", chk.cmp.aux);
  std::printf("  check: rel_err=%.2e max_err=%.2e %s=%s  %s\n         (fp64 reference on %s)\n", chk.cmp.rel,
              chk.cmp.max_abs, o.op == "kda" ? "state_err" : "lse_err", aux, chk.cmp.pass ? "PASS" : "FAIL",
              chk.what.c_str());
  if (!chk.cmp.pass) {
    std::printf("  not timed: the engine fails the correctness check on this configuration\nbench: FAIL\n");
    return 1;
  }

  // Warm-up over every set, then an estimate of the per-call time to size the graph.
  if (Status s = cuda_status(cudaEventCreate(&res->begin), "cudaEventCreate"); !s.ok()) return fail(s);
  if (Status s = cuda_status(cudaEventCreate(&res->end), "cudaEventCreate"); !s.ok()) return fail(s);
  auto elapsed = [&](double* ms) {
    GA_CU(cudaEventSynchronize(res->end));
    float f = 0;
    GA_CU(cudaEventElapsedTime(&f, res->begin, res->end));
    *ms = f;
    return Status::Ok();
  };
  double est_ms = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (Status s = cuda_status(cudaEventRecord(res->begin, res->stream), "cudaEventRecord"); !s.ok()) return fail(s);
    for (size_t i = 0; i < nsets; ++i) {
      if (Status s = hooks.run(sets[i], ro); !s.ok()) return fail(s);
    }
    if (Status s = cuda_status(cudaEventRecord(res->end, res->stream), "cudaEventRecord"); !s.ok()) return fail(s);
    if (Status s = elapsed(&est_ms); !s.ok()) return fail(s);
  }
  est_ms /= static_cast<double>(nsets);
  int64_t calls = bo.calls;
  if (calls <= 0) {
    const double want = std::ceil(25.0 / std::max(est_ms, 1e-4));
    const int64_t lo = static_cast<int64_t>(nsets);
    const int64_t c = std::clamp<int64_t>(static_cast<int64_t>(want), lo, std::max<int64_t>(lo, 4096));
    calls = (c + static_cast<int64_t>(nsets) - 1) / static_cast<int64_t>(nsets) * static_cast<int64_t>(nsets);
  }

  // One graph of `calls` calls over the rotating sets, captured on the non-default stream.
  if (Status s = cuda_status(cudaStreamBeginCapture(res->stream, cudaStreamCaptureModeThreadLocal),
                             "cudaStreamBeginCapture");
      !s.ok()) {
    return fail(s);
  }
  Status cap;
  for (int64_t i = 0; i < calls && cap.ok(); ++i) cap = hooks.run(sets[static_cast<size_t>(i) % nsets], ro);
  const cudaError_t end_err = cudaStreamEndCapture(res->stream, &res->graph);
  if (!cap.ok()) return fail(Status{cap.code(), "during graph capture: " + cap.message()});
  if (Status s = cuda_status(end_err, "cudaStreamEndCapture"); !s.ok()) return fail(s);
  if (Status s = cuda_status(cudaGraphInstantiate(&res->exec, res->graph, 0), "cudaGraphInstantiate"); !s.ok()) {
    return fail(s);
  }
  if (Status s = cuda_status(cudaGraphLaunch(res->exec, res->stream), "cudaGraphLaunch (warm-up)"); !s.ok()) {
    return fail(s);
  }
  if (Status s = cuda_status(cudaStreamSynchronize(res->stream), "graph warm-up"); !s.ok()) return fail(s);

  std::vector<double> per_call;
  for (int64_t r = 0; r < bo.rounds; ++r) {
    double ms = 0;
    Status s = cuda_status(cudaEventRecord(res->begin, res->stream), "cudaEventRecord");
    if (s.ok()) s = cuda_status(cudaGraphLaunch(res->exec, res->stream), "cudaGraphLaunch");
    if (s.ok()) s = cuda_status(cudaEventRecord(res->end, res->stream), "cudaEventRecord");
    if (s.ok()) s = elapsed(&ms);
    if (!s.ok()) return fail(s);
    per_call.push_back(ms / static_cast<double>(calls));
  }

  // Per-call wall time: host dispatch included, synchronize after each call.
  std::vector<double> wall;
  for (int64_t i = 0; i < bo.wall_calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = hooks.run(sets[static_cast<size_t>(i) % nsets], ro);
    if (s.ok()) s = cuda_status(cudaStreamSynchronize(res->stream), "cudaStreamSynchronize");
    if (!s.ok()) return fail(s);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  // Per-call host (enqueue) time: the library call alone, no synchronize inside the timed span (a
  // synchronize every 8 calls keeps the launch queue from filling). This is the CPU cost a C++
  // caller pays per call; the Python binding's cost is measured beside it by bench/host_cost.py.
  std::vector<double> enqueue;
  for (int64_t i = 0; i < bo.wall_calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = hooks.run(sets[static_cast<size_t>(i) % nsets], ro);
    enqueue.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (s.ok() && i % 8 == 7) s = cuda_status(cudaStreamSynchronize(res->stream), "cudaStreamSynchronize");
    if (!s.ok()) return fail(s);
  }
  if (Status s = cuda_status(cudaStreamSynchronize(res->stream), "cudaStreamSynchronize"); !s.ok()) return fail(s);

  const double med = quantile(per_call, 0.5), p20 = quantile(per_call, 0.2), p80 = quantile(per_call, 0.8);
  std::printf("  inputs: %zu rotating sets x %s = %s (fresh random values per set), workspace %s\n", nsets,
              format_bytes(static_cast<double>(set_bytes)).c_str(),
              format_bytes(static_cast<double>(nsets * set_bytes)).c_str(),
              format_bytes(static_cast<double>(ws_bytes)).c_str());
  std::printf("  graph: %lld calls per replay, %lld rounds\n", static_cast<long long>(calls),
              static_cast<long long>(bo.rounds));
  // Rates: the p20 of time is the fast end, so it gives the p80 of the rate.
  const double scale = hooks.work_is_flops ? 1e12 : 1e9;
  auto rate = [&](double ms) { return hooks.work / (ms * 1e-3) / scale; };
  std::printf("  GPU time per call:  %.4f ms median (p20 %.4f, p80 %.4f)\n", med, p20, p80);
  std::printf("  %s: %.1f median (p20-p80 %.1f-%.1f); %s\n", hooks.work_is_flops ? "TFLOP/s" : "effective GB/s",
              rate(med), rate(p80), rate(p20), hooks.work_note.c_str());
  std::printf("  wall time per call: %.4f ms median (p20 %.4f, p80 %.4f) over %lld synchronized calls\n",
              quantile(wall, 0.5), quantile(wall, 0.2), quantile(wall, 0.8), static_cast<long long>(bo.wall_calls));
  std::printf("  host time per call (enqueue, no synchronize): %.1f us median (p20 %.1f, p80 %.1f)\n",
              quantile(enqueue, 0.5), quantile(enqueue, 0.2), quantile(enqueue, 0.8));
  if (bo.host_breakdown) {
    if (Status s = print_host_breakdown(hooks, sets, ro, bo.wall_calls, res->stream); !s.ok()) return fail(s);
  }
  if (bo.launch_cost) {
    if (Status s = print_launch_cost(bo.wall_calls, res->stream); !s.ok()) return fail(s);
    if (bo.host_breakdown) {
      // The same breakdown with the sm90 decode's cluster launch through the runtime
      // (cudaLaunchKernelEx) and the KDA chunked path's small problems through the prep and state
      // kernels instead of the one cluster kernel, then again as set (GROUPATTN_SM90_DECODE_DRIVER_LAUNCH,
      // GROUPATTN_KDA_CLUSTER_CHUNKED; both on by default), twice in turn: an A/B in one process (the
      // host's level drifts between processes). Other launches are the same in both.
      for (int round = 0; round < 2; ++round) {
        std::printf("  again with the decode's runtime launch and the KDA prep + state kernels "
                    "(sm90_engine::set_decode_driver_launch_mode(0), kda_cuda_set_cluster_chunked(0)):\n");
        sm90_engine::set_decode_driver_launch_mode(0);
        kda_cuda_set_cluster_chunked(0);
        Status s = print_host_breakdown(hooks, sets, ro, bo.wall_calls, res->stream);
        sm90_engine::set_decode_driver_launch_mode(-1);
        kda_cuda_set_cluster_chunked(-1);
        if (!s.ok()) return fail(s);
        std::printf("  again as set (GROUPATTN_SM90_DECODE_DRIVER_LAUNCH, GROUPATTN_KDA_CLUSTER_CHUNKED; default "
                    "on):\n");
        if (s = print_host_breakdown(hooks, sets, ro, bo.wall_calls, res->stream); !s.ok()) return fail(s);
      }
    }
  }
  std::printf("bench: OK\n");
  return 0;
}

int bench_attention(Options o, const BenchOptions& bo, bool decode) {
  apply_attention_defaults(&o, decode);
  AttnData x = make_attention(o, decode, /*fill_inputs=*/false);
  const std::string label = attention_label(o, decode);
  if (Status v = validate_attention(x.params); !v.ok()) {
    std::printf("%s\n  %s\nbench: FAIL\n", label.c_str(), v.to_string().c_str());
    return 1;
  }
  DeviceResources res;
  int dev = 0;
  (void)cudaGetDevice(&dev);
  AttentionParams hp = x.params;
  // fp8 caches: make_attention drew the scales on the host; one copy serves every input set.
  for (auto [h, f] : {std::pair{&x.block_table, &hp.block_table}, {&x.seqlens_k, &hp.seqlens_k},
                      {&x.k_scale, &hp.k_scale}, {&x.v_scale, &hp.v_scale}, {&x.cu_seqlens, &hp.cu_seqlens_q}}) {
    if (Status s = upload_shared(&res, *h, dev, f); !s.ok()) {
      std::printf("%s\n  %s\nbench: FAIL\n", label.c_str(), s.to_string().c_str());
      return 1;
    }
  }
  hp.cu_seqlens_k = hp.cu_seqlens_q;  // --varlen: one cu_seqlens for Q and K/V (absent otherwise)
  std::vector<Slot> slots = {{&x.q, 0, Slot::kNormal, 0, 1}, {&x.k, 1, Slot::kNormal, 0, 1},
                             {&x.v, 2, Slot::kNormal, 0, 1}, {&x.out, 3, Slot::kNone},
                             {&x.lse, 4, Slot::kNone}};
  OpHooks<AttentionParams> hooks;
  hooks.fields = [](AttentionParams& p) { return std::vector<TensorView*>{&p.q, &p.k, &p.v, &p.out, &p.lse}; };
  hooks.run = [](const AttentionParams& p, const RunOptions& r) { return attention(p, r); };
  hooks.workspace = [](const AttentionParams& p, const RunOptions& r, size_t* b) {
    return attention_workspace_bytes(p, r, b);
  };
  hooks.engine_for = [](const AttentionParams& p, const RunOptions& r, const char** n) {
    return attention_engine_for(p, r, n);
  };
  hooks.check = [&] { return sample_check_attention(x, o, decode); };
  AttnCountProblem cp = batched_problem(o.batch, decode ? o.new_tokens : o.seq_len, decode ? o.kv_len : o.seq_len,
                                        o.hq, o.hkv, o.d);
  cp.head_dim_v = o.dv;
  cp.causal = o.causal != 0;
  cp.window_left = o.wl;
  cp.window_right = o.wr;
  cp.elem_bytes = static_cast<int64_t>(dtype_size(o.dtype));
  cp.kv_elem_bytes = static_cast<int64_t>(dtype_size(x.k.dtype()));  // 1 for an fp8 cache (bytes read)
  cp.page_size = decode ? o.page : 0;
  char note[160];
  if (decode) {
    const AttnBytes b = attention_bytes(cp);
    hooks.work = static_cast<double>(b.total);
    std::snprintf(note, sizeof note, "%.1f MB per call (Q, K, V, O, LSE once%s)", static_cast<double>(b.total) / 1e6,
                  o.page > 0 ? "; whole pages holding visible keys" : "");
  } else {
    const int64_t flops = attention_flops(cp);
    hooks.work = static_cast<double>(flops);
    hooks.work_is_flops = true;
    std::snprintf(note, sizeof note, "%.4g FLOP per call (4*D per visible query-key pair and query head)",
                  static_cast<double>(flops));
  }
  hooks.work_note = note;
  return bench_problem(o, bo, label, hp, slots, hooks, &res);
}

int bench_kda(Options o, const BenchOptions& bo) {
  apply_kda_defaults(&o);
  KdaData x = make_kda(o, /*fill_inputs=*/false);
  const std::string label = kda_label(o);
  if (Status v = validate_kda(x.params); !v.ok()) {
    std::printf("%s\n  %s\nbench: FAIL\n", label.c_str(), v.to_string().c_str());
    return 1;
  }
  DeviceResources res;
  int dev = 0;
  (void)cudaGetDevice(&dev);
  KdaParams hp = x.params;
  for (auto [h, f] : {std::pair{&x.A_log, &hp.A_log}, {&x.dt_bias, &hp.dt_bias}}) {
    if (Status s = upload_shared(&res, *h, dev, f); !s.ok()) {
      std::printf("%s\n  %s\nbench: FAIL\n", label.c_str(), s.to_string().c_str());
      return 1;
    }
  }
  const bool log_decay = o.gate == "log-decay";
  std::vector<Slot> slots = {{&x.q, 0, Slot::kNormal, 0, 1},
                             {&x.k, 1, Slot::kNormal, 0, kda_key_stddev(o)},
                             {&x.v, 2, Slot::kNormal, 0, 1},
                             {&x.g, 3, log_decay ? Slot::kUniform : Slot::kNormal, log_decay ? -2.0 : 0.0,
                              log_decay ? 0.0 : 1.0},
                             {&x.beta, 4, o.beta_sigmoid ? Slot::kNormal : Slot::kUniform, 0, 1},
                             {&x.out, 5, Slot::kNone},
                             {&x.ht, 6, Slot::kNone}};
  if (x.h0.defined()) slots.push_back({&x.h0, 7, Slot::kNormal, 0, 0.1});
  OpHooks<KdaParams> hooks;
  hooks.fields = [](KdaParams& p) {
    return std::vector<TensorView*>{&p.q, &p.k, &p.v, &p.g, &p.beta, &p.out, &p.final_state, &p.initial_state};
  };
  hooks.run = [](const KdaParams& p, const RunOptions& r) { return kda(p, r); };
  hooks.workspace = [](const KdaParams& p, const RunOptions& r, size_t* b) { return kda_workspace_bytes(p, r, b); };
  hooks.engine_for = [](const KdaParams& p, const RunOptions& r, const char** n) { return kda_engine_for(p, r, n); };
  hooks.check = [&] { return sample_check_kda(x, o); };
  const int64_t bytes = kda_bytes(o.batch * o.seq_len, o.hq, o.hkv, o.d, o.dv, o.batch,
                                  static_cast<int64_t>(dtype_size(o.dtype)), o.initial_state, true, !log_decay);
  hooks.work = static_cast<double>(bytes);
  char note[160];
  std::snprintf(note, sizeof note, "%.1f MB per call (minimum traffic: inputs, output, states once)",
                static_cast<double>(bytes) / 1e6);
  hooks.work_note = note;
  return bench_problem(o, bo, label, hp, slots, hooks, &res);
}

void print_device_banner() {
  const BuildInfo b = build_info();
  int dev = 0, driver = 0, runtime = 0;
  (void)cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, dev);
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  std::printf("groupattn %s: CUDA engines built for %s; GPU %d: %s (%d SMs, %s L2), driver %d.%d, runtime %d.%d\n",
              b.version.c_str(), b.cuda_archs.c_str(), dev, prop.name, prop.multiProcessorCount,
              format_bytes(static_cast<double>(prop.l2CacheSize)).c_str(), driver / 1000, (driver % 1000) / 10,
              runtime / 1000, (runtime % 1000) / 10);
  std::printf("GPU time: CUDA events around a graph replay of many calls over rotating input sets (> 1 GiB);\n"
              "wall time: host clock around one call plus a stream synchronize\n");
}

#endif  // GROUPATTN_WITH_CUDA

}  // namespace

int run_bench(int argc, char** argv, int first) {
  Args args;
  std::string err;
  Options o;
  BenchOptions bo;
  if (!args.parse(argc, argv, first, bench_flags(), &err)) {
    std::fprintf(stderr, "groupattn bench: %s\n", err.c_str());
    return 2;
  }
  if (args.has("help")) {
    std::printf("usage: groupattn bench --op prefill|decode|kda [flags]\n\n%s", format_help(bench_flags()).c_str());
    return 0;
  }
  bo.host_breakdown = args.has("host-breakdown");
  bo.launch_cost = args.has("launch-cost");
  bool ok = read_options(args, &o, &err) && args.get_int("rounds", &bo.rounds, &err) &&
            args.get_int("calls", &bo.calls, &err) && args.get_int("wall-calls", &bo.wall_calls, &err);
  if (ok && o.op == "all") {
    err = "--op prefill|decode|kda is required (or a shape flag that implies the op)";
    ok = false;
  }
  if (ok && bo.rounds < 5) {
    err = "--rounds: at least 5 (got " + std::to_string(bo.rounds) + "); the median and p20-p80 need them";
    ok = false;
  }
  if (ok && args.has("calls") && bo.calls <= 0) {
    err = "--calls: must be positive (got " + std::to_string(bo.calls) + ")";
    ok = false;
  }
  if (ok && bo.wall_calls <= 0) {
    err = "--wall-calls: must be positive (got " + std::to_string(bo.wall_calls) + ")";
    ok = false;
  }
  if (ok && (o.engine == "all" || is_host_engine(o.engine))) {
    err = "--engine " + o.engine + ": bench times one GPU engine (name one from `groupattn engines`, or leave it out)";
    ok = false;
  }
  if (!ok) {
    std::fprintf(stderr, "groupattn bench: %s\n", err.c_str());
    return 2;
  }
  const BuildInfo b = build_info();
  if (!b.cuda_compiled) {
    std::fprintf(stderr,
                 "groupattn bench: CPU-only build (no CUDA compiler at build time): there is no GPU engine to time; "
                 "bench reports GPU measurements only\n");
    return 2;
  }
  if (!cuda_device_available()) {
    std::fprintf(stderr,
                 "groupattn bench: no CUDA GPU is visible: nothing to time (bench reports GPU measurements only; "
                 "`groupattn check` runs the reference engine on the host)\n");
    return 2;
  }
#if GROUPATTN_WITH_CUDA
  print_device_banner();
  if (o.op == "kda") return bench_kda(o, bo);
  return bench_attention(o, bo, o.op == "decode");
#else
  return 2;
#endif
}

}  // namespace groupattn::cli
