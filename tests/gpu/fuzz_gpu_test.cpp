// GPU fuzz tier (issue 6): random VALID problems for the cuda attention and KDA engines, each run
// on the device with NaN-poisoned outputs and guard bands and compared with the fp64 reference on
// host copies (TESTING.md's pass rules). A problem the engine declines is counted by reason, not
// failed, unless the draw expected the engine to serve it; a problem it accepts must match.
//
//   GROUPATTN_FUZZ_SEED   base seed (default 20261129; printed)
//   GROUPATTN_FUZZ_CASES  cases per test (default 200 attention, 100 KDA)
//   GROUPATTN_FUZZ_CASE   run only this case index (reproduces one failure exactly)
//
// Case i draws everything from its own generator, seeded by (seed, i), so one case reproduces alone.
// A failure prints ONE line ("[gpu-fuzz] FAIL ...") with the case, what failed and the commands that
// reproduce it (a `groupattn check ... --seed <case seed>` line where check's flags express the
// case, then the gtest line); the test continues and fails at the end with the count. A summary
// line follows: "[gpu-fuzz] attention: seed S, N cases run, D declined (reasons...), E unexpected
// declines, F failed". GpuFuzzRepro (no GPU needed) checks that the check lines rebuild their case.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_args.h"
#include "cli_problem.h"
#include "gpu/cuda_attention_harness.h"
#include "gpu/kda_cuda_harness.h"
#include "kda/engines/cuda/kda_cuda_engine.h"

namespace groupattn::test {
namespace {

constexpr uint64_t kDefaultSeed = 20261129;
constexpr int kDefaultAttentionCases = 200;
constexpr int kDefaultKdaCases = 100;
// Per-case work caps (multiply-adds of the fp64 reference), so the whole test stays well under a
// minute on the H200's host: attention sum_b Sq_b * Sk_b * Hq * D, KDA N * T * HV * K * V.
constexpr double kAttentionWorkCap = 6e6;
constexpr double kKdaWorkCap = 2.5e7;

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 0);
  return (end != nullptr && *end == '\0') ? static_cast<uint64_t>(x) : fallback;
}

int64_t env_i64(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 0);
  return (end != nullptr && *end == '\0') ? static_cast<int64_t>(x) : fallback;
}

// splitmix64: case i's generator seed from (seed, i).
uint64_t case_seed(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  int64_t uni(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); }
  bool chance(double p) { return real(0.0, 1.0) < p; }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + uni(0, static_cast<int64_t>(xs.size()) - 1));
  }
};

// A decline reason with its numbers replaced by '#', so reasons group.
std::string reason_key(const std::string& msg) {
  std::string k;
  for (char ch : msg) {
    if (ch >= '0' && ch <= '9') {
      if (k.empty() || k.back() != '#') k.push_back('#');
    } else {
      k.push_back(ch);
    }
  }
  return k;
}

std::string reasons_string(const std::map<std::string, int>& m) {
  std::string s;
  for (const auto& [reason, n] : m) s.append(s.empty() ? "" : "; ").append(std::to_string(n)).append("x ").append(reason);
  return s.empty() ? "none" : s;
}

struct Tally {
  int run = 0, declined = 0, unexpected_declines = 0, failed = 0;
  std::map<std::string, int> reasons;
};

std::string gtest_repro(const char* test, uint64_t seed, int i) {
  return "GROUPATTN_FUZZ_SEED=" + std::to_string(seed) + " GROUPATTN_FUZZ_CASE=" + std::to_string(i) +
         " groupattn_tests_gpu --gtest_filter=GpuFuzz." + test;
}

// The text of a failure line after "repro: ": check's line first (it needs no test build), then the
// gtest line, which always reproduces the case exactly. `note` qualifies a check line that does not.
std::string repro_commands(const std::string& cli, const char* note, const std::string& gtest) {
  if (cli.empty()) return gtest;
  return cli + note + "; exact: " + gtest;
}

// A float as check's flags read it back bit for bit (strtod, then rounded to float).
std::string float_flag(float x) {
  std::ostringstream os;
  os << std::setprecision(std::numeric_limits<float>::max_digits10) << x;
  return os.str();
}

class GpuFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// ---------------------------------------------------------------------------------------------
// Attention

struct AttnDraw {
  Case c;
  bool partial = false;                     // kv_shard_offset / kv_total_len
  std::vector<int> shard_offset, total_len;  // per sequence, partial mode
  bool expect_served = true;
};

