// Which kernel form of the sm90 decode engine serves which problem (decode_traits.h
// packed_rows_form and packed_rows_below_cut, where the choice is made): the packed-rows multi-token
// form for a 16-bit cache with group x new tokens >= 17 (head dim 64), 32 (128) or 33 (256), or an
// f8e4m3 cache at head dim 128 with >= 33, and at head dims 64 / 256 from 16 rows where the call
// reads >= 64 MiB of K/V; swap-AB for everything else. Pure host functions: run without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/engines/cuda/split_planner.h"
#include "attention/engines/sm90/decode_split_plan.h"
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
  EXPECT_TRUE(packed_rows_form(128, true, 8, 5));     // f8e4m3 from 33 rows (section 17's outcome)
  EXPECT_TRUE(packed_rows_form(128, true, 8, 7));
  EXPECT_TRUE(packed_rows_form(128, true, 8, 16));
  EXPECT_TRUE(packed_rows_form(128, true, 5, 13));
}

TEST(Sm90DecodeForm, SwapAbBelowTheThresholdsAndElsewhere) {
  EXPECT_FALSE(packed_rows_form(128, false, 8, 1));   // 64/8, one token: 8 columns
  EXPECT_FALSE(packed_rows_form(128, false, 8, 3));   // 24 columns
  EXPECT_FALSE(packed_rows_form(128, false, 4, 7));   // 32/8 x 7: 28 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 4));    // f8e4m3 at 32 rows: swap-AB (one column block)
  EXPECT_FALSE(packed_rows_form(128, false, 1, 16));  // MHA: 16 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 1));    // f8e4m3 K/V up to 32 rows: swap-AB's register
  EXPECT_FALSE(packed_rows_form(128, true, 4, 8));    // conversion
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
  EXPECT_EQ(sm90_engine::packed_decode_min_rows(128, true), 33);
}

// Below the cut at head dims 64 and 256 (DECODE_SM90.md section 31): the packed form from 16 rows
// where the call reads 64 MiB of K/V or more; sm90_engine.cu plan_call also keeps swap-AB where
// its work list would run (GPU tests: Sm90Decode.PackedBelowCutIsTakenBitwise, the list tests).
TEST(Sm90DecodeForm, PackedBelowTheCutAtHeadDims64And256) {
  using sm90_engine::packed_rows_below_cut;
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_TRUE(packed_rows_below_cut(64, false, 16, 64 * kMiB));       // 16/1 d64 B8 x 32K, one token
  EXPECT_TRUE(packed_rows_below_cut(64, false, 16, 256 * kMiB));      // B128 x 8K
  EXPECT_TRUE(packed_rows_below_cut(256, false, 16, 64 * kMiB));      // 32/2 d256 B8 x 4K
  EXPECT_TRUE(packed_rows_below_cut(256, false, 32, 64 * kMiB));      // 32/2 x 2 tokens
  EXPECT_FALSE(packed_rows_below_cut(64, false, 16, 64 * kMiB - 1));  // 16/1 d64 B16 x 4K lost 16 %
  EXPECT_FALSE(packed_rows_below_cut(256, false, 16, 16 * kMiB));     // 32/2 d256 B1 x 8K lost 17 %
  EXPECT_FALSE(packed_rows_below_cut(64, false, 17, 256 * kMiB));  // at the cut: packed_rows_form's already
  EXPECT_FALSE(packed_rows_below_cut(256, false, 33, 256 * kMiB));
  EXPECT_FALSE(packed_rows_below_cut(64, false, 8, 256 * kMiB));    // 8 rows
  EXPECT_FALSE(packed_rows_below_cut(128, false, 16, 256 * kMiB));  // D 128 keeps its cut of 32
  EXPECT_FALSE(packed_rows_below_cut(128, true, 16, 256 * kMiB));   // fp8
}

// The split reduction (decode_traits.h cluster_reduction, docs/DECODE_SM90.md section 14) and the
// automatic split count (decode_split_plan.h auto_decode_splits, section 15: the wave-filling count
// of sections 8-14 unless the cost model -- stream time against the combine kernel's serial cost
// per 8 splits -- says another saves >= 1.5 us) on the H200's 132 SMs.
using sm90_engine::cluster_reduction;
using sm90_engine::max_cluster_splits;

constexpr int kH200Sms = 132;

