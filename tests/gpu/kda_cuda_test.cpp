// GPU tier for the KDA cuda engine: both of its paths (recurrent decode, chunked prefill) against
// the fp64 per-token recurrence on host copies (TESTING.md: relative RMS < 5e-3 on output and
// final state, NaN never), across gate strengths, GVA, varlen, state pools in place, chaining,
// guard bands, determinism and declines. Each case prints its error figures ("[kda] ...").
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/device_tensor.h"
#include "common/host_tensor.h"
#include "cpu/kda_test_case.h"
#include "gpu/kda_cuda_harness.h"
#include "groupattn/kda.h"
#include "kda/engines/cuda/kda_cuda_engine.h"
#include "kda/engines/cuda/kda_cuda_path.h"
#include "kda/reference.h"

namespace groupattn::test {
namespace {

constexpr double kKdaRelTol = 5e-3;  // TESTING.md, output and final state

class KdaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

const char* path_name(KdaCudaPath p) {
  if (p == KdaCudaPath::kChunkedFused) return "chunked-fused";
  return p == KdaCudaPath::kRecurrent ? "recurrent" : p == KdaCudaPath::kChunked ? "chunked" : "auto";
}

std::string describe(const KdaCase& c, KdaCudaPath path, const std::string& extra) {
  std::ostringstream os;
  os << path_name(path) << " " << dtype_name(c.dtype) << " B=" << c.B << " T=" << c.T << " H/HV=" << c.H << "/"
     << c.HV << " K=" << c.K << " V=" << c.V << " gate="
     << (c.gate == KdaGate::kLogDecay ? "log" : c.gate == KdaGate::kSoftplus ? "softplus" : "lb")
     << " lb=" << c.lower_bound << " g=[" << c.g_lo << "," << c.g_hi << "]" << (c.with_A_log ? " A_log" : "")
     << (c.with_dt_bias ? " dt_bias" : "") << (c.l2norm ? " l2" : "") << (c.beta_sigmoid ? " bsig" : "")
     << (c.neg_eigval ? " neg" : "") << (c.layout == KdaStateLayout::kKFirst ? " K-first" : " V-first");
  if (!c.cu.empty()) {
    os << " cu(" << dtype_name(c.cu_dtype) << ")=";
    for (int64_t x : c.cu) os << x << ",";
  }
  os << extra;
  return os.str();
}

// One problem on host and device (tests/gpu/kda_cuda_harness.h). With `pool_extra` >= 0 the
// states are a pool of N + pool_extra rows, sequence n using row idx[n] (shuffled), updated in
// place (initial_state == final_state).
using KdaRun = KdaGpuRun;

struct Errors {
  double out = 0, state = 0;
};

// Runs `path` on the device (out NaN-poisoned first), compares with the fp64 recurrence.
Errors check_run(KdaRun& r, KdaCudaPath path, const std::string& extra = "") {
  const std::string label = describe(r.c, path, extra);
  std::vector<double> ref_out, ref_state;
  const Status rs = kda_recurrent_fp64(r.host_params(), &ref_out, &ref_state);
  EXPECT_TRUE(rs.ok()) << label << ": reference: " << rs.to_string();
  HostTensor pool_before;
  if (r.pool) {
    // A pool is updated in place (initial_state == final_state): a run made earlier on this problem
    // (another path in the same loop) has already advanced its rows, and the reference starts from
    // the host's pool. Every run starts from that pool again. (Without this, the second path of
    // `for (path : kChunkedPaths)` on a pooled problem ran from the first path's final states: the
    // session-7 "cuda-c64 fails on pools" was exactly that, see docs/ENGINES.md; that path has since
    // been removed.)
    pool_before = r.c.initial;
    r.dinit = std::make_unique<DeviceTensor>(r.c.initial);
  }
  r.dout->poison();
  if (r.dfinal) r.dfinal->poison();
  const Status s = kda_cuda_run_path(r.device_params(), path, nullptr);
  EXPECT_TRUE(s.ok()) << label << ": cuda: " << s.to_string();
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Errors err;
  HostTensor out = r.c.out;
  r.dout->download(&out);
  const std::vector<double> got = out.values();
  EXPECT_TRUE(all_finite(got)) << label << ": NaN/Inf in out";
  err.out = rel_error(got, ref_out);
  EXPECT_LT(err.out, kKdaRelTol) << label << ": out rel RMS";
  const std::vector<double> st = r.final_states();
  if (!st.empty()) {
    EXPECT_TRUE(all_finite(st)) << label << ": NaN/Inf in final state";
    err.state = rel_error(st, ref_state);
    EXPECT_LT(err.state, kKdaRelTol) << label << ": final state rel RMS";
  }
  if (r.pool) {  // rows no sequence names are untouched, bit for bit
    HostTensor after = r.c.initial;
    r.dinit->download(&after);
    std::vector<bool> used(static_cast<size_t>(r.c.initial.shape()[0]), false);
    for (int64_t n = 0; n < r.c.N(); ++n) used[static_cast<size_t>(r.row(n))] = true;
    int changed = 0;
    for_each_index(r.c.initial.shape(), [&](const std::vector<int64_t>& i) {
      if (!used[static_cast<size_t>(i[0])] && after.at(i) != pool_before.at(i)) ++changed;
    });
    EXPECT_EQ(changed, 0) << label << ": unreferenced pool rows changed";
  }
  for (auto* t : {r.dq.get(), r.dk.get(), r.dv.get(), r.dg.get(), r.dbeta.get(), r.dout.get(), r.dinit.get(),
                  r.dfinal.get(), r.dcu.get(), r.didx.get()}) {
    if (t != nullptr) {
      EXPECT_TRUE(t->guards_intact()) << label << ": guard band overwritten";
    }
  }
  std::printf("[kda] out %.2e state %.2e  %s\n", err.out, err.state, label.c_str());
  return err;
}

// The production-like defaults: bf16, GVA 2 -> 4, K = V = 128, l2norm, beta logits, lower-bound gate.
KdaCase base_case() {
  KdaCase c;
  c.dtype = DType::kBF16;
  c.B = 2, c.T = 77, c.H = 2, c.HV = 4, c.K = 128, c.V = 128;
  c.l2norm = true, c.beta_sigmoid = true;
  c.gate = KdaGate::kLowerBound;
  c.with_A_log = true, c.with_dt_bias = true;
  c.g_lo = -2.0, c.g_hi = 6.0;  // sigmoid arguments up to saturation: decays down to lower_bound
  return c;
}

// kChunkedFused: the one-launch kernel the engine uses for small chunked problems (kda_cuda_path.h);
// exact at any length, so the shared cases (T = 77, 110, ...) run it pinned too.
const KdaCudaPath kPaths[] = {KdaCudaPath::kRecurrent, KdaCudaPath::kChunked, KdaCudaPath::kChunkedFused};
const KdaCudaPath kChunkedPaths[] = {KdaCudaPath::kChunked, KdaCudaPath::kChunkedFused};

TEST_F(KdaCuda, LowerBoundGateStrengths) {
  for (float lb : {-1.f, -2.f, -3.f, -5.f, -8.f}) {
    for (KdaCudaPath path : kPaths) {
      KdaRun r;
      r.c = base_case();
      r.c.lower_bound = lb;
      r.setup(11, -1);
      check_run(r, path);
    }
  }
}

TEST_F(KdaCuda, SoftplusGateVeryNegativeDecay) {
  for (KdaCudaPath path : kPaths) {
    for (bool dt : {true, false}) {
      KdaRun r;
      r.c = base_case();
      r.c.gate = KdaGate::kSoftplus;
      r.c.with_dt_bias = dt;
      r.c.g_lo = -4.0, r.c.g_hi = 30.0;  // softplus up to 30 * exp(A_log <= 1): log decays below -20 per token
      r.setup(12, -1);
      check_run(r, path, dt ? "" : " (no dt_bias)");
    }
    KdaRun r;  // lower bound without A_log; plain log decay without gate parameters
    r.c = base_case();
    r.c.with_A_log = false;
    r.setup(13, -1);
    check_run(r, path);
    KdaRun l;
    l.c = base_case();
    l.c.gate = KdaGate::kLogDecay;
    l.c.with_A_log = false, l.c.with_dt_bias = false;
    l.c.g_lo = -3.0, l.c.g_hi = 0.0;
    l.setup(14, -1);
    check_run(l, path);
  }
}

TEST_F(KdaCuda, DtypesHeadDimsLayoutsOptions) {
  for (KdaCudaPath path : kPaths) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (auto [K, V] : {std::pair<int64_t, int64_t>{64, 64}, {64, 128}, {128, 64}, {128, 128}}) {
        KdaRun r;
        r.c = base_case();
        r.c.dtype = dt, r.c.K = K, r.c.V = V, r.c.T = 33;
        r.c.H = 3, r.c.HV = 6;
        r.setup(20 + static_cast<uint64_t>(K + V), -1);
        check_run(r, path);
      }
    }
    KdaRun a;  // K-first states, custom scale, negative eigenvalues
    a.c = base_case();
    a.c.layout = KdaStateLayout::kKFirst;
    a.c.scale = 0.3f;
    a.c.neg_eigval = true;
    a.setup(30, -1);
    check_run(a, path, " scale=0.3");
    KdaRun b;  // no l2norm (unit-norm keys), raw beta
    b.c = base_case();
    b.c.l2norm = false, b.c.beta_sigmoid = false;
    b.c.H = 1, b.c.HV = 8;  // GVA 8:1
    b.setup(31, -1);
    check_run(b, path);
    KdaRun z;  // zero initial state, no final state
    z.c = base_case();
    z.c.with_initial = false, z.c.with_final = false;
    z.setup(32, -1);
    check_run(z, path, " no states");
  }
}

