// 64-bit sizes on the CPU side, and the inputs fuzz/ found that broke validation or the reference.
//
// The huge-shape cases are validation-only (validate_attention / validate_kda): the views carry
// aligned fake pointers that nothing may dereference, and shapes whose element count or byte span
// does not fit in int64 must be rejected, not wrapped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.h"
#include "groupattn/attention.h"
#include "groupattn/kda.h"

namespace groupattn::test {
namespace {

constexpr int64_t kMax = INT64_MAX;

// Distinct, aligned, never-dereferenced addresses, far enough apart not to overlap.
void* fake(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 44); }

// A decode problem over a KV cache with more than 2^31 elements per tensor (and more than 4 GiB):
// q [1, 1, 8, 128], k/v [1, 2^24 + 1, 2, 128] bf16 (8 GiB each).
AttentionParams big_decode() {
  AttentionParams p;
  const int64_t sk = (int64_t{1} << 24) + 1;
  p.q = make_contiguous_view(fake(0), DType::kBF16, {1, 1, 8, 128});
  p.out = make_contiguous_view(fake(1), DType::kBF16, {1, 1, 8, 128});
  p.k = make_contiguous_view(fake(2), DType::kBF16, {1, sk, 2, 128});
  p.v = make_contiguous_view(fake(3), DType::kBF16, {1, sk, 2, 128});
  return p;
}

TEST(Sizes, AttentionAcceptsKvCachePast2To31Elements) {
  const AttentionParams p = big_decode();
  EXPECT_GT(p.k.numel(), int64_t{1} << 31);
  EXPECT_GT(p.k.span_bytes(), int64_t{4} << 30);
  EXPECT_TRUE(validate_attention(p).ok()) << validate_attention(p).to_string();
}

TEST(Sizes, AttentionRejectsSpanPastInt64) {
  AttentionParams p = big_decode();
  // Sk * stride overflows int64 bytes: 2^40 rows of 2^23 elements.
  p.k = make_strided_view(fake(2), DType::kBF16, {1, int64_t{1} << 40, 2, 128},
                          {0, int64_t{1} << 23, 128, 1});
  const Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("k: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("int64"), std::string::npos) << s.message();
}

TEST(Sizes, AttentionRejectsStrideTimesSizeOverflow) {
  AttentionParams p = big_decode();
  p.v = make_strided_view(fake(3), DType::kBF16, {3, 1, 2, 128}, {kMax, 256, 128, 1});
  const Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("v: "), std::string::npos) << s.message();
}

TEST(Sizes, AttentionRejectsElementCountPastInt64) {
  // Broadcast (stride 0) q with B * Sq past 2^63: the byte span is tiny, the row count is not.
  AttentionParams p = big_decode();
  const int64_t huge = int64_t{1} << 40;
  p.q = make_strided_view(fake(0), DType::kBF16, {huge, huge, 8, 128}, {0, 0, 128, 1});
  const Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q: "), std::string::npos) << s.message();
}

TEST(Sizes, EmptyViewWithHugeStridesIsAcceptedAndSpansNothing) {
  // Found by validate_attention_fuzz: q [3, 0, 8, 128] with stride INT64_MAX on dim 0 made
  // span_bytes() multiply (3 - 1) * INT64_MAX before it saw the empty dimension.
  AttentionParams p = big_decode();
  p.q = make_strided_view(fake(0), DType::kBF16, {1, 0, 8, 128}, {kMax, 2048, 128, 1});
  p.out = make_strided_view(fake(1), DType::kBF16, {1, 0, 8, 128}, {kMax, 2048, 128, 1});
  EXPECT_EQ(p.q.span_bytes(), 0);
  EXPECT_TRUE(validate_attention(p).ok()) << validate_attention(p).to_string();
}

TEST(Sizes, KdaRejectsSpanPastInt64) {
  KdaParams p;
  const int64_t T = int64_t{1} << 20;
  p.q = make_strided_view(fake(0), DType::kBF16, {1, T, 1, 64}, {0, int64_t{1} << 50, 64, 1});
  p.k = make_contiguous_view(fake(1), DType::kBF16, {1, T, 1, 64});
  p.v = make_contiguous_view(fake(2), DType::kBF16, {1, T, 1, 64});
  p.g = make_contiguous_view(fake(3), DType::kF32, {1, T, 1, 64});
  p.beta = make_contiguous_view(fake(4), DType::kF32, {1, T, 1});
  p.out = make_contiguous_view(fake(5), DType::kBF16, {1, T, 1, 64});
  const Status s = validate_kda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q: "), std::string::npos) << s.message();
  // The same problem with q contiguous: 2^20 tokens, fine.
  p.q = make_contiguous_view(fake(0), DType::kBF16, {1, T, 1, 64});
  EXPECT_TRUE(validate_kda(p).ok()) << validate_kda(p).to_string();
}

TEST(Sizes, IndexTensorTooLargeToReadIsOutOfMemoryNotAnException) {
  // Broadcast views of one row: B = 2^50 sequences in a few bytes. Reading seqlens_k back to check
  // it needs 8 PiB of host memory: the call must return kOutOfMemory, not throw std::bad_alloc.
  const int64_t batch = int64_t{1} << 50;
  std::vector<float> q(32), k(32), v(32);
  AttentionParams p;
  p.q = make_strided_view(q.data(), DType::kF32, {batch, 1, 1, 32}, {0, 0, 0, 1});
  p.k = make_strided_view(k.data(), DType::kF32, {batch, 1, 1, 32}, {0, 0, 0, 1});
  p.v = make_strided_view(v.data(), DType::kF32, {batch, 1, 1, 32}, {0, 0, 0, 1});
  // out cannot broadcast (its elements must not overlap): a fake pointer far above the rest.
  p.out = make_contiguous_view(reinterpret_cast<void*>(uintptr_t{1} << 60), DType::kF32, {batch, 1, 1, 32});
  // A fake pointer above user space (its 4 PiB span overlaps nothing real): the host buffer for
  // the values is reserved before anything is read.
  p.seqlens_k = make_contiguous_view(reinterpret_cast<void*>(uintptr_t{1} << 56), DType::kI32, {batch});
  ASSERT_TRUE(validate_attention(p).ok()) << validate_attention(p).to_string();
  RunOptions o;
  o.engine = "reference";
  const Status s = attention(p, o);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_NE(s.message().find("seqlens_k"), std::string::npos) << s.message();
}

TEST(FuzzRegression, OutputsWhoseElementsOverlapAreRejected) {
  // Seen in what the validation fuzzers accepted: an output with stride 0 on a dim of size > 1 (or
  // dims interleaving) passed, so an engine would write one element from many rows (a race on a
  // GPU). The fuzzers now also check every accepted output's elements are distinct.
  AttentionParams p = big_decode();
  p.out = make_strided_view(fake(1), DType::kBF16, {1, 1, 8, 128}, {1024, 1024, 0, 1});
  Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("out: output elements overlap"), std::string::npos) << s.message();
  p = big_decode();
  p.lse = make_strided_view(fake(5), DType::kF32, {8, 1}, {1, 1});  // fine: one column
  EXPECT_TRUE(validate_attention(p).ok()) << validate_attention(p).to_string();
  p.out = make_strided_view(fake(1), DType::kBF16, {1, 1, 8, 128}, {0, 0, 64, 1});  // heads interleave
  s = validate_attention(p);
  EXPECT_NE(s.message().find("out: output elements overlap"), std::string::npos) << s.message();