struct Shape {
  int batch, kv_heads, m_blocks, keys;
  int64_t head_dim;
  bool fp8;
  int col_tile = 8;  // packed query columns per CTA: group x new tokens, rounded up to 8 / 16 / 32
};

int64_t key_tiles(const Shape& s) { return (s.keys + sm90_engine::kBlockKV - 1) / sm90_engine::kBlockKV; }

sm90_engine::DecodeSplitShape plan_shape(const Shape& s) {
  sm90_engine::DecodeSplitShape d;
  d.sm_count = kH200Sms;
  d.batch = s.batch;
  d.kv_heads = s.kv_heads;
  d.m_blocks = s.m_blocks;
  d.n_blocks = key_tiles(s);
  d.head_dim = static_cast<int>(s.head_dim);
  d.col_tile = s.col_tile;
  d.fp8 = s.fp8;
  return d;
}

int auto_splits(const Shape& s) { return sm90_engine::auto_decode_splits(plan_shape(s)); }

bool auto_cluster(const Shape& s) { return sm90_engine::auto_split_cluster(plan_shape(s), auto_splits(s)); }

// The rule before section 15 (sections 8-14): balanced_num_splits over a wave of
// decode_tile().split_wave CTAs per SM, >= 8 tiles per split.
int wave_splits(const Shape& s) {
  cuda_engine::SplitProblem sp;
  sp.sm_count = kH200Sms * sm90_engine::decode_tile(static_cast<int>(s.head_dim), s.fp8).split_wave;
  sp.batch = s.batch;
  sp.kv_heads = s.kv_heads;
  sp.m_blocks = s.m_blocks;
  sp.n_blocks = static_cast<int>(key_tiles(s));
  return cuda_engine::balanced_num_splits(sp, 8);
}

TEST(Sm90DecodeSplitReduction, AutomaticSmallProblemsUseClusters) {
  // 8/1 B1 x 8K one token: 128 tiles -> 16 splits of 8, 16 CTAs. More, shorter splits would leave
  // the cluster (at most 16) for the workspace mode: 32 of 4 tiles cost 1.9 us less streaming but
  // 1.4 + 4 x 0.82 us of combine against the cluster's 1.3.
  EXPECT_EQ(auto_splits({1, 1, 1, 8192, 128, false}), 16);
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 128, false}));
  // 16/1 d64 B1 x 8K (16 columns): 16 splits, 16 CTAs.
  EXPECT_EQ(auto_splits({1, 1, 1, 8192, 64, false, 16}), 16);
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 64, false, 16}));
  // 64/8 B1 x 8K: 8 KV heads x 16 splits = 128 CTAs, one wave.
  EXPECT_EQ(auto_splits({1, 8, 1, 8192, 128, false}), 16);
  EXPECT_TRUE(auto_cluster({1, 8, 1, 8192, 128, false}));
  // fp8 K/V, 8/1 B1 x 8K: 16 splits.
  EXPECT_TRUE(auto_cluster({1, 1, 1, 8192, 128, true}));
  // Short caches: 8/1 B1 x 2K (32 tiles) was 4 splits of 8 in a cluster; the cluster's cost does
  // not grow with its size, so 8 splits of 4 tiles (the shortest the sweeps measured as fast per
  // tile) stream half as long: ~1.9 us less by the model.
  EXPECT_EQ(auto_splits({1, 1, 1, 2048, 128, false}), 8);
  EXPECT_TRUE(auto_cluster({1, 1, 1, 2048, 128, false}));
}

