// Attention validation: every bad input gets InvalidArgument naming the argument (and the accepted
// values where there is a set), and nothing is written: out/lse stay poisoned, inputs unchanged.
// Also engine selection: pinning by option and by GROUPATTN_ENGINE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

enum class Kind { kBatched, kVarlen, kPaged };

HostTensor int_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  HostTensor t(DType::kI32, std::move(shape));
  size_t n = 0;
  for_each_index(t.shape(), [&](const std::vector<int64_t>& i) { t.set(i, static_cast<double>(values[n++])); });
  return t;
}

// One valid problem of each K/V layout: B = 2, Hq = 8, Hkv = 2, D = Dv = 64, bf16.
//   batched: q [2, 3, 8, 64], k/v [2, 8, 2, 64], seqlens_k {8, 5}
//   varlen:  q [6, 8, 64] cu_seqlens_q {0, 2, 6}; k/v [13, 2, 64] cu_seqlens_k {0, 8, 13}
//   paged:   q [2, 3, 8, 64], k/v [5, 4, 2, 64] (page_size 4), block_table {{0, 1, -1}, {2, 3, 4}},
//            seqlens_k {8, 9}
struct Fixture {
  Kind kind;
  HostTensor q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table;
  AttentionParams p;

  explicit Fixture(Kind kind_) : kind(kind_) {
    std::mt19937_64 rng(42);
    const DType dt = DType::kBF16;
    if (kind == Kind::kVarlen) {
      q = HostTensor(dt, {6, 8, 64});
      out = HostTensor(dt, {6, 8, 64});
      k = HostTensor(dt, {13, 2, 64});
      v = HostTensor(dt, {13, 2, 64});
      cu_q = int_tensor({3}, {0, 2, 6});
      cu_k = int_tensor({3}, {0, 8, 13});
    } else {
      q = HostTensor(dt, {2, 3, 8, 64});
      out = HostTensor(dt, {2, 3, 8, 64});
      if (kind == Kind::kBatched) {
        k = HostTensor(dt, {2, 8, 2, 64});
        v = HostTensor(dt, {2, 8, 2, 64});
        seqlens_k = int_tensor({2}, {8, 5});
      } else {
        k = HostTensor(dt, {5, 4, 2, 64});
        v = HostTensor(dt, {5, 4, 2, 64});
        seqlens_k = int_tensor({2}, {8, 9});
        block_table = int_tensor({2, 3}, {0, 1, -1, 2, 3, 4});
      }
    }
    lse = HostTensor(DType::kF32, {8, 6});
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    out.poison();
    lse.poison();
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
    p.cu_seqlens_q = cu_q.view();
    p.cu_seqlens_k = cu_k.view();
    p.seqlens_k = seqlens_k.view();
    p.block_table = block_table.view();
    p.causal = true;
  }

  std::vector<const HostTensor*> inputs() const { return {&q, &k, &v, &cu_q, &cu_k, &seqlens_k, &block_table}; }
};

bool all_nan(const HostTensor& t) {
  for (double x : t.values()) {
    if (!std::isnan(x)) return false;
  }
  return true;
}

