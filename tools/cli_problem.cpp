#include "cli_problem.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <utility>

namespace groupattn::cli {

using test::HostTensor;

std::vector<FlagSpec> shape_flags() {
  return {
      {"heads", true, "query/KV heads, e.g. 64/8 (KDA: H/HV)"},
      {"head-dim", true, "head dim D (KDA: K)"},
      {"head-dim-v", true, "value head dim Dv (KDA: V); default = head dim"},
      {"batch", true, "batch size (sequences)"},
      {"seq-len", true, "prefill query and key length; KDA tokens per sequence"},
      {"kv-len", true, "decode: KV cache length"},
      {"new-tokens", true, "decode: new query tokens per sequence (1..16)"},
      {"paged", true, "decode: page size of a paged KV cache (pages shuffled)"},
      {"varlen", false, "prefill: pack the batch as one varlen batch (cu_seqlens; every sequence --seq-len tokens)"},
      {"seqlens", false,
       "decode, contiguous cache: pass every sequence's K length (--kv-len) as seqlens_k, as serving engines do "
       "(paged caches always pass it)"},
      {"causal", false, "causal mask (bottom-right aligned); default for prefill and decode"},
      {"no-causal", false, "no causal mask"},
      {"window", true, "sliding window LEFT,RIGHT (-1 = unbounded)"},
      {"softcap", true, "tanh softcap (0 = off)"},
      {"scale", true, "softmax / KDA scale (default 1/sqrt(D))"},
      {"dtype", true, "bf16 | f16 | f32"},
      {"kv-dtype", true, "attention K/V: same (as --dtype) | f8e4m3 (fp8 cache, random fp32 scales per sequence and KV head)"},
      {"splits", true, "decode split-KV count (0 = automatic)"},
      {"gate", true, "KDA gate: log-decay | softplus | lower-bound"},
      {"lower-bound", true, "KDA lower-bound gate value (default -5)"},
      {"no-l2norm", false, "KDA: q/k l2norm off (default on)"},
      {"no-beta-sigmoid", false, "KDA: beta given directly, not as logits (default logits)"},
      {"no-initial-state", false, "KDA: start from a zero state (default random initial state)"},
      {"k-first", false, "KDA: K-first state layout [N,HV,K,V] (default V-first)"},
  };
}

// 2^32 elements: 8 GiB of bf16, far beyond what a CPU reference check finishes on, and large
// enough for the decode shapes a benchmark times (a 1M-token cache of 8 KV heads x 128).
constexpr double kMaxCliTensorElements = 4294967296.0;

bool read_options(const Args& a, Options* o, std::string* err) {
  std::string dtype = "bf16", kv_dtype = "same";
  bool ok = a.get_choice("op", {"prefill", "decode", "kda", "all"}, &o->op, err) &&
            a.get_ratio("heads", &o->hq, &o->hkv, err) && a.get_int("head-dim", &o->d, err) &&
            a.get_int("head-dim-v", &o->dv, err) && a.get_int("batch", &o->batch, err) &&
            a.get_int("seq-len", &o->seq_len, err) && a.get_int("kv-len", &o->kv_len, err) &&
            a.get_int("new-tokens", &o->new_tokens, err) && a.get_int("paged", &o->page, err) &&
            a.get_pair("window", &o->wl, &o->wr, err) && a.get_float("softcap", &o->softcap, err) &&
            a.get_float("scale", &o->scale, err) &&
            a.get_choice("dtype", {"bf16", "f16", "f32"}, &dtype, err) &&
            a.get_choice("kv-dtype", {"same", "f8e4m3"}, &kv_dtype, err) &&
            a.get_int("splits", &o->splits, err) &&
            a.get_choice("gate", {"log-decay", "softplus", "lower-bound"}, &o->gate, err) &&
            a.get_float("lower-bound", &o->lower_bound, err) && a.get_int("repeat", &o->repeat, err) &&
            a.get_uint64("seed", &o->seed, err);
  if (!ok) return false;
  if (auto e = a.get("engine")) o->engine = *e;
  o->dtype = dtype == "f16" ? DType::kF16 : dtype == "f32" ? DType::kF32 : DType::kBF16;
  o->kv_fp8 = kv_dtype == "f8e4m3";
  if (a.has("causal") && a.has("no-causal")) {
    *err = "--causal and --no-causal contradict each other";
    return false;
  }
  if (a.has("causal")) o->causal = 1;
  if (a.has("no-causal")) o->causal = 0;
  o->l2norm = !a.has("no-l2norm");
  o->beta_sigmoid = !a.has("no-beta-sigmoid");
  o->initial_state = !a.has("no-initial-state");
  o->k_first = a.has("k-first");
  o->varlen = a.has("varlen");
  o->seqlens = a.has("seqlens");
  // Shape flags imply the op when --op is not given.
  if (!a.has("op")) {
    if (a.has("new-tokens") || a.has("kv-len") || a.has("paged") || a.has("splits")) o->op = "decode";
    else if (a.has("gate") || a.has("lower-bound")) o->op = "kda";
    else if (a.has("seq-len") || a.has("heads") || a.has("head-dim") || a.has("batch") || a.has("varlen"))
      o->op = "prefill";
  }
  if (o->varlen && o->op != "prefill") {
    *err = "--varlen: prefill only (--op prefill; got --op " + o->op + ")";
    return false;
  }
  if (o->seqlens && o->op != "decode") {
    *err = "--seqlens: decode only (--op decode; got --op " + o->op + ")";
    return false;
  }
  const std::vector<std::pair<const char*, int64_t>> positive = {
      {"heads", o->hq}, {"heads", o->hkv}, {"head-dim", o->d}, {"head-dim-v", o->dv}, {"batch", o->batch}, {"seq-len", o->seq_len},
      {"kv-len", o->kv_len}, {"new-tokens", o->new_tokens}, {"paged", o->page}, {"repeat", o->repeat}};
  for (const auto& [name, v] : positive) {
    if (a.has(name) && v <= 0) {
      *err = std::string("--") + name + ": must be positive (got " + std::to_string(v) + ")";
      return false;
    }
  }
  // The CLI builds every problem in host memory: refuse sizes whose largest tensor would not fit
  // (and whose element counts could overflow) before anything is allocated. Counted in double.
  // Unset sizes count at their largest default (32 heads, head dim 128, batch 2).
  auto f = [](int64_t x, int64_t unset = 1) { return static_cast<double>(x > 0 ? x : unset); };
  // Query-side tensors have Hq heads over the query rows, K/V Hkv heads over the keys (plus a page).
  const double hq = f(o->hq, 32), hkv = f(o->hkv, 32), dim = std::max(f(o->d, 128), f(o->dv, 128));
  const double q_rows = std::max(f(o->seq_len), f(o->new_tokens));
  const double kv_rows = std::max(f(o->seq_len), f(o->kv_len) + f(o->page));
  const double per_seq = o->op == "kda" ? q_rows * std::max(hq, hkv) * (dim / 16 + 1)
                                        : std::max(q_rows * hq, kv_rows * hkv);
  const double elements = f(o->batch, 2) * per_seq * dim;
  if (elements > kMaxCliTensorElements) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "~%.3g elements (accepted: up to %.0f)", elements, kMaxCliTensorElements);
    *err = std::string("--batch/--heads/--head-dim/--seq-len/--kv-len: the problem's largest tensor would have ") + buf;
    return false;
  }
  return true;
}