int tile_len(Rng& r) {
  // Lengths around the kernel's key tiles (128 keys at D 64, 64 otherwise) and query tiles.
  const int base = static_cast<int>(r.pick<int64_t>({16, 32, 64, 128, 192}));
  return std::max(0, base + static_cast<int>(r.uni(-1, 1)));
}

double attention_work(const Case& c) {
  double w = 0;
  for (size_t b = 0; b < c.q_lens.size(); ++b) w += double(c.q_lens[b]) * double(c.k_lens[b]);
  return w * double(c.hq) * double(c.d);
}

AttnDraw draw_attention(uint64_t seed) {
  Rng r(seed);
  AttnDraw a;
  Case& c = a.c;
  c.seed = seed;
  c.dtype = r.chance(0.5) ? DType::kBF16 : DType::kF16;
  if (r.chance(0.06)) {
    c.d = r.pick<int64_t>({96, 192});  // valid, not compiled into the cuda engine: it must decline
    a.expect_served = false;
  } else {
    c.d = r.pick<int64_t>({32, 64, 64, 128, 128, 128, 256});
  }
  c.hkv = r.uni(1, 4);
  c.hq = c.hkv * r.pick<int64_t>({1, 2, 3, 4, 5, 6, 7, 8});  // non-power-of-two groups included
  const int batch = static_cast<int>(r.uni(1, 4));
  const int kind = static_cast<int>(r.uni(0, 2));
  c.kv = kind == 0 ? KvKind::kBatched : kind == 1 ? KvKind::kVarlen : KvKind::kPaged;
  c.page_size = static_cast<int>(r.chance(0.3) ? r.pick<int64_t>({1, 2, 3, 16, 64}) : r.uni(1, 64));
  const bool decode = r.chance(0.6);
  c.q_varlen = r.chance(0.4);
  c.q_lens.assign(static_cast<size_t>(batch), 1);
  c.k_lens.assign(static_cast<size_t>(batch), 1);
  const int common_q = decode ? static_cast<int>(r.uni(1, 16)) : static_cast<int>(r.chance(0.5) ? tile_len(r) : r.uni(1, 200));
  const bool equal_k = r.chance(0.4);
  const int common_k = static_cast<int>(r.chance(0.5) ? tile_len(r) : r.uni(0, 700));
  for (int b = 0; b < batch; ++b) {
    int q = common_q;
    if (c.q_varlen && r.chance(0.5)) q = decode ? static_cast<int>(r.uni(0, 16)) : static_cast<int>(r.uni(0, 200));
    c.q_lens[static_cast<size_t>(b)] = std::max(q, c.q_varlen ? 0 : 1);
    int k = equal_k ? common_k : static_cast<int>(r.chance(0.15) ? 0 : r.chance(0.4) ? tile_len(r) : r.uni(1, 700));
    if (!decode && r.chance(0.5)) k = std::max(k, c.q_lens[static_cast<size_t>(b)]);  // prefill: Sk >= Sq
    c.k_lens[static_cast<size_t>(b)] = k;
  }
  if (!c.q_varlen) std::fill(c.q_lens.begin(), c.q_lens.end(), std::max(1, c.q_lens[0]));
  // Keep the reference's work bounded: shrink key lengths, then query lengths.
  for (int guard = 0; guard < 40 && attention_work(c) > kAttentionWorkCap; ++guard) {
    for (int& k : c.k_lens) k = k / 2 + (k % 2);
    if (guard >= 4) {
      for (int& q : c.q_lens) q = std::max(c.q_varlen ? 0 : 1, q / 2);
    }
  }
  // Some sequence has a query and a key: max_seqlen_q / max_seqlen_k must be >= 1 for the device
  // (0 means "compute from the index tensors", which a device-resident problem cannot).
  if (std::all_of(c.q_lens.begin(), c.q_lens.end(), [](int q) { return q == 0; })) c.q_lens[0] = 1;
  if (std::all_of(c.k_lens.begin(), c.k_lens.end(), [](int k) { return k == 0; })) c.k_lens.back() = 1;
  c.causal = r.chance(0.5);
  if (r.chance(0.3)) {
    c.window_left = r.chance(0.2) ? 0 : r.uni(0, 300);
    c.window_right = r.chance(0.5) ? -1 : r.uni(0, 16);
  }
  if (r.chance(0.2)) c.softcap = static_cast<float>(r.pick<double>({5.0, 30.0, 50.0}));
  if (r.chance(0.2)) c.scale = static_cast<float>(r.real(0.02, 0.3));
  c.num_splits = static_cast<int>(r.pick<int64_t>({0, 0, 1, 3}));
  c.strided = r.chance(0.25);
  if (r.chance(0.15)) {
    a.partial = true;
    for (int b = 0; b < batch; ++b) {
      const int before = static_cast<int>(r.chance(0.3) ? 0 : r.uni(0, 300));
      const int after = static_cast<int>(r.chance(0.3) ? 0 : r.uni(0, 300));
      a.shard_offset.push_back(before);
      a.total_len.push_back(before + c.k_lens[static_cast<size_t>(b)] + after);
    }
  }
  return a;
}