struct BadCase {
  const char* name;
  Kind kind;
  std::function<void(Fixture&)> mutate;
  std::vector<std::string> expect_in_message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

void set_dtype_all(Fixture& f, DType d) {
  f.p.q.dtype = f.p.k.dtype = f.p.v.dtype = f.p.out.dtype = d;
}

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // presence
      {"QMissing", Kind::kBatched, [](Fixture& f) { f.p.q.data = nullptr; }, {"q:", "missing"}},
      {"KMissing", Kind::kBatched, [](Fixture& f) { f.p.k.data = nullptr; }, {"k:", "missing"}},
      {"VMissing", Kind::kVarlen, [](Fixture& f) { f.p.v.data = nullptr; }, {"v:", "missing"}},
      {"OutMissing", Kind::kPaged, [](Fixture& f) { f.p.out.data = nullptr; }, {"out:", "missing"}},
      // dtypes
      {"QDtypeUnsupported", Kind::kBatched, [](Fixture& f) { set_dtype_all(f, DType::kF64); },
       {"q:", "f64", "accepted: bf16, f16, f32"}},
      {"KDtypeDiffersFromQ", Kind::kBatched, [](Fixture& f) { f.p.k.dtype = DType::kF16; }, {"k:", "f16", "bf16"}},
      {"VDtypeDiffersFromQ", Kind::kVarlen, [](Fixture& f) { f.p.v.dtype = DType::kF32; }, {"v:", "f32", "bf16"}},
      {"OutDtypeDiffersFromQ", Kind::kPaged, [](Fixture& f) { f.p.out.dtype = DType::kF16; }, {"out:", "f16"}},
      {"LseDtypeNotF32", Kind::kBatched, [](Fixture& f) { f.p.lse.dtype = DType::kBF16; }, {"lse:", "accepted: f32"}},
      {"CuSeqlensQDtype", Kind::kVarlen, [](Fixture& f) { f.p.cu_seqlens_q.dtype = DType::kI64; },
       {"cu_seqlens_q:", "i64", "accepted: i32"}},
      {"CuSeqlensKDtype", Kind::kVarlen, [](Fixture& f) { f.p.cu_seqlens_k.dtype = DType::kF32; },
       {"cu_seqlens_k:", "accepted: i32"}},
      {"SeqlensKDtype", Kind::kBatched, [](Fixture& f) { f.p.seqlens_k.dtype = DType::kI64; },
       {"seqlens_k:", "accepted: i32"}},
      {"BlockTableDtype", Kind::kPaged, [](Fixture& f) { f.p.block_table.dtype = DType::kI64; },
       {"block_table:", "accepted: i32"}},
      // ranks per layout
      {"QRankBatched", Kind::kBatched, [](Fixture& f) { f.p.q.rank = 3; }, {"q:", "rank 3", "[B, Sq, Hq, D]"}},
      {"QRankVarlen", Kind::kVarlen,
       [](Fixture& f) {
         f.p.q.rank = 4;
         f.p.q.shape[3] = 1;
       },
       {"q:", "rank 4", "[total_q, Hq, D]"}},
      {"OutRank", Kind::kBatched, [](Fixture& f) { f.p.out.rank = 3; }, {"out:", "[B, Sq, Hq, Dv]"}},
      {"KRankBatched", Kind::kBatched, [](Fixture& f) { f.p.k.rank = 3; }, {"k:", "[B, Sk, Hkv, D]"}},
      {"KRankVarlen", Kind::kVarlen,
       [](Fixture& f) {
         f.p.k.rank = 4;
         f.p.k.shape[3] = 1;
       },
       {"k:", "[total_k, Hkv, D]"}},
      {"KRankPaged", Kind::kPaged, [](Fixture& f) { f.p.k.rank = 3; }, {"k:", "[num_pages, page_size, Hkv, D]"}},
      {"VRankPaged", Kind::kPaged, [](Fixture& f) { f.p.v.rank = 3; }, {"v:", "[num_pages, page_size, Hkv, Dv]"}},
      {"LseRank", Kind::kBatched, [](Fixture& f) { f.p.lse.rank = 1; }, {"lse:", "[Hq, total_q]"}},
      {"CuSeqlensQRank", Kind::kVarlen,
       [](Fixture& f) {
         f.p.cu_seqlens_q.rank = 2;
         f.p.cu_seqlens_q.shape[1] = 1;
       },
       {"cu_seqlens_q:", "[B+1]"}},
      {"SeqlensKRank", Kind::kPaged,
       [](Fixture& f) {
         f.p.seqlens_k.rank = 2;
         f.p.seqlens_k.shape[1] = 1;
       },
       {"seqlens_k:", "[B]"}},
      {"BlockTableRank", Kind::kPaged, [](Fixture& f) { f.p.block_table.rank = 1; }, {"block_table:", "[B, max_pages]"}},
      // which index tensors go together
      {"SeqlensKRequiredWhenPaged", Kind::kPaged, [](Fixture& f) { f.p.seqlens_k = {}; }, {"seqlens_k:", "required"}},
      {"SeqlensKWithVarlenK", Kind::kVarlen, [](Fixture& f) { f.p.seqlens_k = f.cu_k.view(); },
       {"seqlens_k:", "varlen", "accepted"}},
      {"CuSeqlensKWithPagedK", Kind::kPaged,
       [](Fixture& f) {
         f.cu_k = int_tensor({3}, {0, 8, 9});
         f.p.cu_seqlens_k = f.cu_k.view();
       },
       {"cu_seqlens_k:", "paged"}},
      // shapes that disagree
      {"BatchKVsQ", Kind::kBatched, [](Fixture& f) { f.p.k.shape[0] = f.p.v.shape[0] = 1; }, {"k:", "B", "from q"}},
      {"BatchKVsCuSeqlensQ", Kind::kVarlen,
       [](Fixture& f) {
         // varlen Q (B = 1 from cu_seqlens_q) with batched K/V of B = 2
         f.p.cu_seqlens_q.shape[0] = 2;
         f.p.cu_seqlens_k = {};
         f.p.k = make_strided_view(f.p.k.data, f.p.k.dtype, {2, 6, 2, 64}, {768, 128, 64, 1});
         f.p.v = make_strided_view(f.p.v.data, f.p.v.dtype, {2, 6, 2, 64}, {768, 128, 64, 1});
       },
       {"k:", "B", "cu_seqlens_q"}},
      {"BatchBlockTableVsQ", Kind::kPaged, [](Fixture& f) { f.p.block_table.shape[0] = 1; }, {"block_table:", "B"}},
      {"BatchSeqlensKVsQ", Kind::kBatched, [](Fixture& f) { f.p.seqlens_k.shape[0] = 1; }, {"seqlens_k:", "B"}},
      {"BatchCuSeqlensKVsCuSeqlensQ", Kind::kVarlen, [](Fixture& f) { f.p.cu_seqlens_k.shape[0] = 2; },
       {"cu_seqlens_k:", "B+1"}},
      {"HkvDiffersBetweenKAndV", Kind::kBatched, [](Fixture& f) { f.p.v.shape[2] = 1; }, {"v:", "Hkv"}},
      {"SkDiffersBetweenKAndV", Kind::kBatched, [](Fixture& f) { f.p.v.shape[1] = 7; }, {"v:", "Sk"}},
      {"PagesDifferBetweenKAndV", Kind::kPaged, [](Fixture& f) { f.p.v.shape[0] = 4; }, {"v:", "num_pages"}},
      {"HqNotMultipleOfHkv", Kind::kBatched, [](Fixture& f) { f.p.k.shape[2] = f.p.v.shape[2] = 3; },
       {"q/k: Hq = 8 is not a multiple of Hkv = 3"}},
      {"DDiffersBetweenQAndK", Kind::kBatched, [](Fixture& f) { f.p.k.shape[3] = 32; }, {"k:", "D", "64"}},
      {"DvDiffersBetweenVAndOut", Kind::kVarlen, [](Fixture& f) { f.p.out.shape[2] = 32; }, {"out:", "Dv"}},
      {"OutLeadingDimsDifferFromQ", Kind::kBatched, [](Fixture& f) { f.p.out.shape[1] = 2; }, {"out:", "from q"}},
      {"OutHeadsDifferFromQ", Kind::kVarlen, [](Fixture& f) { f.p.out.shape[1] = 4; }, {"out:", "Hq"}},
      {"LseHeads", Kind::kBatched, [](Fixture& f) { f.p.lse.shape[0] = 4; }, {"lse:", "Hq"}},
      {"LseTotalQ", Kind::kVarlen, [](Fixture& f) { f.p.lse.shape[1] = 5; }, {"lse:", "total_q"}},
      {"PageSizeZero", Kind::kPaged, [](Fixture& f) { f.p.k.shape[1] = f.p.v.shape[1] = 0; }, {"k:", "page_size"}},
      // head dims
      {"HeadDimUnsupported", Kind::kBatched, [](Fixture& f) { f.p.q.shape[3] = f.p.k.shape[3] = 48; },
       {"q:", "48", "accepted: 32, 64, 96, 128, 192, 256"}},
      {"ValueHeadDimUnsupported", Kind::kBatched, [](Fixture& f) { f.p.v.shape[3] = f.p.out.shape[3] = 40; },
       {"v:", "Dv", "40", "accepted: 32, 64, 96, 128, 192, 256"}},
      // layout of every tensor
      {"QLastDimNotContiguous", Kind::kBatched, [](Fixture& f) { f.p.q.stride[3] = 2; }, {"q:", "stride", "accepted: 1"}},
      {"KLastDimNotContiguous", Kind::kVarlen, [](Fixture& f) { f.p.k.stride[2] = 2; }, {"k:", "stride"}},
      {"VLastDimNotContiguous", Kind::kPaged, [](Fixture& f) { f.p.v.stride[3] = 3; }, {"v:", "stride"}},
      {"OutLastDimNotContiguous", Kind::kBatched, [](Fixture& f) { f.p.out.stride[3] = 2; }, {"out:", "stride"}},
      {"LseLastDimNotContiguous", Kind::kBatched, [](Fixture& f) { f.p.lse.stride[1] = 2; }, {"lse:", "stride"}},
      {"BlockTableLastDimNotContiguous", Kind::kPaged, [](Fixture& f) { f.p.block_table.stride[1] = 2; },
       {"block_table:", "stride"}},
      {"CuSeqlensQNotContiguous", Kind::kVarlen, [](Fixture& f) { f.p.cu_seqlens_q.stride[0] = 2; },
       {"cu_seqlens_q:", "stride"}},
      {"KNegativeStride", Kind::kBatched, [](Fixture& f) { f.p.k.stride[1] = -f.p.k.stride[1]; },
       {"k:", "negative stride", "accepted: strides >= 0"}},
      {"QMisaligned", Kind::kBatched, [](Fixture& f) { f.p.q.data = static_cast<char*>(f.p.q.data) + 1; },
       {"q:", "aligned"}},
      {"LseMisaligned", Kind::kBatched, [](Fixture& f) { f.p.lse.data = static_cast<char*>(f.p.lse.data) + 2; },
       {"lse:", "aligned"}},
      {"SeqlensKMisaligned", Kind::kPaged,
       [](Fixture& f) { f.p.seqlens_k.data = static_cast<char*>(f.p.seqlens_k.data) + 1; },
       {"seqlens_k:", "aligned"}},
      // devices
      {"KOnOtherDevice", Kind::kBatched, [](Fixture& f) { f.p.k.device = Device::kCUDA; }, {"k:", "cuda", "share a device"}},
      {"OutOnOtherGpu", Kind::kBatched,
       [](Fixture& f) {
         f.p.q.device = f.p.k.device = f.p.v.device = f.p.lse.device = f.p.seqlens_k.device = Device::kCUDA;
         f.p.out.device = Device::kCUDA;
         f.p.out.device_id = 1;
       },
       {"out:", "cuda:1", "share a device"}},
      {"BlockTableOnOtherDevice", Kind::kPaged, [](Fixture& f) { f.p.block_table.device = Device::kCUDA; },
       {"block_table:", "share a device"}},
      // outputs overlapping inputs
      {"OutOverlapsQ", Kind::kBatched, [](Fixture& f) { f.p.out.data = f.p.q.data; }, {"out:", "overlaps", "q"}},
      {"OutOverlapsV", Kind::kVarlen,
       [](Fixture& f) {
         f.p.out.data = static_cast<char*>(f.p.v.data) + 64;
       },
       {"out:", "overlaps", "v"}},
      {"LseOverlapsK", Kind::kPaged, [](Fixture& f) { f.p.lse.data = f.p.k.data; }, {"lse:", "overlaps", "k"}},
      // scalar options
      {"WindowLeftBelowMinusOne", Kind::kBatched, [](Fixture& f) { f.p.window_left = -2; }, {"window_left:", "-1"}},
      {"WindowRightBelowMinusOne", Kind::kBatched, [](Fixture& f) { f.p.window_right = -7; }, {"window_right:", "-1"}},
      {"SoftcapNegative", Kind::kBatched, [](Fixture& f) { f.p.softcap = -1.f; }, {"softcap:", "accepted"}},
      {"SoftcapInfinite", Kind::kBatched, [](Fixture& f) { f.p.softcap = INFINITY; }, {"softcap:", "finite"}},
      {"SoftcapNaN", Kind::kBatched, [](Fixture& f) { f.p.softcap = NAN; }, {"softcap:", "finite"}},
      {"SoftmaxScaleInfinite", Kind::kBatched, [](Fixture& f) { f.p.softmax_scale = -INFINITY; },
       {"softmax_scale:", "finite", "NaN"}},
      {"NumSplitsNegative", Kind::kPaged, [](Fixture& f) { f.p.num_splits = -1; }, {"num_splits:", "0 = automatic"}},
      {"MaxSeqlenQNegative", Kind::kVarlen, [](Fixture& f) { f.p.max_seqlen_q = -1; }, {"max_seqlen_q:", "accepted"}},
      {"MaxSeqlenKNegative", Kind::kVarlen, [](Fixture& f) { f.p.max_seqlen_k = -3; }, {"max_seqlen_k:", "accepted"}},
      // index contents
      {"CuSeqlensQNotStartingAtZero", Kind::kVarlen, [](Fixture& f) { f.cu_q.set({0}, 1); }, {"cu_seqlens_q:", "start at 0"}},
      {"CuSeqlensQDecreasing", Kind::kVarlen, [](Fixture& f) { f.cu_q.set({1}, 5); f.cu_q.set({2}, 4); },
       {"cu_seqlens_q:", "non-decreasing"}},
      {"CuSeqlensQBeyondTotalQ", Kind::kVarlen, [](Fixture& f) { f.cu_q.set({2}, 7); }, {"cu_seqlens_q:", "total_q"}},
      {"CuSeqlensKNotStartingAtZero", Kind::kVarlen, [](Fixture& f) { f.cu_k.set({0}, 2); }, {"cu_seqlens_k:", "start at 0"}},
      {"CuSeqlensKDecreasing", Kind::kVarlen, [](Fixture& f) { f.cu_k.set({1}, 14); }, {"cu_seqlens_k:", "non-decreasing"}},
      {"CuSeqlensKBeyondTotalK", Kind::kVarlen, [](Fixture& f) { f.cu_k.set({2}, 14); }, {"cu_seqlens_k:", "total_k"}},
      {"SeqlensKBeyondCache", Kind::kBatched, [](Fixture& f) { f.seqlens_k.set({1}, 9); },
       {"seqlens_k:", "seqlens_k[1] = 9", "accepted: 0..8"}},
      {"SeqlensKNegative", Kind::kBatched, [](Fixture& f) { f.seqlens_k.set({0}, -1); }, {"seqlens_k:", "accepted: 0..8"}},
      {"SeqlensKBeyondBlockTable", Kind::kPaged, [](Fixture& f) { f.seqlens_k.set({0}, 13); },
       {"seqlens_k:", "accepted: 0..12", "max_pages * page_size"}},
      {"BlockTablePageTooLarge", Kind::kPaged, [](Fixture& f) { f.block_table.set({1, 2}, 5); },
       {"block_table:", "block_table[1][2] = 5", "accepted: 0..4"}},
      {"BlockTablePageNegative", Kind::kPaged, [](Fixture& f) { f.block_table.set({0, 1}, -1); },
       {"block_table:", "block_table[0][1] = -1", "accepted: 0..4"}},
      {"MaxSeqlenQBelowLongest", Kind::kVarlen, [](Fixture& f) { f.p.max_seqlen_q = 3; }, {"max_seqlen_q:", "4"}},
      {"MaxSeqlenKBelowLongest", Kind::kPaged, [](Fixture& f) { f.p.max_seqlen_k = 8; }, {"max_seqlen_k:", "9"}},
  };
  return cases;
}

class AttentionValidationBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(AttentionValidationBadInput, RejectedWithNamedArgumentAndNothingWritten) {
  const BadCase& c = GetParam();
  Fixture f(c.kind);
  const std::vector<std::vector<double>> before = {f.q.values(), f.k.values(), f.v.values()};
  c.mutate(f);
  RunOptions opts;
  opts.engine = "reference";
  const Status s = attention(f.p, opts);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (const std::string& want : c.expect_in_message) {
    EXPECT_NE(s.message().find(want), std::string::npos) << "message '" << s.message() << "' lacks '" << want << "'";
  }
  EXPECT_TRUE(all_nan(f.out)) << "out was written";
  EXPECT_TRUE(all_nan(f.lse)) << "lse was written";
  EXPECT_TRUE(f.out.guards_intact());
  EXPECT_TRUE(f.lse.guards_intact());
  // q/k/v unchanged (no case edits their values, and they are NaN-free so == compares them all).
  EXPECT_EQ(f.q.values(), before[0]);
  EXPECT_EQ(f.k.values(), before[1]);
  EXPECT_EQ(f.v.values(), before[2]);
  for (const HostTensor* t : f.inputs()) {
    if (t->defined()) {
      EXPECT_TRUE(t->guards_intact());
    }
  }
  // The public validation entry point agrees wherever the fault is not in index contents.
  const Status v = validate_attention(f.p);
  if (!v.ok()) {
    EXPECT_EQ(v.message(), s.message());
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionValidationBadInput, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& param) { return std::string(param.param.name); });

