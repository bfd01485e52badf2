// Every KDA validation error path: kInvalidArgument, the argument named in the message (and the
// accepted values where there is a set), and out / final_state untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/kda_test_case.h"
#include "groupattn/kda.h"

namespace groupattn::test {
namespace {

class KdaValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.B = 2, c_.T = 9, c_.H = 2, c_.HV = 4, c_.K = 32, c_.V = 64;
    c_.build(7);
    c_.out.fill(7.0);
    c_.final_state.fill(7.0);
    ASSERT_TRUE(validate_kda(c_.params()).ok()) << validate_kda(c_.params()).to_string();
  }

  // Runs kda() (pinned to the reference so a real engine would write) on `p`, expects
  // InvalidArgument naming `arg` (and containing each of `also`), and checks nothing was written.
  void expect_invalid(const KdaParams& p, const std::string& arg, std::vector<std::string> also = {}) {
    RunOptions o;
    o.engine = "reference";
    const Status s = kda(p, o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(arg), std::string::npos) << "message does not name " << arg << ": " << s.message();
    for (const std::string& a : also) {
      EXPECT_NE(s.message().find(a), std::string::npos) << "message lacks '" << a << "': " << s.message();
    }
    EXPECT_EQ(validate_kda(p).ok() && validate_kda_indices_ok(p), false);
    for (double x : c_.out.values()) ASSERT_EQ(x, 7.0) << "out written on failure";
    for (double x : c_.final_state.values()) ASSERT_EQ(x, 7.0) << "final_state written on failure";
    EXPECT_TRUE(c_.out.guards_intact() && c_.final_state.guards_intact());
  }

  static bool validate_kda_indices_ok(const KdaParams& p) {
    RunOptions o;
    o.engine = "reference";
    size_t bytes = 0;
    return kda_workspace_bytes(p, o, &bytes).ok();
  }

  KdaParams p() const { return c_.params(); }
  KdaCase c_;
};

TEST_F(KdaValidation, MissingTensors) {
  for (const char* name : {"q", "k", "v", "g", "beta", "out"}) {
    KdaParams x = p();
    TensorView* t = std::string(name) == "q"  ? &x.q
                    : std::string(name) == "k" ? &x.k
                    : std::string(name) == "v" ? &x.v
                    : std::string(name) == "g" ? &x.g
                    : std::string(name) == "beta" ? &x.beta
                                                  : &x.out;
    t->data = nullptr;
    SCOPED_TRACE(name);
    expect_invalid(x, name, {"missing"});
  }
}

TEST_F(KdaValidation, WrongRank) {
  KdaParams x = p();
  x.q.rank = 3;
  expect_invalid(x, "q", {"[B, T, H, K]"});
  x = p();
  x.beta.rank = 4;
  expect_invalid(x, "beta", {"[B, T, HV]"});
}

TEST_F(KdaValidation, QDtypeNotSupported) {
  KdaParams x = p();
  x.q.dtype = DType::kI32;
  expect_invalid(x, "q", {"accepted: bf16, f16, f32"});
}

TEST_F(KdaValidation, KVOutDtypeMustMatchQ) {
  for (const char* name : {"k", "v", "out"}) {
    SCOPED_TRACE(name);
    KdaParams x = p();
    TensorView& t = std::string(name) == "k" ? x.k : std::string(name) == "v" ? x.v : x.out;
    t.dtype = DType::kF64;  // same element count per byte span is irrelevant: rejected before use
    expect_invalid(x, name, {"accepted: f32"});
  }
}

TEST_F(KdaValidation, GateAndBetaMustBeF32) {
  KdaParams x = p();
  x.g.dtype = DType::kBF16;
  expect_invalid(x, "g", {"accepted: f32"});
  x = p();
  x.beta.dtype = DType::kF16;
  expect_invalid(x, "beta", {"accepted: f32"});
}

TEST_F(KdaValidation, HeadDimsNotSupported) {
  KdaParams x = p();
  x.q.shape[3] = 48;
  expect_invalid(x, "q", {"K = 48", "accepted: 32, 64, 128, 256"});
  x = p();
  x.v.shape[3] = 48;
  expect_invalid(x, "v", {"V = 48", "accepted: 32, 64, 128, 256"});
}

