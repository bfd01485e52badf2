// The chunk rule of the decode work list (cuda/decode_work_list.h, both decode engines;
// docs/DECODE_SM90.md section 20), run on the host over arrays of per-sequence tile counts: the
// decode CTAs run the same
// integer function on the device. Pins the plan's bounds (slots within list_slot_bound: P for a
// batch of at most P, the one-wave plan; at most kListMaxSplits splits a sequence, >= kListMinTiles tiles a
// CTA) and the plans it gives the benchmark's uniform and mixed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "attention/engines/cuda/decode_work_list.h"

namespace groupattn::test {
namespace {

using cuda_engine::kListMaxSplits;
using cuda_engine::kListMinTiles;
using cuda_engine::list_chunk;
using cuda_engine::list_slot_bound;
using cuda_engine::list_splits_of;

struct Plan {
  int64_t chunk = 0;
  int64_t slots = 0;        // sum of the splits (CTAs per plane)
  int64_t longest_cta = 0;  // tiles of the longest CTA (equal splits: ceil(n / s))
  int max_splits = 0;
};

Plan plan_of(const std::vector<int64_t>& n, int plane_wave) {
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  const int64_t max_n = n.empty() ? 0 : *std::max_element(n.begin(), n.end());
  auto count = [&](int64_t c) {
    int64_t f = 0;
    for (int64_t x : n) f += list_splits_of(x, c);
    return f;
  };
  Plan p;
  p.chunk = list_chunk(total, max_n, static_cast<int64_t>(n.size()), plane_wave, count);
  for (int64_t x : n) {
    const int s = list_splits_of(x, p.chunk);
    p.slots += s;
    p.max_splits = std::max(p.max_splits, s);
    p.longest_cta = std::max(p.longest_cta, (x + s - 1) / s);
  }
  return p;
}

// The bench's mixed lengths (bench/matrices.py mixed_lengths): the first sequence at L, the others
// uniform in [1, L]; here in tiles of 64 keys.
std::vector<int64_t> mixed_tiles(int batch, int64_t len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(1, len);
  std::vector<int64_t> n(batch);
  for (int b = 0; b < batch; ++b) n[b] = ((b == 0 ? len : dist(rng)) + 63) / 64;
  return n;
}

TEST(Sm90DecodeWorkList, UniformLengthsGiveTheWaveFillingPlan) {
  // 8/1 d128 B32 x 32K, one CTA per SM (P = 132): 4 splits of 128 tiles, the ordinary plan.
  Plan p = plan_of(std::vector<int64_t>(32, 512), 132);
  EXPECT_EQ(p.chunk, 128);
  EXPECT_EQ(p.slots, 128);
  // Page 16 (a wave of two, P = 264): 8 splits of 64, as split_wave_of's plan.
  p = plan_of(std::vector<int64_t>(32, 512), 264);
  EXPECT_EQ(p.slots, 256);
  EXPECT_EQ(p.longest_cta, 64);
  // 64/8 B32 x 32K (P = 16) and 8/1 B128 x 8K (P = 132): one split a sequence.
  p = plan_of(std::vector<int64_t>(32, 512), 16);
  EXPECT_EQ(p.slots, 32);
  p = plan_of(std::vector<int64_t>(128, 128), 132);
  EXPECT_EQ(p.slots, 128);
  p = plan_of(std::vector<int64_t>(128, 128), 16);  // 64/8 B128 x 8K: more sequences than a wave holds
  EXPECT_EQ(p.slots, 128);
}

TEST(Sm90DecodeWorkList, MixedLengthsShortenTheLongestCta) {
  // 8/1 d128 B32 x 32K mixed: the ordinary plan (4 splits a sequence) has a 128-tile CTA;
  // the list fits one wave with CTAs near the average share.
  const std::vector<int64_t> n = mixed_tiles(32, 32768, 7);
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  Plan p = plan_of(n, 132);
  EXPECT_LE(p.slots, 132);
  EXPECT_LE(p.longest_cta, (total + 131) / 132 * 5 / 4 + 1);
  EXPECT_LT(p.longest_cta, 128);
  // 64/8 B32 x 32K mixed (P = 16): several waves of CTAs of at most ~total / (8 P) tiles.
  p = plan_of(n, 16);
  EXPECT_LE(p.longest_cta, std::max<int64_t>((total + 127) / 128, (512 + 15) / 16));
  EXPECT_GT(p.slots, 32);
}

TEST(Sm90DecodeWorkList, OneLongSequenceAmongShortOnes) {
  std::vector<int64_t> n(16, 2);
  n[5] = 2048;  // 128K keys among 128-key sequences
  const Plan p = plan_of(n, 132);
  EXPECT_EQ(p.max_splits, kListMaxSplits);  // the cap, so the one-warp combine
  EXPECT_EQ(p.longest_cta, 2048 / kListMaxSplits);
}

TEST(Sm90DecodeWorkList, EmptySequencesTakeOneSlot) {
  EXPECT_EQ(list_splits_of(0, 8), 1);
  std::vector<int64_t> n = {0, 0, 0};
  Plan p = plan_of(n, 132);
  EXPECT_EQ(p.slots, 3);
  EXPECT_GE(p.chunk, kListMinTiles);
  n = {0, 100, 0, 1, 0};
  p = plan_of(n, 132);
  EXPECT_LE(p.slots, list_slot_bound(132, 5));
  EXPECT_GE(p.chunk, kListMinTiles);
}

// Every plan stays inside the bounds the host sizes the grid and workspace for.
TEST(Sm90DecodeWorkList, BoundsHoldOverRandomBatches) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const int batch = 2 + static_cast<int>(rng() % 1023);
    const int plane_wave = 1 + static_cast<int>(rng() % 300);
    const int64_t len = 1 + static_cast<int64_t>(rng() % 8192);  // tiles of the longest
    std::vector<int64_t> n(batch);
    for (auto& x : n) {
      const uint32_t kind = rng() % 4;
      x = kind == 0 ? 0 : kind == 1 ? len : static_cast<int64_t>(rng() % (len + 1));
    }
    const Plan p = plan_of(n, plane_wave);
    ASSERT_LE(p.slots, list_slot_bound(plane_wave, batch)) << trial;
    if (batch <= plane_wave) {
      ASSERT_LE(p.slots, plane_wave) << trial;  // one wave: the grid has P slots
    }
    ASSERT_LE(p.max_splits, kListMaxSplits) << trial;
    ASSERT_GE(p.chunk, kListMinTiles) << trial;
    ASSERT_LE(p.longest_cta, p.chunk) << trial;
  }
}