TEST_F(KdaCuda, VarlenInt32Int64) {
  for (KdaCudaPath path : kPaths) {
    for (DType cu : {DType::kI32, DType::kI64}) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 1;
      r.c.cu = {0, 0, 1, 17, 33, 73, 73, 110};  // zero-length sequences, 1, 16, 16 + 0, 40, 37
      r.c.T = r.c.cu.back();
      r.c.cu_dtype = cu;
      r.setup(40, -1);
      check_run(r, path);
    }
  }
}

TEST_F(KdaCuda, StridedViews) {
  for (KdaCudaPath path : kPaths) {
    KdaRun r;
    r.c = base_case();
    r.c.T = 40;
    r.setup(45, -1, true);
    check_run(r, path, " strided");
    KdaRun k;
    k.c = base_case();
    k.c.layout = KdaStateLayout::kKFirst;
    k.c.B = 3, k.c.T = 2;
    k.setup(46, 4, true);
    check_run(k, path, " strided pool+4 in place");
  }
}

TEST_F(KdaCuda, LongSequenceFewHeads) {
  KdaRun r;
  r.c = base_case();
  r.c.gate = KdaGate::kSoftplus;
  r.c.g_lo = -4.0, r.c.g_hi = 8.0;
  r.c.B = 1, r.c.T = 1000, r.c.H = 2, r.c.HV = 2;
  r.setup(50, -1);
  for (KdaCudaPath path : kChunkedPaths) check_run(r, path);
  check_run(r, KdaCudaPath::kAuto);
}

// The automatic path choice at its boundaries (kda_cuda_path.h: recurrent while the sequences
// average <= 16 tokens; beyond, the fused one-launch kernel while every sequence has <= 64 tokens and
// its N x HV x V / 16 CTAs fit on the SMs; else the two-kernel chunked path): T just below, at and
// above 16 and 64, dense and varlen (averages 16 and 16.x, a sequence longer than 16 among them, so
// the recurrent kernel stages two token blocks), a grid over the SM count, against the fp64
// recurrence. The path is kda_cuda_auto_path's answer, checked against the rule with this device's
// SM count (the rule's numbers are the CPU tier's, KdaCudaPath.*), and the public workspace size
// must be 0 on the recurrent and fused paths (the Python fast path then allocates nothing).
TEST_F(KdaCuda, AutoPathAtThreshold) {
  struct Boundary {
    int64_t B, T;
    std::vector<int64_t> cu;
    int pool_extra;
    KdaStateLayout layout;
    int64_t H;
  };
  const Boundary cases[] = {
      {2, 15, {}, -1, KdaStateLayout::kVFirst, 2},
      {2, 16, {}, -1, KdaStateLayout::kVFirst, 2},
      {2, 17, {}, -1, KdaStateLayout::kVFirst, 2},
      {1, 17, {}, -1, KdaStateLayout::kKFirst, 2},
      {1, 32, {}, -1, KdaStateLayout::kVFirst, 4},   // 2 chunks, 64 CTAs: fused before sm_90
      {1, 33, {}, -1, KdaStateLayout::kKFirst, 4},   // 3 chunks: two-kernel path
      {1, 64, {}, -1, KdaStateLayout::kVFirst, 4},   // issue 11's length: two-kernel path
      {3, 32, {}, -1, KdaStateLayout::kVFirst, 8},   // 3 x 16 x 8 = 384 CTAs: over the SM count
      {1, 0, {0, 10, 32}, -1, KdaStateLayout::kVFirst, 2},     // average 16 (10, 22)
      {1, 0, {0, 10, 33}, -1, KdaStateLayout::kVFirst, 2},     // average 16.5 (10, 23)
      {1, 0, {0, 0, 17, 48}, 3, KdaStateLayout::kKFirst, 2},   // average 16 (0, 17, 31), pool
      {1, 0, {0, 0, 17, 49}, 3, KdaStateLayout::kKFirst, 2},   // average 16.3 (0, 17, 32), pool
      {1, 0, {0, 32}, 3, KdaStateLayout::kVFirst, 2},          // T = 32, one sequence, pool: fused before sm_90
      {1, 0, {0, 0, 30, 64}, 3, KdaStateLayout::kVFirst, 2},   // T = 64 over 3 sequences: two-kernel
  };
  int sms = 0, major = 0, minor = 0;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
  cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "cudaDeviceGetAttribute");
  const bool fused_arch = kda_cuda::fused_path_arch(10 * major + minor);
  for (const Boundary& b : cases) {
    KdaRun r;
    r.c = base_case();
    r.c.B = b.B, r.c.T = b.cu.empty() ? b.T : b.cu.back(), r.c.cu = b.cu;
    r.c.H = b.H, r.c.HV = 2 * b.H;
    r.c.layout = b.layout;
    r.setup(70 + static_cast<uint64_t>(r.c.T), b.pool_extra);
    const int64_t N = b.cu.empty() ? b.B : static_cast<int64_t>(b.cu.size()) - 1;
    const bool varlen = !b.cu.empty();
    const KdaCudaPath expected =
        kda_cuda::use_recurrent_path(r.c.T, N, varlen)                                  ? KdaCudaPath::kRecurrent
        : kda_cuda::use_fused_path(r.c.T, N, varlen, r.c.HV, r.c.V, sms) && fused_arch ? KdaCudaPath::kChunkedFused
                                                                                                : KdaCudaPath::kChunked;
    const KdaCudaPath got = kda_cuda_auto_path(r.device_params());
    EXPECT_EQ(got, expected) << describe(r.c, KdaCudaPath::kAuto, "") << ": path " << path_name(got)
                             << ", expected " << path_name(expected);
    RunOptions o;
    o.engine = "cuda";
    size_t ws = 0;
    ASSERT_TRUE(kda_workspace_bytes(r.device_params(), o, &ws).ok());
    EXPECT_EQ(ws == 0, expected != KdaCudaPath::kChunked)
        << describe(r.c, KdaCudaPath::kAuto, "") << ": workspace " << ws << " bytes on the " << path_name(expected)
        << " path";
    check_run(r, KdaCudaPath::kAuto, std::string(" (") + path_name(expected) + ")");
  }
}

// The fused one-launch path pinned, against the fp64 recurrence, over what it serves automatically
// (sequences of 1..64 tokens) and beyond: every length 1..64 (partial chunks, one to four chunks),
// both state layouts in turn, GVA 2 -> 4; the shape (H = HV = 4) at every gate (lower bounds
// -1 .. -8, softplus with decays below -20 per token, plain log decay); GVA 1 -> 8 and 3 -> 6, f16
// and K, V of 64; varlen with zero-length sequences (int32 and int64 offsets) on a shuffled pool in
// place, both layouts; no initial / final state; strided views; and T = 200 (13 chunks: exact at
// any length, though the engine sends it to the two-kernel path).
TEST_F(KdaCuda, FusedPathAgainstReference) {
  const KdaCudaPath fused = KdaCudaPath::kChunkedFused;
  for (int64_t T = 1; T <= 64; ++T) {
    KdaRun r;
    r.c = base_case();
    r.c.B = 1, r.c.T = T;
    r.c.layout = T % 2 == 0 ? KdaStateLayout::kVFirst : KdaStateLayout::kKFirst;
    r.setup(300 + static_cast<uint64_t>(T), -1);
    check_run(r, fused, " lengths 1..64");
  }
  for (int gate = 0; gate < 7; ++gate) {
    KdaRun r;
    r.c = base_case();
    r.c.B = 1, r.c.T = 64, r.c.H = 4, r.c.HV = 4;
    if (gate < 5) {
      r.c.lower_bound = std::vector<float>{-1.f, -2.f, -3.f, -5.f, -8.f}[static_cast<size_t>(gate)];
    } else if (gate == 5) {
      r.c.gate = KdaGate::kSoftplus;
      r.c.g_lo = -4.0, r.c.g_hi = 30.0;
    } else {
      r.c.gate = KdaGate::kLogDecay;
      r.c.with_A_log = false, r.c.with_dt_bias = false;
      r.c.g_lo = -3.0, r.c.g_hi = 0.0;
    }
    r.setup(380 + static_cast<uint64_t>(gate), -1);
    check_run(r, fused, " issue-11 shape");
  }
  for (auto [H, HV, K, V] : {std::array<int64_t, 4>{1, 8, 128, 128}, {3, 6, 64, 128}, {3, 6, 128, 64}, {2, 4, 64, 64}}) {
    KdaRun r;
    r.c = base_case();
    r.c.dtype = DType::kF16;
    r.c.B = 2, r.c.T = 41, r.c.H = H, r.c.HV = HV, r.c.K = K, r.c.V = V;
    r.setup(390 + static_cast<uint64_t>(K + V + HV), -1);
    check_run(r, fused, " GVA");
  }
  for (KdaStateLayout layout : {KdaStateLayout::kVFirst, KdaStateLayout::kKFirst}) {
    for (DType cu : {DType::kI32, DType::kI64}) {
      KdaRun v;
      v.c = base_case();
      v.c.B = 1;
      v.c.cu = {0, 0, 1, 17, 40, 40, 64};  // 0, 1, 16, 23, 0, 24
      v.c.T = v.c.cu.back();
      v.c.cu_dtype = cu;
      v.c.layout = layout;
      v.setup(400, 5);
      check_run(v, fused, " varlen pool+5 in place");
    }
  }
  struct States {
    int64_t T;
    bool initial, final_state;
    uint64_t seed;
    const char* label;
  };
  for (const States& st : {States{50, false, false, 410, " no states"}, States{30, true, false, 411, " initial only"},
                           States{30, false, true, 412, " final only"}}) {
    KdaRun r;
    r.c = base_case();
    r.c.T = st.T;
    r.c.with_initial = st.initial, r.c.with_final = st.final_state;
    r.setup(st.seed, -1);
    check_run(r, fused, st.label);
  }
  KdaRun st;
  st.c = base_case();
  st.c.T = 37;
  st.setup(413, 2, true);
  check_run(st, fused, " strided pool+2 in place");
  KdaRun l;
  l.c = base_case();
  l.c.B = 1, l.c.T = 200;
  l.setup(414, -1);
  check_run(l, fused, " 13 chunks");
}