TEST_F(KdaValidation, ShapeMismatches) {
  KdaParams x = p();
  x.k.shape[1] = 8;
  expect_invalid(x, "k", {"T"});
  x = p();
  x.v.shape[0] = 1;
  expect_invalid(x, "v", {"B"});
  x = p();
  x.g.shape[2] = 2;
  expect_invalid(x, "g", {"HV"});
  x = p();
  x.g.shape[3] = 64;
  expect_invalid(x, "g", {"K"});
  x = p();
  x.beta.shape[2] = 2;
  expect_invalid(x, "beta", {"HV"});
  x = p();
  x.out.shape[3] = 32;
  expect_invalid(x, "out", {"V"});
}

TEST_F(KdaValidation, HvNotMultipleOfH) {
  KdaCase c;
  c.H = 4, c.HV = 6;
  c.build(1);
  c.out.fill(7.0);
  c.final_state.fill(7.0);
  std::swap(c_, c);
  expect_invalid(p(), "v/q: HV = 6 is not a multiple of H = 4");
}

TEST_F(KdaValidation, StateMustBeF32) {
  KdaParams x = p();
  x.initial_state.dtype = DType::kBF16;
  expect_invalid(x, "initial_state", {"accepted: f32"});
  x = p();
  x.final_state.dtype = DType::kF16;
  expect_invalid(x, "final_state", {"accepted: f32"});
}

TEST_F(KdaValidation, StateShapes) {
  KdaParams x = p();
  x.initial_state.shape[0] = 3;  // N = B = 2
  expect_invalid(x, "initial_state", {"N"});
  x = p();
  x.final_state.shape[1] = 2;
  expect_invalid(x, "final_state", {"HV"});
  // K-first layout given V-first shaped states (K = 32 != V = 64).
  x = p();
  x.state_layout = KdaStateLayout::kKFirst;
  expect_invalid(x, "initial_state", {"K-first"});
  x = p();
  x.initial_state.rank = 3;
  expect_invalid(x, "initial_state", {"[N, HV, V, K]"});
}

TEST_F(KdaValidation, CuSeqlensNeedsBatchOne) {
  HostTensor cu(DType::kI32, {3});
  cu.set({1}, 4), cu.set({2}, 9);
  KdaParams x = p();  // B = 2
  x.cu_seqlens = cu.view();
  expect_invalid(x, "cu_seqlens", {"B == 1"});
}

class KdaValidationVarlen : public KdaValidation {
 protected:
  void SetUp() override {
    c_.B = 1, c_.T = 9, c_.H = 1, c_.HV = 2, c_.K = 32, c_.V = 32;
    c_.cu = {0, 4, 9};
    c_.build(8);
    c_.out.fill(7.0);
    c_.final_state.fill(7.0);
    ASSERT_TRUE(validate_kda(c_.params()).ok()) << validate_kda(c_.params()).to_string();
  }
  void set_cu(std::vector<int64_t> v, DType dt = DType::kI32) {
    cu_ = HostTensor(dt, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) cu_.set({static_cast<int64_t>(i)}, static_cast<double>(v[i]));
  }
  HostTensor cu_;
};

TEST_F(KdaValidationVarlen, CuSeqlensDtypeAndRank) {
  KdaParams x = p();
  set_cu({0, 4, 9}, DType::kF32);
  x.cu_seqlens = cu_.view();
  expect_invalid(x, "cu_seqlens", {"accepted: i32, i64"});
  x = p();
  x.cu_seqlens.rank = 2;
  x.cu_seqlens.shape[1] = 1;
  x.cu_seqlens.shape[0] = 3;
  x.cu_seqlens.stride[0] = 1;
  x.cu_seqlens.stride[1] = 1;
  expect_invalid(x, "cu_seqlens", {"rank"});
}

TEST_F(KdaValidationVarlen, CuSeqlensContents) {
  for (const auto& [vals, what] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{0, 4, 8}, "must equal T"},
           {{0, 4, 10}, "exceeds"},
           {{1, 4, 9}, "start at 0"},
           {{0, 5, 4}, "non-decreasing"}}) {
    SCOPED_TRACE(what);
    for (DType dt : {DType::kI32, DType::kI64}) {
      set_cu(vals, dt);
      KdaParams x = p();
      x.cu_seqlens = cu_.view();
      expect_invalid(x, "cu_seqlens", {what});
    }
  }
}

