// The cuda engine's split planner (a pure host function): FlashAttention's wave-efficiency rules.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/engines/cuda/split_planner.h"

namespace groupattn::cuda_engine {
namespace {

constexpr int kH200Sms = 132;

SplitProblem decode(int batch, int kv_heads, int n_blocks) {
  return SplitProblem{kH200Sms, batch, kv_heads, 1, n_blocks};
}

TEST(CudaSplitPlanner, NoSplitWhenTilesFillTheMachine) {
  EXPECT_EQ(auto_num_splits(decode(64, 8, 1000)), 1);
  EXPECT_EQ(auto_num_splits(SplitProblem{kH200Sms, 4, 8, 4, 1000}), 1);  // 128 tiles >= 0.8 * 132
}

TEST(CudaSplitPlanner, NoSplitForShortKv) {
  EXPECT_EQ(auto_num_splits(decode(1, 1, 4)), 1);
  EXPECT_EQ(auto_num_splits(decode(1, 1, 0)), 1);
}

TEST(CudaSplitPlanner, SplitsLongKvWithFewTiles) {
  const int s = auto_num_splits(decode(1, 8, 1000));
  EXPECT_GT(s, 1);
  EXPECT_LE(s, kMaxSplits);
  // The chosen count fills most of the last wave: 8 tiles * s over 132 SMs.
  const double waves = 8.0 * s / kH200Sms;
  EXPECT_GE(waves / std::ceil(waves), 0.85 * 0.9);
}

TEST(CudaSplitPlanner, NeverMoreSplitsThanKvTiles) {
  for (int n = 5; n < 40; ++n) EXPECT_LE(auto_num_splits(decode(1, 1, n)), n);
}

TEST(CudaSplitPlanner, OverrideIsHonouredAndClamped) {
  EXPECT_EQ(plan_num_splits(decode(64, 8, 1000), 3), 3);
  EXPECT_EQ(plan_num_splits(decode(1, 1, 2), 7), 7);
  EXPECT_EQ(plan_num_splits(decode(1, 1, 1000), 100000), kMaxSplits);
  EXPECT_EQ(plan_num_splits(decode(1, 1, 1000), 0), auto_num_splits(decode(1, 1, 1000)));
}

// A wave is SMs x resident CTAs: with 3 CTAs per SM the 64 tiles of B8 x 8 KV heads need more
// splits to fill it, and still none once the tiles alone fill 80% of the larger wave.
TEST(CudaSplitPlanner, WaveCountsResidentCtas) {
  SplitProblem one = decode(8, 8, 128);
  SplitProblem three = one;
  three.ctas_per_sm = 3;
  EXPECT_GT(auto_num_splits(three), auto_num_splits(one));
  const double waves = 64.0 * auto_num_splits(three) / (3 * kH200Sms);
  EXPECT_GE(waves / std::ceil(waves), 0.85 * 0.9);
  SplitProblem full = decode(8, 48, 128);  // 384 tiles >= 0.8 * 396
  full.ctas_per_sm = 3;
  EXPECT_EQ(auto_num_splits(full), 1);
}

// The decode kernel's fuller waves (kDecodeWaveSlack) on the one-token B1 shapes of issue 10: every
// SM busy where the tile kernel's slack left some idle; a shape whose best wave is far from full
// (8/1 B1 8K) keeps its count.
TEST(CudaSplitPlanner, DecodeSlackFillsTheWave) {
  auto with = [](SplitProblem p, int ctas_per_sm, double slack) {
    p.ctas_per_sm = ctas_per_sm;
    p.wave_slack = slack;
    return auto_num_splits(p);
  };
  // 32/2 d256 B1 x 128K (one CTA per SM): 56 splits (112 CTAs, 37 tiles) -> 61 (122 CTAs, 34).
  EXPECT_EQ(with(decode(1, 2, 2048), 1, kTileWaveSlack), 56);
  EXPECT_EQ(with(decode(1, 2, 2048), 1, kDecodeWaveSlack), 61);
  // 64/8 d128 B1 x 128K (two CTAs per SM): 29 splits (232 CTAs, 71 tiles) -> 32 (256 CTAs, 64).
  EXPECT_EQ(with(decode(1, 8, 2048), 2, kTileWaveSlack), 29);
  EXPECT_EQ(with(decode(1, 8, 2048), 2, kDecodeWaveSlack), 32);
  // 8/1 d128 B32 x 32K: 7 splits (224 CTAs, 74 tiles) -> 8 (256 CTAs, 64).
  EXPECT_EQ(with(decode(32, 1, 512), 2, kTileWaveSlack), 7);
  EXPECT_EQ(with(decode(32, 1, 512), 2, kDecodeWaveSlack), 8);
  EXPECT_EQ(with(decode(1, 1, 128), 2, kTileWaveSlack), with(decode(1, 1, 128), 2, kDecodeWaveSlack));
}

// The sm90 engine's planner, on the shapes of the H200 split sweep (bench/results/decode-splits-a552d4d.txt):
// the fastest measured count or one within 2 % of it, and 8/1 B2 32K as it stands (10 % off the best).
TEST(CudaSplitPlanner, BalancedPicksTheMeasuredBest) {
  EXPECT_EQ(balanced_num_splits(decode(1, 1, 128), 8), 16);    // 8/1 B1 8K: 11.3 us (auto's 128: 19.9)
  EXPECT_EQ(balanced_num_splits(decode(1, 8, 128), 8), 16);    // 64/8 B1 8K: 15.5 us (32: 17.5)
  EXPECT_EQ(balanced_num_splits(decode(2, 1, 2048), 8), 64);   // 8/1 B2 128K: 43.4 us (128: 50.2)
  EXPECT_EQ(balanced_num_splits(decode(2, 8, 512), 8), 8);     // 64/8 B2 32K: 66.2 us (16: 67.6)
  EXPECT_EQ(balanced_num_splits(decode(2, 8, 2048), 8), 8);    // 64/8 B2 128K: 242.6 us (best 241.1)
  EXPECT_EQ(balanced_num_splits(decode(2, 1, 512), 8), 64);    // 8/1 B2 32K: 20.6 us (32: 18.6; 128: 27.2)
  EXPECT_EQ(balanced_num_splits(decode(1, 1, 4), 8), 1);       // too short to split
  EXPECT_EQ(balanced_num_splits(decode(128, 8, 128), 8), 1);   // the tiles fill the machine
  for (int n = 1; n < 300; n += 7) EXPECT_LE(balanced_num_splits(decode(1, 1, n), 8), std::max(1, n / 8));
}

TEST(CudaSplitPlanner, DegenerateInputsGiveOne) {
  EXPECT_EQ(balanced_num_splits(SplitProblem{0, 1, 1, 1, 1000}, 8), 1);
  EXPECT_EQ(auto_num_splits(SplitProblem{0, 1, 1, 1, 1000}), 1);
  EXPECT_EQ(auto_num_splits(SplitProblem{kH200Sms, 0, 1, 1, 1000}), 1);
}

}  // namespace
}  // namespace groupattn::cuda_engine
