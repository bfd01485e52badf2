// The two fp64 KDA references against each other and against the properties of the op: chunked ==
// recurrent over gate strengths and lengths, state chaining, GVA == copied-up heads, varlen ==
// per-sequence runs, state layouts, a hand-computed case, and outputs fully written.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/kda_test_case.h"
#include "groupattn/kda.h"
#include "kda/engine_list.h"
#include "kda/reference.h"
#include "kda/reference_chunked.h"

namespace groupattn::test {
namespace {

using Fp64Fn = Status (*)(const KdaParams&, std::vector<double>*, std::vector<double>*);
struct NamedFn {
  const char* name;  // the engine name of the same algorithm
  Fp64Fn fn;
};
const NamedFn kBoth[] = {{"reference", kda_recurrent_fp64}, {"reference-chunked", kda_chunked_fp64}};

constexpr double kFp64Tol = 1e-10;  // two fp64 algorithms of the same math

double norm2(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

std::vector<double> slice(const std::vector<double>& x, size_t begin, size_t len) {
  return {x.begin() + static_cast<std::ptrdiff_t>(begin), x.begin() + static_cast<std::ptrdiff_t>(begin + len)};
}

Status run_pinned(const KdaParams& p, const char* engine) {
  RunOptions o;
  o.engine = engine;
  return kda(p, o);
}

// ---------------------------------------------------------------------------------------------
// Chunked == recurrent

struct GateSetup {
  const char* name;
  KdaGate gate;
  float lower_bound;
  bool A_log, dt_bias;
  double g_lo, g_hi, A_lo, A_hi, dt_std;
};

const GateSetup kGates[] = {
    {"lower bound -1", KdaGate::kLowerBound, -1.f, true, true, -4, 4, -1, 1, 1},
    {"lower bound -3", KdaGate::kLowerBound, -3.f, true, true, -4, 4, -1, 1, 1},
    {"lower bound -5", KdaGate::kLowerBound, -5.f, true, true, -4, 4, -1, 1, 1},
    {"lower bound -8", KdaGate::kLowerBound, -8.f, true, true, -4, 4, -1, 1, 1},
    {"lower bound -5, no A_log", KdaGate::kLowerBound, -5.f, false, true, -4, 4, 0, 0, 1},
    {"lower bound -2, no dt_bias", KdaGate::kLowerBound, -2.f, true, false, -4, 4, -1, 1, 0},
    // g + dt_bias around 20..30, exp(A_log) in [1, 3]: per-token log decay -20 and below, down
    // to about -90, where whole-chunk decays underflow to exactly 0 in fp64.
    {"softplus, very strong", KdaGate::kSoftplus, -5.f, true, true, 20, 28, 0, 1.1, 0.5},
    {"softplus, moderate", KdaGate::kSoftplus, -5.f, true, true, -6, 2, -2, 0.5, 1},
    {"softplus, no dt_bias", KdaGate::kSoftplus, -5.f, true, false, -3, 1, -1, 0, 0},
    {"log decay", KdaGate::kLogDecay, -5.f, false, false, -1, 0, 0, 0, 0},
    {"log decay, strong", KdaGate::kLogDecay, -5.f, false, false, -12, 0, 0, 0, 0},
};

// The gate fields of a case from one row of kGates.
void apply_gate(const GateSetup& gs, KdaCase* c) {
  c->gate = gs.gate;
  c->lower_bound = gs.lower_bound;
  c->with_A_log = gs.A_log;
  c->with_dt_bias = gs.dt_bias;
  c->g_lo = gs.g_lo;
  c->g_hi = gs.g_hi;
  c->A_log_lo = gs.A_lo;
  c->A_log_hi = gs.A_hi;
  c->dt_bias_std = gs.dt_std;
}

TEST(KdaReference, ChunkedMatchesRecurrent) {
  const int64_t lengths[] = {1, 15, 16, 17, 33, 50};
  int i = 0;
  for (const GateSetup& gs : kGates) {
    for (int64_t T : lengths) {
      ++i;
      KdaCase c;
      c.T = T;
      apply_gate(gs, &c);
      c.l2norm = i % 2 == 0;
      c.beta_sigmoid = i % 3 != 0;
      c.neg_eigval = c.beta_sigmoid && c.l2norm && i % 4 == 0;
      c.with_initial = i % 7 != 0;  // mostly a non-zero initial state
      if (i % 3 == 1) {  // GVA with a non-power-of-two group
        c.H = 1;
        c.HV = 3;
      }
      c.B = i % 5 == 0 ? 2 : 1;
      if (i % 6 == 0) c.scale = 0.3f;
      c.build(1000 + static_cast<uint64_t>(i));
      SCOPED_TRACE(std::string(gs.name) + ", T = " + std::to_string(T) + ", l2norm " +
                   std::to_string(c.l2norm) + ", beta sigmoid " + std::to_string(c.beta_sigmoid) +
                   ", neg eig " + std::to_string(c.neg_eigval) + ", H/HV " + std::to_string(c.H) + "/" +
                   std::to_string(c.HV) + ", B " + std::to_string(c.B));
      const KdaParams p = c.params();
      ASSERT_TRUE(validate_kda(p).ok()) << validate_kda(p).to_string();
      std::vector<double> o_rec, s_rec, o_chk, s_chk;
      ASSERT_TRUE(kda_recurrent_fp64(p, &o_rec, &s_rec).ok());
      ASSERT_TRUE(kda_chunked_fp64(p, &o_chk, &s_chk).ok());
      ASSERT_TRUE(all_finite(o_rec) && all_finite(s_rec) && all_finite(o_chk) && all_finite(s_chk));
      ASSERT_GT(norm2(o_rec), 0.0);  // never compare against zeros
      ASSERT_GT(norm2(s_rec), 0.0);
      EXPECT_LT(rel_error(o_chk, o_rec), kFp64Tol);
      EXPECT_LT(rel_error(s_chk, s_rec), kFp64Tol);
    }
  }
}

// The strong softplus gate really is strong: the effective per-token log decay is <= -20.
TEST(KdaReference, StrongSoftplusGateIsBelowMinus20) {
  for (double x : {18.0, 20.0, 25.0}) {
    EXPECT_LE(kda_effective_gate(KdaGate::kSoftplus, x, true, 0.0, 2.0, -5.0), -20.0);
  }
}

TEST(KdaReference, GateFormulas) {
  const double lb = -5, A = std::log(2.0), gx = 0.7, dt = -0.2;
  EXPECT_DOUBLE_EQ(kda_effective_gate(KdaGate::kLogDecay, -0.3, false, 0, 0, lb), -0.3);
  EXPECT_NEAR(kda_effective_gate(KdaGate::kSoftplus, gx, true, A, dt, lb), -2.0 * std::log(1.0 + std::exp(0.5)),
              1e-15);
  EXPECT_NEAR(kda_effective_gate(KdaGate::kLowerBound, gx, true, A, dt, lb), lb / (1.0 + std::exp(-2.0 * 0.5)),
              1e-15);
  EXPECT_NEAR(kda_effective_gate(KdaGate::kLowerBound, gx, false, 0, dt, lb), lb / (1.0 + std::exp(-0.5)), 1e-15);
  // Extreme inputs stay finite and in range.
  EXPECT_NEAR(kda_effective_gate(KdaGate::kSoftplus, 800.0, true, 0, 0, lb), -800.0, 1e-9);
  EXPECT_EQ(kda_effective_gate(KdaGate::kLowerBound, -800.0, true, 0, 0, lb), 0.0);
  EXPECT_DOUBLE_EQ(kda_effective_beta(0.0, true, false), 0.5);
  EXPECT_DOUBLE_EQ(kda_effective_beta(0.0, true, true), 1.0);
  EXPECT_DOUBLE_EQ(kda_effective_beta(0.25, false, false), 0.25);
}

// ---------------------------------------------------------------------------------------------
// One token, K = V = 2, worked by hand from the recurrence.

TEST(KdaReference, HandComputedOneToken) {
  KdaCase c;
  c.B = 1, c.T = 1, c.H = 1, c.HV = 1, c.K = 2, c.V = 2;
  c.layout = KdaStateLayout::kKFirst;
  c.l2norm = true;
  c.beta_sigmoid = true;
  c.scale = 0.5f;
  c.build(1);
  c.q.set({0, 0, 0, 0}, 1.0), c.q.set({0, 0, 0, 1}, 2.0);
  c.k.set({0, 0, 0, 0}, 3.0), c.k.set({0, 0, 0, 1}, 4.0);  // |k|^2 = 25
  c.v.set({0, 0, 0, 0}, 1.0), c.v.set({0, 0, 0, 1}, -1.0);
  c.g.set({0, 0, 0, 0}, -0.5), c.g.set({0, 0, 0, 1}, -1.0);
  c.beta.set({0, 0, 0}, 0.0);  // sigmoid(0) = 0.5
  // S0 (K-first, S[d][e]) = [[1, 2], [3, 4]]
  c.initial.set({0, 0, 0, 0}, 1.0), c.initial.set({0, 0, 0, 1}, 2.0);
  c.initial.set({0, 0, 1, 0}, 3.0), c.initial.set({0, 0, 1, 1}, 4.0);

  const double nq = std::sqrt(5.0 + 1e-6), nk = std::sqrt(25.0 + 1e-6);
  const double q0 = 1 / nq, q1 = 2 / nq, k0 = 3 / nk, k1 = 4 / nk;
  const double a0 = std::exp(-0.5), a1 = std::exp(-1.0), beta = 0.5, scale = 0.5;
  // Decay first: S' = [[a0, 2 a0], [3 a1, 4 a1]].
  // Residual from the decayed state: r_e = v_e - sum_d S'[d][e] k_d.
  const double r0 = 1.0 - (a0 * 1 * k0 + a1 * 3 * k1);
  const double r1 = -1.0 - (a0 * 2 * k0 + a1 * 4 * k1);
  // Write: S = S' + beta k r^T.
  const double S00 = a0 * 1 + beta * k0 * r0, S01 = a0 * 2 + beta * k0 * r1;
  const double S10 = a1 * 3 + beta * k1 * r0, S11 = a1 * 4 + beta * k1 * r1;
  // Output reads the state after the write: o_e = sum_d S[d][e] scale q_d.
  const double o0 = scale * (S00 * q0 + S10 * q1), o1 = scale * (S01 * q0 + S11 * q1);

  for (const NamedFn& f : kBoth) {
    SCOPED_TRACE(f.name);
    std::vector<double> o, s;
    ASSERT_TRUE(f.fn(c.params(), &o, &s).ok());
    ASSERT_EQ(o.size(), 2u);
    EXPECT_NEAR(o[0], o0, 1e-14);
    EXPECT_NEAR(o[1], o1, 1e-14);
    EXPECT_NEAR(s[0], S00, 1e-14);
    EXPECT_NEAR(s[1], S01, 1e-14);
    EXPECT_NEAR(s[2], S10, 1e-14);
    EXPECT_NEAR(s[3], S11, 1e-14);
  }
}

// ---------------------------------------------------------------------------------------------
// State chaining: A then B from A's final state == A+B.

TEST(KdaReference, StateChainingFp64) {
  for (int64_t split : {int64_t{16}, int64_t{20}, int64_t{1}}) {
    KdaCase c;
    c.B = 2, c.T = 50, c.H = 2, c.HV = 4;
    c.gate = KdaGate::kLowerBound;
    c.with_A_log = c.with_dt_bias = true;
    c.g_lo = -3, c.g_hi = 3;
    c.beta_sigmoid = true;
    c.build(77);
    const KdaParams whole = c.params();
    for (const NamedFn& f : kBoth) {
      SCOPED_TRACE(std::string(f.name) + ", split " + std::to_string(split));
      std::vector<double> o_whole, s_whole, o_a, s_a, o_b, s_b;
      ASSERT_TRUE(f.fn(whole, &o_whole, &s_whole).ok());

      const KdaParams a = slice_problem_tokens(whole, 0, split);
      ASSERT_TRUE(f.fn(a, &o_a, &s_a).ok());

      // B starts from A's final state, kept in fp64 (an f64 K-first tensor: the fp64 functions do
      // not validate, so the chain is exact up to the algorithms' own rounding).
      HostTensor s_mid(DType::kF64, {c.B, c.HV, c.K, c.V});
      int64_t i = 0;
      for_each_index(s_mid.shape(), [&](const std::vector<int64_t>& idx) { s_mid.set(idx, s_a[i++]); });
      KdaParams b = slice_problem_tokens(whole, split, c.T - split);
      b.initial_state = s_mid.view();
      b.state_layout = KdaStateLayout::kKFirst;
      b.final_state = TensorView{};
      ASSERT_TRUE(f.fn(b, &o_b, &s_b).ok());

      const auto row = static_cast<size_t>(c.HV * c.V);  // one token of out
      std::vector<double> whole_a, whole_b;
      for (int64_t bb = 0; bb < c.B; ++bb) {
        const auto base = static_cast<size_t>(bb * c.T) * row;
        auto wa = slice(o_whole, base, static_cast<size_t>(split) * row);
        auto wb = slice(o_whole, base + static_cast<size_t>(split) * row, static_cast<size_t>(c.T - split) * row);
        whole_a.insert(whole_a.end(), wa.begin(), wa.end());
        whole_b.insert(whole_b.end(), wb.begin(), wb.end());
      }
      EXPECT_LT(rel_error(o_a, whole_a), kFp64Tol);
      EXPECT_LT(rel_error(o_b, whole_b), kFp64Tol);
      EXPECT_LT(rel_error(s_b, s_whole), kFp64Tol);
    }
  }
}

// The same chain through kda() on an f32 state pool updated in place via state_indices.
TEST(KdaReference, StateChainingThroughInPlacePool) {
  for (const NamedFn& f : kBoth) {
    SCOPED_TRACE(f.name);
    KdaCase c;
    c.B = 2, c.T = 37, c.H = 1, c.HV = 2;
    c.gate = KdaGate::kSoftplus;
    c.with_A_log = c.with_dt_bias = true;
    c.g_lo = -4, c.g_hi = 1;
    c.with_final = false;
    c.build(5);
    // The whole run, fp64, from the dense initial state.
    std::vector<double> o_whole, s_whole;
    ASSERT_TRUE(f.fn(c.params(), &o_whole, &s_whole).ok());

    // Pool of 5 rows; sequence 0 lives in row 3, sequence 1 in row 0.
    const int64_t P = 5, rows[2] = {3, 0};
    std::mt19937_64 rng(9);
    HostTensor pool(DType::kF32, c.state_shape(P));
    pool.fill_normal(rng);
    for (int64_t n = 0; n < 2; ++n) {
      for_each_index({c.HV, c.V, c.K}, [&](const std::vector<int64_t>& i) {
        pool.set({rows[n], i[0], i[1], i[2]}, c.initial.at({n, i[0], i[1], i[2]}));
      });
    }
    const std::vector<double> pool_before = pool.values();
    HostTensor idx(DType::kI32, {2});
    idx.set({0}, 3), idx.set({1}, 0);

    const int64_t split = 17;
    for (auto [start, len] : {std::pair<int64_t, int64_t>{0, split}, {split, c.T - split}}) {
      KdaParams p = slice_problem_tokens(c.params(), start, len);
      p.initial_state = pool.view();
      p.final_state = pool.view();  // in place
      p.state_indices = idx.view();
      const Status s = run_pinned(p, f.name);
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
    EXPECT_TRUE(pool.guards_intact());
    EXPECT_TRUE(c.out.guards_intact());
    // Outputs: f32 rounding of the fp64 whole run, plus the f32-rounded state between the calls.
    EXPECT_LT(rel_error(c.out.values(), o_whole), 1e-5);
    const std::vector<double> after = pool.values();
    const auto per_row = static_cast<size_t>(c.HV * c.V * c.K);
    for (int64_t r = 0; r < P; ++r) {
      const auto got = slice(after, static_cast<size_t>(r) * per_row, per_row);
      if (r == 3 || r == 0) {
        // s_whole is K-first [n][hv][d][e]; the pool is V-first [hv][e][d].
        const int64_t n = r == 3 ? 0 : 1;
        std::vector<double> want;
        for_each_index({c.HV, c.V, c.K}, [&](const std::vector<int64_t>& i) {
          want.push_back(s_whole[static_cast<size_t>(((n * c.HV + i[0]) * c.K + i[2]) * c.V + i[1])]);
        });
        EXPECT_LT(rel_error(got, want), 1e-5) << "pool row " << r;
      } else {
        EXPECT_EQ(got, slice(pool_before, static_cast<size_t>(r) * per_row, per_row)) << "untouched row " << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GVA == the same problem with q/k copied up to HV heads (bitwise, through the engines).

TEST(KdaReference, GvaEqualsCopiedUpHeads) {
  for (const NamedFn& f : kBoth) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string(f.name) + " " + dtype_name(dt));
      KdaCase c;
      c.B = 2, c.T = 19, c.H = 2, c.HV = 6;
      c.dtype = dt;
      c.gate = KdaGate::kLowerBound;
      c.with_A_log = c.with_dt_bias = true;
      c.beta_sigmoid = true;
      c.build(11);
      KdaCase up = c;  // same values; q/k replaced by copies at HV heads
      up.H = c.HV;
      up.q = HostTensor(dt, {c.B, c.T, c.HV, c.K});
      up.k = HostTensor(dt, {c.B, c.T, c.HV, c.K});
      for_each_index(up.q.shape(), [&](const std::vector<int64_t>& i) {
        const int64_t h = i[2] / (c.HV / c.H);
        up.q.set(i, c.q.at({i[0], i[1], h, i[3]}));
        up.k.set(i, c.k.at({i[0], i[1], h, i[3]}));
      });
      up.out = HostTensor(dt, {c.B, c.T, c.HV, c.V});
      up.out.poison();
      up.final_state = HostTensor(DType::kF32, c.state_shape(c.B));
      up.final_state.poison();
      ASSERT_TRUE(run_pinned(c.params(), f.name).ok());
      ASSERT_TRUE(run_pinned(up.params(), f.name).ok());
      EXPECT_TRUE(all_finite(c.out.values()));
      EXPECT_TRUE(bitwise_equal(c.out, up.out));
      EXPECT_TRUE(bitwise_equal(c.final_state, up.final_state));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Varlen == each sequence run on its own (an empty sequence included).

TEST(KdaReference, VarlenEqualsPerSequence) {
  for (DType cu_dtype : {DType::kI32, DType::kI64}) {
    for (const NamedFn& f : kBoth) {
      SCOPED_TRACE(std::string(f.name) + " cu_seqlens " + dtype_name(cu_dtype));
      KdaCase c;
      c.T = 50, c.H = 2, c.HV = 4;
      c.cu = {0, 5, 5, 22, 50};
      c.cu_dtype = cu_dtype;
      c.gate = KdaGate::kSoftplus;
      c.with_A_log = true;
      c.g_lo = -3, c.g_hi = 2;
      c.build(21);
      const KdaParams packed = c.params();
      std::vector<double> o_all, s_all;
      ASSERT_TRUE(f.fn(packed, &o_all, &s_all).ok());
      ASSERT_GT(norm2(o_all), 0.0);
      const auto row = static_cast<size_t>(c.HV * c.V), srow = static_cast<size_t>(c.HV * c.K * c.V);
      for (size_t n = 0; n + 1 < c.cu.size(); ++n) {
        const int64_t bos = c.cu[n], len = c.cu[n + 1] - c.cu[n];
        KdaParams one = slice_problem_tokens(packed, bos, len);
        one.cu_seqlens = TensorView{};
        one.initial_state = slice_rows(packed.initial_state, static_cast<int64_t>(n), 1);
        one.final_state = slice_rows(packed.final_state, static_cast<int64_t>(n), 1);
        std::vector<double> o, s;
        ASSERT_TRUE(f.fn(one, &o, &s).ok());
        EXPECT_EQ(o, slice(o_all, static_cast<size_t>(bos) * row, static_cast<size_t>(len) * row)) << "seq " << n;
        EXPECT_EQ(s, slice(s_all, n * srow, srow)) << "seq " << n;
      }
      // Through the engine: every output element written, guards intact.
      ASSERT_TRUE(run_pinned(packed, f.name).ok());
      EXPECT_TRUE(all_finite(c.out.values()));
      EXPECT_TRUE(all_finite(c.final_state.values()));
      EXPECT_TRUE(c.out.guards_intact() && c.final_state.guards_intact());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// V-first and K-first state layouts are transposes of each other.

TEST(KdaReference, StateLayoutsAgree) {
  for (const NamedFn& f : kBoth) {
    SCOPED_TRACE(f.name);
    KdaCase vf;
    vf.B = 2, vf.T = 21, vf.K = 32, vf.V = 64;  // K != V so a swapped index cannot pass
    vf.layout = KdaStateLayout::kVFirst;
    vf.build(31);
    KdaCase kf = vf;
    kf.layout = KdaStateLayout::kKFirst;
    kf.initial = HostTensor(DType::kF32, kf.state_shape(kf.B));
    kf.final_state = HostTensor(DType::kF32, kf.state_shape(kf.B));
    kf.final_state.poison();
    kf.out = HostTensor(kf.dtype, {kf.B, kf.T, kf.HV, kf.V});
    kf.out.poison();
    for_each_index(kf.initial.shape(), [&](const std::vector<int64_t>& i) {
      kf.initial.set(i, vf.initial.at({i[0], i[1], i[3], i[2]}));
    });
    ASSERT_TRUE(run_pinned(vf.params(), f.name).ok());
    ASSERT_TRUE(run_pinned(kf.params(), f.name).ok());
    EXPECT_TRUE(bitwise_equal(vf.out, kf.out));
    bool same = true;
    for_each_index(kf.final_state.shape(), [&](const std::vector<int64_t>& i) {
      const double a = kf.final_state.at(i), b = vf.final_state.at({i[0], i[1], i[3], i[2]});
      same = same && std::memcmp(&a, &b, sizeof a) == 0;
    });
    EXPECT_TRUE(same);
  }
}

// ---------------------------------------------------------------------------------------------
// The engines write every output element (NaN-prefilled), round out to its dtype, write the final
// state as f32, and touch nothing outside their tensors; the inputs are unchanged.

TEST(KdaReference, EnginesWriteAllOutputsAndNothingElse) {
  for (const NamedFn& f : kBoth) {
    for (DType dt : {DType::kF16, DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string(f.name) + " " + dtype_name(dt));
      KdaCase c;
      c.B = 2, c.T = 18, c.H = 1, c.HV = 2;
      c.dtype = dt;
      c.gate = KdaGate::kLowerBound;
      c.with_A_log = true;
      c.build(41);
      // A strided out view: padded value heads, so there are gaps the engine must not write.
      c.out = HostTensor(dt, {c.B, c.T, c.HV, c.V}, {c.T * c.HV * (c.V + 8), c.HV * (c.V + 8), c.V + 8, 1});
      c.out.poison();
      const std::vector<double> q_before = c.q.values(), init_before = c.initial.values();
      const KdaParams p = c.params();
      std::vector<double> o_ref, s_ref;
      ASSERT_TRUE(f.fn(p, &o_ref, &s_ref).ok());
      const Status s = run_pinned(p, f.name);
      ASSERT_TRUE(s.ok()) << s.to_string();
      const std::vector<double> o = c.out.values();
      ASSERT_TRUE(all_finite(o));
      ASSERT_TRUE(all_finite(c.final_state.values()));
      for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o[i], round_to_dtype(o_ref[i], dt)) << i;
      // The final state is f32 (V-first [n][hv][e][d] against K-first [n][hv][d][e]).
      int64_t mism = 0;
      for_each_index(c.final_state.shape(), [&](const std::vector<int64_t>& i) {
        const double want = s_ref[static_cast<size_t>(((i[0] * c.HV + i[1]) * c.K + i[3]) * c.V + i[2])];
        if (c.final_state.at(i) != static_cast<double>(static_cast<float>(want))) ++mism;
      });
      EXPECT_EQ(mism, 0);
      EXPECT_TRUE(c.out.guards_intact() && c.final_state.guards_intact() && c.q.guards_intact());
      EXPECT_EQ(c.q.values(), q_before);
      EXPECT_EQ(c.initial.values(), init_before);
    }
  }
}

// T = 0: nothing to write in out; the final state is the initial state.
TEST(KdaReference, EmptySequencesPassStateThrough) {
  for (const NamedFn& f : kBoth) {
    SCOPED_TRACE(f.name);
    KdaCase c;
    c.B = 2, c.T = 0;
    c.build(4);
    ASSERT_TRUE(run_pinned(c.params(), f.name).ok());
    EXPECT_TRUE(bitwise_equal(c.final_state, c.initial));
  }
}

TEST(KdaReference, EngineOrder) {
  const auto& engines = kda_engines();
  ASSERT_GE(engines.size(), 2u);
  // "reference-chunked" comes right after "reference", so automatic selection never reaches it.
  for (size_t i = 0; i + 1 < engines.size(); ++i) {
    if (std::string(engines[i]->name()) == "reference") {
      EXPECT_STREQ(engines[i + 1]->name(), "reference-chunked");
    }
  }
  // The 64-token "cuda-c64" engine was removed (1.28-1.47x slower than "cuda"'s 16-token chunks on
  // every shape timed; docs/ENGINES.md "64-token state steps"): no engine of that name remains.
  for (const KdaEngine* e : engines) EXPECT_STRNE(e->name(), "cuda-c64");
  KdaCase c;
  c.build(3);
  EXPECT_TRUE(kda(c.params()).ok());
}

}  // namespace
}  // namespace groupattn::test