TEST_F(KdaValidationVarlen, StateCountFollowsCuSeqlens) {
  set_cu({0, 2, 4, 9});  // N = 3, states have 2 rows
  KdaParams x = p();
  x.cu_seqlens = cu_.view();
  expect_invalid(x, "initial_state", {"len(cu_seqlens) - 1"});
}

class KdaValidationPool : public KdaValidation {
 protected:
  void SetUp() override {
    KdaValidation::SetUp();  // B = 2 sequences
    pool_in_ = HostTensor(DType::kF32, {5, c_.HV, c_.V, c_.K});
    pool_out_ = HostTensor(DType::kF32, {4, c_.HV, c_.V, c_.K});
    pool_out_.fill(7.0);
    idx_ = HostTensor(DType::kI32, {2});
    idx_.set({0}, 3), idx_.set({1}, 1);
  }
  KdaParams pool_params(const std::vector<int64_t>& idx) {
    for (size_t i = 0; i < idx.size(); ++i) idx_.set({static_cast<int64_t>(i)}, static_cast<double>(idx[i]));
    KdaParams x = p();
    x.initial_state = pool_in_.view();
    x.final_state = pool_out_.view();
    x.state_indices = idx_.view();
    return x;
  }
  void expect_pool_untouched() {
    for (double v : pool_out_.values()) ASSERT_EQ(v, 7.0);
  }
  HostTensor pool_in_, pool_out_, idx_;
};

TEST_F(KdaValidationPool, ValidPoolAccepted) {
  EXPECT_TRUE(validate_kda(pool_params({3, 1})).ok());
  size_t bytes = 0;
  EXPECT_TRUE(kda_workspace_bytes(pool_params({3, 1}), {}, &bytes).ok());
}

TEST_F(KdaValidationPool, IndexOutOfRange) {
  expect_invalid(pool_params({3, 5}), "state_indices", {"initial_state", "accepted: 0..4"});
  expect_pool_untouched();
  expect_invalid(pool_params({4, 1}), "state_indices", {"final_state", "accepted: 0..3"});  // final pool has 4 rows
  expect_pool_untouched();
  expect_invalid(pool_params({-1, 1}), "state_indices", {"accepted: 0..4"});
  expect_pool_untouched();
}

TEST_F(KdaValidationPool, DuplicateRowsWithFinalState) {
  expect_invalid(pool_params({2, 2}), "state_indices", {"distinct"});
  expect_pool_untouched();
  // Read-only pools may share rows.
  KdaParams x = pool_params({2, 2});
  x.final_state = TensorView{};
  EXPECT_TRUE(validate_kda(x).ok());
  EXPECT_TRUE(validate_kda_indices_ok(x));
}

TEST_F(KdaValidationPool, IndexDtypeShapeAndUse) {
  HostTensor i64(DType::kI64, {2});
  KdaParams x = pool_params({3, 1});
  x.state_indices = i64.view();
  expect_invalid(x, "state_indices", {"accepted: i32"});
  HostTensor three(DType::kI32, {3});
  x = pool_params({3, 1});
  x.state_indices = three.view();
  expect_invalid(x, "state_indices", {"N"});
  x = pool_params({3, 1});
  x.initial_state = TensorView{};
  x.final_state = TensorView{};
  expect_invalid(x, "state_indices", {"initial_state or final_state"});
}

