// Partial-output mode (kv_shard_offset / kv_total_len) of the reference engine and attention_merge
// on the host: a problem's keys cut into shards, each shard run in partial mode, the partials
// merged, must equal the whole problem (decode and prefill, causal with Sq != Sk, windows, GQA
// 8/2 and 12/4, varlen Q, empty shards and rows that see no key of a shard). Plus the validation
// of the new fields and of attention_merge: named errors, nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.h"
#include "groupattn/attention.h"
#include "groupattn/context_parallel.h"

namespace groupattn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

HostTensor int_tensor(const std::vector<int64_t>& values) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set({static_cast<int64_t>(i)}, static_cast<double>(values[i]));
  return t;
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(1, 0);
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

struct CpCase {
  std::string name;
  int64_t hq = 8, hkv = 2, d = 32;
  std::vector<int64_t> q_lens = {1, 1};  // batched Q when all equal and !varlen_q
  std::vector<int64_t> k_lens = {37, 21};
  bool varlen_q = false;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  // Shard cut points per sequence (shards = cuts.size() - 1 each), global key positions.
  std::vector<std::vector<int64_t>> cuts;
};

// The whole problem (varlen K/V) and its shards, all f32 on the host.
struct Whole {
  CpCase c;
  HostTensor q, k, v, out, lse, cu_q, cu_k;
  int64_t total_q = 0;

  AttentionParams params() const {
    AttentionParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
    p.cu_seqlens_q = cu_q.view();
    p.cu_seqlens_k = cu_k.view();
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    return p;
  }
};

Whole make_whole(const CpCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Whole w;
  w.c = c;
  const auto batch = static_cast<int64_t>(c.q_lens.size());
  const std::vector<int64_t> cu_q = prefix_sums(c.q_lens), cu_k = prefix_sums(c.k_lens);
  w.total_q = cu_q.back();
  if (c.varlen_q) {
    w.q = HostTensor(DType::kF32, {w.total_q, c.hq, c.d});
    w.out = HostTensor(DType::kF32, {w.total_q, c.hq, c.d});
    w.cu_q = int_tensor(cu_q);
  } else {
    w.q = HostTensor(DType::kF32, {batch, c.q_lens[0], c.hq, c.d});
    w.out = HostTensor(DType::kF32, {batch, c.q_lens[0], c.hq, c.d});
  }
  w.lse = HostTensor(DType::kF32, {c.hq, w.total_q});
  w.k = HostTensor(DType::kF32, {cu_k.back(), c.hkv, c.d});
  w.v = HostTensor(DType::kF32, {cu_k.back(), c.hkv, c.d});
  w.cu_k = int_tensor(cu_k);
  w.q.fill_normal(rng);
  w.k.fill_normal(rng);
  w.v.fill_normal(rng);
  return w;
}

// Shard s of every sequence: K/V rows [cuts[b][s], cuts[b][s+1]) as varlen K/V, with offsets and totals.
struct Shard {
  HostTensor k, v, cu_k, offset, total, out, lse;
};

Shard make_shard(const Whole& w, size_t s) {
  const CpCase& c = w.c;
  std::vector<int64_t> lens, offsets;
  for (size_t b = 0; b < c.k_lens.size(); ++b) {
    offsets.push_back(c.cuts[b][s]);
    lens.push_back(c.cuts[b][s + 1] - c.cuts[b][s]);
  }
  const std::vector<int64_t> cu = prefix_sums(lens), whole_cu = prefix_sums(c.k_lens);
  Shard sh;
  sh.k = HostTensor(DType::kF32, {cu.back(), c.hkv, c.d});
  sh.v = HostTensor(DType::kF32, {cu.back(), c.hkv, c.d});
  for (size_t b = 0; b < lens.size(); ++b) {
    for (int64_t j = 0; j < lens[b]; ++j) {
      for (int64_t h = 0; h < c.hkv; ++h) {
        for (int64_t x = 0; x < c.d; ++x) {
          const int64_t src = whole_cu[b] + offsets[b] + j, dst = cu[b] + j;
          sh.k.set({dst, h, x}, w.k.at({src, h, x}));
          sh.v.set({dst, h, x}, w.v.at({src, h, x}));
        }
      }
    }
  }
  sh.cu_k = int_tensor(cu);
  sh.offset = int_tensor(offsets);
  sh.total = int_tensor(c.k_lens);
  sh.out = HostTensor(w.out.dtype(), w.out.shape());
  sh.lse = HostTensor(DType::kF32, {c.hq, w.total_q});
  return sh;
}

AttentionParams shard_params(const Whole& w, const Shard& sh) {
  AttentionParams p = w.params();
  p.k = sh.k.view();
  p.v = sh.v.view();
  p.cu_seqlens_k = sh.cu_k.view();
  p.kv_shard_offset = sh.offset.view();
  p.kv_total_len = sh.total.view();
  p.out = sh.out.view();
  p.lse = sh.lse.view();
  return p;
}

RunOptions reference() {
  RunOptions o;
  o.engine = "reference";
  return o;
}