void apply_attention_defaults(Options* o, bool decode) {
  if (o->hq == 0) o->hq = decode ? 32 : 16, o->hkv = decode ? 8 : 4;
  if (o->d == 0) o->d = 128;
  if (o->dv == 0) o->dv = o->d;
  if (o->batch == 0) o->batch = decode ? 2 : 1;
  if (o->seq_len == 0) o->seq_len = 512;
  if (o->kv_len == 0) o->kv_len = 4096;
  if (o->new_tokens == 0) o->new_tokens = 1;
  if (o->causal < 0) o->causal = 1;
}

void apply_kda_defaults(Options* o) {
  // 1 x 250 tokens (not a multiple of the 16-token chunk), 4/8 heads (GVA), K = V = 128,
  // lower-bound gate -5, l2norm, beta sigmoid, random initial state.
  if (o->hq == 0) o->hq = 4, o->hkv = 8;
  if (o->d == 0) o->d = 128;
  if (o->dv == 0) o->dv = o->d;
  if (o->batch == 0) o->batch = 1;
  if (o->seq_len == 0) o->seq_len = 250;
}

std::string attention_label(const Options& o, bool decode) {
  // Built by appending (GCC 12 at -O3 warns falsely on `"literal" + std::to_string(...)` here).
  std::string dv, shape, paged;
  if (o.dv != o.d) dv.append("/").append(std::to_string(o.dv));
  if (decode) {
    shape.append("kv ").append(std::to_string(o.kv_len)).append(" new ").append(std::to_string(o.new_tokens));
  } else {
    shape.append("S ").append(std::to_string(o.seq_len));
  }
  if (o.page > 0) paged.append(" paged ").append(std::to_string(o.page));
  if (o.varlen && !decode) paged.append(" varlen");
  if (o.seqlens && decode && o.page <= 0) paged.append(" seqlens");
  char label[256];
  std::snprintf(label, sizeof label, "%s %s heads %lld/%lld d%lld%s B%lld %s%s%s%s", decode ? "decode" : "prefill",
                dtype_name(o.dtype), static_cast<long long>(o.hq), static_cast<long long>(o.hkv),
                static_cast<long long>(o.d), dv.c_str(), static_cast<long long>(o.batch), shape.c_str(),
                o.causal ? " causal" : "", paged.c_str(), o.kv_fp8 ? " kv f8e4m3" : "");
  return label;
}