TEST(Sm90DecodeSplitReduction, WorkspaceWhereTheSplitsDoNotFitOrNoSplit) {
  // 8/1 B2 x 32K: 512 tiles. The wave-filling rule takes 64 splits (128 CTAs of 8 tiles: 20.6 us in
  // the a552d4d sweep, with one warp per row walking 8 combine batches; 32 splits measured 18.6).
  // Above 16 splits the combine is now one CTA per row (3 batches at 64 splits), so the model keeps
  // the 64: its stream is shorter and the combine no longer grows with the count.
  EXPECT_EQ(wave_splits({2, 1, 1, 32768, 128, false}), 64);
  EXPECT_EQ(auto_splits({2, 1, 1, 32768, 128, false}), 64);
  EXPECT_FALSE(auto_cluster({2, 1, 1, 32768, 128, false}));
  // 64/8 B32 x 32K: one split per (sequence, KV head).
  EXPECT_EQ(auto_splits({32, 8, 1, 32768, 128, false}), 1);
  EXPECT_FALSE(auto_cluster({32, 8, 1, 32768, 128, false}));
  // 32/2 d256 B1 x 128K (16 columns): 64 splits, 128 CTAs of 32 tiles; the per-CTA chain (32 x 1.3
  // us) is below the stream, so fewer splits would slow it more than the combine saves.
  EXPECT_EQ(auto_splits({1, 2, 1, 131072, 256, false, 16}), 64);
  EXPECT_FALSE(auto_cluster({1, 2, 1, 131072, 256, false, 16}));
  // 64/8 B1 x 128K: 16 splits of 128 tiles in one wave, but long splits (measured: clusters 148.4 us
  // against the workspace mode's 123.8 at b47c4d8).
  EXPECT_EQ(auto_splits({1, 8, 1, 131072, 128, false}), 16);
  EXPECT_FALSE(auto_cluster({1, 8, 1, 131072, 128, false}));
  EXPECT_FALSE(cluster_reduction(16, 128, 9, kH200Sms, 128, false, false));
  EXPECT_TRUE(cluster_reduction(16, 128, 128, kH200Sms, 128, false, true));  // forced: any length
  // A short cache: 4 tiles, one split.
  EXPECT_EQ(auto_splits({1, 1, 1, 256, 128, false}), 1);
  EXPECT_FALSE(auto_cluster({1, 1, 1, 256, 128, false}));
  // D 256, 32/2 B1 x 4K (64 tiles): was 8 splits of 8 in a cluster of 8 (16 CTAs). Its chain is
  // 1.3 us a tile, so 16 splits of 4 tiles (32 CTAs, workspace: the largest cluster is 8) stream
  // 5.2 us less for 3.0 us of combine instead of the cluster's 1.3.
  EXPECT_EQ(wave_splits({1, 2, 1, 4096, 256, false, 16}), 8);
  EXPECT_EQ(auto_splits({1, 2, 1, 4096, 256, false, 16}), 16);
  EXPECT_FALSE(auto_cluster({1, 2, 1, 4096, 256, false, 16}));
  // D 256 cannot take 16 (one CTA per SM): the largest cluster is 8.
  EXPECT_EQ(max_cluster_splits(256, false), 8);
  EXPECT_EQ(max_cluster_splits(128, false), 16);
  EXPECT_EQ(max_cluster_splits(64, false), 16);
  EXPECT_EQ(max_cluster_splits(128, true), 16);
  EXPECT_FALSE(cluster_reduction(16, 32, 8, kH200Sms, 256, false, false));
  // Past one wave, an automatic count that fits a cluster stays in the workspace mode.
  EXPECT_FALSE(cluster_reduction(4, 4 * 40, 8, kH200Sms, 128, false, false));
}