// Many (sequence, value head) pairs: N * HV * V / 16 is above twice the SM count of any current GPU
// (768 and 384 CTAs of 16 columns), so the chunked state pass runs its 32-column V-tiles (two
// phase-2 columns per thread, four n8 tiles per product); both head dims, both state layouts, a
// partial last chunk, and a shuffled pool in place.
TEST_F(KdaCuda, ChunkedWideValueTiles) {
  for (auto [K, V] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}}) {
    for (KdaStateLayout layout : {KdaStateLayout::kVFirst, KdaStateLayout::kKFirst}) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 12, r.c.T = 70, r.c.H = 4, r.c.HV = 8, r.c.K = K, r.c.V = V;
      r.c.layout = layout;
      r.setup(70 + static_cast<uint64_t>(K), layout == KdaStateLayout::kKFirst ? 3 : -1);
      for (KdaCudaPath path : kChunkedPaths) check_run(r, path, " wide V-tiles");
    }
  }
}

// The chunked state pass over many chunks (its next-chunk prefetch alternates two stages, and the
// state stays in registers across chunks): weak decays, so errors in the carried state are not
// washed out; lengths not multiples of 16; varlen with empty sequences on a K-first pool in place;
// both head-dim tiles; and a repeating (k, v) pattern that the delta rule learns, so D = U - W S
// is a small difference of large terms (the case that would expose a low-precision W S product).
TEST_F(KdaCuda, ChunkedLongWeakDecay) {
  for (auto [K, V] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}}) {
    for (KdaStateLayout layout : {KdaStateLayout::kVFirst, KdaStateLayout::kKFirst}) {
      KdaRun r;
      r.c = base_case();
      r.c.gate = KdaGate::kLogDecay;
      r.c.with_A_log = false, r.c.with_dt_bias = false;
      r.c.g_lo = -0.02, r.c.g_hi = 0.0;
      r.c.B = 1, r.c.T = 1237, r.c.H = 1, r.c.HV = 2, r.c.K = K, r.c.V = V;
      r.c.layout = layout;
      r.setup(60 + static_cast<uint64_t>(K), -1);
      for (KdaCudaPath path : kChunkedPaths) check_run(r, path, " weak decay");
    }
  }
  KdaRun v;  // varlen, empty sequences first, between and last; K-first pool updated in place
  v.c = base_case();
  v.c.gate = KdaGate::kLogDecay;
  v.c.with_A_log = false, v.c.with_dt_bias = false;
  v.c.g_lo = -0.05, v.c.g_hi = 0.0;
  v.c.B = 1;
  v.c.cu = {0, 0, 301, 301, 350, 863, 863};
  v.c.T = v.c.cu.back();
  v.c.layout = KdaStateLayout::kKFirst;
  v.setup(62, 2);
  for (KdaCudaPath path : kChunkedPaths) check_run(v, path, " weak decay pool+2");
}

TEST_F(KdaCuda, ChunkedLearnedStateCancellation) {
  for (KdaGate gate : {KdaGate::kLogDecay, KdaGate::kSoftplus}) {
    KdaRun r;
    r.c = base_case();
    r.c.gate = gate;
    if (gate == KdaGate::kLogDecay) {
      r.c.with_A_log = false, r.c.with_dt_bias = false;
      r.c.g_lo = -0.01, r.c.g_hi = 0.0;
    } else {
      r.c.g_lo = -12.0, r.c.g_hi = -6.0;  // softplus of very negative inputs: decays near 1
    }
    r.c.B = 1, r.c.T = 700, r.c.H = 1, r.c.HV = 2;
    r.setup(63, -1, false, false);
    constexpr int64_t kPeriod = 8;  // tokens repeat every kPeriod: the state converges to the pairs
    for (int64_t t = kPeriod; t < r.c.T; ++t) {
      for (int64_t d = 0; d < r.c.K; ++d) r.c.k.set({0, t, 0, d}, r.c.k.at({0, t % kPeriod, 0, d}));
      for (int64_t h = 0; h < r.c.HV; ++h) {
        for (int64_t e = 0; e < r.c.V; ++e) r.c.v.set({0, t, h, e}, r.c.v.at({0, t % kPeriod, h, e}));
      }
    }
    r.upload();
    for (KdaCudaPath path : kChunkedPaths) check_run(r, path, " repeating k,v");
  }
}

TEST_F(KdaCuda, DecodeOnPoolInPlace) {
  for (KdaStateLayout layout : {KdaStateLayout::kVFirst, KdaStateLayout::kKFirst}) {
    for (int64_t T : {1, 2, 3, 10, 16}) {  // 10 and 16: > 48 KiB of shared memory at K = 128
      KdaRun r;
      r.c = base_case();
      r.c.layout = layout;
      r.c.B = 5, r.c.T = T;
      r.setup(60 + static_cast<uint64_t>(T), 7);
      check_run(r, KdaCudaPath::kAuto, " pool+7 in place");
      // The chunked path on the same pool problem (fresh pool).
      KdaRun q;
      q.c = r.c;
      q.setup(60 + static_cast<uint64_t>(T), 7);
      for (KdaCudaPath path : kChunkedPaths) check_run(q, path, " pool+7 in place");
    }
    KdaRun v;  // varlen decode on a pool
    v.c = base_case();
    v.c.layout = layout;
    v.c.B = 1;
    v.c.cu = {0, 1, 5, 21, 23};
    v.c.T = 23;
    v.setup(70, 5);
    check_run(v, KdaCudaPath::kAuto, " varlen pool+5 in place");
  }
}

// The chunked paths on state pools updated in place, each run from the fresh pool (check_run restores
// the pool before every run): several sequences reading and writing shuffled pool rows, both
// layouts, lengths of 1 chunk, a partial chunk, several chunks; the two-kernel path's 32-column
// V-tiles by grid size (B 12 x HV 8 x 8 tiles of 16 columns > 2 CTAs per SM), run before the fused
// kernel and again after it; varlen with empty sequences on a pool. (Until the removal of the
// 64-token "cuda-c64" path this test ran that path; docs/ENGINES.md "64-token state steps".)
TEST_F(KdaCuda, ChunkedPooledStates) {
  for (KdaStateLayout layout : {KdaStateLayout::kVFirst, KdaStateLayout::kKFirst}) {
    const char* lay = layout == KdaStateLayout::kVFirst ? " V-first" : " K-first";
    for (int64_t T : {1, 17, 70, 130}) {
      KdaRun r;
      r.c = base_case();
      r.c.layout = layout;
      r.c.B = 3, r.c.T = T;  // 3 x 4 heads x 8 tiles of 16 columns: under one CTA per SM on the H200
      r.setup(300 + static_cast<uint64_t>(T), 7);
      for (KdaCudaPath path : kChunkedPaths) check_run(r, path, std::string(" pool+7 in place") + lay);
    }
    KdaRun w;
    w.c = base_case();
    w.c.layout = layout;
    w.c.B = 12, w.c.T = 70, w.c.H = 4, w.c.HV = 8;
    w.setup(310, 3);
    for (KdaCudaPath path : {KdaCudaPath::kChunked, KdaCudaPath::kChunkedFused, KdaCudaPath::kChunked}) {
      check_run(w, path, std::string(" wide V-tiles pool+3") + lay);
    }
    KdaRun v;
    v.c = base_case();
    v.c.layout = layout;
    v.c.B = 1;
    v.c.cu = {0, 0, 70, 70, 71, 200, 200};
    v.c.T = v.c.cu.back();
    v.setup(320, 2);
    for (KdaCudaPath path : kChunkedPaths) check_run(v, path, std::string(" varlen pool+2") + lay);
  }
}

// The recurrent path's scalar state access: V-first pools whose rows do not start on 16 bytes
// (every stride padded by one element), in place, decode and past one 16-token stage block.
TEST_F(KdaCuda, RecurrentUnalignedVFirstPool) {
  for (auto [K, V] : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}, {128, 64}}) {
    for (int64_t T : {1, 5, 20}) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 3, r.c.T = T, r.c.K = K, r.c.V = V;
      r.stride_pad = 1;
      r.setup(110 + static_cast<uint64_t>(T + K + V), 4, true);
      check_run(r, KdaCudaPath::kRecurrent, " pool+4 in place, strides padded by 1");
    }
  }
}

// The chunked prep's scalar token loads: every stride padded by one element, so no q/k/v/g/dt_bias
// row starts on its vector size (the default views take 16-byte loads); both head dims, the
// softplus and lower-bound gates, a partial last chunk.
TEST_F(KdaCuda, ChunkedPrepUnalignedViews) {
  for (auto [K, V] : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}, {128, 64}}) {
    for (KdaGate gate : {KdaGate::kLowerBound, KdaGate::kSoftplus}) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 2, r.c.T = 45, r.c.K = K, r.c.V = V;
      r.c.gate = gate;
      r.stride_pad = 1;
      r.setup(130 + static_cast<uint64_t>(K + V), -1, true);
      for (KdaCudaPath path : kChunkedPaths) check_run(r, path, " strides padded by 1");
    }
  }
}

