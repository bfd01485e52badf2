// Which kernel form of the sm90 decode engine serves which problem (decode_traits.h
// packed_rows_form, the one place the choice is made): the packed-rows multi-token form for a
// 16-bit cache with group x new tokens >= 17 (head dim 64), 32 (128) or 33 (256), or an f8e4m3
// cache at head dim 128 with >= 64, swap-AB for everything else. Pure host function: runs without
// a GPU.
#include <gtest/gtest.h>

#include "attention/engines/cuda/split_planner.h"
#include "attention/engines/sm90/decode_traits.h"

namespace groupattn::test {
namespace {

using sm90_engine::packed_rows_form;

TEST(Sm90DecodeForm, PackedRowsFromThirtyTwoRows16BitSixtyFourFp8) {
  // (head ratio, new tokens) -> group x tokens rows per KV head.
  EXPECT_TRUE(packed_rows_form(128, false, 8, 8));    // 64/8, 8/1, 16/2 x 8 tokens: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 8, 16));   // x 16 tokens: 128 rows
  EXPECT_TRUE(packed_rows_form(128, false, 16, 4));   // 32/2 x 4: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 16, 16));  // 32/2 x 16: 256 rows, two row blocks
  EXPECT_TRUE(packed_rows_form(128, false, 5, 13));   // 40/8 x 13: 65 rows (a non-power-of-two group)
  EXPECT_TRUE(packed_rows_form(128, false, 64, 1));   // 64/1, one token: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 8, 4));    // 64/8 x 4 tokens: 32 rows (16-bit threshold)
  EXPECT_TRUE(packed_rows_form(128, false, 8, 7));    // 56 rows
  EXPECT_TRUE(packed_rows_form(128, false, 5, 12));   // 40/8 x 12: 60 rows
  // f8e4m3 K/V from 64 rows (tiles widened in shared memory, DECODE_SM90.md section 13).
  EXPECT_TRUE(packed_rows_form(128, true, 8, 8));
  EXPECT_TRUE(packed_rows_form(128, true, 8, 16));
  EXPECT_TRUE(packed_rows_form(128, true, 5, 13));
}

TEST(Sm90DecodeForm, SwapAbBelowTheThresholdsAndElsewhere) {
  EXPECT_FALSE(packed_rows_form(128, false, 8, 1));   // 64/8, one token: 8 columns
  EXPECT_FALSE(packed_rows_form(128, false, 8, 3));   // 24 columns
  EXPECT_FALSE(packed_rows_form(128, false, 4, 7));   // 32/8 x 7: 28 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 4));    // f8e4m3 at 32 and 56 rows: swap-AB
  EXPECT_FALSE(packed_rows_form(128, false, 1, 16));  // MHA: 16 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 1));    // f8e4m3 K/V below 64 rows: swap-AB's register
  EXPECT_FALSE(packed_rows_form(128, true, 8, 7));    // conversion
  EXPECT_FALSE(packed_rows_form(64, true, 8, 16));    // f8e4m3 at head dims 64 and 256: not served
  EXPECT_FALSE(packed_rows_form(256, true, 8, 16));   // (the engine declines them)
  EXPECT_FALSE(packed_rows_form(32, false, 8, 16));   // not a decode head dim
}

// Head dims 64 and 256 (DECODE_SM90.md section 15): packed from 17 rows at D 64 (swap-AB's
// 32-column tile is the dear one there), from 33 at D 256 (swap-AB's second column block).
TEST(Sm90DecodeForm, HeadDims64And256Thresholds) {
  EXPECT_FALSE(packed_rows_form(64, false, 16, 1));   // 16/1 one token: 16 rows, swap-AB
  EXPECT_FALSE(packed_rows_form(64, false, 8, 2));    // 16 rows
  EXPECT_TRUE(packed_rows_form(64, false, 17, 1));    // 17/1 one token: 17 rows
  EXPECT_TRUE(packed_rows_form(64, false, 16, 2));    // 16/1 x 2: 32 rows
  EXPECT_TRUE(packed_rows_form(64, false, 8, 3));     // 8/1 x 3: 24 rows
  EXPECT_TRUE(packed_rows_form(64, false, 16, 16));   // 256 rows, two row blocks
  EXPECT_FALSE(packed_rows_form(256, false, 16, 2));  // 32/2 x 2: 32 columns, one swap-AB block
  EXPECT_FALSE(packed_rows_form(256, false, 8, 4));   // 32 rows
  EXPECT_TRUE(packed_rows_form(256, false, 16, 3));   // 48 rows
  EXPECT_TRUE(packed_rows_form(256, false, 3, 11));   // 33 rows, a non-power-of-two group
  EXPECT_TRUE(packed_rows_form(256, false, 16, 16));  // 256 rows
  EXPECT_EQ(sm90_engine::packed_decode_min_rows(64, false), 17);
  EXPECT_EQ(sm90_engine::packed_decode_min_rows(128, false), 32);
  EXPECT_EQ(sm90_engine::packed_decode_min_rows(256, false), 33);
  EXPECT_EQ(sm90_engine::packed_decode_min_rows(128, true), 64);
}

// The split reduction (decode_traits.h cluster_reduction, docs/DECODE_SM90.md section 14), fed with
// the engine's automatic split count (sm90_engine.cu num_splits_for: balanced_num_splits over a wave
// of decode_tile().split_wave CTAs per SM, >= 8 tiles per split) on the H200's 132 SMs.
using sm90_engine::cluster_reduction;
using sm90_engine::max_cluster_splits;

constexpr int kH200Sms = 132;

struct Shape {
  int batch, kv_heads, m_blocks, keys;
  int64_t head_dim;
  bool fp8;
};

int64_t key_tiles(const Shape& s) { return (s.keys + sm90_engine::kBlockKV - 1) / sm90_engine::kBlockKV; }

int auto_splits(const Shape& s) {
  cuda_engine::SplitProblem sp;
  sp.sm_count = kH200Sms * sm90_engine::decode_tile(static_cast<int>(s.head_dim), s.fp8).split_wave;
  sp.batch = s.batch;
  sp.kv_heads = s.kv_heads;
  sp.m_blocks = s.m_blocks;
  sp.n_blocks = static_cast<int>(key_tiles(s));
  return cuda_engine::balanced_num_splits(sp, 8);
}

bool auto_cluster(const Shape& s) {
  const int splits = auto_splits(s);
  const int64_t ctas = static_cast<int64_t>(s.batch) * s.kv_heads * s.m_blocks * splits;
  return cluster_reduction(splits, ctas, (key_tiles(s) + splits - 1) / splits, kH200Sms, s.head_dim, s.fp8,
                           /*forced=*/false);
}

TEST(Sm90DecodeSplitReduction, AutomaticSmallProblemsUseClusters) {
  // 8/1 B1 x 8K one token: 128 tiles -> 16 splits of 8, 16 CTAs.
  EXPECT_EQ(auto_splits({1, 1, 1, 8192, 128, false}), 16);
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 128, false}));
  // 16/1 d64 B1 x 8K: 16 splits (the wave of two per SM is not the limit), 16 CTAs.
  EXPECT_EQ(auto_splits({1, 1, 1, 8192, 64, false}), 16);
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 64, false}));
  // 64/8 B1 x 8K: 8 KV heads x 16 splits = 128 CTAs, one wave.
  EXPECT_EQ(auto_splits({1, 8, 1, 8192, 128, false}), 16);
  EXPECT_TRUE(auto_cluster({1, 8, 1, 8192, 128, false}));
  // fp8 K/V, 8/1 B1 x 8K: 16 splits.
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 128, true}));
  // D 256, 32/2 B1 x 4K: 64 tiles -> 8 splits (a cluster of 8 at one CTA per SM).
  EXPECT_EQ(auto_splits({1, 2, 1, 4096, 256, false}), 8);
  EXPECT_TRUE(auto_cluster({1, 2, 1, 4096, 256, false}));
}

