// Which path of the KDA cuda engine serves which problem (kda_cuda_path.h, the one place the
// choice is made): recurrent while the sequences average at most 16 tokens, chunked beyond -- before
// sm_90 in one fused launch while every sequence has at most 32 tokens and the grid fits on the SMs;
// on sm_90+ in one cluster launch while every sequence has at most V / 16 chunks and the clusters fit. Pure
// host function: runs without a GPU. The GPU tier checks the same boundary end to end against the
// fp64 recurrence (KdaCuda.AutoPathAtThreshold).
#include <gtest/gtest.h>

#include <cstdint>

#include "kda/engines/cuda/kda_cuda_path.h"

namespace groupattn::test {
namespace {

using kda_cuda::fused_ctas;
using kda_cuda::fused_path_arch;
using kda_cuda::kFusedMaxTokens;
using kda_cuda::kRecurrentMaxAvgTokens;
using kda_cuda::use_cluster_chunked;
using kda_cuda::use_fused_path;
using kda_cuda::use_recurrent_path;
using kda_cuda::within_fused_tokens;

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

static_assert(kFusedMaxTokens == 32, "docs/HOST_COST.md's measured bound and the GPU boundary cases assume 2 chunks");

constexpr int64_t kH200Sms = 132;

TEST(KdaCudaPath, FusedForSmallChunkedProblems) {
  // H = HV = 4, V = 128, B = 1: 32 CTAs. Issue 11's chunk_kda (T = 64) is past the bound.
  EXPECT_EQ(fused_ctas(1, 4, 128), 32);
  EXPECT_TRUE(use_fused_path(32, 1, false, 4, 128, kH200Sms));
  EXPECT_FALSE(use_fused_path(64, 1, false, 4, 128, kH200Sms));
  // Dense: 17..32 tokens fused, 16 recurrent (not fused), 33 two-kernel.
  EXPECT_FALSE(use_fused_path(16, 1, false, 4, 128, kH200Sms));
  EXPECT_TRUE(use_fused_path(17, 1, false, 4, 128, kH200Sms));
  EXPECT_TRUE(use_fused_path(32, 2, false, 4, 128, kH200Sms));
  EXPECT_FALSE(use_fused_path(33, 1, false, 4, 128, kH200Sms));
  EXPECT_FALSE(use_fused_path(1000, 1, false, 1, 64, kH200Sms));
  // The grid bound: N x HV x V / 16 <= SMs, inclusive.
  EXPECT_EQ(fused_ctas(1, 16, 128), 128);
  EXPECT_TRUE(use_fused_path(32, 1, false, 16, 128, kH200Sms));    // 128 CTAs
  EXPECT_TRUE(use_fused_path(32, 33, false, 1, 64, kH200Sms));     // 33 x 4 = 132 CTAs
  EXPECT_FALSE(use_fused_path(32, 34, false, 1, 64, kH200Sms));    // 136
  EXPECT_FALSE(use_fused_path(32, 3, false, 8, 128, kH200Sms));    // 192
  EXPECT_FALSE(use_fused_path(32, 1, false, 32, 128, kH200Sms));   // 256
  EXPECT_TRUE(use_fused_path(32, 2, false, 8, 128, 128));          // a smaller GPU: 128 of 128
  EXPECT_FALSE(use_fused_path(32, 2, false, 8, 128, 127));
  // Unknown SM count: never.
  EXPECT_FALSE(use_fused_path(32, 1, false, 4, 128, 0));
  EXPECT_FALSE(use_fused_path(32, 1, false, 4, 128, -1));
}

TEST(KdaCudaPath, FusedVarlenBoundedByTotalTokens) {
  // Varlen: the lengths are on the device, the total T bounds each; fused while T <= 32 and the
  // average is above 16 (else recurrent).
  EXPECT_TRUE(use_fused_path(31, 1, true, 4, 128, kH200Sms));    // {31}
  EXPECT_FALSE(use_fused_path(32, 2, true, 4, 128, kH200Sms));   // {10, 22}: recurrent
  EXPECT_TRUE(use_fused_path(32, 1, true, 4, 128, kH200Sms));    // {32}
  EXPECT_FALSE(use_fused_path(33, 2, true, 4, 128, kH200Sms));   // {10, 23}: two-kernel
  EXPECT_FALSE(use_fused_path(48, 3, true, 4, 128, kH200Sms));   // average 16: recurrent
  EXPECT_FALSE(use_fused_path(0, 3, true, 4, 128, kH200Sms));    // all empty: recurrent
  // Large counts: no overflow of N x HV x V / 16 for any N the engine accepts.
  EXPECT_FALSE(use_fused_path(32, int64_t{1} << 31, true, 65535, 128, kH200Sms));
  EXPECT_EQ(fused_ctas(int64_t{1} << 31, 65535, 128), (int64_t{1} << 31) * 65535 * 8);
}

TEST(KdaCudaPath, TokenBoundAloneDecidesPastIt) {
  // The engine's auto_path skips the SM-count query when within_fused_tokens is false: that is exact
  // only if no SM count, sequence count, head count or layout can then make use_fused_path true.
  EXPECT_TRUE(within_fused_tokens(kFusedMaxTokens));
  EXPECT_FALSE(within_fused_tokens(kFusedMaxTokens + 1));
  for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{17}, int64_t{32}, int64_t{33}, int64_t{64},
                    int64_t{65}, int64_t{4096}}) {
    for (int64_t n : {1, 2, 3, 1000}) {
      for (bool varlen : {false, true}) {
        for (int64_t sms : {int64_t{-1}, int64_t{0}, int64_t{132}, int64_t{1} << 40}) {
          if (!within_fused_tokens(t)) {
            EXPECT_FALSE(use_fused_path(t, n, varlen, 1, 64, sms)) << t << " " << n << " " << varlen << " " << sms;
          }
          if (use_fused_path(t, n, varlen, 1, 64, sms)) {
            EXPECT_TRUE(within_fused_tokens(t)) << t;
          }
        }
      }
    }
  }
}