std::string attention_description(const AttnDraw& a) {
  std::ostringstream os;
  os << describe(a.c);
  if (!std::isnan(a.c.scale)) os << " scale=" << a.c.scale;
  if (a.partial) {
    os << " partial offsets/totals=";
    for (size_t b = 0; b < a.shard_offset.size(); ++b) os << a.shard_offset[b] << "/" << a.total_len[b] << ",";
  }
  return os.str();
}

// The `groupattn check` line that rebuilds this case exactly, or "" when check's flags cannot
// express it. check's attention problem (make_attention in tools/cli_problem.cpp) takes the same
// generator, seed, fill order and paged layout as make_problem here, so --seed <case seed> gives
// the same inputs; GpuFuzzRepro.CheckLinesRebuildTheAttentionCaseExactly checks it bit for bit.
// check builds batched Q of one length and batched or paged K/V of one length. Fields this tier
// randomises that no check flag expresses (such a case prints the gtest line alone):
//   varlen Q; varlen K/V; K lengths that differ per sequence or are 0; strided views;
//   partial-output mode (kv_shard_offset / kv_total_len).
// check has no guard bands: a write outside a tensor happens again there but is not reported.
std::string cli_repro(const AttnDraw& a) {
  const Case& c = a.c;
  if (c.q_varlen || c.strided || a.partial || c.kv == KvKind::kVarlen) return "";
  if (std::any_of(c.k_lens.begin(), c.k_lens.end(), [&](int k) { return k != c.k_lens[0]; })) return "";
  const int sq = c.q_lens[0], sk = c.k_lens[0];
  if (sk <= 0) return "";
  // Batched K/V with Sq == Sk is check's prefill problem; any other Sq is its decode problem (check
  // takes any --new-tokens; the 1..16 in its help is the sm90 decode engine's range).
  const bool prefill = c.kv == KvKind::kBatched && sq == sk;
  std::ostringstream os;
  os << "groupattn check --engine cuda --op " << (prefill ? "prefill" : "decode") << " --seed " << c.seed
     << " --dtype " << dtype_name(c.dtype) << " --heads " << c.hq << "/" << c.hkv << " --head-dim " << c.d
     << " --batch " << c.q_lens.size();
  if (prefill) {
    os << " --seq-len " << sq;
  } else {
    os << " --kv-len " << sk << " --new-tokens " << sq;
  }
  if (c.kv == KvKind::kPaged) os << " --paged " << c.page_size;
  os << (c.causal ? " --causal" : " --no-causal");
  if (c.window_left >= 0 || c.window_right >= 0) os << " --window " << c.window_left << "," << c.window_right;
  if (c.softcap != 0.f) os << " --softcap " << float_flag(c.softcap);
  if (!std::isnan(c.scale)) os << " --scale " << float_flag(c.scale);
  if (c.num_splits != 0) os << " --splits " << c.num_splits;
  return os.str();
}

HostTensor i32_tensor(const std::vector<int>& v) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set({static_cast<int64_t>(i)}, v[i]);
  return t;
}