TEST(Sm90DecodeSplitReduction, WorkspaceWhereTheSplitsDoNotFitOrNoSplit) {
  // 8/1 B2 x 32K: 512 tiles -> 64 splits, more than a cluster holds.
  EXPECT_EQ(auto_splits({2, 1, 1, 32768, 128, false}), 64);
  EXPECT_FALSE(auto_cluster({2, 1, 1, 32768, 128, false}));
  // 64/8 B32 x 32K: one split per (sequence, KV head).
  EXPECT_EQ(auto_splits({32, 8, 1, 32768, 128, false}), 1);
  EXPECT_FALSE(auto_cluster({32, 8, 1, 32768, 128, false}));
  // 32/2 d256 B1 x 128K: 64 splits.
  EXPECT_FALSE(auto_cluster({1, 2, 1, 131072, 256, false}));
  // 64/8 B1 x 128K: 16 splits of 128 tiles in one wave, but long splits (measured: clusters 148.4 us
  // against the workspace mode's 123.8 at b47c4d8).
  EXPECT_EQ(auto_splits({1, 8, 1, 131072, 128, false}), 16);
  EXPECT_FALSE(auto_cluster({1, 8, 1, 131072, 128, false}));
  EXPECT_FALSE(cluster_reduction(16, 128, 9, kH200Sms, 128, false, false));
  EXPECT_TRUE(cluster_reduction(16, 128, 128, kH200Sms, 128, false, true));  // forced: any length
  // A short cache: 4 tiles, one split.
  EXPECT_FALSE(auto_cluster({1, 1, 1, 256, 128, false}));
  // D 256 cannot take 16 (one CTA per SM): the largest cluster is 8.
  EXPECT_EQ(max_cluster_splits(256, false), 8);
  EXPECT_EQ(max_cluster_splits(128, false), 16);
  EXPECT_EQ(max_cluster_splits(64, false), 16);
  EXPECT_EQ(max_cluster_splits(128, true), 16);
  EXPECT_FALSE(cluster_reduction(16, 32, 8, kH200Sms, 256, false, false));
  // Past one wave, an automatic count that fits a cluster stays in the workspace mode.
  EXPECT_FALSE(cluster_reduction(4, 4 * 40, 8, kH200Sms, 128, false, false));
}

TEST(Sm90DecodeSplitReduction, ForcedCountsThatFitUseClusters) {
  EXPECT_TRUE(cluster_reduction(2, 2, 8, kH200Sms, 128, false, true));
  EXPECT_TRUE(cluster_reduction(3, 3 * 256, 8, kH200Sms, 128, false, true));  // many waves: forced
  EXPECT_TRUE(cluster_reduction(16, 16, 8, kH200Sms, 64, false, true));
  EXPECT_TRUE(cluster_reduction(8, 8, 8, kH200Sms, 256, false, true));
  EXPECT_FALSE(cluster_reduction(9, 9, 8, kH200Sms, 256, false, true));
  EXPECT_FALSE(cluster_reduction(17, 17, 8, kH200Sms, 128, false, true));
  EXPECT_FALSE(cluster_reduction(1, 1, 8, kH200Sms, 128, false, true));
}

}  // namespace
}  // namespace groupattn::test