class AttentionValidationGood : public ::testing::TestWithParam<Kind> {};

// The unmutated fixtures are valid, so each bad case fails for its own reason; unused block-table
// entries (-1 here) are not checked.
TEST_P(AttentionValidationGood, BaseProblemRuns) {
  Fixture f(GetParam());
  EXPECT_TRUE(validate_attention(f.p).ok());
  RunOptions opts;
  opts.engine = "reference";
  const Status s = attention(f.p, opts);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(all_finite(f.out.values()));
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionValidationGood, ::testing::Values(Kind::kBatched, Kind::kVarlen, Kind::kPaged));

TEST(AttentionEngineSelection, PinningReferenceWorks) {
  Fixture f(Kind::kBatched);
  RunOptions opts;
  opts.engine = "reference";
  EXPECT_TRUE(attention(f.p, opts).ok());
}

TEST(AttentionEngineSelection, PinningUnknownNameListsAcceptedNames) {
  Fixture f(Kind::kBatched);
  RunOptions opts;
  opts.engine = "nope";
  const Status s = attention(f.p, opts);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nope"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("accepted:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reference"), std::string::npos) << s.message();
  EXPECT_TRUE(all_nan(f.out));
}

TEST(AttentionEngineSelection, EnvironmentVariableHonoured) {
  Fixture f(Kind::kBatched);
  ASSERT_EQ(setenv("GROUPATTN_ENGINE", "nope", 1), 0);
  Status s = attention(f.p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("nope"), std::string::npos);
  EXPECT_TRUE(all_nan(f.out));
  // An engine named in the options wins over the environment.
  RunOptions opts;
  opts.engine = "reference";
  EXPECT_TRUE(attention(f.p, opts).ok());
  ASSERT_EQ(setenv("GROUPATTN_ENGINE", "reference", 1), 0);
  f.out.poison();
  s = attention(f.p);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(all_finite(f.out.values()));
  ASSERT_EQ(unsetenv("GROUPATTN_ENGINE"), 0);
}

TEST(AttentionEngineSelection, ReferenceDeclinesDeviceMemoryWithReason) {
  Fixture f(Kind::kBatched);
  // Host buffers labelled as device memory: valid for validation, never dereferenced.
  for (TensorView* t : {&f.p.q, &f.p.k, &f.p.v, &f.p.out, &f.p.lse, &f.p.seqlens_k}) t->device = Device::kCUDA;
  RunOptions opts;
  opts.engine = "reference";
  const Status s = attention(f.p, opts);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("reference"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("host"), std::string::npos) << s.message();
  EXPECT_TRUE(all_nan(f.out));
}

}  // namespace
}  // namespace groupattn::test