std::string kda_label(const Options& o) {
  std::string bound;
  if (o.gate == "lower-bound") bound.append(" ").append(format_number(o.lower_bound));
  char label[256];
  std::snprintf(label, sizeof label, "kda %s heads %lld/%lld K%lld V%lld B%lld T %lld gate %s%s", dtype_name(o.dtype),
                static_cast<long long>(o.hq), static_cast<long long>(o.hkv), static_cast<long long>(o.d),
                static_cast<long long>(o.dv), static_cast<long long>(o.batch), static_cast<long long>(o.seq_len),
                o.gate.c_str(), bound.c_str());
  return label;
}

AttnData make_attention(const Options& o, bool decode, bool fill_inputs) {
  std::mt19937_64 rng(o.seed);
  AttnData x;
  const int64_t B = o.batch, Hq = o.hq, Hkv = o.hkv, D = o.d, Dv = o.dv;
  const int64_t Sq = decode ? o.new_tokens : o.seq_len;
  const int64_t Sk = decode ? o.kv_len : o.seq_len;
  const DType kv_dtype = o.kv_fp8 ? kAttentionFp8KvDType : o.dtype;
  x.q = HostTensor(o.dtype, {B, Sq, Hq, D});
  x.out = HostTensor(o.dtype, {B, Sq, Hq, Dv});
  x.lse = HostTensor(DType::kF32, {Hq, B * Sq});
  AttentionParams& p = x.params;
  if (decode && o.page > 0) {
    // Paged cache, laid out as the GPU tests' harness lays it out (make_problem in
    // tests/gpu/cuda_attention_harness.cpp), so that one seed builds the same problem in both: the
    // GPU fuzz tier's reproduction lines rely on it. The pool's pages are shuffled, 3 are spare,
    // and every block-table row ends in one spare column that points at a spare page.
    const int64_t pages_per_seq = (Sk + o.page - 1) / o.page;
    const int64_t num_pages = B * pages_per_seq + 3;
    x.k = HostTensor(kv_dtype, {num_pages, o.page, Hkv, D});
    x.v = HostTensor(kv_dtype, {num_pages, o.page, Hkv, Dv});
    std::vector<int64_t> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    x.block_table = HostTensor(DType::kI32, {B, pages_per_seq + 1});
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < pages_per_seq; ++j) {
        x.block_table.set({b, j}, static_cast<double>(ids[static_cast<size_t>(b * pages_per_seq + j)]));
      }
      x.block_table.set({b, pages_per_seq}, static_cast<double>(ids.back()));
    }
    p.block_table = x.block_table.view();
  } else if (o.varlen && !decode) {
    // Packed: [B * S, H, D] tensors over the batched problem's memory; one cu_seqlens for Q and K/V.
    x.q = HostTensor(o.dtype, {B * Sq, Hq, D});
    x.out = HostTensor(o.dtype, {B * Sq, Hq, Dv});
    x.k = HostTensor(kv_dtype, {B * Sk, Hkv, D});
    x.v = HostTensor(kv_dtype, {B * Sk, Hkv, Dv});
    x.cu_seqlens = HostTensor(DType::kI32, {B + 1});
    for (int64_t b = 0; b <= B; ++b) x.cu_seqlens.set({b}, static_cast<double>(b * Sq));
    p.cu_seqlens_q = x.cu_seqlens.view();
    p.cu_seqlens_k = x.cu_seqlens.view();
    p.max_seqlen_q = Sq;
    p.max_seqlen_k = Sk;
  } else {
    x.k = HostTensor(kv_dtype, {B, Sk, Hkv, D});
    x.v = HostTensor(kv_dtype, {B, Sk, Hkv, Dv});
  }
  // Every sequence's length in seqlens_k: a paged cache needs it; with --seqlens a contiguous one
  // gets it too, as a serving engine passes its cache lengths, so the engines plan from the
  // device-side lengths (the sm90 and cuda work lists) instead of the shape. max_seqlen_k: device
  // engines size their plan by it (paged: else by the table's width).
  if (x.block_table.defined() || (decode && o.seqlens)) {
    x.seqlens_k = HostTensor(DType::kI32, {B});
    for (int64_t b = 0; b < B; ++b) x.seqlens_k.set({b}, static_cast<double>(Sk));
    p.seqlens_k = x.seqlens_k.view();
    p.max_seqlen_k = Sk;
  }
  // Inputs are drawn after the page permutation, q then k then v (the harness's order too).
  if (fill_inputs) {
    x.q.fill_normal(rng);
    x.k.fill_normal(rng);
    x.v.fill_normal(rng);
  }
  if (o.kv_fp8) {
    // Scales drawn after the inputs, so a seed builds the same q/k/v with or without them; the
    // cache values are N(0, 1) rounded to e4m3, the scales uniform in [0.25, 1).
    x.k_scale = HostTensor(DType::kF32, {B, Hkv});
    x.v_scale = HostTensor(DType::kF32, {B, Hkv});
    x.k_scale.fill_uniform(rng, 0.25, 1.0);
    x.v_scale.fill_uniform(rng, 0.25, 1.0);
    p.k_scale = x.k_scale.view();
    p.v_scale = x.v_scale.view();
  }
  p.q = x.q.view();
  p.k = x.k.view();
  p.v = x.v.view();
  p.out = x.out.view();
  p.lse = x.lse.view();
  p.causal = o.causal != 0;
  p.window_left = o.wl;
  p.window_right = o.wr;
  p.softcap = static_cast<float>(o.softcap);
  p.softmax_scale = static_cast<float>(o.scale);
  p.num_splits = static_cast<int>(o.splits);
  return x;
}