  KdaParams k;
  k.q = make_contiguous_view(fake(0), DType::kBF16, {1, 4, 1, 64});
  k.k = make_contiguous_view(fake(1), DType::kBF16, {1, 4, 1, 64});
  k.v = make_contiguous_view(fake(2), DType::kBF16, {1, 4, 1, 64});
  k.g = make_contiguous_view(fake(3), DType::kF32, {1, 4, 1, 64});
  k.beta = make_contiguous_view(fake(4), DType::kF32, {1, 4, 1});
  k.out = make_contiguous_view(fake(5), DType::kBF16, {1, 4, 1, 64});
  ASSERT_TRUE(validate_kda(k).ok()) << validate_kda(k).to_string();
  k.final_state = make_strided_view(fake(6), DType::kF32, {1, 1, 64, 64}, {4096, 4096, 0, 1});
  s = validate_kda(k);
  EXPECT_NE(s.message().find("final_state: output elements overlap"), std::string::npos) << s.message();
  k.final_state = TensorView{};
  k.out = make_strided_view(fake(5), DType::kBF16, {1, 4, 1, 64}, {256, 0, 64, 1});
  s = validate_kda(k);
  EXPECT_NE(s.message().find("out: output elements overlap"), std::string::npos) << s.message();
}

TEST(FuzzRegression, RankAboveMaxIsRejectedWithoutReadingPastTheShape) {
  // Found by validate_attention_fuzz: the rank error message printed shape[5] of a rank-6 view.
  AttentionParams p = big_decode();
  p.q.rank = 6;
  const Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q: rank 6"), std::string::npos) << s.message();
}

