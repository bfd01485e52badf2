// `groupattn check`: build one attention (prefill or decode) or KDA problem from flags, run it on
// the chosen engine(s), and compare against the fp64 reference: relative error, max error, LSE
// error (or final-state error for KDA), time, PASS/FAIL by the TESTING.md rules.
#include "cli_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "attention/reference.h"
#include "cli_args.h"
#include "cli_device.h"
#include "common/host_tensor.h"
#include "groupattn/groupattn.h"
#include "kda/reference.h"

namespace groupattn::cli {

using test::HostTensor;

namespace {

const std::vector<FlagSpec>& check_flags() {
  static const std::vector<FlagSpec> flags = {
      {"op", true, "prefill | decode | kda | all (default: all three default problems)"},
      {"engine", true, "engine name, or 'all' (default: the one automatic selection picks)"},
      {"heads", true, "query/KV heads, e.g. 64/8 (KDA: H/HV)"},
      {"head-dim", true, "head dim D (KDA: K)"},
      {"head-dim-v", true, "value head dim Dv (KDA: V); default = head dim"},
      {"batch", true, "batch size (sequences)"},
      {"seq-len", true, "prefill query and key length; KDA tokens per sequence"},
      {"kv-len", true, "decode: KV cache length"},
      {"new-tokens", true, "decode: new query tokens per sequence (1..16)"},
      {"paged", true, "decode: page size of a paged KV cache (pages shuffled)"},
      {"causal", false, "causal mask (bottom-right aligned); default for prefill and decode"},
      {"no-causal", false, "no causal mask"},
      {"window", true, "sliding window LEFT,RIGHT (-1 = unbounded)"},
      {"softcap", true, "tanh softcap (0 = off)"},
      {"scale", true, "softmax / KDA scale (default 1/sqrt(D))"},
      {"dtype", true, "bf16 | f16 | f32"},
      {"splits", true, "decode split-KV count (0 = automatic)"},
      {"gate", true, "KDA gate: log-decay | softplus | lower-bound"},
      {"lower-bound", true, "KDA lower-bound gate value (default -5)"},
      {"no-l2norm", false, "KDA: q/k l2norm off (default on)"},
      {"no-beta-sigmoid", false, "KDA: beta given directly, not as logits (default logits)"},
      {"no-initial-state", false, "KDA: start from a zero state (default random initial state)"},
      {"k-first", false, "KDA: K-first state layout [N,HV,K,V] (default V-first)"},
      {"repeat", true, "timed repetitions (median reported)"},
      {"seed", true, "random seed"},
      {"help", false, "this text"},
  };
  return flags;
}

struct Options {
  std::string op = "all", engine;
  int64_t hq = 0, hkv = 0, d = 0, dv = 0, batch = 0, seq_len = 0, kv_len = 0, new_tokens = 0, page = 0;
  int64_t wl = -1, wr = -1, splits = 0, repeat = 0, seed = 1;
  int causal = -1;  // -1 = op default
  double softcap = 0, scale = NAN, lower_bound = -5;
  DType dtype = DType::kBF16;
  std::string gate = "lower-bound";
  bool l2norm = true, beta_sigmoid = true, initial_state = true, k_first = false;
};

bool read_options(const Args& a, Options* o, std::string* err) {
  std::string dtype = "bf16";
  bool ok = a.get_choice("op", {"prefill", "decode", "kda", "all"}, &o->op, err) &&
            a.get_ratio("heads", &o->hq, &o->hkv, err) && a.get_int("head-dim", &o->d, err) &&
            a.get_int("head-dim-v", &o->dv, err) && a.get_int("batch", &o->batch, err) &&
            a.get_int("seq-len", &o->seq_len, err) && a.get_int("kv-len", &o->kv_len, err) &&
            a.get_int("new-tokens", &o->new_tokens, err) && a.get_int("paged", &o->page, err) &&
            a.get_pair("window", &o->wl, &o->wr, err) && a.get_float("softcap", &o->softcap, err) &&
            a.get_float("scale", &o->scale, err) && a.get_choice("dtype", {"bf16", "f16", "f32"}, &dtype, err) &&
            a.get_int("splits", &o->splits, err) &&
            a.get_choice("gate", {"log-decay", "softplus", "lower-bound"}, &o->gate, err) &&
            a.get_float("lower-bound", &o->lower_bound, err) && a.get_int("repeat", &o->repeat, err) &&
            a.get_int("seed", &o->seed, err);
  if (!ok) return false;
  if (auto e = a.get("engine")) o->engine = *e;
  o->dtype = dtype == "f16" ? DType::kF16 : dtype == "f32" ? DType::kF32 : DType::kBF16;
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
  // Shape flags imply the op when --op is not given.
  if (!a.has("op")) {
    if (a.has("new-tokens") || a.has("kv-len") || a.has("paged") || a.has("splits")) o->op = "decode";
    else if (a.has("gate") || a.has("lower-bound")) o->op = "kda";
    else if (a.has("seq-len") || a.has("heads") || a.has("head-dim") || a.has("batch")) o->op = "prefill";
  }
  const std::vector<std::pair<const char*, int64_t>> positive = {
      {"heads", o->hq}, {"head-dim", o->d}, {"head-dim-v", o->dv}, {"batch", o->batch}, {"seq-len", o->seq_len},
      {"kv-len", o->kv_len}, {"new-tokens", o->new_tokens}, {"paged", o->page}, {"repeat", o->repeat}};
  for (const auto& [name, v] : positive) {
    if (a.has(name) && v <= 0) {
      *err = std::string("--") + name + ": must be positive (got " + std::to_string(v) + ")";
      return false;
    }
  }
  return true;
}

// Shared result line.
struct Result {
  std::string engine;
  Status status;
  double rel = NAN, max_abs = NAN, aux = NAN;  // aux: LSE error (attention) or state error (KDA)
  double ms = NAN;
  bool pass = false;
};

void print_result(const std::string& problem, const Result& r, const char* aux_name) {
  if (!r.status.ok()) {
    std::printf("  %-10s %s\n", r.engine.c_str(), r.status.to_string().c_str());
    return;
  }
  std::printf("  %-10s rel_err=%.2e max_err=%.2e %s=%.2e time=%.3f ms  %s\n", r.engine.c_str(), r.rel,
              r.max_abs, aux_name, r.aux, r.ms, r.pass ? "PASS" : "FAIL");
  (void)problem;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

// Runs `call` (host engines) `repeats` times with a wall clock, or (device engines) with events
// after one warm-up; returns the first call's Status.
Status timed(bool on_device, int64_t repeats, const std::function<Status()>& call, double* ms) {
  std::vector<double> times;
  if (on_device) {
    GA_RETURN_IF_ERROR(call());  // warm-up (module load)
    GA_RETURN_IF_ERROR(device_synchronize());
  }
  for (int64_t i = 0; i < repeats; ++i) {
    if (on_device) {
      DeviceTimer t;
      t.start();
      GA_RETURN_IF_ERROR(call());
      double m = 0;
      GA_RETURN_IF_ERROR(t.stop(&m));
      times.push_back(m);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      GA_RETURN_IF_ERROR(call());
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  *ms = median(times);
  return Status::Ok();
}

// Largest |a - b| over entries where both are finite; infinite when finiteness differs.
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

bool is_host_engine(const std::string& name) { return name.rfind("reference", 0) == 0; }

// The engines to try: all listed (--engine all), the one named, or the automatic choice.
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

// ---------------------------------------------------------------------------------------------
// Attention

struct AttnData {
  HostTensor q, k, v, out, lse, seqlens_k, block_table;
  AttentionParams params;  // host views
};

AttnData make_attention(const Options& o, bool decode) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  AttnData x;
  const int64_t B = o.batch, Hq = o.hq, Hkv = o.hkv, D = o.d, Dv = o.dv;
  const int64_t Sq = decode ? o.new_tokens : o.seq_len;
  const int64_t Sk = decode ? o.kv_len : o.seq_len;
  x.q = HostTensor(o.dtype, {B, Sq, Hq, D});
  x.q.fill_normal(rng);
  x.out = HostTensor(o.dtype, {B, Sq, Hq, Dv});
  x.lse = HostTensor(DType::kF32, {Hq, B * Sq});
  AttentionParams& p = x.params;
  if (decode && o.page > 0) {
    // Paged cache: each sequence's pages are a random permutation of the pool, plus spare pages.
    const int64_t pages_per_seq = (Sk + o.page - 1) / o.page;
    const int64_t num_pages = B * pages_per_seq + 3;
    x.k = HostTensor(o.dtype, {num_pages, o.page, Hkv, D});
    x.v = HostTensor(o.dtype, {num_pages, o.page, Hkv, Dv});
    std::vector<int64_t> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    x.block_table = HostTensor(DType::kI32, {B, pages_per_seq});
    x.seqlens_k = HostTensor(DType::kI32, {B});
    for (int64_t b = 0; b < B; ++b) {
      x.seqlens_k.set({b}, static_cast<double>(Sk));
      for (int64_t j = 0; j < pages_per_seq; ++j) {
        x.block_table.set({b, j}, static_cast<double>(ids[static_cast<size_t>(b * pages_per_seq + j)]));
      }
    }
    p.block_table = x.block_table.view();
    p.seqlens_k = x.seqlens_k.view();
  } else {
    x.k = HostTensor(o.dtype, {B, Sk, Hkv, D});
    x.v = HostTensor(o.dtype, {B, Sk, Hkv, Dv});
  }
  x.k.fill_normal(rng);
  x.v.fill_normal(rng);
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

Result run_attention_engine(AttnData& x, const std::string& engine, int64_t repeats,
                            const std::vector<double>& ref_o, const std::vector<double>& ref_lse) {
  Result r;
  RunOptions ro;
  ro.engine = engine.empty() ? nullptr : engine.c_str();
  const bool device = cuda_device_available() && !(engine.empty() ? false : is_host_engine(engine));
  AttentionParams p = x.params;
  DeviceMirror dq, dk, dv, dout, dlse, dseq, dbt;
  if (device) {
    for (auto [m, h] : {std::pair{&dq, &x.q}, {&dk, &x.k}, {&dv, &x.v}, {&dout, &x.out}, {&dlse, &x.lse},
                        {&dseq, &x.seqlens_k}, {&dbt, &x.block_table}}) {
      r.status = m->upload(*h);
      if (!r.status.ok()) return r;
    }
    p.q = dq.view(), p.k = dk.view(), p.v = dv.view(), p.out = dout.view(), p.lse = dlse.view();
    p.seqlens_k = dseq.view(), p.block_table = dbt.view();
  }
  const char* chosen = nullptr;
  r.status = attention_engine_for(p, ro, &chosen);
  r.engine = chosen != nullptr ? chosen : engine;
  if (!r.status.ok()) return r;
  x.out.poison();
  x.lse.poison();
  if (device) {
    // Re-upload the poisoned outputs so that unwritten elements show as NaN.
    r.status = dout.upload(x.out);
    if (r.status.ok()) r.status = dlse.upload(x.lse);
    if (!r.status.ok()) return r;
    p.out = dout.view(), p.lse = dlse.view();
  }
  r.status = timed(device, repeats, [&] { return attention(p, ro); }, &r.ms);
  if (!r.status.ok()) return r;
  if (device) {
    r.status = dout.download(&x.out);
    if (r.status.ok()) r.status = dlse.download(&x.lse);
    if (!r.status.ok()) return r;
  }
  const std::vector<double> o = x.out.values(), lse = x.lse.values();
  r.rel = test::rel_error(o, ref_o);
  r.max_abs = test::max_abs_error(o, ref_o);
  r.aux = lse_error(lse, ref_lse);
  const double tol = x.q.dtype() == DType::kBF16 ? 1e-2 : x.q.dtype() == DType::kF16 ? 2e-3 : 1e-4;
  r.pass = test::all_finite(o) && r.rel < tol && r.aux < 1e-3;
  return r;
}

bool check_attention(Options o, bool decode) {
  // Defaults: decode 32/8 d128, 2 x 4096 cache, 1 new token; prefill 16/4 d128, 1 x 512, causal.
  if (o.hq == 0) o.hq = decode ? 32 : 16, o.hkv = decode ? 8 : 4;
  if (o.d == 0) o.d = 128;
  if (o.dv == 0) o.dv = o.d;
  if (o.batch == 0) o.batch = decode ? 2 : 1;
  if (o.seq_len == 0) o.seq_len = 512;
  if (o.kv_len == 0) o.kv_len = 4096;
  if (o.new_tokens == 0) o.new_tokens = 1;
  if (o.causal < 0) o.causal = 1;
  AttnData x = make_attention(o, decode);
  char label[256];
  std::snprintf(label, sizeof label, "%s %s heads %lld/%lld d%lld%s B%lld %s%s%s", decode ? "decode" : "prefill",
                dtype_name(o.dtype), static_cast<long long>(o.hq), static_cast<long long>(o.hkv),
                static_cast<long long>(o.d), o.dv != o.d ? ("/" + std::to_string(o.dv)).c_str() : "",
                static_cast<long long>(o.batch),
                decode ? ("kv " + std::to_string(o.kv_len) + " new " + std::to_string(o.new_tokens)).c_str()
                       : ("S " + std::to_string(o.seq_len)).c_str(),
                o.causal ? " causal" : "", o.page > 0 ? (" paged " + std::to_string(o.page)).c_str() : "");
  std::printf("%s\n", label);
  Status v = validate_attention(x.params);
  if (!v.ok()) {
    std::printf("  %s\n", v.to_string().c_str());
    return false;
  }
  std::vector<double> ref_o, ref_lse;
  Status s = reference_attention_fp64(x.params, 0, std::numeric_limits<int64_t>::max(), &ref_o, &ref_lse);
  if (!s.ok()) {
    std::printf("  fp64 reference: %s\n", s.to_string().c_str());
    return false;
  }
  bool all = true;
  for (const std::string& e : engines_to_run(Op::kAttention, o.engine)) {
    const int64_t reps = o.repeat > 0 ? o.repeat : (cuda_device_available() && !is_host_engine(e) ? 20 : 1);
    Result r = run_attention_engine(x, e, reps, ref_o, ref_lse);
    print_result(label, r, "lse_err");
    all = all && r.status.ok() && r.pass;
  }
  return all;
}

// ---------------------------------------------------------------------------------------------
// KDA

struct KdaData {
  HostTensor q, k, v, g, beta, out, A_log, dt_bias, h0, ht;
  KdaParams params;
};

KdaData make_kda(const Options& o) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  KdaData x;
  const int64_t B = o.batch, T = o.seq_len, H = o.hq, HV = o.hkv, K = o.d, V = o.dv;
  x.q = HostTensor(o.dtype, {B, T, H, K});
  x.k = HostTensor(o.dtype, {B, T, H, K});
  x.v = HostTensor(o.dtype, {B, T, HV, V});
  x.g = HostTensor(DType::kF32, {B, T, HV, K});
  x.beta = HostTensor(DType::kF32, {B, T, HV});
  x.out = HostTensor(o.dtype, {B, T, HV, V});
  x.q.fill_normal(rng);
  x.k.fill_normal(rng);
  x.v.fill_normal(rng);
  x.beta.fill_normal(rng);
  KdaParams& p = x.params;
  if (o.gate == "log-decay") {
    x.g.fill_uniform(rng, -2.0, 0.0);
    p.gate = KdaGate::kLogDecay;
  } else {
    x.g.fill_normal(rng);
    x.A_log = HostTensor(DType::kF32, {HV});
    x.A_log.fill_uniform(rng, -1.0, 1.0);
    x.dt_bias = HostTensor(DType::kF32, {HV, K});
    x.dt_bias.fill_normal(rng, 0.0, 0.5);
    p.gate = o.gate == "softplus" ? KdaGate::kSoftplus : KdaGate::kLowerBound;
    p.A_log = x.A_log.view();
    p.dt_bias = x.dt_bias.view();
    p.lower_bound = static_cast<float>(o.lower_bound);
  }
  if (!o.beta_sigmoid) x.beta.fill_uniform(rng, 0.0, 1.0);
  const std::vector<int64_t> state_shape =
      o.k_first ? std::vector<int64_t>{B, HV, K, V} : std::vector<int64_t>{B, HV, V, K};
  x.ht = HostTensor(DType::kF32, state_shape);
  if (o.initial_state) {
    x.h0 = HostTensor(DType::kF32, state_shape);
    x.h0.fill_normal(rng, 0.0, 0.1);
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

Result run_kda_engine(KdaData& x, const std::string& engine, int64_t repeats, const std::vector<double>& ref_o,
                      const std::vector<double>& ref_state) {
  Result r;
  RunOptions ro;
  ro.engine = engine.empty() ? nullptr : engine.c_str();
  const bool device = cuda_device_available() && !(engine.empty() ? false : is_host_engine(engine));
  KdaParams p = x.params;
  DeviceMirror m[10];
  if (device) {
    HostTensor* hs[10] = {&x.q, &x.k, &x.v, &x.g, &x.beta, &x.out, &x.A_log, &x.dt_bias, &x.h0, &x.ht};
    TensorView* vs[10] = {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.out, &p.A_log, &p.dt_bias, &p.initial_state,
                          &p.final_state};
    for (int i = 0; i < 10; ++i) {
      r.status = m[i].upload(*hs[i]);
      if (!r.status.ok()) return r;
      *vs[i] = m[i].view();
    }
  }
  const char* chosen = nullptr;
  r.status = kda_engine_for(p, ro, &chosen);
  r.engine = chosen != nullptr ? chosen : engine;
  if (!r.status.ok()) return r;
  x.out.poison();
  x.ht.poison();
  if (device) {
    r.status = m[5].upload(x.out);
    if (r.status.ok()) r.status = m[9].upload(x.ht);
    if (!r.status.ok()) return r;
    p.out = m[5].view(), p.final_state = m[9].view();
  }
  r.status = timed(device, repeats, [&] { return kda(p, ro); }, &r.ms);
  if (!r.status.ok()) return r;
  if (device) {
    r.status = m[5].download(&x.out);
    if (r.status.ok()) r.status = m[9].download(&x.ht);
    if (!r.status.ok()) return r;
  }
  const std::vector<double> o = x.out.values();
  // The reference returns K-first [N, HV, K, V] states whatever the layout; read ours that way.
  std::vector<double> st;
  const bool k_first = x.params.state_layout == KdaStateLayout::kKFirst;
  const auto& sh = x.ht.shape();
  const int64_t kdim = k_first ? sh[2] : sh[3], vdim = k_first ? sh[3] : sh[2];
  for (int64_t n = 0; n < sh[0]; ++n)
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t i = 0; i < kdim; ++i)
        for (int64_t j = 0; j < vdim; ++j) st.push_back(k_first ? x.ht.at({n, h, i, j}) : x.ht.at({n, h, j, i}));
  r.rel = test::rel_error(o, ref_o);
  r.max_abs = test::max_abs_error(o, ref_o);
  r.aux = test::rel_error(st, ref_state);
  r.pass = test::all_finite(o) && test::all_finite(st) && r.rel < 5e-3 && r.aux < 5e-3;
  return r;
}

bool check_kda(Options o) {
  // Default: 1 x 250 tokens (not a multiple of the 16-token chunk), 4/8 heads (GVA), K = V = 128,
  // lower-bound gate -5, l2norm, beta sigmoid, random initial state.
  if (o.hq == 0) o.hq = 4, o.hkv = 8;
  if (o.d == 0) o.d = 128;
  if (o.dv == 0) o.dv = o.d;
  if (o.batch == 0) o.batch = 1;
  if (o.seq_len == 0) o.seq_len = 250;
  KdaData x = make_kda(o);
  char label[256];
  std::snprintf(label, sizeof label, "kda %s heads %lld/%lld K%lld V%lld B%lld T %lld gate %s%s", dtype_name(o.dtype),
                static_cast<long long>(o.hq), static_cast<long long>(o.hkv), static_cast<long long>(o.d),
                static_cast<long long>(o.dv), static_cast<long long>(o.batch), static_cast<long long>(o.seq_len),
                o.gate.c_str(), o.gate == "lower-bound" ? (" " + format_number(o.lower_bound)).c_str() : "");
  std::printf("%s\n", label);
  Status v = validate_kda(x.params);
  if (!v.ok()) {
    std::printf("  %s\n", v.to_string().c_str());
    return false;
  }
  std::vector<double> ref_o, ref_state;
  Status s = kda_recurrent_fp64(x.params, &ref_o, &ref_state);
  if (!s.ok()) {
    std::printf("  fp64 reference: %s\n", s.to_string().c_str());
    return false;
  }
  bool all = true;
  for (const std::string& e : engines_to_run(Op::kKda, o.engine)) {
    const int64_t reps = o.repeat > 0 ? o.repeat : (cuda_device_available() && !is_host_engine(e) ? 20 : 1);
    Result r = run_kda_engine(x, e, reps, ref_o, ref_state);
    print_result(label, r, "state_err");
    all = all && r.status.ok() && r.pass;
  }
  return all;
}

void print_banner() {
  const BuildInfo b = build_info();
  if (!b.cuda_compiled) {
    std::printf("groupattn %s: CPU-only build (no CUDA compiler at build time): running the fp64 reference engine\n",
                b.version.c_str());
  } else if (!cuda_device_available()) {
    std::printf("groupattn %s: CUDA engines built for %s, but no GPU is visible: running the reference engine\n",
                b.version.c_str(), b.cuda_archs.c_str());
  } else {
    std::printf("groupattn %s: CUDA engines built for %s, GPU visible\n", b.version.c_str(), b.cuda_archs.c_str());
  }
  std::printf("errors against the fp64 reference; time = median per call (GPU: events; CPU: wall clock)\n");
}

}  // namespace

int run_check(int argc, char** argv, int first) {
  Args args;
  std::string err;
  Options o;
  if (!args.parse(argc, argv, first, check_flags(), &err) || !read_options(args, &o, &err)) {
    std::fprintf(stderr, "groupattn check: %s\n", err.c_str());
    return 2;
  }
  if (args.has("help")) {
    std::printf("usage: groupattn check [flags]\n\n%s", format_help(check_flags()).c_str());
    return 0;
  }
  print_banner();
  bool ok = true;
  if (o.op == "decode" || o.op == "all") ok = check_attention(o, true) && ok;
  if (o.op == "prefill" || o.op == "all") ok = check_attention(o, false) && ok;
  if (o.op == "kda" || o.op == "all") ok = check_kda(o) && ok;
  std::printf("%s\n", ok ? "check: PASS" : "check: FAIL");
  return ok ? 0 : 1;
}

int run_engines(int argc, char** argv, int first) {
  if (first < argc) {
    std::fprintf(stderr, "groupattn engines: takes no arguments (got '%s')\n", argv[first]);
    return 2;
  }
  const BuildInfo b = build_info();
  std::printf("groupattn %s, %s\n", b.version.c_str(),
              b.cuda_compiled ? ("CUDA engines built for " + b.cuda_archs).c_str() : "CPU-only build");
  for (Op op : {Op::kAttention, Op::kKda}) {
    std::printf("%s (in selection order):\n", op_name(op));
    for (const EngineInfo& e : list_engines(op)) {
      std::printf("  %-18s %s%s\n", e.name.c_str(), e.description.c_str(),
                  e.available ? "" : ("  [unavailable: " + e.unavailable_reason + "]").c_str());
      std::printf("  %-18s supports: %s\n", "", e.supports.c_str());
    }
  }
  return 0;
}

}  // namespace groupattn::cli