double kda_key_stddev(const Options& o) {
  // With l2norm the kernel normalises keys; without it, N(0, 1/K) keys have norm ~1, which keeps
  // the delta rule stable (N(0, 1) keys of norm ~sqrt(K) make every engine's state diverge).
  return o.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(o.d));
}

KdaData make_kda(const Options& o, bool fill_inputs) {
  std::mt19937_64 rng(o.seed);
  KdaData x;
  const int64_t B = o.batch, T = o.seq_len, H = o.hq, HV = o.hkv, K = o.d, V = o.dv;
  x.q = HostTensor(o.dtype, {B, T, H, K});
  x.k = HostTensor(o.dtype, {B, T, H, K});
  x.v = HostTensor(o.dtype, {B, T, HV, V});
  x.g = HostTensor(DType::kF32, {B, T, HV, K});
  x.beta = HostTensor(DType::kF32, {B, T, HV});
  x.out = HostTensor(o.dtype, {B, T, HV, V});
  if (fill_inputs) {
    x.q.fill_normal(rng);
    x.k.fill_normal(rng, 0.0, kda_key_stddev(o));
    x.v.fill_normal(rng);
    x.beta.fill_normal(rng);
  }
  KdaParams& p = x.params;
  if (o.gate == "log-decay") {
    if (fill_inputs) x.g.fill_uniform(rng, -2.0, 0.0);
    p.gate = KdaGate::kLogDecay;
  } else {
    if (fill_inputs) x.g.fill_normal(rng);
    x.A_log = HostTensor(DType::kF32, {HV});
    x.A_log.fill_uniform(rng, -1.0, 1.0);
    x.dt_bias = HostTensor(DType::kF32, {HV, K});
    x.dt_bias.fill_normal(rng, 0.0, 0.5);
    p.gate = o.gate == "softplus" ? KdaGate::kSoftplus : KdaGate::kLowerBound;
    p.A_log = x.A_log.view();
    p.dt_bias = x.dt_bias.view();
    p.lower_bound = static_cast<float>(o.lower_bound);
  }
  if (!o.beta_sigmoid && fill_inputs) x.beta.fill_uniform(rng, 0.0, 1.0);
  const std::vector<int64_t> state_shape =
      o.k_first ? std::vector<int64_t>{B, HV, K, V} : std::vector<int64_t>{B, HV, V, K};
  x.ht = HostTensor(DType::kF32, state_shape);
  if (o.initial_state) {
    x.h0 = HostTensor(DType::kF32, state_shape);
    if (fill_inputs) x.h0.fill_normal(rng, 0.0, 0.1);
    p.initial_state = x.h0.view();
  }
  p.q = x.q.view(), p.k = x.k.view(), p.v = x.v.view(), p.g = x.g.view(), p.beta = x.beta.view();
  p.out = x.out.view();
  p.final_state = x.ht.view();
  p.state_layout = o.k_first ? KdaStateLayout::kKFirst : KdaStateLayout::kVFirst;
  p.use_qk_l2norm = o.l2norm;
  p.use_beta_sigmoid = o.beta_sigmoid;
  p.scale = static_cast<float>(o.scale);
  return x;
}