// Runs one drawn problem on `engine`. Returns "" on pass, "declined: <reason>" on a decline, else
// findings.
std::string run_attention_case(const AttnDraw& a, const char* engine) {
  std::unique_ptr<Problem> p = make_problem(a.c);
  HostTensor offs, tots;
  std::unique_ptr<DeviceTensor> doffs, dtots;
  AttentionParams hp = p->host_params(), dp = p->device_params();
  if (a.partial) {
    offs = i32_tensor(a.shard_offset), tots = i32_tensor(a.total_len);
    doffs = std::make_unique<DeviceTensor>(offs), dtots = std::make_unique<DeviceTensor>(tots);
    hp.kv_shard_offset = offs.view(), hp.kv_total_len = tots.view();
    dp.kv_shard_offset = doffs->view(), dp.kv_total_len = dtots->view();
  }
  RunOptions o;
  o.engine = engine;
  const char* name = nullptr;
  const Status sel = attention_engine_for(dp, o, &name);
  if (sel.code() == StatusCode::kNotSupported) return "declined: " + sel.message();
  if (!sel.ok()) return "invalid problem drawn (a fuzzer bug): " + sel.to_string();
  RunOptions ro;
  ro.engine = "reference";
  const Status rs = attention(hp, ro);
  if (!rs.ok()) return "reference: " + rs.to_string();
  p->dout->poison();
  p->dlse->poison();
  const Status s = attention(dp, o);
  if (!s.ok()) return std::string(engine) + " engine accepted, then failed: " + s.to_string();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return std::string("CUDA error after the launch: ") + cudaGetErrorString(e);
  HostTensor got_out = like(p->out), got_lse = like(p->lse);
  p->dout->download(&got_out);
  p->dlse->download(&got_lse);

  std::ostringstream bad;
  const std::vector<double> out = got_out.values(), ref = p->out.values();
  if (!all_finite(out)) bad << "NaN/Inf in O; ";
  const double tol = a.c.dtype == DType::kBF16 ? 1e-2 : 2e-3;  // TESTING.md
  const double rel = rel_error(out, ref);
  // An all-zero reference (every row sees no key) must give exactly zero.
  const bool ref_zero = std::all_of(ref.begin(), ref.end(), [](double x) { return x == 0.0; });
  if (ref_zero ? !std::all_of(out.begin(), out.end(), [](double x) { return x == 0.0; }) : !(rel < tol)) {
    bad << "O relative error " << rel << " (tolerance " << tol << "); ";
  }
  const std::vector<double> lse = got_lse.values(), lse_ref = p->lse.values();
  int wrong_state = 0;
  double worst = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i]) && lse_ref[i] < 0) {
      if (!(std::isinf(lse[i]) && lse[i] < 0)) ++wrong_state;
    } else if (!std::isfinite(lse[i])) {
      ++wrong_state;
    } else {
      worst = std::max(worst, std::abs(lse[i] - lse_ref[i]));
    }
  }
  if (wrong_state != 0) bad << wrong_state << " LSE rows with the wrong -inf/finite state; ";
  if (!(worst < 1e-3)) bad << "LSE abs error " << worst << " (tolerance 1e-3); ";
  for (const DeviceTensor* t : {p->dq.get(), p->dk.get(), p->dv.get(), p->dout.get(), p->dlse.get(), p->dcu_q.get(),
                                p->dcu_k.get(), p->dseqlens_k.get(), p->dblock_table.get(), doffs.get(), dtots.get()}) {
    if (t != nullptr && !t->guards_intact()) {
      bad << "a guard band was overwritten; ";
      break;
    }
  }
  std::string r = bad.str();
  if (r.empty()) return r;
  r.resize(r.size() - 2);
  return r;
}