// More sequences than one grid dimension holds (65535): the kernel loops over them.
TEST_F(KdaCuda, RecurrentManySequences) {
  KdaRun r;
  r.c = base_case();
  r.c.B = 70000, r.c.T = 1, r.c.H = 1, r.c.HV = 1, r.c.K = 64, r.c.V = 64;
  r.c.with_initial = false, r.c.with_final = false;  // outputs only (states would take 1 GiB)
  r.setup(120, -1);
  check_run(r, KdaCudaPath::kRecurrent, " 70000 sequences");
}

// Prefill of tokens [0, a) then of [a, T) from its final state equals one prefill of [0, T); and
// decode steps of one token, in place on the state, continue it the same way.
TEST_F(KdaCuda, StateChaining) {
  KdaCase c = base_case();
  c.B = 2, c.T = 83;
  KdaRun r;
  r.c = c;
  r.setup(80, -1);
  std::vector<double> ref_out, ref_state;
  ASSERT_TRUE(kda_recurrent_fp64(r.host_params(), &ref_out, &ref_state).ok());

  const int64_t a = 50, steps = 3, b_end = r.c.T - steps;  // chunked [0,a), chunked [a,b_end), 3 decode steps
  HostTensor mid = r.c.initial;
  DeviceTensor dmid(mid);
  dmid.poison();
  r.dout->poison();
  r.dfinal->poison();
  const KdaParams full = r.device_params();
  KdaParams p1 = slice_problem_tokens(full, 0, a);
  p1.final_state = dmid.view();
  ASSERT_TRUE(kda_cuda_run_path(p1, KdaCudaPath::kChunked, nullptr).ok());
  KdaParams p2 = slice_problem_tokens(full, a, b_end - a);
  p2.initial_state = dmid.view();
  p2.final_state = dmid.view();  // in place
  ASSERT_TRUE(kda_cuda_run_path(p2, KdaCudaPath::kChunked, nullptr).ok());
  for (int64_t t = b_end; t < r.c.T; ++t) {
    KdaParams p3 = slice_problem_tokens(full, t, 1);
    p3.initial_state = dmid.view();
    p3.final_state = t + 1 == r.c.T ? r.dfinal->view() : dmid.view();
    ASSERT_TRUE(kda_cuda_run_path(p3, KdaCudaPath::kRecurrent, nullptr).ok());
  }
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  HostTensor out = r.c.out;
  r.dout->download(&out);
  const std::vector<double> got = out.values(), st = r.final_states();
  EXPECT_TRUE(all_finite(got));
  EXPECT_TRUE(all_finite(st));
  const double eo = rel_error(got, ref_out), es = rel_error(st, ref_state);
  EXPECT_LT(eo, kKdaRelTol);
  EXPECT_LT(es, kKdaRelTol);
  std::printf("[kda] out %.2e state %.2e  chaining [0,%lld) + [%lld,%lld) + %lld decode steps\n", eo, es,
              static_cast<long long>(a), static_cast<long long>(a), static_cast<long long>(b_end),
              static_cast<long long>(steps));
}

// Lengths around chunk boundaries (written for the 64-token "cuda-c64" path, removed since; docs/ENGINES.md
// "64-token state steps"), run on both chunked paths: 1, 15, 16, 17 (one partial chunk, one full, one
// full and one partial), 63, 64, 65, 127, 129, 200 at the mildest and
// strongest lower bounds and the unbounded softplus gate, GVA 2 -> 4, initial and final states; varlen
// with zero-length sequences first, between and last and lengths 63 / 64 / 65 / 129; and two chunked
// prefills chained through the state at a split on, just before and just after a 64-token boundary.
TEST_F(KdaCuda, ChunkedLengthsAround64) {
  for (int64_t T : {1, 15, 16, 17, 63, 64, 65, 127, 129, 200}) {
    for (int gate = 0; gate < 3; ++gate) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 1, r.c.T = T;
      if (gate == 2) {
        r.c.gate = KdaGate::kSoftplus;
        r.c.g_lo = -4.0, r.c.g_hi = 30.0;  // log decays below -20 per token
      } else {
        r.c.lower_bound = gate == 0 ? -1.f : -8.f;
      }
      r.setup(140 + static_cast<uint64_t>(T), -1);
      for (KdaCudaPath path : kChunkedPaths) check_run(r, path, " around 64");
    }
  }
  KdaRun v;
  v.c = base_case();
  v.c.B = 1;
  v.c.cu = {0, 0, 63, 127, 127, 192, 321, 321};  // 0, 63, 64, 0, 65, 129, 0
  v.c.T = v.c.cu.back();
  v.setup(150, -1);
  for (KdaCudaPath path : kChunkedPaths) check_run(v, path, " varlen around 64");

  for (int64_t a : {63, 64, 65}) {  // chunked [0, a) then chunked [a, T) from its final state
    for (KdaCudaPath path : kChunkedPaths) {
      KdaRun r;
      r.c = base_case();
      r.c.T = 193;
      r.setup(160 + static_cast<uint64_t>(a), -1);
      std::vector<double> ref_out, ref_state;
      ASSERT_TRUE(kda_recurrent_fp64(r.host_params(), &ref_out, &ref_state).ok());
      HostTensor mid = r.c.initial;
      DeviceTensor dmid(mid);
      dmid.poison();
      r.dout->poison();
      r.dfinal->poison();
      const KdaParams full = r.device_params();
      KdaParams p1 = slice_problem_tokens(full, 0, a);
      p1.final_state = dmid.view();
      ASSERT_TRUE(kda_cuda_run_path(p1, path, nullptr).ok());
      KdaParams p2 = slice_problem_tokens(full, a, r.c.T - a);
      p2.initial_state = dmid.view();
      ASSERT_TRUE(kda_cuda_run_path(p2, path, nullptr).ok());
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      HostTensor out = r.c.out;
      r.dout->download(&out);
      const std::vector<double> got = out.values(), st = r.final_states();
      EXPECT_TRUE(all_finite(got));
      EXPECT_TRUE(all_finite(st));
      const double eo = rel_error(got, ref_out), es = rel_error(st, ref_state);
      EXPECT_LT(eo, kKdaRelTol) << "split at " << a;
      EXPECT_LT(es, kKdaRelTol) << "split at " << a;
      std::printf("[kda] out %.2e state %.2e  %s chaining [0,%lld) + [%lld,%lld)\n", eo, es, path_name(path),
                  static_cast<long long>(a), static_cast<long long>(a), static_cast<long long>(r.c.T));
    }
  }
}

// The "cuda" engine through the public entry point (the library's workspace, automatic selection and
// pinned alike): GVA 1 -> 3 and 2 -> 6 with a custom scale, initial and final states, a length over
// several chunks with a partial last one, and varlen with a zero-length sequence. (This test pinned the
// 64-token "cuda-c64" engine until its removal; pinning that name is now an unknown engine.)
TEST_F(KdaCuda, EnginePublicEntry) {
  RunOptions pin;
  pin.engine = "cuda";
  for (auto [H, HV] : {std::pair<int64_t, int64_t>{1, 3}, {2, 6}}) {
    for (bool varlen : {false, true}) {
      KdaRun r;
      r.c = base_case();
      r.c.H = H, r.c.HV = HV;
      r.c.scale = 0.2f;
      if (varlen) {
        r.c.B = 1;
        r.c.cu = {0, 130, 130, 333};
        r.c.T = r.c.cu.back();
      } else {
        r.c.B = 2, r.c.T = 333;
      }
      r.setup(170 + static_cast<uint64_t>(HV) + (varlen ? 1 : 0), -1);
      const char* name = nullptr;
      ASSERT_TRUE(kda_engine_for(r.device_params(), {}, &name).ok());
      EXPECT_STREQ(name, "cuda");
      RunOptions gone;
      gone.engine = "cuda-c64";
      EXPECT_FALSE(kda_engine_for(r.device_params(), gone, &name).ok());
      std::vector<double> ref_out, ref_state;
      ASSERT_TRUE(kda_recurrent_fp64(r.host_params(), &ref_out, &ref_state).ok());
      r.dout->poison();
      r.dfinal->poison();
      const Status s = kda(r.device_params(), pin);
      ASSERT_TRUE(s.ok()) << s.to_string();
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      HostTensor out = r.c.out;
      r.dout->download(&out);
      const std::vector<double> got = out.values(), st = r.final_states();
      EXPECT_TRUE(all_finite(got));
      EXPECT_TRUE(all_finite(st));
      const double eo = rel_error(got, ref_out), es = rel_error(st, ref_state);
      EXPECT_LT(eo, kKdaRelTol) << "GVA " << H << " -> " << HV << (varlen ? " varlen" : "");
      EXPECT_LT(es, kKdaRelTol) << "GVA " << H << " -> " << HV << (varlen ? " varlen" : "");
      std::printf("[kda] out %.2e state %.2e  cuda pinned GVA %lld -> %lld scale 0.2%s\n", eo, es,
                  static_cast<long long>(H), static_cast<long long>(HV), varlen ? " varlen" : "");
    }
  }
}

// A small chunked problem of the bitwise comparisons below: B sequences of T tokens (or the varlen
// offsets cu), H / HV heads, a state layout; the base case otherwise.
struct SmallShape {
  int64_t B, T, H, HV;
  std::vector<int64_t> cu;
  KdaStateLayout layout;
  int64_t V = 128;  // base_case()'s
};