TEST(KdaCudaPath, FusedBeforeSm90Only) {
  // sm_90+ runs small chunked problems on the chunked path (faster on the GPU at every length).
  EXPECT_TRUE(fused_path_arch(80));
  EXPECT_TRUE(fused_path_arch(89));
  EXPECT_FALSE(fused_path_arch(90));
  EXPECT_FALSE(fused_path_arch(100));
}

TEST(KdaCudaPath, ClusterChunkedForSequencesOfAtMostVOver16Chunks) {
  // One chunk per CTA of the (sequence, head)'s V / 16 CTAs: T <= V tokens; the grid within the SMs
  // and its N x HV clusters within the capacity; sm_90+ (clusters).
  constexpr int64_t kCap = 8;  // clusters at once (the device's, asked by the engine)
  EXPECT_TRUE(use_cluster_chunked(64, 128, 32, kH200Sms, 90, kCap));    // the chunk_kda: T 64, H 4
  EXPECT_TRUE(use_cluster_chunked(128, 128, 32, kH200Sms, 90, kCap));   // 8 chunks, 8 CTAs
  EXPECT_FALSE(use_cluster_chunked(129, 128, 32, kH200Sms, 90, kCap));  // a 9th chunk
  EXPECT_TRUE(use_cluster_chunked(64, 64, 16, kH200Sms, 90, kCap));     // V 64: 4 CTAs, 4 chunks
  EXPECT_FALSE(use_cluster_chunked(65, 64, 16, kH200Sms, 90, kCap));
  EXPECT_TRUE(use_cluster_chunked(64, 128, 64, kH200Sms, 90, kCap));    // 8 clusters of 8
  EXPECT_FALSE(use_cluster_chunked(64, 128, 72, kH200Sms, 90, kCap));   // 9 clusters: a second wave
  EXPECT_TRUE(use_cluster_chunked(64, 128, 72, kH200Sms, 90, 9));
  EXPECT_TRUE(use_cluster_chunked(64, 64, 32, kH200Sms, 90, kCap));     // 8 clusters of 4
  EXPECT_FALSE(use_cluster_chunked(64, 128, 136, kH200Sms, 90, 17));    // beyond the SMs
  EXPECT_FALSE(use_cluster_chunked(64, 128, 32, kH200Sms, 80, kCap));   // no clusters before sm_90
  EXPECT_FALSE(use_cluster_chunked(64, 128, 32, 0, 90, kCap));          // unknown SM count
  EXPECT_FALSE(use_cluster_chunked(64, 128, 32, kH200Sms, 90, 0));      // no capacity known
}

}  // namespace
}  // namespace groupattn::test