// A batch of at most P sequences always gets a one-wave plan (the grid has exactly P slots),
// however skewed the lengths.
TEST(Sm90DecodeWorkList, BatchesWithinAWaveGetOneWave) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 3000; ++trial) {
    const int plane_wave = 2 + static_cast<int>(rng() % 299);
    const int batch = 2 + static_cast<int>(rng() % (plane_wave - 1));
    const int64_t len = 1 + static_cast<int64_t>(rng() % 8192);
    std::vector<int64_t> n(batch);
    for (auto& x : n) {
      const uint32_t kind = rng() % 4;
      x = kind == 0 ? 0 : kind == 1 ? len : static_cast<int64_t>(rng() % (len + 1));
    }
    const Plan p = plan_of(n, plane_wave);
    ASSERT_LE(p.slots, plane_wave) << trial;
    ASSERT_EQ(list_slot_bound(plane_wave, batch), plane_wave) << trial;
    // The narrowed search finds what a search of the whole [lo, top] finds: the smallest c with
    // f(c) <= P (f is non-increasing).
    auto f = [&](int64_t c) {
      int64_t s = 0;
      for (int64_t x : n) s += list_splits_of(x, c);
      return s;
    };
    const int64_t max_n = *std::max_element(n.begin(), n.end());
    int64_t a = std::max<int64_t>(kListMinTiles, (max_n + kListMaxSplits - 1) / kListMaxSplits);
    int64_t b = std::max(a, max_n);
    while (a < b) {
      const int64_t mid = a + (b - a) / 2;
      if (f(mid) <= plane_wave) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    ASSERT_EQ(p.chunk, a) << trial;
    ASSERT_LE(p.max_splits, kListMaxSplits) << trial;
    ASSERT_LE(p.longest_cta, p.chunk) << trial;
  }
}