TEST_F(GpuFuzz, AttentionRandomValidProblems) {
  const uint64_t seed = env_u64("GROUPATTN_FUZZ_SEED", kDefaultSeed);
  const int cases = static_cast<int>(env_i64("GROUPATTN_FUZZ_CASES", kDefaultAttentionCases));
  const int only = static_cast<int>(env_i64("GROUPATTN_FUZZ_CASE", -1));
  std::printf("[gpu-fuzz] attention: seed %llu, %d cases%s\n", static_cast<unsigned long long>(seed), cases,
              only >= 0 ? (" (case " + std::to_string(only) + " only)").c_str() : "");
  const auto t0 = std::chrono::steady_clock::now();
  Tally t;
  int hopper_run = 0;
  for (int i = 0; i < cases; ++i) {
    if (only >= 0 && i != only) continue;
    const AttnDraw a = draw_attention(case_seed(seed, static_cast<uint64_t>(i)));
    const std::string label = attention_description(a);
    const std::string result = run_attention_case(a, "cuda");
    const std::string repro =
        repro_commands(cli_repro(a), "", gtest_repro("AttentionRandomValidProblems", seed, i));
    ++t.run;
    // The Hopper engines serve subsets (decode: D 64 / 128 / 256, batched or paged with any page
    // size; prefill: batched): every drawn problem one accepts is checked the same way; their
    // declines are expected. sm90-rows: sm90's packed-rows multi-token form pinned for every group,
    // so the drawn decode problems below 64 packed rows exercise it too.
    for (const char* hopper : {"sm90", "sm90-rows", "sm90-prefill"}) {
      const std::string r_hopper = run_attention_case(a, hopper);
      if (r_hopper.rfind("declined: ", 0) == 0) continue;
      ++hopper_run;
      if (!r_hopper.empty()) {
        ++t.failed;
        std::string repro_hopper = repro;  // the same lines with the engine swapped
        if (const size_t at = repro_hopper.find("--engine cuda"); at != std::string::npos) {
          repro_hopper.replace(at, 13, std::string("--engine ") + hopper);
        }
        std::printf("[gpu-fuzz] FAIL attention case %d (engine %s): %s | %s | repro: %s\n", i, hopper, r_hopper.c_str(),
                    label.c_str(), repro_hopper.c_str());
      }
    }
    if (result.rfind("declined: ", 0) == 0) {
      ++t.declined;
      ++t.reasons[reason_key(result.substr(10))];
      if (a.expect_served) {
        ++t.unexpected_declines;
        std::printf("[gpu-fuzz] FAIL attention case %d: unexpected decline (%s) | %s | repro: %s\n", i,
                    result.c_str(), label.c_str(), repro.c_str());
      }
      continue;
    }
    if (!result.empty()) {
      ++t.failed;
      std::printf("[gpu-fuzz] FAIL attention case %d: %s | %s | repro: %s\n", i, result.c_str(),
                  label.c_str(), repro.c_str());
    }
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[gpu-fuzz] attention summary: seed %llu, %d cases run, %d declined (%s), %d unexpected declines, "
              "%d also run on sm90 or sm90-prefill, %d failed, %.1f s\n",
              static_cast<unsigned long long>(seed), t.run, t.declined, reasons_string(t.reasons).c_str(),
              t.unexpected_declines, hopper_run, t.failed, secs);
  EXPECT_EQ(t.failed, 0) << t.failed << " of " << t.run << " attention cases failed (lines starting [gpu-fuzz] FAIL)";
  EXPECT_EQ(t.unexpected_declines, 0) << "the cuda engine declined problems it should serve";
}