void setup_small(KdaRun& r, const SmallShape& sh, uint64_t seed_base) {
  r.c = base_case();
  r.c.B = sh.B, r.c.T = sh.cu.empty() ? sh.T : sh.cu.back(), r.c.H = sh.H, r.c.HV = sh.HV, r.c.cu = sh.cu;
  r.c.layout = sh.layout, r.c.V = sh.V;
  r.setup(seed_base + static_cast<uint64_t>(r.c.T), -1);
}

// r on `path` with its outputs poisoned first; O and the final state downloaded when it ran.
Status run_pinned(KdaRun& r, KdaCudaPath path, HostTensor* out, HostTensor* state) {
  r.dout->poison();
  r.dfinal->poison();
  const Status s = kda_cuda_run_path(r.device_params(), path, nullptr);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (s.ok()) {
    r.dout->download(out);
    r.dfinal->download(state);
  }
  return s;
}

// The portable state kernels for the chunked path while in scope (the sm_90 state kernel is the
// default on an H200 at K = V = 128 and rounds in another order): for the tests that compare those
// kernels bit for bit or with kernel-to-kernel bounds.
struct PortableStatePass {
  PortableStatePass() { kda_cuda_set_state_sm90(0); }
  ~PortableStatePass() { kda_cuda_set_state_sm90(-1); }
  PortableStatePass(const PortableStatePass&) = delete;
  PortableStatePass& operator=(const PortableStatePass&) = delete;
};

// The fused kernel against the two-kernel path on the same problem: the same prep code and operands,
// and the same recurrence, so the final states are bitwise equal (1e-5 allows a different FMA
// contraction by the compiler). The outputs differ in how Aqk D is summed: fp32 FMAs in the fused
// kernel's step, plain tf32 on tensor cores in the column kernel the two-kernel path runs (since
// session 17; 3xTF32 before, within 1e-3): 2e-3, the bound StateKernelsAgree uses between kernels
// (both are checked against the fp64 recurrence at 5e-3 elsewhere).
TEST_F(KdaCuda, FusedMatchesTwoKernelPath) {
  const PortableStatePass portable;
  const SmallShape shapes[] = {{1, 64, 4, 4, {}, KdaStateLayout::kVFirst},
                               {2, 37, 2, 4, {}, KdaStateLayout::kKFirst},
                               {1, 0, 1, 3, {0, 0, 9, 40, 40, 61}, KdaStateLayout::kVFirst}};
  for (const SmallShape& sh : shapes) {
    KdaRun r;
    setup_small(r, sh, 420);
    HostTensor out[2] = {r.c.out, r.c.out}, st[2] = {r.c.final_state, r.c.final_state};
    const KdaCudaPath paths[2] = {KdaCudaPath::kChunked, KdaCudaPath::kChunkedFused};
    for (int i = 0; i < 2; ++i) {
      const Status s = run_pinned(r, paths[i], &out[i], &st[i]);
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
    const double eo = rel_error(out[1].values(), out[0].values()), es = rel_error(st[1].values(), st[0].values());
    const std::string label = describe(r.c, KdaCudaPath::kChunkedFused, " vs chunked");
    EXPECT_TRUE(all_finite(out[1].values())) << label;
    EXPECT_LT(eo, 2e-3) << label << ": out";
    EXPECT_LT(es, 1e-5) << label << ": state";
    std::printf("[kda] fused vs chunked: out %.2e (bitwise %s) state %.2e (bitwise %s)  %s\n", eo,
                bitwise_equal(out[0], out[1]) ? "yes" : "no", es, bitwise_equal(st[0], st[1]) ? "yes" : "no",
                label.c_str());
  }
}

// The state pass's copy ring (kda_cuda_set_state_stages: 2, 3 or 4 stages at 16-column V-tiles)
// changes when each chunk block lands, never the arithmetic: every count gives the double buffer's
// bits. Lengths with fewer chunks than stages (1 and 2 chunks), a ring that wraps many times, and
// varlen with empty sequences; the 4-stage run is also checked against the fp64 recurrence.
TEST_F(KdaCuda, StateStagesBitwise) {
  const PortableStatePass portable;
  const SmallShape shapes[] = {{1, 5, 2, 2, {}, KdaStateLayout::kVFirst},
                               {2, 17, 2, 4, {}, KdaStateLayout::kKFirst},
                               {1, 300, 2, 2, {}, KdaStateLayout::kVFirst},
                               {1, 0, 1, 3, {0, 0, 9, 40, 40, 161}, KdaStateLayout::kKFirst}};
  for (const SmallShape& sh : shapes) {
    KdaRun r;
    setup_small(r, sh, 510);
    HostTensor out[3] = {r.c.out, r.c.out, r.c.out}, st[3] = {r.c.final_state, r.c.final_state, r.c.final_state};
    kda_cuda_set_state_cols(0);  // the K-quarter kernel, whose ring the stages size
    for (int i = 0; i < 3; ++i) {
      kda_cuda_set_state_stages(2 + i);
      const Status s = run_pinned(r, KdaCudaPath::kChunked, &out[i], &st[i]);
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
    kda_cuda_set_state_stages(4);
    check_run(r, KdaCudaPath::kChunked, " 4 stages");
    kda_cuda_set_state_stages(0);
    kda_cuda_set_state_cols(-1);
    const std::string label = describe(r.c, KdaCudaPath::kChunked, "");
    for (int i = 1; i < 3; ++i) {
      EXPECT_TRUE(bitwise_equal(out[0], out[i])) << label << ": out, " << 2 + i << " stages vs 2";
      EXPECT_TRUE(bitwise_equal(st[0], st[i])) << label << ": state, " << 2 + i << " stages vs 2";
    }
  }
}

// The chunked path's launches through the driver's cuLaunchKernelEx (kda_cuda_set_driver_launch, the
// default) against the runtime's <<<>>>: the same kernels with the same arguments, so the same bits;
// dense (no chunk map) and varlen (the chunk map kernel too), each state kernel kind.
TEST_F(KdaCuda, DriverLaunchBitwise) {
  const PortableStatePass portable;
  const SmallShape shapes[] = {{2, 77, 2, 4, {}, KdaStateLayout::kKFirst},
                               {1, 0, 1, 3, {0, 0, 9, 40, 40, 161}, KdaStateLayout::kVFirst}};
  for (const SmallShape& sh : shapes) {
    KdaRun r;
    setup_small(r, sh, 560);
    for (int cols = 0; cols < 3; ++cols) {
      kda_cuda_set_state_cols(cols);
      HostTensor out[2] = {r.c.out, r.c.out}, st[2] = {r.c.final_state, r.c.final_state};
      for (int driver = 0; driver < 2; ++driver) {
        kda_cuda_set_driver_launch(driver);
        const Status s = run_pinned(r, KdaCudaPath::kChunked, &out[driver], &st[driver]);
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
      if (cols == 2) check_run(r, KdaCudaPath::kChunked, " driver launch");
      kda_cuda_set_driver_launch(-1);
      const std::string label = describe(r.c, KdaCudaPath::kChunked, "") + ", state kind " + std::to_string(cols);
      EXPECT_TRUE(bitwise_equal(out[0], out[1])) << label << ": out, driver vs runtime launch";
      EXPECT_TRUE(bitwise_equal(st[0], st[1])) << label << ": state, driver vs runtime launch";
    }
    kda_cuda_set_state_cols(-1);
  }
}

// Small chunked problems in one launch (the cluster kernel, sm_90+: kda_cuda_path.h's
// use_cluster_chunked) against the prep and state kernels: the same prep and state pass, so the same
// bits; dense and varlen (the cluster kernel sums the earlier sequences' chunks itself), GVA, V 64,
// partial and whole last chunks, up to V / 16 chunks a sequence, and 8 clusters of 8 CTAs. Each case
// checks that the cluster kernel ran (and only when allowed).
TEST_F(KdaCuda, ClusterChunkedBitwise) {
  int dev = 0, cc_major = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev), "attribute");
  if (cc_major < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  const PortableStatePass portable;  // the cluster kernel runs the column state pass
  const SmallShape shapes[] = {{1, 64, 4, 4, {}, KdaStateLayout::kKFirst},
                               {2, 128, 2, 4, {}, KdaStateLayout::kVFirst},
                               {1, 33, 1, 8, {}, KdaStateLayout::kKFirst},
                               {1, 0, 1, 1, {0, 0, 40, 40, 73, 128}, KdaStateLayout::kVFirst},
                               {3, 50, 2, 2, {}, KdaStateLayout::kKFirst, 64}};
  for (const SmallShape& sh : shapes) {
    KdaRun r;
    setup_small(r, sh, 570);
    HostTensor out[2] = {r.c.out, r.c.out}, st[2] = {r.c.final_state, r.c.final_state};
    for (int cluster = 0; cluster < 2; ++cluster) {
      kda_cuda_set_cluster_chunked(cluster);
      const Status s = run_pinned(r, KdaCudaPath::kChunked, &out[cluster], &st[cluster]);
      ASSERT_TRUE(s.ok()) << s.to_string();
      ASSERT_EQ(kda_cuda_last_call_used_cluster_kernel(), cluster == 1)
          << describe(r.c, KdaCudaPath::kChunked, "") << ": the case must take the cluster kernel when allowed";
    }
    check_run(r, KdaCudaPath::kChunked, " cluster kernel");
    kda_cuda_set_cluster_chunked(-1);
    const std::string label = describe(r.c, KdaCudaPath::kChunked, "");
    EXPECT_TRUE(bitwise_equal(out[0], out[1])) << label << ": out, cluster kernel vs prep + state kernels";
    EXPECT_TRUE(bitwise_equal(st[0], st[1])) << label << ": state, cluster kernel vs prep + state kernels";
  }
}

// The prep's two forms of the pair sums L and Aqk (kda_cuda_set_prep_pairs): the running-product
// loop, and the products through the chunk's anchor token on tensor cores, taken by a chunk only where
// every |Gamma_r - Gamma_anchor| <= 60 (kda_chunk_prep.cuh). Each pinned, on both chunked paths,
// against the fp64 recurrence, for gates from weak to strong. Where some chunk is within the bound the
// forms round differently, so the outputs or the final states differ in some bit (the anchored form
// ran; at lb -8 only the outputs may: the last chunks, which the final state keeps, can all be
// beyond the bound, and with nearest-even tf32 rounding they were, session 16 call 4); log decays
// of -9 to -12 a token put every 16-token chunk beyond it (|Gamma_0 - Gamma_7| >= 63), and so does the
// softplus gate at up to -20 a token on these inputs (some channel in every chunk; session 15 call 2),
// so both runs take the loop and give the same bits.
TEST_F(KdaCuda, PrepPairFormsAgree) {
  struct Gate {
    KdaGate gate;
    float lb;
    double lo, hi;
    bool params;
    const char* name;
    int64_t T;
    bool every_chunk_far;
  };
  const Gate gates[] = {{KdaGate::kLowerBound, -5.f, -2.0, 6.0, true, " lb -5", 77, false},
                        {KdaGate::kLowerBound, -8.f, -2.0, 6.0, true, " lb -8", 77, false},
                        {KdaGate::kLowerBound, -1.f, -2.0, 6.0, true, " lb -1", 77, false},
                        {KdaGate::kSoftplus, -5.f, -4.0, 30.0, true, " softplus to -20 a token", 77, true},
                        {KdaGate::kSoftplus, -5.f, -6.0, -2.0, true, " softplus mild", 77, false},
                        {KdaGate::kLogDecay, -5.f, -0.5, 0.0, false, " log decay -0.5..0", 77, false},
                        {KdaGate::kLogDecay, -5.f, -12.0, -9.0, false, " log decay -12..-9", 64, true}};
  for (const Gate& gt : gates) {
    for (KdaCudaPath path : kChunkedPaths) {
      KdaRun r;
      r.c = base_case();
      r.c.gate = gt.gate, r.c.lower_bound = gt.lb, r.c.g_lo = gt.lo, r.c.g_hi = gt.hi;
      r.c.with_A_log = gt.params, r.c.with_dt_bias = gt.params;
      r.c.T = gt.T;
      r.setup(560 + static_cast<uint64_t>(&gt - gates), -1);
      HostTensor out[2] = {r.c.out, r.c.out}, st[2] = {r.c.final_state, r.c.final_state};
      for (int m = 0; m < 2; ++m) {
        kda_cuda_set_prep_pairs(m);
        check_run(r, path, std::string(gt.name) + (m == 0 ? ", pair loop" : ", pairs anchored"));
        r.dout->download(&out[m]);
        r.dfinal->download(&st[m]);
      }
      kda_cuda_set_prep_pairs(-1);
      const double d = rel_error(out[1].values(), out[0].values());
      EXPECT_LT(d, 2e-3) << describe(r.c, path, gt.name) << ": anchored vs loop";
      const bool same = bitwise_equal(st[0], st[1]);
      const bool same_out = bitwise_equal(out[0], out[1]);
      if (gt.every_chunk_far) {
        EXPECT_TRUE(same && same_out) << describe(r.c, path, gt.name) << ": every chunk takes the loop";
      } else {
        EXPECT_FALSE(same && same_out) << describe(r.c, path, gt.name) << ": the anchored form never ran";
      }
      std::printf("[kda] prep pairs anchored vs loop%s: out %.2e, state bitwise %s\n", gt.name, d, same ? "yes" : "no");
    }
  }
}

// The state-pass kernels (kda_cuda_set_state_cols: the K-quarter kernel with three barriers a
// step, the column-owning one with one, kda_state_cols.cuh, and its K-halves form), each pinned, against the fp64
// recurrence on the shapes that stress the column kernel's own code: both head dims, dtypes and
// state layouts, lengths of 1, 2 and 19 chunks with a partial last one (the output rows it must
// not store), varlen with empty sequences, GVA and a pool by index in place. Their outputs must
// agree to well inside the budget.
TEST_F(KdaCuda, StateKernelsAgree) {
  const PortableStatePass portable;
  struct Shape {
    int64_t B, T, H, HV, K;
    DType dtype;
    std::vector<int64_t> cu;
    KdaStateLayout layout;
    int pool_extra;
  };
  const Shape shapes[] = {{1, 5, 2, 2, 128, DType::kBF16, {}, KdaStateLayout::kVFirst, -1},
                          {2, 29, 2, 4, 128, DType::kF16, {}, KdaStateLayout::kKFirst, -1},
                          {1, 300, 2, 2, 64, DType::kBF16, {}, KdaStateLayout::kVFirst, -1},
                          {1, 300, 1, 3, 128, DType::kBF16, {}, KdaStateLayout::kKFirst, 2},
                          {1, 0, 1, 2, 128, DType::kBF16, {0, 0, 9, 40, 40, 161}, KdaStateLayout::kVFirst, 3}};
  for (const Shape& sh : shapes) {
    KdaRun r;
    r.c = base_case();
    r.c.B = sh.B, r.c.T = sh.cu.empty() ? sh.T : sh.cu.back(), r.c.H = sh.H, r.c.HV = sh.HV, r.c.cu = sh.cu;
    r.c.K = sh.K, r.c.V = sh.K, r.c.dtype = sh.dtype, r.c.layout = sh.layout;
    r.setup(530 + static_cast<uint64_t>(r.c.T), sh.pool_extra);
    const char* names[3] = {" K-quarter kernel", " cols kernel", " cols kernel, K halves"};
    HostTensor out[3] = {r.c.out, r.c.out, r.c.out};
    for (int cols = 0; cols < 3; ++cols) {
      kda_cuda_set_state_cols(cols);
      check_run(r, KdaCudaPath::kChunked, names[cols]);
      r.dout->download(&out[cols]);
    }
    kda_cuda_set_state_cols(-1);
    for (int cols = 1; cols < 3; ++cols) {
      const double d = rel_error(out[cols].values(), out[0].values());
      EXPECT_LT(d, 2e-3) << describe(r.c, KdaCudaPath::kChunked, "") << ":" << names[cols] << " vs K-quarter";
      std::printf("[kda]%s vs K-quarter kernel: out %.2e\n", names[cols], d);
    }
  }
}

// Whether the current device has compute capability 9.0 (where the sm_90 state kernel runs).
bool device_is_cc90() {
  int dev = 0, cc_major = 0, cc_minor = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev), "attribute");
  cuda_check(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev), "attribute");
  return cc_major == 9 && cc_minor == 0;
}

