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

TEST(CudaSplitPlanner, DegenerateInputsGiveOne) {
  EXPECT_EQ(auto_num_splits(SplitProblem{0, 1, 1, 1, 1000}), 1);
  EXPECT_EQ(auto_num_splits(SplitProblem{kH200Sms, 0, 1, 1, 1000}), 1);
}

}  // namespace
}  // namespace groupattn::cuda_engine
