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
#include "cli_problem.h"
#include "common/host_tensor.h"
#include "groupattn/groupattn.h"
#include "kda/reference.h"

namespace groupattn::cli {

using test::HostTensor;

namespace {

const std::vector<FlagSpec>& check_flags() {
  static const std::vector<FlagSpec> flags = [] {
    std::vector<FlagSpec> f = {
        {"op", true, "prefill | decode | kda | all (default: all three default problems)"},
        {"engine", true, "engine name, or 'all' (default: the one automatic selection picks)"},
    };
    for (const FlagSpec& s : shape_flags()) f.push_back(s);
    f.push_back({"repeat", true, "timed repetitions (median reported)"});
    f.push_back({"seed", true, "random seed, 0..2^64-1 (default 1)"});
    f.push_back({"help", false, "this text"});
    return f;
  }();
  return flags;
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

// ---------------------------------------------------------------------------------------------
// Attention

Result run_attention_engine(AttnData& x, const std::string& engine, int64_t repeats,
                            const std::vector<double>& ref_o, const std::vector<double>& ref_lse) {
  Result r;
  RunOptions ro;
  ro.engine = engine.empty() ? nullptr : engine.c_str();
  const bool device = cuda_device_available() && !(engine.empty() ? false : is_host_engine(engine));
  AttentionParams p = x.params;
  DeviceMirror dq, dk, dv, dout, dlse, dseq, dbt, dks, dvs, dcu;
  if (device) {
    for (auto [m, h] : {std::pair{&dq, &x.q}, {&dk, &x.k}, {&dv, &x.v}, {&dout, &x.out}, {&dlse, &x.lse},
                        {&dseq, &x.seqlens_k}, {&dbt, &x.block_table}, {&dks, &x.k_scale}, {&dvs, &x.v_scale},
                        {&dcu, &x.cu_seqlens}}) {
      r.status = m->upload(*h);
      if (!r.status.ok()) return r;
    }
    p.q = dq.view(), p.k = dk.view(), p.v = dv.view(), p.out = dout.view(), p.lse = dlse.view();
    p.seqlens_k = dseq.view(), p.block_table = dbt.view(), p.k_scale = dks.view(), p.v_scale = dvs.view();
    p.cu_seqlens_q = p.cu_seqlens_k = dcu.view();  // --varlen: one cu_seqlens for Q and K/V
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
  const Comparison c = compare_attention(x.out.values(), x.lse.values(), ref_o, ref_lse, x.q.dtype());
  r.rel = c.rel, r.max_abs = c.max_abs, r.aux = c.aux, r.pass = c.pass;
  return r;
}

bool check_attention(Options o, bool decode) {
  apply_attention_defaults(&o, decode);
  AttnData x = make_attention(o, decode);
  const std::string label_text = attention_label(o, decode);
  const char* label = label_text.c_str();
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
  // The reference returns K-first [N, HV, K, V] states whatever the layout; read ours that way.
  const std::vector<double> st = kda_state_k_first(x.ht, x.params.state_layout == KdaStateLayout::kKFirst);
  const Comparison c = compare_kda(x.out.values(), st, ref_o, ref_state);
  r.rel = c.rel, r.max_abs = c.max_abs, r.aux = c.aux, r.pass = c.pass;
  return r;
}

bool check_kda(Options o) {
  apply_kda_defaults(&o);
  KdaData x = make_kda(o);
  const std::string label_text = kda_label(o);
  const char* label = label_text.c_str();
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