// The sm_90 state kernel (wgmma, kda_state_sm90.cuh; the default on compute capability 9.0 at
// K = V = 128) against the fp64 recurrence and against the portable column kernels on the same prep:
// the same tf32 operands summed in another order, so outputs within the kernel-to-kernel bound of
// StateKernelsAgree and final states within 1e-4. One chunk and part of one, a ring of 4 stages
// wrapping many times, bf16 and f16, V-first and K-first states, a pool in place, GVA, varlen with
// empty sequences, custom scale; each case checks which kernel ran.
TEST_F(KdaCuda, Sm90StateAgrees) {
  if (!device_is_cc90()) GTEST_SKIP() << "the sm_90 state kernel needs compute capability 9.0";
  kda_cuda_set_cluster_chunked(0);  // small cases would otherwise take the one-launch cluster kernel
  struct Shape {
    int64_t B, T, H, HV;
    DType dtype;
    std::vector<int64_t> cu;
    KdaStateLayout layout;
    int pool_extra;
    float scale;
  };
  const Shape shapes[] = {
      {1, 16, 2, 2, DType::kBF16, {}, KdaStateLayout::kVFirst, -1, 0.f},
      {1, 5, 1, 2, DType::kBF16, {}, KdaStateLayout::kVFirst, -1, 0.f},
      {2, 29, 2, 4, DType::kF16, {}, KdaStateLayout::kKFirst, -1, 0.3f},
      {1, 1000, 2, 2, DType::kBF16, {}, KdaStateLayout::kVFirst, -1, 0.f},
      {1, 300, 1, 3, DType::kBF16, {}, KdaStateLayout::kKFirst, 2, 0.f},
      {1, 0, 1, 2, DType::kBF16, {0, 0, 9, 40, 40, 161}, KdaStateLayout::kVFirst, 3, 0.f}};
  for (const Shape& sh : shapes) {
    KdaRun r;
    r.c = base_case();
    r.c.B = sh.B, r.c.T = sh.cu.empty() ? sh.T : sh.cu.back(), r.c.H = sh.H, r.c.HV = sh.HV, r.c.cu = sh.cu;
    r.c.dtype = sh.dtype, r.c.layout = sh.layout;
    if (sh.scale > 0) r.c.scale = sh.scale;
    r.setup(590 + static_cast<uint64_t>(r.c.T), sh.pool_extra);
    HostTensor out[2] = {r.c.out, r.c.out};
    std::vector<double> st[2];
    for (int sm90 = 0; sm90 < 2; ++sm90) {
      kda_cuda_set_state_sm90(sm90);
      check_run(r, KdaCudaPath::kChunked, sm90 ? " sm90 state kernel" : " portable state kernel");
      EXPECT_EQ(kda_cuda_last_call_used_sm90_state(), sm90 == 1) << describe(r.c, KdaCudaPath::kChunked, "");
      r.dout->download(&out[sm90]);
      st[sm90] = r.final_states();
    }
    kda_cuda_set_state_sm90(-1);
    const double d = rel_error(out[1].values(), out[0].values());
    const double ds = st[0].empty() ? 0.0 : rel_error(st[1], st[0]);
    const std::string label = describe(r.c, KdaCudaPath::kChunked, "");
    EXPECT_LT(d, 2e-3) << label << ": out, sm90 vs portable state kernel";
    EXPECT_LT(ds, 1e-4) << label << ": final state, sm90 vs portable state kernel";
    std::printf("[kda] sm90 vs portable state kernel: out %.2e state %.2e  %s\n", d, ds, label.c_str());
  }
  kda_cuda_set_cluster_chunked(-1);
}