TEST_F(KdaValidation, GateRequirements) {
  HostTensor A_log(DType::kF32, {c_.HV}), dt_bias(DType::kF32, {c_.HV, c_.K});
  KdaParams x = p();
  x.gate = KdaGate::kSoftplus;
  expect_invalid(x, "A_log", {"kSoftplus"});

  x = p();
  x.gate = KdaGate::kLowerBound;
  for (float lb : {0.f, 1.f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    x.lower_bound = lb;
    expect_invalid(x, "lower_bound", {"accepted: finite values < 0"});
  }
  x.lower_bound = -5.f;
  EXPECT_TRUE(validate_kda(x).ok());  // A_log and dt_bias optional here

  HostTensor A_bad(DType::kF32, {c_.HV + 1}), A_f16(DType::kF16, {c_.HV});
  x.A_log = A_bad.view();
  expect_invalid(x, "A_log", {"HV"});
  x.A_log = A_f16.view();
  expect_invalid(x, "A_log", {"accepted: f32"});
  x.A_log = A_log.view();
  HostTensor dt_bad(DType::kF32, {c_.HV, c_.K + 32}), dt_rank(DType::kF32, {c_.HV * c_.K});
  x.dt_bias = dt_bad.view();
  expect_invalid(x, "dt_bias", {"K"});
  x.dt_bias = dt_rank.view();
  expect_invalid(x, "dt_bias", {"[HV, K]"});
  x.dt_bias = dt_bias.view();
  EXPECT_TRUE(validate_kda(x).ok());

  // Gate parameters with the pre-gated log decay would be silently ignored: refused.
  x = p();
  x.A_log = A_log.view();
  expect_invalid(x, "A_log", {"kLogDecay"});
  x = p();
  x.dt_bias = dt_bias.view();
  expect_invalid(x, "dt_bias", {"kLogDecay"});
}

TEST_F(KdaValidation, NegEigvalNeedsBetaSigmoid) {
  KdaParams x = p();
  x.allow_neg_eigval = true;
  expect_invalid(x, "allow_neg_eigval", {"use_beta_sigmoid"});
  x.use_beta_sigmoid = true;
  EXPECT_TRUE(validate_kda(x).ok());
}

TEST_F(KdaValidation, ScaleFiniteOrNaN) {
  KdaParams x = p();
  x.scale = std::numeric_limits<float>::infinity();
  expect_invalid(x, "scale", {"accepted"});
  x.scale = 0.25f;
  EXPECT_TRUE(validate_kda(x).ok());
}

TEST_F(KdaValidation, Layout) {
  KdaParams x = p();
  x.v.stride[3] = 2;
  expect_invalid(x, "v", {"stride"});
  x = p();
  x.g.stride[0] = -1;
  expect_invalid(x, "g", {"negative stride"});
  x = p();
  x.initial_state.stride[3] = 3;
  expect_invalid(x, "initial_state", {"stride"});
  x = p();
  x.beta.data = static_cast<char*>(x.beta.data) + 1;  // misaligned
  expect_invalid(x, "beta", {"aligned"});
}

TEST_F(KdaValidation, OneDevice) {
  KdaParams x = p();
  x.out.device = Device::kCUDA;
  expect_invalid(x, "out", {"share a device"});
  x = p();
  x.initial_state.device = Device::kCUDA;
  expect_invalid(x, "initial_state", {"share a device"});
}

TEST_F(KdaValidation, OutputsMustNotOverlapInputs) {
  // out aliasing v (both [B, T, HV, V] f32).
  KdaParams x = p();
  x.out = c_.v.view();
  expect_invalid(x, "out", {"overlaps", "v"});
  // final_state over the second half of initial_state: overlapping but not the same view.
  x = p();
  x.final_state = slice_rows(x.initial_state, 1, 1);
  x.final_state.shape[0] = 2;
  expect_invalid(x, "final_state", {"initial_state", "same view"});
  // final_state over out.
  HostTensor big(DType::kF32, {c_.B * c_.HV * c_.V * c_.K + c_.B * c_.T * c_.HV * c_.V});
  x = p();
  x.out = make_contiguous_view(big.view().data, DType::kF32, {c_.B, c_.T, c_.HV, c_.V});
  x.final_state = make_contiguous_view(big.view().data, DType::kF32, {c_.B, c_.HV, c_.V, c_.K});
  expect_invalid(x, "final_state", {"out"});
}

TEST_F(KdaValidation, FinalStateMayAliasInitialStateExactly) {
  KdaParams x = p();
  x.final_state = x.initial_state;
  EXPECT_TRUE(validate_kda(x).ok()) << validate_kda(x).to_string();
  std::vector<double> before = c_.initial.values();
  RunOptions o;
  o.engine = "reference";
  ASSERT_TRUE(kda(x, o).ok());
  EXPECT_NE(c_.initial.values(), before);  // updated in place
}

TEST_F(KdaValidation, EnginesDeclineDeviceTensors) {
  KdaParams x = p();
  for (TensorView* t : {&x.q, &x.k, &x.v, &x.g, &x.beta, &x.out, &x.initial_state, &x.final_state}) {
    t->device = Device::kCUDA;
  }
  for (const char* engine : {"reference", "reference-chunked"}) {
    RunOptions o;
    o.engine = engine;
    const Status s = kda(x, o);
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("host memory"), std::string::npos) << s.message();
  }
}

TEST_F(KdaValidation, UnknownEngineListsBoth) {
  RunOptions o;
  o.engine = "no-such-engine";
  const Status s = kda(p(), o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("reference-chunked"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace groupattn::test