// The rows of issue 9's small-KV-head table (docs/DECODE_SM90.md section 15; one token unless
// named). Few KV heads and one sequence: the wave-filling rule already gave 128 of the 132 SMs a
// split at 128K, and the combine's 16 batches per row (~13 us) were the loss.
TEST(Sm90DecodeSplitPlan, IssueRowsSmallKvHeads) {
  // 8/1 d128 B1 x 128K: 128 splits of 16 tiles. With one warp per row the combine's 16 batches
  // made 64 splits cheaper; with one CTA per row (combine_wide_kernel: 2 + 2 batches) the
  // wave-filling 128 is the cheapest again.
  EXPECT_EQ(wave_splits({1, 1, 1, 131072, 128, false}), 128);
  EXPECT_EQ(auto_splits({1, 1, 1, 131072, 128, false}), 128);
  // 16/1 d64 B1 x 128K (16 columns): likewise 128.
  EXPECT_EQ(wave_splits({1, 1, 1, 131072, 64, false, 16}), 128);
  EXPECT_EQ(auto_splits({1, 1, 1, 131072, 64, false, 16}), 128);
  // 32/2 d256 B1 x 8K (16 columns): 16 splits of 8 tiles on 32 SMs -> 32 of 4 on 64 SMs: the d256
  // chain (1.3 us a tile) is what the few SMs waited on.
  EXPECT_EQ(wave_splits({1, 2, 1, 8192, 256, false, 16}), 16);
  EXPECT_EQ(auto_splits({1, 2, 1, 8192, 256, false, 16}), 32);
  // ... and with 2 new tokens (32 columns, 2.6 us a tile): also 32.
  EXPECT_EQ(auto_splits({1, 2, 1, 8192, 256, false, 32}), 32);
  // Unchanged: 8/1 d128 B32 x 4K (4 splits, 128 CTAs of 16 tiles, one combine batch); 16/1 d64
  // B32 x 4K (8 splits, 256 CTAs two per SM: the model has no term for a shared SM, so the
  // wave of two stays); 8/1 d128 B1 x 128K with 2 tokens (16 columns, 0.75 us a tile: 103 splits
  // save ~1 us by the model, under the 1.5 us bar); 16/1 d64 B1 x 128K with 2 tokens (32 columns:
  // the chain, 0.96 us a tile, is the limit) and 4 tokens (two column blocks, 256 CTAs).
  EXPECT_EQ(auto_splits({32, 1, 1, 4096, 128, false}), 4);
  EXPECT_EQ(auto_splits({32, 1, 1, 4096, 64, false, 16}), 8);
  EXPECT_EQ(auto_splits({1, 1, 1, 131072, 128, false, 16}), 128);
  EXPECT_EQ(auto_splits({1, 1, 1, 131072, 64, false, 32}), 128);
  EXPECT_EQ(auto_splits({1, 1, 2, 131072, 64, false, 32}), 128);
  // 32/2 d256 B1 x 128K, 4 tokens: two column blocks x 2 KV heads x 33 splits = 132 CTAs of 63
  // tiles at 2.6 us: chain-bound on every SM already.
  EXPECT_EQ(auto_splits({1, 2, 2, 131072, 256, false, 32}), 33);
}

// Large shapes keep the wave-filling count (issue 9 asks them unchanged or better).
TEST(Sm90DecodeSplitPlan, LargeShapesKeepTheWaveFillingCount) {
  const std::vector<Shape> shapes = {
      {1, 8, 1, 131072, 128, false},     {32, 8, 1, 32768, 128, false},     {128, 8, 1, 8192, 128, false},
      {32, 8, 1, 4096, 128, false},      {1, 8, 1, 131072, 128, false, 8},  {32, 1, 1, 32768, 128, false},
      {128, 1, 1, 8192, 128, false},     {32, 1, 1, 32768, 64, false, 16},  {128, 1, 1, 8192, 64, false, 16},
      {32, 2, 1, 32768, 256, false, 16}, {128, 2, 1, 8192, 256, false, 16}, {32, 2, 1, 4096, 256, false, 16},
      {1, 8, 1, 131072, 128, true},      {32, 8, 1, 32768, 128, true},      {2, 8, 1, 131072, 128, false},
      {2, 8, 1, 32768, 128, false},      {4, 8, 1, 8192, 128, false},       {8, 8, 1, 4096, 128, false},
  };
  for (const Shape& s : shapes) {
    EXPECT_EQ(auto_splits(s), wave_splits(s)) << s.batch << " x " << s.kv_heads << " KV heads, " << s.keys
                                              << " keys, D " << s.head_dim;
  }
  EXPECT_EQ(auto_splits({1, 8, 1, 131072, 128, false}), 16);
  EXPECT_EQ(auto_splits({32, 8, 1, 32768, 128, false}), 1);
  EXPECT_EQ(auto_splits({32, 1, 1, 32768, 64, false, 16}), 8);
  EXPECT_EQ(auto_splits({32, 2, 1, 32768, 256, false, 16}), 2);
}