// The streamed sm_90 path (the prep persistent on the SMs the state grid leaves, the state chains
// copying each block in once its ready flag is set) against the prep-then-state sm_90 path: the same
// prep and step arithmetic, so the same bits, whatever the order the blocks were made in. Dense
// batches (chunk-major items over several sequences), one varlen sequence, GVA, K-first pool rows,
// lengths off the chunk, long chains (512 chunks), each case twice (the flags are zeroed per call),
// and the fp64 check.
TEST_F(KdaCuda, Sm90StreamedBitwise) {
  if (!device_is_cc90()) GTEST_SKIP() << "the sm_90 state kernel needs compute capability 9.0";
  kda_cuda_set_cluster_chunked(0);
  kda_cuda_set_state_sm90(1);
  struct Shape {
    int64_t B, T, H, HV;
    std::vector<int64_t> cu;
    KdaStateLayout layout;
    int pool_extra;
  };
  // Each has more (chunk, value head) items than one wave of prep CTAs on the SMs its state grid
  // leaves (use_streamed_sm90), on an H100 / H200 alike.
  const Shape shapes[] = {{1, 4100, 4, 8, {}, KdaStateLayout::kVFirst, -1},
                          {3, 1000, 2, 4, {}, KdaStateLayout::kKFirst, 2},
                          {1, 0, 2, 4, {0, 5000}, KdaStateLayout::kVFirst, 3},
                          {1, 8192, 2, 2, {}, KdaStateLayout::kVFirst, -1}};
  for (const Shape& sh : shapes) {
    KdaRun r;
    r.c = base_case();
    r.c.B = sh.B, r.c.T = sh.cu.empty() ? sh.T : sh.cu.back(), r.c.H = sh.H, r.c.HV = sh.HV, r.c.cu = sh.cu;
    r.c.layout = sh.layout;
    r.setup(2400 + static_cast<uint64_t>(r.c.T), sh.pool_extra);
    const std::string label = describe(r.c, KdaCudaPath::kChunked, "");
    // Runs: 0 prep then state; 1 and 2 streamed (twice: the second finds the first call's flags).
    HostTensor out[3] = {r.c.out, r.c.out, r.c.out};
    std::vector<double> st[3];
    for (int run = 0; run < 3; ++run) {
      kda_cuda_set_state_streamed(run > 0 ? 1 : 0);
      check_run(r, KdaCudaPath::kChunked, run > 0 ? " streamed" : " prep then state");
      EXPECT_TRUE(kda_cuda_last_call_used_sm90_state()) << label;
      EXPECT_EQ(kda_cuda_last_call_streamed(), run > 0) << label;
      r.dout->download(&out[run]);
      st[run] = r.final_states();
    }
    for (int run = 1; run < 3; ++run) {
      EXPECT_TRUE(bitwise_equal(out[0], out[run])) << label << ": out, streamed run " << run;
      // The final states are floats widened to double exactly: == is bitwise.
      EXPECT_TRUE(st[0] == st[run]) << label << ": final state, streamed run " << run;
    }
  }
  kda_cuda_set_state_streamed(-1);
  kda_cuda_set_state_sm90(-1);
  kda_cuda_set_cluster_chunked(-1);
}

TEST_F(KdaCuda, DeterministicRepeats) {
  for (KdaCudaPath path : kPaths) {
    KdaRun r;
    r.c = base_case();
    r.setup(90, -1);
    HostTensor first = r.c.out, again = r.c.out, s_first = r.c.final_state, s_again = r.c.final_state;
    for (int i = 0; i < 20; ++i) {
      r.dout->poison();
      r.dfinal->poison();
      ASSERT_TRUE(kda_cuda_run_path(r.device_params(), path, nullptr).ok());
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      r.dout->download(i == 0 ? &first : &again);
      r.dfinal->download(i == 0 ? &s_first : &s_again);
      if (i > 0) {
        ASSERT_TRUE(bitwise_equal(first, again)) << path_name(path) << " repeat " << i << ": out differs";
        ASSERT_TRUE(bitwise_equal(s_first, s_again)) << path_name(path) << " repeat " << i << ": state differs";
      }
    }
  }
}

// The public entry point selects "cuda" for device tensors (with the library's own workspace)
// and the reference for host ones; what the engine does not serve gets a reason.
TEST_F(KdaCuda, SelectionAndDeclines) {
  KdaRun r;
  r.c = base_case();
  r.c.T = 100;  // chunked: the library allocates the workspace
  r.setup(100, -1);
  const char* name = nullptr;
  ASSERT_TRUE(kda_engine_for(r.device_params(), {}, &name).ok());
  EXPECT_STREQ(name, "cuda");
  ASSERT_TRUE(kda_engine_for(r.host_params(), {}, &name).ok());
  EXPECT_STREQ(name, "reference");
  size_t ws = 0;
  ASSERT_TRUE(kda_workspace_bytes(r.device_params(), {}, &ws).ok());
  EXPECT_GT(ws, 0u);
  r.dout->poison();
  ASSERT_TRUE(kda(r.device_params()).ok());
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<double> ref_out;
  ASSERT_TRUE(kda_recurrent_fp64(r.host_params(), &ref_out, nullptr).ok());
  HostTensor out = r.c.out;
  r.dout->download(&out);
  EXPECT_LT(rel_error(out.values(), ref_out), kKdaRelTol);

  RunOptions pin;
  pin.engine = "cuda";
  KdaRun f;  // f32 q/k/v: declined with the accepted set
  f.c = base_case();
  f.c.dtype = DType::kF32;
  f.setup(101, -1);
  Status s = kda(f.device_params(), pin);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("bf16, f16"), std::string::npos) << s.to_string();
  KdaRun d;  // head dim 32: declined
  d.c = base_case();
  d.c.K = 32, d.c.V = 32;
  d.setup(102, -1);
  s = kda(d.device_params(), pin);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("64 or 128"), std::string::npos) << s.to_string();
}


// Timing, not part of the GPU tier (disabled): --gtest_also_run_disabled_tests
// --gtest_filter='KdaCuda.DISABLED_Timing'. GPU time per call by CUDA events (10 calls after 2
// warm-up calls, the caller's workspace): the decode step on a state pool in place (GB/s of state
// traffic, read + write) and chunked prefill at the production gate on issue 4's shapes.
double time_us(const KdaParams& p, const RunOptions& o) {
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(kda(p, o).ok());
  constexpr int kIters = 10;
  cuda_check(cudaEventRecord(a), "cudaEventRecord");
  for (int i = 0; i < kIters; ++i) EXPECT_TRUE(kda(p, o).ok());
  cuda_check(cudaEventRecord(b), "cudaEventRecord");
  cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0.f;
  cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cuda_check(cudaEventDestroy(a), "cudaEventDestroy");
  cuda_check(cudaEventDestroy(b), "cudaEventDestroy");
  return 1e3 * ms / kIters;
}