TEST(FuzzRegression, Int64CuSeqlensNearInt64MaxIsReadExactly) {
  // Found by validate_kda_fuzz: int64 index values went through double (undefined past 2^63,
  // rounded past 2^53). The last entry 2^53 + 1 must be reported exactly.
  std::vector<float> q(64 * 3), g(64 * 3), beta(3), out(64 * 3);
  std::vector<int64_t> cu = {0, (int64_t{1} << 53) + 1};
  KdaParams p;
  p.q = make_contiguous_view(q.data(), DType::kF32, {1, 3, 1, 64});
  p.k = p.q;
  p.v = p.q;
  p.g = make_contiguous_view(g.data(), DType::kF32, {1, 3, 1, 64});
  p.beta = make_contiguous_view(beta.data(), DType::kF32, {1, 3, 1});
  p.out = make_contiguous_view(out.data(), DType::kF32, {1, 3, 1, 64});
  p.cu_seqlens = make_contiguous_view(cu.data(), DType::kI64, {2});
  RunOptions o;
  o.engine = "reference";
  Status s = kda(p, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("9007199254740993"), std::string::npos) << s.message();
  cu[1] = INT64_MAX;
  s = kda(p, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("9223372036854775807"), std::string::npos) << s.message();
}

TEST(FuzzRegression, UnknownDtypeValueIsRejected) {
  // Found by validate_kda_fuzz: a DType outside the enum has size 0, and the alignment check
  // divided by it.
  KdaParams p;
  p.q = make_contiguous_view(fake(0), static_cast<DType>(7), {1, 1, 1, 64});
  const Status s = validate_kda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q: unknown dtype"), std::string::npos) << s.message();
}

TEST(FuzzRegression, HugeWindowsEqualUnboundedInTheReference) {
  // Found by validate_attention_fuzz: window_right = INT64_MAX overflowed pos + window_right + 1
  // in the reference's visible range (and window_left = INT64_MAX underflowed pos - window_left).
  std::mt19937_64 rng(6);
  HostTensor q(DType::kF32, {1, 3, 2, 32}), k(DType::kF32, {1, 5, 1, 32}), v(DType::kF32, {1, 5, 1, 32});
  q.fill_normal(rng), k.fill_normal(rng), v.fill_normal(rng);
  HostTensor out_huge(DType::kF32, {1, 3, 2, 32}), out_unbounded(DType::kF32, {1, 3, 2, 32});
  AttentionParams p;
  p.q = q.view(), p.k = k.view(), p.v = v.view();
  RunOptions o;
  o.engine = "reference";
  for (bool causal : {false, true}) {
    p.causal = causal;
    p.out = out_unbounded.view();
    p.window_left = p.window_right = -1;
    ASSERT_TRUE(attention(p, o).ok());
    p.out = out_huge.view();
    p.window_left = p.window_right = kMax;
    const Status s = attention(p, o);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(out_huge.values(), out_unbounded.values()) << "causal " << causal;
  }
}

TEST(FuzzRegression, PagedCapacityOfAHugeBlockTableDoesNotOverflow) {
  // Found by validate_attention_fuzz (CI, 8490949): seqlens_k's bound max_pages * page_size was
  // computed in int64 for a block table [0, ~2^63 / 1.1] wide (empty: B = 0, so it spans nothing)
  // with page_size 2 -- signed overflow (UBSan). The bound saturates now. Under plain builds the
  // overflow was silent; fuzz/corpus/validate_attention_fuzz/regress-paged-capacity-overflow keeps
  // the UBSan check in CI.
  HostTensor q(DType::kF32, {0, 1, 32}), out(DType::kF32, {0, 1, 32}), k(DType::kF32, {1, 2, 1, 32}),
      v(DType::kF32, {1, 2, 1, 32}), cu_q(DType::kI32, {1}), seqlens(DType::kI32, {0});
  cu_q.fill(0);
  AttentionParams p;
  p.q = q.view(), p.out = out.view(), p.k = k.view(), p.v = v.view();
  p.cu_seqlens_q = cu_q.view();
  p.max_seqlen_q = 0;
  p.seqlens_k = seqlens.view();
  p.block_table = make_strided_view(fake(0), DType::kI32, {0, int64_t{8140523272870384283}}, {1, 1});
  RunOptions o;
  o.engine = "reference";
  const Status s = attention(p, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace groupattn::test