// Paged K/V (DecodeSplitShape::paged: pages that are not a multiple of the 64-key tile, and with
// the default switch every page size) fill a wave of two CTAs per SM where two fit
// (decode_split_plan.h split_wave_of, docs/DECODE_SM90.md sections 18 and 29): twice the bytes in flight per
// SM for the shapes that ran one CTA per SM. D 256 (one CTA per SM), D 64 and fp8 (already a wave of two),
// small problems (the costed / cluster plan) and one-split grids keep their count.
TEST(Sm90DecodeSplitPlan, SmallPagesFillAWaveOfTwo) {
  auto small = [](const Shape& s) {
    sm90_engine::DecodeSplitShape d = plan_shape(s);
    d.paged = true;
    return d;
  };
  // 64/8 B1 x 128K: 16 splits of 128 tiles (128 CTAs) -> 33 of 63 (264 CTAs, two per SM).
  EXPECT_EQ(sm90_engine::auto_decode_splits(small({1, 8, 1, 131072, 128, false})), 33);
  // 8/1 B32 x 32K: 4 -> 8 splits (256 CTAs); 8/1 B128 x 8K: 1 -> 2.
  EXPECT_EQ(sm90_engine::auto_decode_splits(small({32, 1, 1, 32768, 128, false})), 8);
  EXPECT_EQ(sm90_engine::auto_decode_splits(small({128, 1, 1, 8192, 128, false})), 2);
  for (const Shape& s : std::vector<Shape>{{1, 2, 1, 131072, 256, false, 16},
                                           {32, 2, 1, 4096, 256, false, 16},
                                           {32, 1, 1, 32768, 64, false, 16},
                                           {128, 1, 1, 8192, 64, false, 16},
                                           {1, 8, 1, 131072, 128, true},
                                           {32, 8, 1, 32768, 128, false},
                                           {1, 1, 1, 8192, 128, false},
                                           {1, 8, 1, 8192, 128, false}}) {
    const sm90_engine::DecodeSplitShape d = small(s);
    EXPECT_EQ(sm90_engine::auto_decode_splits(d), auto_splits(s))
        << s.batch << " x " << s.kv_heads << " KV heads, " << s.keys << " keys, D " << s.head_dim;
    EXPECT_EQ(sm90_engine::auto_split_cluster(d, auto_splits(s)), auto_cluster(s));
  }
  // The wave of two never exceeds what two CTAs per SM hold.
  for (int keys : {4096, 8192, 32768, 131072}) {
    for (int batch : {1, 2, 4, 32}) {
      const sm90_engine::DecodeSplitShape d = small({batch, 8, 1, keys, 128, false});
      const int splits = sm90_engine::auto_decode_splits(d);
      EXPECT_TRUE(sm90_engine::split_ctas(d, splits) <= 2 * kH200Sms || splits == 1) << batch << " x " << keys;
    }
  }
}

// The planner looks at few candidates (host cost per call); every count it could take gives no
// cheaper plan: where the cheapest count of all (<= one CTA per SM, >= 4 tiles, <= kMaxSplits)
// saves >= kMinPlanGainUs against the wave-filling count, the planner's choice costs the same, and
// otherwise it keeps the wave-filling count.
TEST(Sm90DecodeSplitPlan, CandidatesFindTheCheapestCount) {
  for (int64_t d : {64, 128, 256}) {
    for (int col_tile : {8, 16, 32}) {
      for (int kv_heads : {1, 2, 4, 8}) {
        for (int batch : {1, 2, 3, 8}) {
          for (int keys : {64, 300, 2048, 4096, 8192, 20000, 65536, 131072, 262144}) {
            const Shape s{batch, kv_heads, 1, keys, d, false, col_tile};
            const sm90_engine::DecodeSplitShape p = plan_shape(s);
            const int wave = wave_splits(s);
            const int chosen = auto_splits(s);
            if (static_cast<int64_t>(batch) * kv_heads * wave > kH200Sms) {
              EXPECT_EQ(chosen, wave);
              continue;
            }
            const int64_t hi = std::max<int64_t>(
                1, std::min<int64_t>({cuda_engine::kMaxSplits, key_tiles(s) / 4, kH200Sms / (batch * kv_heads)}));
            double best = sm90_engine::split_cost_us(p, wave);
            for (int splits = 1; splits <= hi; ++splits) best = std::min(best, sm90_engine::split_cost_us(p, splits));
            const double wave_cost = sm90_engine::split_cost_us(p, wave);
            if (wave_cost - best >= sm90_engine::kMinPlanGainUs) {
              EXPECT_NEAR(sm90_engine::split_cost_us(p, chosen), best, 1e-9) << keys << " keys, " << kv_heads;
            } else {
              EXPECT_EQ(chosen, wave) << keys << " keys, " << kv_heads << " KV heads, batch " << batch;
            }
            EXPECT_GE(chosen, 1);
            EXPECT_LE(chosen, cuda_engine::kMaxSplits);
            EXPECT_LE(static_cast<int64_t>(batch) * kv_heads * chosen, kH200Sms);
          }
        }
      }
    }
  }
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