// Parses a `groupattn check ...` line as check does (its problem flags, --op, --engine, --seed).
bool parse_check_line(const std::string& line, cli::Options* o, std::string* err) {
  std::istringstream is(line);
  std::vector<std::string> words;
  for (std::string w; is >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::vector<cli::FlagSpec> specs = {{"op", true, ""}, {"engine", true, ""}, {"seed", true, ""}};
  for (const cli::FlagSpec& s : cli::shape_flags()) specs.push_back(s);
  cli::Args args;
  return words.size() >= 2 && words[0] == "groupattn" && words[1] == "check" &&
         args.parse(static_cast<int>(argv.size()), argv.data(), 2, specs, err) &&
         cli::read_options(args, o, err);
}

// What differs between check's problem and the fuzz case's host problem; "" when nothing does.
std::string problem_difference(const cli::AttnData& x, Problem& p) {
  std::string d;
  const auto compare = [&](const HostTensor& a, const HostTensor& b, const char* name) {
    if (a.defined() != b.defined() || (a.defined() && !bitwise_equal(a, b))) d.append(" ").append(name);
  };
  compare(x.q, p.q, "q");
  compare(x.k, p.k, "k");
  compare(x.v, p.v, "v");
  compare(x.seqlens_k, p.seqlens_k, "seqlens_k");
  compare(x.block_table, p.block_table, "block_table");
  if (x.out.shape() != p.out.shape()) d.append(" out-shape");
  if (x.lse.shape() != p.lse.shape()) d.append(" lse-shape");
  const AttentionParams& a = x.params;
  const AttentionParams b = p.host_params();
  const auto same_bits = [](float u, float v) { return std::memcmp(&u, &v, sizeof u) == 0; };
  if (a.causal != b.causal) d.append(" causal");
  if (a.window_left != b.window_left || a.window_right != b.window_right) d.append(" window");
  if (!same_bits(a.softcap, b.softcap)) d.append(" softcap");
  if (!same_bits(a.softmax_scale, b.softmax_scale)) d.append(" scale");
  if (a.num_splits != b.num_splits) d.append(" splits");
  if (a.max_seqlen_q != b.max_seqlen_q || a.max_seqlen_k != b.max_seqlen_k) d.append(" max_seqlen");
  return d;
}

// Every `groupattn check` line the attention tier prints must rebuild its case bit for bit: the
// default draw's cases (and two other seeds'), each line parsed as check parses it and its problem
// built by check's own code. Host only: needs no GPU.
TEST(GpuFuzzRepro, CheckLinesRebuildTheAttentionCaseExactly) {
  for (const uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{7}}) {
    int lines = 0, paged = 0;
    for (int i = 0; i < kDefaultAttentionCases; ++i) {
      const AttnDraw a = draw_attention(case_seed(seed, static_cast<uint64_t>(i)));
      const std::string line = cli_repro(a);
      if (line.empty()) continue;
      ++lines;
      if (a.c.kv == KvKind::kPaged) ++paged;
      cli::Options o;
      std::string err;
      ASSERT_TRUE(parse_check_line(line, &o, &err))
          << "seed " << seed << " case " << i << ": " << line << ": " << err;
      const bool decode = o.op == "decode";
      cli::apply_attention_defaults(&o, decode);
      const cli::AttnData x = cli::make_attention(o, decode);
      const std::unique_ptr<Problem> p = make_host_problem(a.c);
      EXPECT_EQ(problem_difference(x, *p), "") << "seed " << seed << " case " << i << ": " << line;
    }
    // 10-15% of the draws have a check line (21, 31 and 28 of 200 at these seeds), paged ones among
    // them; far fewer would mean cli_repro lost its reach.
    std::printf("[gpu-fuzz-repro] seed %llu: %d of %d cases have a check line (%d paged)\n",
                static_cast<unsigned long long>(seed), lines, kDefaultAttentionCases, paged);
    EXPECT_GE(lines, kDefaultAttentionCases / 20) << "seed " << seed;
    EXPECT_GE(paged, 1) << "seed " << seed;
  }
}

// ---------------------------------------------------------------------------------------------
// KDA

struct KdaDraw {
  KdaCase c;
  int pool_extra = -1;  // >= 0: state pool in place with this many spare rows
  bool strided = false;
  KdaCudaPath path = KdaCudaPath::kAuto;
  bool expect_served = true;
};

const char* path_name(KdaCudaPath p) {
  return p == KdaCudaPath::kRecurrent ? "recurrent" : p == KdaCudaPath::kChunked ? "chunked" : "auto";
}