bool is_host_engine(const std::string& name) { return name.rfind("reference", 0) == 0; }

std::vector<std::string> engines_to_run(Op op, const std::string& requested) {
  std::vector<std::string> names;
  if (requested == "all") {
    for (const EngineInfo& e : list_engines(op)) {
      if (e.available) names.push_back(e.name);
    }
  } else if (!requested.empty()) {
    names.push_back(requested);
  } else {
    names.push_back("");  // automatic
  }
  return names;
}

double lse_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double m = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i]) return INFINITY;
      continue;
    }
    const double e = std::fabs(out[i] - ref[i]);
    if (!(e <= m)) m = e;  // NaN propagates
  }
  return m;
}

Comparison compare_attention(const std::vector<double>& o, const std::vector<double>& lse,
                             const std::vector<double>& ref_o, const std::vector<double>& ref_lse, DType dtype) {
  Comparison c;
  c.rel = test::rel_error(o, ref_o);
  c.max_abs = test::max_abs_error(o, ref_o);
  c.aux = lse_error(lse, ref_lse);
  const double tol = dtype == DType::kBF16 ? 1e-2 : dtype == DType::kF16 ? 2e-3 : 1e-4;
  c.pass = test::all_finite(o) && c.rel < tol && c.aux < 1e-3;
  return c;
}

Comparison compare_kda(const std::vector<double>& o, const std::vector<double>& state,
                       const std::vector<double>& ref_o, const std::vector<double>& ref_state) {
  Comparison c;
  c.rel = test::rel_error(o, ref_o);
  c.max_abs = test::max_abs_error(o, ref_o);
  c.aux = test::rel_error(state, ref_state);
  c.pass = test::all_finite(o) && test::all_finite(state) && c.rel < 5e-3 && c.aux < 5e-3;
  return c;
}

std::vector<double> kda_state_k_first(const HostTensor& ht, bool k_first) {
  std::vector<double> st;
  const auto& sh = ht.shape();
  const int64_t kdim = k_first ? sh[2] : sh[3], vdim = k_first ? sh[3] : sh[2];
  for (int64_t n = 0; n < sh[0]; ++n)
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t i = 0; i < kdim; ++i)
        for (int64_t j = 0; j < vdim; ++j) st.push_back(k_first ? ht.at({n, h, i, j}) : ht.at({n, h, j, i}));
  return st;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace groupattn::cli