// Runs the whole problem and every shard, merges, compares. Returns the number of (shard, row, head)
// triples that saw no key of their shard (so a case can assert that it exercises them).
int check_sharded_equals_whole(const CpCase& c) {
  SCOPED_TRACE(c.name);
  Whole w = make_whole(c, 7);
  const Status st = attention(w.params(), reference());
  EXPECT_TRUE(st.ok()) << st.to_string();
  const size_t shards = c.cuts[0].size() - 1;
  const std::vector<int64_t>& oshape = w.out.shape();
  HostTensor o_parts(DType::kF32, {static_cast<int64_t>(shards), w.total_q, c.hq, c.d});
  HostTensor lse_parts(DType::kF32, {static_cast<int64_t>(shards), c.hq, w.total_q});
  int empty_rows = 0;
  for (size_t s = 0; s < shards; ++s) {
    Shard sh = make_shard(w, s);
    sh.out.poison();
    sh.lse.poison();
    const Status ss = attention(shard_params(w, sh), reference());
    EXPECT_TRUE(ss.ok()) << "shard " << s << ": " << ss.to_string();
    for (int64_t r = 0; r < w.total_q; ++r) {
      for (int64_t h = 0; h < c.hq; ++h) {
        const double l = sh.lse.at({h, r});
        EXPECT_FALSE(std::isnan(l));
        lse_parts.set({static_cast<int64_t>(s), h, r}, l);
        if (l == -kInf) ++empty_rows;
        for (int64_t x = 0; x < c.d; ++x) {
          const double o = oshape.size() == 3 ? sh.out.at({r, h, x})
                                              : sh.out.at({r / oshape[1], r % oshape[1], h, x});
          if (l == -kInf) {
            EXPECT_EQ(o, 0.0) << "a row with no key in its shard must have O = 0";
          }
          o_parts.set({static_cast<int64_t>(s), r, h, x}, o);
        }
      }
    }
  }
  HostTensor merged(w.out.dtype(), oshape), merged_lse(DType::kF32, {c.hq, w.total_q});
  merged.poison();
  merged_lse.poison();
  MergeParams m;
  m.o_partials = o_parts.view();
  m.lse_partials = lse_parts.view();
  m.out = merged.view();
  m.lse = merged_lse.view();
  const Status ms = attention_merge(m);
  EXPECT_TRUE(ms.ok()) << ms.to_string();
  const std::vector<double> want = w.out.values(), got = merged.values();
  EXPECT_LT(max_abs_error(got, want), 1e-5);
  const std::vector<double> want_lse = w.lse.values(), got_lse = merged_lse.values();
  for (size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      EXPECT_EQ(got_lse[i], want_lse[i]) << "lse " << i;
    } else {
      EXPECT_NEAR(got_lse[i], want_lse[i], 1e-5) << "lse " << i;
    }
  }
  EXPECT_TRUE(merged.guards_intact() && merged_lse.guards_intact());
  return empty_rows;
}

TEST(ContextParallelReference, DecodeThreeShardsGqa8To2) {
  CpCase c{.name = "decode 8/2", .q_lens = {1, 1}, .k_lens = {37, 21}, .causal = true,
           .cuts = {{0, 10, 20, 37}, {0, 7, 14, 21}}};
  check_sharded_equals_whole(c);
}

TEST(ContextParallelReference, DecodeFourNewTokensGqa12To4UnevenShards) {
  CpCase c{.name = "decode 12/4 Sq=4", .hq = 12, .hkv = 4, .q_lens = {4, 4}, .k_lens = {50, 9}, .causal = true,
           .cuts = {{0, 1, 30, 50}, {0, 9, 9, 9}}};  // sequence 1: two empty shards
  check_sharded_equals_whole(c);
}

TEST(ContextParallelReference, PrefillCausalSqLessThanSkHasRowsWithNoKeyInAShard) {
  // Query i of sequence 0 sits at 40 - 12 + i; the first shard [0, 5) ... the last [30, 40):
  // queries at positions < 30 see nothing of the last shard.
  CpCase c{.name = "prefill causal", .q_lens = {12, 12}, .k_lens = {40, 25}, .causal = true,
           .cuts = {{0, 5, 30, 40}, {0, 12, 13, 25}}};
  EXPECT_GT(check_sharded_equals_whole(c), 0);
}

TEST(ContextParallelReference, PrefillSlidingWindowVarlenQ) {
  CpCase c{.name = "prefill window varlen", .hq = 12, .hkv = 4, .q_lens = {9, 3, 14}, .k_lens = {31, 3, 50},
           .varlen_q = true, .causal = true, .window_left = 6,
           .cuts = {{0, 11, 22, 31}, {0, 1, 2, 3}, {0, 17, 34, 50}}};
  EXPECT_GT(check_sharded_equals_whole(c), 0);
}