// GPU time of one call of `path` (kda_cuda_run_path: the chunked path's workspace is a
// stream-ordered allocation inside the graph): kCalls calls captured in one CUDA graph, replayed
// kReplays times; the median per call. No host time in it (the graph launches back to back).
double graph_time_us(const KdaParams& p, KdaCudaPath path) {
  constexpr int kCalls = 20, kReplays = 11;
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(kda_cuda_run_path(p, path, stream).ok());  // attributes set, code loaded
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  for (int i = 0; i < kCalls; ++i) EXPECT_TRUE(kda_cuda_run_path(p, path, stream).ok());
  cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_check(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "cudaGraphInstantiate");
  cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");  // warm-up replay
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> per_call;
  for (int r = 0; r < kReplays; ++r) {
    cuda_check(cudaEventRecord(a, stream), "cudaEventRecord");
    cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_check(cudaEventRecord(b, stream), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0.f;
    cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    per_call.push_back(1e3 * ms / kCalls);
  }
  std::sort(per_call.begin(), per_call.end());
  cuda_check(cudaEventDestroy(a), "cudaEventDestroy");
  cuda_check(cudaEventDestroy(b), "cudaEventDestroy");
  cuda_check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  cuda_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return per_call[per_call.size() / 2];
}

// The chunked path's GPU time per call under each mode of a KDA switch (set: a kda_cuda_set_*), the
// modes in turn twice so drift lands on every mode alike; then the switch back to `reset`.
// us[m][round].
template <size_t N>
std::array<std::array<double, 2>, N> alternated_us(const KdaParams& p, void (*set)(int), const int (&modes)[N],
                                                  int reset) {
  std::array<std::array<double, 2>, N> us{};
  for (int round = 0; round < 2; ++round) {
    for (size_t m = 0; m < N; ++m) {
      set(modes[m]);
      us[m][static_cast<size_t>(round)] = graph_time_us(p, KdaCudaPath::kChunked);
    }
  }
  set(reset);
  return us;
}

TEST_F(KdaCuda, DISABLED_Timing) {
  // Decode: HV = 32, K = V = 128, a pool of N rows in place (256 rows: 512 MiB, 1024: 2 GiB);
  // T tokens per sequence. Rates count the state read + written; "all" adds q/k/v/g/beta/out.
  for (auto [N, T] : {std::pair<int64_t, int64_t>{256, 1}, {1024, 1}, {256, 2}, {256, 4}, {256, 8}, {256, 16}}) {
    KdaRun r;
    r.c = base_case();
    r.c.B = N, r.c.T = T, r.c.H = 32, r.c.HV = 32;
    r.c.with_initial = false, r.c.with_final = false;
    r.setup(200, -1);
    const int64_t state_bytes = N * 32 * 128 * 128 * 4;
    const int64_t token_bytes = N * T * 32 * (128 * 2 * 3 + 128 * 4 + 4 + 128 * 2);  // q, k, v, g, beta, out
    void* pool = nullptr;
    cuda_check(cudaMalloc(&pool, static_cast<size_t>(state_bytes)), "cudaMalloc");
    cuda_check(cudaMemset(pool, 0, static_cast<size_t>(state_bytes)), "cudaMemset");
    KdaParams p = r.device_params();
    p.initial_state = p.final_state = make_contiguous_view(pool, DType::kF32, {N, 32, 128, 128}, Device::kCUDA);
    RunOptions o;
    o.engine = "cuda";
    const double us = time_us(p, o);
    std::printf("[kda-time] decode N=%lld T=%lld HV=32 pool %.0f MiB: %.1f us, %.0f GB/s of state (read + write), "
                "%.0f GB/s all\n",
                static_cast<long long>(N), static_cast<long long>(T), static_cast<double>(state_bytes) / (1 << 20),
                us, 2.0 * static_cast<double>(state_bytes) / (us * 1e3),
                (2.0 * static_cast<double>(state_bytes) + static_cast<double>(token_bytes)) / (us * 1e3));
    cuda_check(cudaFree(pool), "cudaFree");
  }
  for (auto [T, H] : {std::pair<int64_t, int64_t>{1024, 4}, {2048, 12}, {4096, 16}, {8192, 16}, {8192, 24}}) {
    KdaRun r;
    r.c = base_case();
    r.c.B = 1, r.c.T = T, r.c.H = H, r.c.HV = H;
    r.setup(201, -1);
    const KdaParams p = r.device_params();
    RunOptions o;
    o.engine = "cuda";
    size_t ws = 0;
    ASSERT_TRUE(kda_workspace_bytes(p, o, &ws).ok());
    cuda_check(cudaMalloc(&o.workspace, ws), "cudaMalloc");
    o.workspace_bytes = ws;
    const double us = time_us(p, o);
    double rec_us = 0;
    if (T <= 2048) {  // the recurrent path on the same problem, for scale
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      cudaEvent_t a, b;
      cuda_check(cudaEventCreate(&a), "cudaEventCreate");
      cuda_check(cudaEventCreate(&b), "cudaEventCreate");
      cuda_check(cudaEventRecord(a), "cudaEventRecord");
      EXPECT_TRUE(kda_cuda_run_path(p, KdaCudaPath::kRecurrent, nullptr).ok());
      cuda_check(cudaEventRecord(b), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
      float ms = 0.f;
      cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
      rec_us = 1e3 * ms;
      cuda_check(cudaEventDestroy(a), "cudaEventDestroy");
      cuda_check(cudaEventDestroy(b), "cudaEventDestroy");
    }
    std::printf("[kda-time] prefill T=%lld H=HV=%lld lb=-5: chunked %.1f us (workspace %.0f MiB), recurrent %.1f us\n",
                static_cast<long long>(T), static_cast<long long>(H), us, static_cast<double>(ws) / (1 << 20), rec_us);
    cuda_check(cudaFree(o.workspace), "cudaFree");
  }
  // The state pass's copy ring (docs/ENGINES.md "Session 14: a deeper copy ring"): the chunked path
  // at 2, 3, 4, then 2 stages again (drift check), same problem and process.
  for (auto [T, H] : {std::pair<int64_t, int64_t>{1024, 4}, {2048, 12}, {4096, 16}, {8192, 16}, {8192, 24}, {8192, 32}}) {
    KdaRun r;
    r.c = base_case();
    r.c.B = 1, r.c.T = T, r.c.H = H, r.c.HV = H;
    r.setup(201, -1);
    const KdaParams p = r.device_params();
    double us[4];
    kda_cuda_set_state_cols(0);
    for (int i = 0; i < 4; ++i) {
      kda_cuda_set_state_stages(i == 3 ? 2 : 2 + i);
      us[i] = graph_time_us(p, KdaCudaPath::kChunked);
    }
    kda_cuda_set_state_stages(0);
    std::printf("[kda-time] stages T=%lld H=HV=%lld lb=-5 (graph): 2 stages %.1f us, 3 %.1f, 4 %.1f, 2 again %.1f; "
                "4 / 2 %.3f\n",
                static_cast<long long>(T), static_cast<long long>(H), us[0], us[1], us[2], us[3],
                us[2] / (0.5 * (us[0] + us[3])));
    // The column-owning kernel (and its K-halves form) against the K-quarter one at 3 stages.
    const auto sk = alternated_us(p, kda_cuda_set_state_cols, {0, 1, 2}, -1);
    const auto sum = [](const std::array<double, 2>& x) { return x[0] + x[1]; };
    std::printf("[kda-time] state kernel T=%lld H=HV=%lld lb=-5 (graph): K-quarter %.1f / %.1f us, cols %.1f / %.1f us, "
                "cols K-halves %.1f / %.1f us; cols / K-quarter %.3f, K-halves / K-quarter %.3f\n",
                static_cast<long long>(T), static_cast<long long>(H), sk[0][0], sk[0][1], sk[1][0], sk[1][1],
                sk[2][0], sk[2][1], sum(sk[1]) / sum(sk[0]), sum(sk[2]) / sum(sk[0]));
    // The prep's pair sums: the running-product loop against the anchored products (automatic state kernel).
    const auto pp = alternated_us(p, kda_cuda_set_prep_pairs, {0, 1}, -1);
    std::printf("[kda-time] prep pairs T=%lld H=HV=%lld lb=-5 (graph): loop %.1f / %.1f us, anchored %.1f / %.1f us; "
                "anchored / loop %.3f\n",
                static_cast<long long>(T), static_cast<long long>(H), pp[0][0], pp[0][1], pp[1][0], pp[1][1],
                sum(pp[1]) / sum(pp[0]));
  }
  // The decode shapes on both paths (many sequences: the state stream the recurrent path is built
  // for): N = 256 sequences x HV = 32 on a 512 MiB pool in place, 1..16 new tokens each.
  for (int64_t T : {1, 4, 8, 16}) {
    constexpr int64_t N = 256;
    KdaRun r;
    r.c = base_case();
    r.c.B = N, r.c.T = T, r.c.H = 32, r.c.HV = 32;
    r.c.with_initial = false, r.c.with_final = false;
    r.setup(203, -1);
    const int64_t state_bytes = N * 32 * 128 * 128 * 4;
    void* pool = nullptr;
    cuda_check(cudaMalloc(&pool, static_cast<size_t>(state_bytes)), "cudaMalloc");
    cuda_check(cudaMemset(pool, 0, static_cast<size_t>(state_bytes)), "cudaMemset");
    KdaParams p = r.device_params();
    p.initial_state = p.final_state =
        make_contiguous_view(pool, DType::kF32, {N, 32, 128, 128}, Device::kCUDA);
    const double rec = graph_time_us(p, KdaCudaPath::kRecurrent);
    const double chk = graph_time_us(p, KdaCudaPath::kChunked);
    std::printf(
        "[kda-time] decode shape N=%lld T=%lld HV=32 pool in place: recurrent %.1f us, chunked %.1f us, "
        "recurrent / chunked %.2f\n",
        static_cast<long long>(N), static_cast<long long>(T), rec, chk, rec / chk);
    cuda_check(cudaFree(pool), "cudaFree");
  }
}

// Short prefills on every path (the recurrent / chunked threshold, docs/HOST_COST.md "KDA path
// threshold"; the chunked path with and without the cluster kernel, "Session 18"): GPU time per call
// with no host in it, as bench/host_cost.py's gpu_us. Apart from DISABLED_Timing so that it runs alone:
// --gtest_also_run_disabled_tests --gtest_filter='KdaCuda.DISABLED_TimingShortPrefill'.
TEST_F(KdaCuda, DISABLED_TimingShortPrefill) {
  for (int64_t H : {4, 8, 16}) {
    for (int64_t T : {8, 16, 32, 48, 64, 128, 256, 512}) {
      KdaRun r;
      r.c = base_case();
      r.c.B = 1, r.c.T = T, r.c.H = H, r.c.HV = H;
      r.setup(202, -1);
      const KdaParams p = r.device_params();
      const double rec = graph_time_us(p, KdaCudaPath::kRecurrent);
      kda_cuda_set_cluster_chunked(0);
      const double two = graph_time_us(p, KdaCudaPath::kChunked);
      kda_cuda_set_cluster_chunked(-1);
      const double chk = graph_time_us(p, KdaCudaPath::kChunked);
      const bool cluster = kda_cuda_last_call_used_cluster_kernel();
      const double fus = graph_time_us(p, KdaCudaPath::kChunkedFused);
      std::printf(
          "[kda-time] short prefill T=%lld H=HV=%lld K=V=128 lb=-5: recurrent %.2f us, chunked %.2f us (%s), "
          "two kernels %.2f us, fused %.2f us; recurrent / chunked %.2f, fused / chunked %.2f\n",
          static_cast<long long>(T), static_cast<long long>(H), rec, chk, cluster ? "cluster kernel" : "two kernels",
          two, fus, rec / chk, fus / chk);
    }
  }
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