KdaDraw draw_kda(uint64_t seed) {
  Rng r(seed);
  KdaDraw d;
  KdaCase& c = d.c;
  c.dtype = r.chance(0.5) ? DType::kBF16 : DType::kF16;
  c.H = r.uni(1, 4);
  c.HV = c.H * r.pick<int64_t>({1, 1, 2, 3, 4});  // GVA
  c.K = r.pick<int64_t>({64, 128});
  c.V = r.pick<int64_t>({64, 128});
  if (r.chance(0.05)) {
    c.K = r.pick<int64_t>({32, 256});  // valid, not compiled into the cuda engine: declined
    d.expect_served = false;
  }
  const int gate = static_cast<int>(r.uni(0, 2));
  if (gate == 0) {
    c.gate = KdaGate::kLogDecay;
    c.g_hi = 0.0;
    c.g_lo = r.pick<double>({-0.05, -1.0, -3.0, -8.0});
    c.with_A_log = false, c.with_dt_bias = false;
  } else if (gate == 1) {
    c.gate = KdaGate::kSoftplus;
    c.with_A_log = true;  // required
    c.with_dt_bias = r.chance(0.6);
    c.g_lo = -4.0;
    c.g_hi = r.pick<double>({2.0, 8.0, 30.0});  // 30: log decays below -20 per token
  } else {
    c.gate = KdaGate::kLowerBound;
    c.lower_bound = static_cast<float>(r.real(-8.0, -1.0));
    c.with_A_log = r.chance(0.7);
    c.with_dt_bias = r.chance(0.7);
    c.g_lo = -2.0, c.g_hi = r.pick<double>({2.0, 6.0});
  }
  c.l2norm = r.chance(0.75);
  c.beta_sigmoid = r.chance(0.7);
  c.neg_eigval = c.beta_sigmoid && c.l2norm && r.chance(0.3);  // 2 * sigmoid: needs unit keys to stay stable
  c.layout = r.chance(0.5) ? KdaStateLayout::kVFirst : KdaStateLayout::kKFirst;
  if (r.chance(0.15)) c.scale = static_cast<float>(r.real(0.05, 0.5));
  const bool varlen = r.chance(0.4);
  if (varlen) {
    c.B = 1;
    const int n = static_cast<int>(r.uni(1, 5));
    c.cu = {0};
    for (int s = 0; s < n; ++s) {
      const int64_t len = r.chance(0.2) ? 0 : r.chance(0.3) ? r.uni(1, 3) : r.chance(0.3) ? 16 * r.uni(1, 4) + r.uni(-1, 1) : r.uni(1, 150);
      c.cu.push_back(c.cu.back() + len);
    }
    c.cu_dtype = r.chance(0.5) ? DType::kI32 : DType::kI64;
    c.T = c.cu.back();
  } else {
    c.B = r.uni(1, 3);
    c.T = r.chance(0.35) ? r.uni(1, 4) : r.chance(0.3) ? 16 * r.uni(1, 8) + r.uni(-1, 1) : r.uni(1, 300);
  }
  // Bound the reference's work: shorten T (dense) or the packed sequences (varlen).
  auto work = [&] { return double(c.B) * double(c.T) * double(c.HV) * double(c.K) * double(c.V); };
  for (int guard = 0; guard < 20 && work() > kKdaWorkCap; ++guard) {
    if (varlen) {
      for (size_t s = 1; s < c.cu.size(); ++s) c.cu[s] = c.cu[s - 1] + (c.cu[s] - c.cu[s - 1]) / 2;
      c.T = c.cu.back();
    } else {
      c.T = std::max<int64_t>(1, c.T / 2);
    }
  }
  if (varlen && c.T == 0) {  // at least one token in the batch
    c.cu.back() += 1;
    c.T = 1;
  }
  c.with_initial = r.chance(0.8);
  c.with_final = r.chance(0.8);
  if (r.chance(0.3)) {
    d.pool_extra = static_cast<int>(r.uni(0, 6));
    c.with_initial = true;  // the pool holds the states in place
  }
  d.strided = r.chance(0.2);
  d.path = r.pick<KdaCudaPath>({KdaCudaPath::kAuto, KdaCudaPath::kRecurrent, KdaCudaPath::kChunked});
  return d;
}

std::string kda_description(const KdaDraw& d) {
  std::string extra = std::string(" path=") + path_name(d.path);
  if (d.pool_extra >= 0) extra += " pool+" + std::to_string(d.pool_extra) + " in place";
  if (d.strided) extra += " strided";
  return kda_describe(d.c, extra);
}

// A `groupattn check` line with this case's shapes and options, or "". It does NOT rebuild the
// case's inputs: check's KDA problem (make_kda in tools/cli_problem.cpp) draws its own, with a
// gate-input range, key scale, beta range, initial-state scale and fill order of its own, and
// check has no flags for them; --seed only makes its draw repeatable. The gtest line is exact.
// Fields this tier randomises that no check flag expresses: the gate-input range (g_lo, g_hi);
// A_log and dt_bias present separately (check gives both, or neither with log-decay); negative
// eigenvalues; varlen cu_seqlens (int32 / int64); no final state; state pools in place; strided
// views; a pinned path (recurrent / chunked: check runs the automatic choice).
std::string kda_cli_repro(const KdaDraw& d, uint64_t seed) {
  const KdaCase& c = d.c;
  // check's KDA problem: dense batch, l2norm/beta-sigmoid flags, A_log + dt_bias with the in-kernel
  // gates, a random initial state (or none), a final state, no pool, no neg eigenvalues.
  // Not --no-l2norm: check's keys are N(0, 1), of norm ~sqrt(K) without l2norm, and its recurrence
  // then diverges (outputs ~1e10, inf in f16) on every engine; the fuzz tier's keys have unit norm.
  if (!c.cu.empty() || d.pool_extra >= 0 || d.strided || c.neg_eigval || !c.with_final || !c.l2norm)
    return "";
  if (c.gate != KdaGate::kLogDecay && !(c.with_A_log && c.with_dt_bias)) return "";
  std::ostringstream os;
  os << "groupattn check --engine cuda --op kda --seed " << seed << " --dtype " << dtype_name(c.dtype)
     << " --heads " << c.H << "/" << c.HV << " --head-dim " << c.K << " --head-dim-v " << c.V << " --batch "
     << c.B << " --seq-len " << c.T << " --gate "
     << (c.gate == KdaGate::kLogDecay   ? "log-decay"
         : c.gate == KdaGate::kSoftplus ? "softplus"
                                        : "lower-bound");
  if (c.gate == KdaGate::kLowerBound) os << " --lower-bound " << float_flag(c.lower_bound);
  if (!c.l2norm) os << " --no-l2norm";
  if (!c.beta_sigmoid) os << " --no-beta-sigmoid";
  if (!c.with_initial) os << " --no-initial-state";
  if (c.layout == KdaStateLayout::kKFirst) os << " --k-first";
  if (!std::isnan(c.scale)) os << " --scale " << float_flag(c.scale);
  return os.str();
}