// Equal lengths: the decode CTAs take list_chunk_equal (closed form, no search) where every length
// is equal (KernelParams::list_uniform_fast); it must be the search's chunk exactly, so the plan and
// the O / LSE bits do not change. And the CTAs run list_chunk in 32-bit integers: the same chunk as
// the host's 64-bit one.
TEST(Sm90DecodeWorkList, EqualLengthsClosedFormIsTheSearch) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 20000; ++trial) {
    const int plane_wave = 1 + static_cast<int>(rng() % 600);
    const int64_t batch = 2 + static_cast<int64_t>(rng() % (trial % 2 == 0 ? plane_wave + 1 : 1023));
    const uint32_t kind = rng() % 8;
    const int64_t n = kind == 0 ? 0 : kind == 1 ? 1 + rng() % 16 : 1 + static_cast<int64_t>(rng() % 20000);
    auto count = [&](int64_t c) { return batch * list_splits_of(n, c); };
    const int64_t searched = list_chunk(batch * n, n, batch, plane_wave, count);
    ASSERT_EQ(cuda_engine::list_chunk_equal<int64_t>(n, batch, plane_wave), searched)
        << trial << ": n " << n << " B " << batch << " P " << plane_wave;
    ASSERT_EQ(cuda_engine::list_chunk_equal<int>(static_cast<int>(n), static_cast<int>(batch), plane_wave),
              searched)
        << trial;
  }
  // The benchmark's uniform rows: 8/1 B32 x 32K (P 132, c 128), page 16 (P 264, c 64), 64/8 (P 16, c 512).
  EXPECT_EQ(cuda_engine::list_chunk_equal<int>(512, 32, 132), 128);
  EXPECT_EQ(cuda_engine::list_chunk_equal<int>(512, 32, 264), 64);
  EXPECT_EQ(cuda_engine::list_chunk_equal<int>(512, 32, 16), 512);
}

TEST(Sm90DecodeWorkList, ThirtyTwoBitChunkIsTheHostChunk) {
  std::mt19937 rng(37);
  for (int trial = 0; trial < 3000; ++trial) {
    const int batch = 2 + static_cast<int>(rng() % 1023);
    const int plane_wave = 1 + static_cast<int>(rng() % 300);
    const int64_t len = 1 + static_cast<int64_t>(rng() % 8192);
    std::vector<int64_t> n(batch);
    for (auto& x : n) {
      const uint32_t kind = rng() % 4;
      x = kind == 0 ? 0 : kind == 1 ? len : static_cast<int64_t>(rng() % (len + 1));
    }
    const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
    const int64_t max_n = *std::max_element(n.begin(), n.end());
    auto count64 = [&](int64_t c) {
      int64_t f = 0;
      for (int64_t x : n) f += list_splits_of(x, c);
      return f;
    };
    auto count32 = [&](int c) { return static_cast<int>(count64(c)); };
    ASSERT_EQ(list_chunk<int>(static_cast<int>(total), static_cast<int>(max_n), batch, plane_wave, count32),
              list_chunk(total, max_n, static_cast<int64_t>(batch), plane_wave, count64))
        << trial;
  }
}

// The batches both engines' host rules send to the list (list_serves_batch), and the cuda
// engine's P (list_plane_wave_for: its decode kernel holds two CTAs an SM at D 64 / 128 on the
// H200, one at D 256). The bench's rows on 132 SMs: 8/1 B32 and B128 one wave of P 264; 64/8 B32
// (P 33 puts it in the band (P / 2, P]) the several-wave plan of P 16; 64/8 B128 several waves of
// P 33; D 256 32/2 B22 one wave of P 66.
TEST(Sm90DecodeWorkList, BatchesTheListServesAndTheCudaEnginesWave) {
  using cuda_engine::list_plane_wave_for;
  using cuda_engine::list_serves_batch;
  EXPECT_FALSE(list_serves_batch(1, 132));
  EXPECT_TRUE(list_serves_batch(2, 132));
  EXPECT_TRUE(list_serves_batch(66, 132));
  EXPECT_FALSE(list_serves_batch(67, 132));
  EXPECT_FALSE(list_serves_batch(132, 132));
  EXPECT_TRUE(list_serves_batch(133, 132));
  EXPECT_TRUE(list_serves_batch(cuda_engine::kListMaxBatch, 132));
  EXPECT_FALSE(list_serves_batch(cuda_engine::kListMaxBatch + 1, 132));
  EXPECT_EQ(list_plane_wave_for(132, 2, 1, 1, 32), 264);
  EXPECT_EQ(list_plane_wave_for(132, 2, 1, 1, 128), 264);
  EXPECT_EQ(list_plane_wave_for(132, 2, 8, 1, 32), 16);
  EXPECT_EQ(list_plane_wave_for(132, 2, 8, 1, 24), 16);
  EXPECT_EQ(list_plane_wave_for(132, 2, 8, 1, 128), 33);
  EXPECT_EQ(list_plane_wave_for(132, 1, 2, 1, 22), 66);
  EXPECT_EQ(list_plane_wave_for(132, 2, 2, 1, 100), 66);  // (66, 132]: several waves of P 66
  // One CTA an SM already (D 256): the band has no other wave to fall back to.
  EXPECT_EQ(list_plane_wave_for(132, 1, 2, 1, 40), 0);
  EXPECT_EQ(list_plane_wave_for(132, 2, 2, 1, 1), 0);
}

}  // namespace
}  // namespace groupattn::test