TEST(ContextParallelReference, NonCausalTwoSidedWindowFiveShards) {
  CpCase c{.name = "window both sides", .q_lens = {6, 6}, .k_lens = {33, 20}, .window_left = 4, .window_right = 3,
           .cuts = {{0, 7, 14, 21, 28, 33}, {0, 4, 8, 12, 16, 20}}};
  EXPECT_GT(check_sharded_equals_whole(c), 0);
}

TEST(ContextParallelReference, OneShardIsTheWholeProblem) {
  CpCase c{.name = "one shard", .q_lens = {5, 5}, .k_lens = {19, 8}, .causal = true, .cuts = {{0, 19}, {0, 8}}};
  EXPECT_EQ(check_sharded_equals_whole(c), 0);
}

TEST(AttentionMerge, AllEmptyPartialsGiveZeroAndMinusInf) {
  HostTensor o(DType::kF32, {2, 3, 2, 32}), lse(DType::kF32, {2, 2, 3});
  o.fill(0.0);
  lse.fill(-kInf);
  HostTensor out(DType::kF32, {3, 2, 32}), out_lse(DType::kF32, {2, 3});
  out.poison();
  out_lse.poison();
  MergeParams m{o.view(), lse.view(), out.view(), out_lse.view()};
  ASSERT_TRUE(attention_merge(m).ok());
  for (double x : out.values()) EXPECT_EQ(x, 0.0);
  for (double x : out_lse.values()) EXPECT_EQ(x, -kInf);
}

// --- validation: named errors, nothing written ---

struct Bad {
  Whole w = make_whole(CpCase{.name = "v", .q_lens = {2, 2}, .k_lens = {10, 6}, .causal = true,
                              .cuts = {{0, 5, 10}, {0, 3, 6}}},
                       3);
  Shard sh = make_shard(w, 1);
  Bad() {
    sh.out.poison();
    sh.lse.poison();
  }
  void expect_error(const AttentionParams& p, const std::string& needle) {
    const Status s = attention(p, reference());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    for (double x : sh.out.values()) ASSERT_TRUE(std::isnan(x)) << "out was written";
    for (double x : sh.lse.values()) ASSERT_TRUE(std::isnan(x)) << "lse was written";
  }
};

TEST(ContextParallelValidation, OffsetWithoutTotalIsRejected) {
  Bad b;
  AttentionParams p = shard_params(b.w, b.sh);
  p.kv_total_len = {};
  b.expect_error(p, "kv_total_len");
  p = shard_params(b.w, b.sh);
  p.kv_shard_offset = {};
  b.expect_error(p, "kv_shard_offset");
}

TEST(ContextParallelValidation, WrongShapeOrDtypeIsRejected) {
  Bad b;
  HostTensor three = int_tensor({0, 0, 0});
  AttentionParams p = shard_params(b.w, b.sh);
  p.kv_shard_offset = three.view();
  b.expect_error(p, "kv_shard_offset");
  HostTensor f(DType::kF32, {2});
  f.fill(0.0);
  p = shard_params(b.w, b.sh);
  p.kv_total_len = f.view();
  b.expect_error(p, "kv_total_len");
}

TEST(ContextParallelValidation, OffsetsOutOfRangeAreRejected) {
  Bad b;
  HostTensor negative = int_tensor({-1, 0});
  AttentionParams p = shard_params(b.w, b.sh);
  p.kv_shard_offset = negative.view();
  b.expect_error(p, "kv_shard_offset[0] = -1");
  HostTensor short_total = int_tensor({10, 5});  // shard 1 of sequence 1 is keys [3, 6) > 5
  p = shard_params(b.w, b.sh);
  p.kv_total_len = short_total.view();
  b.expect_error(p, "kv_total_len[1] = 5");
  HostTensor huge = int_tensor({10, 6});
  huge.set({0}, 2147483647.0);
  p = shard_params(b.w, b.sh);
  p.kv_total_len = huge.view();
  EXPECT_TRUE(attention(p, reference()).ok()) << "INT32_MAX total is accepted";
}

TEST(AttentionMergeValidation, NamedErrors) {
  HostTensor o(DType::kF32, {2, 3, 2, 32}), lse(DType::kF32, {2, 2, 3}), lse_r3(DType::kF32, {3, 2, 3});
  HostTensor o16(DType::kF16, {2, 3, 2, 32});
  HostTensor out(DType::kF32, {3, 2, 32}), out_lse(DType::kF32, {2, 3}), out_bad(DType::kF32, {4, 2, 32});
  o.fill(0.0);
  lse.fill(0.0);
  out.poison();
  auto expect = [&](const MergeParams& m, const std::string& needle) {
    const Status s = attention_merge(m);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "out was written";
  };
  expect(MergeParams{o.view(), lse_r3.view(), out.view(), {}}, "lse_partials");
  expect(MergeParams{o16.view(), lse.view(), out.view(), {}}, "o_partials: dtype f16");
  expect(MergeParams{o.view(), lse.view(), out_bad.view(), {}}, "out");
  expect(MergeParams{o.view(), {}, out.view(), {}}, "lse_partials");
  expect(MergeParams{o.view(), lse.view(), o.view(), {}}, "out");
}

}  // namespace
}  // namespace groupattn::test