constexpr const char* kKdaCliNote = " (same shapes and options, its own inputs)";

std::string run_kda_case(const KdaDraw& d, uint64_t seed) {
  KdaGpuRun r;
  r.c = d.c;
  r.setup(seed, d.pool_extra, d.strided);
  const KdaParams p = r.device_params();
  RunOptions o;
  o.engine = "cuda";
  const char* name = nullptr;
  const Status sel = kda_engine_for(p, o, &name);
  if (sel.code() == StatusCode::kNotSupported) return "declined: " + sel.message();
  if (!sel.ok()) return "invalid problem drawn (a fuzzer bug): " + sel.to_string();
  r.dout->poison();
  if (r.dfinal) r.dfinal->poison();
  const Status s = d.path == KdaCudaPath::kAuto ? kda(p, o) : kda_cuda_run_path(p, d.path, nullptr);
  if (!s.ok()) return "cuda engine accepted, then failed: " + s.to_string();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return std::string("CUDA error after the launch: ") + cudaGetErrorString(e);
  return kda_compare(r, r);
}

TEST_F(GpuFuzz, KdaRandomValidProblems) {
  const uint64_t seed = env_u64("GROUPATTN_FUZZ_SEED", kDefaultSeed);
  const int cases = static_cast<int>(env_i64("GROUPATTN_FUZZ_CASES", kDefaultKdaCases));
  const int only = static_cast<int>(env_i64("GROUPATTN_FUZZ_CASE", -1));
  std::printf("[gpu-fuzz] kda: seed %llu, %d cases%s\n", static_cast<unsigned long long>(seed), cases,
              only >= 0 ? (" (case " + std::to_string(only) + " only)").c_str() : "");
  const auto t0 = std::chrono::steady_clock::now();
  Tally t;
  for (int i = 0; i < cases; ++i) {
    if (only >= 0 && i != only) continue;
    const uint64_t cs = case_seed(seed ^ 0x4B4441ull, static_cast<uint64_t>(i));
    const KdaDraw d = draw_kda(cs);
    const std::string label = kda_description(d);
    const std::string result = run_kda_case(d, cs);
    const std::string repro =
        repro_commands(kda_cli_repro(d, cs), kKdaCliNote, gtest_repro("KdaRandomValidProblems", seed, i));
    ++t.run;
    if (result.rfind("declined: ", 0) == 0) {
      ++t.declined;
      ++t.reasons[reason_key(result.substr(10))];
      if (d.expect_served) {
        ++t.unexpected_declines;
        std::printf("[gpu-fuzz] FAIL kda case %d: unexpected decline (%s) | %s | repro: %s\n", i,
                    result.c_str(), label.c_str(), repro.c_str());
      }
      continue;
    }
    if (!result.empty()) {
      ++t.failed;
      std::printf("[gpu-fuzz] FAIL kda case %d: %s | %s | repro: %s\n", i, result.c_str(), label.c_str(),
                  repro.c_str());
    }
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[gpu-fuzz] kda summary: seed %llu, %d cases run, %d declined (%s), %d unexpected declines, %d failed, "
              "%.1f s\n",
              static_cast<unsigned long long>(seed), t.run, t.declined, reasons_string(t.reasons).c_str(),
              t.unexpected_declines, t.failed, secs);
  EXPECT_EQ(t.failed, 0) << t.failed << " of " << t.run << " KDA cases failed (lines starting [gpu-fuzz] FAIL)";
  EXPECT_EQ(t.unexpected_declines, 0) << "the KDA cuda engine declined problems it should serve";
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
