// Which path of the KDA cuda engine serves which problem (kda_cuda_path.h, the one place the
// choice is made): recurrent while the sequences average at most 16 tokens, chunked beyond. Pure
// host function: runs without a GPU. The GPU tier checks the same boundary end to end against the
// fp64 recurrence (KdaCuda.AutoPathAtThreshold).
#include <gtest/gtest.h>

#include <cstdint>

#include "kda/engines/cuda/kda_cuda_path.h"

namespace groupattn::test {
namespace {

using kda_cuda::kRecurrentMaxAvgTokens;
using kda_cuda::use_recurrent_path;

static_assert(kRecurrentMaxAvgTokens == 16, "docs/HOST_COST.md's model and the GPU boundary cases assume 16");

TEST(KdaCudaPath, DenseBoundaryAtSixteenTokensPerSequence) {
  for (int64_t b : {1, 2, 7, 1000}) {  // dense: the batch size does not move the boundary
    EXPECT_TRUE(use_recurrent_path(1, b, false)) << b;
    EXPECT_TRUE(use_recurrent_path(15, b, false)) << b;
    EXPECT_TRUE(use_recurrent_path(16, b, false)) << b;
    EXPECT_FALSE(use_recurrent_path(17, b, false)) << b;
    EXPECT_FALSE(use_recurrent_path(64, b, false)) << b;  // issue 11's chunk_kda T = 64
  }
  EXPECT_TRUE(use_recurrent_path(0, 0, false));  // nothing to run: no workspace either
}

TEST(KdaCudaPath, VarlenBoundaryOnTheAverage) {
  // N sequences sharing T tokens: recurrent while T <= 16 N, in integers.
  EXPECT_TRUE(use_recurrent_path(32, 2, true));   // {10, 22}: average 16
  EXPECT_FALSE(use_recurrent_path(33, 2, true));  // {10, 23}: average 16.5
  EXPECT_TRUE(use_recurrent_path(48, 3, true));   // average 16
  EXPECT_FALSE(use_recurrent_path(49, 3, true));  // average 16.33
  EXPECT_TRUE(use_recurrent_path(16, 1, true));
  EXPECT_FALSE(use_recurrent_path(17, 1, true));
  EXPECT_TRUE(use_recurrent_path(100, 7, true));  // one long sequence among short ones: the average rules
  EXPECT_FALSE(use_recurrent_path(113, 7, true));
  EXPECT_TRUE(use_recurrent_path(0, 3, true));   // all sequences empty
  EXPECT_FALSE(use_recurrent_path(1, 0, true));  // no sequences but tokens: validation rejects it first
  // Large counts: no overflow of 16 N for any N the engine accepts (grid limits bound N * V / 16).
  EXPECT_TRUE(use_recurrent_path(int64_t{16} << 31, int64_t{1} << 31, true));
  EXPECT_FALSE(use_recurrent_path((int64_t{16} << 31) + 1, int64_t{1} << 31, true));
}

}  // namespace
}  // namespace groupattn::test
