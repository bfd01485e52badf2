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

// The plan of tile counts `n` under a chunk rule `rule(total, max_n, batch, plane_wave, count)`
// (list_chunk or list_chunk_near_wave).
template <class Rule>
Plan plan_by(const std::vector<int64_t>& n, int plane_wave, Rule rule) {
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  const int64_t max_n = n.empty() ? 0 : *std::max_element(n.begin(), n.end());
  auto count = [&](int64_t c) {
    int64_t f = 0;
    for (int64_t x : n) f += list_splits_of(x, c);
    return f;
  };
  Plan p;
  p.chunk = rule(total, max_n, static_cast<int64_t>(n.size()), plane_wave, count);
  for (int64_t x : n) {
    const int s = list_splits_of(x, p.chunk);
    p.slots += s;
    p.max_splits = std::max(p.max_splits, s);
    p.longest_cta = std::max(p.longest_cta, (x + s - 1) / s);
  }
  return p;
}

Plan plan_of(const std::vector<int64_t>& n, int plane_wave) {
  return plan_by(n, plane_wave, [](auto... a) { return list_chunk(a...); });
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

// Session 12: the near-wave plan (decode_work_list.h list_near_wave; the sm90 engine's
// GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE, docs/DECODE_SM90.md section 25) for the band P / 2 < B <= P
// that list_serves_batch turns away. The bench's mixed lengths exactly (bench/matrices.py
// mixed_lengths(B, L), seed 0, Python's random; copied as numbers).
constexpr int kBenchMixed128x8K[128] = {
    8192, 3881, 6441, 7560, 5093, 7203, 2458, 3818, 8115, 5435, 1761, 3539, 7591, 7337, 828, 2923,
    7389, 4830, 2388, 8073, 4048, 2681, 5939, 8072, 5924, 2687, 1638, 5892, 4629, 6025, 2627, 7060,
    1822, 3355, 7078, 6978, 7214, 1361, 7195, 2867, 8159, 7303, 4437, 1052, 5424, 2885, 2054, 1267,
    750, 4747, 7536, 2128, 4985, 7387, 1623, 5109, 7715, 6595, 3333, 4285, 5461, 4348, 7111, 5084,
    1620, 2327, 5445, 1938, 5752, 3861, 3770, 3492, 1899, 4937, 6620, 4026, 4608, 5280, 7559, 7298,
    6312, 1594, 5138, 8135, 4544, 6110, 7089, 7043, 259, 1775, 814, 1547, 5406, 7821, 1672, 4794,
    2797, 5545, 2818, 2950, 3880, 3509, 4190, 5260, 5335, 1074, 4731, 3786, 4281, 2449, 218, 472,
    7501, 7736, 5021, 3704, 4771, 3024, 7963, 1782, 5336, 5785, 2002, 7427, 6818, 5450, 488, 2893};
constexpr int kBenchMixed32x32K[32] = {
    32768, 29959, 18057, 3932, 28618, 14290, 4270, 21965, 9231, 21404, 8547, 9418, 15252, 12272,
    19414, 14388, 5803, 25463, 25008, 32370, 6976, 29793, 13799, 26666, 28503, 24466, 21470, 6778,
    27666, 13998, 546, 20015};

std::vector<int64_t> tiles_of(const int* lens, int batch) {
  std::vector<int64_t> n;
  for (int b = 0; b < batch; ++b) n.push_back((lens[b] + 63) / 64);
  return n;
}

// The plan with the near-wave guard (list_chunk_near_wave) where `guard`, else plan_of's.
Plan near_plan_of(const std::vector<int64_t>& n, int plane_wave, bool guard) {
  if (!guard) return plan_of(n, plane_wave);
  return plan_by(n, plane_wave, [](auto... a) { return cuda_engine::list_chunk_near_wave(a...); });
}

// Which wave the band takes: every CTA place (sm90 D 128 16-bit: split wave 1, two CTAs an SM) with
// the guard, or one CTA an SM (split wave 2 and several planes) without it; nothing outside the band,
// for one batch, above kListMaxBatch, or where neither wave exists (D 256: one CTA an SM).
TEST(Sm90DecodeWorkList, NearWavePicksTheBandsWave) {
  using cuda_engine::list_near_wave;
  auto expect = [](cuda_engine::NearWave w, int plane_wave, bool guard) {
    EXPECT_EQ(w.plane_wave, plane_wave);
    EXPECT_EQ(w.near_uniform_guard, guard);
  };
  // sm_count, split_wave, ctas_per_sm, kv_heads, m_blocks, batch
  expect(list_near_wave(132, 1, 2, 1, 1, 128), 264, true);  // 8/1 d128 B128 contiguous / page 64
  expect(list_near_wave(132, 1, 2, 1, 1, 67), 264, true);
  expect(list_near_wave(132, 1, 2, 1, 1, 132), 264, true);
  expect(list_near_wave(132, 1, 2, 1, 1, 66), 0, false);   // served at P 132 already
  expect(list_near_wave(132, 1, 2, 1, 1, 133), 0, false);  // several waves at P 132 already
  expect(list_near_wave(132, 2, 2, 1, 1, 128), 0, false);  // page 16: P 264 serves B 128 already
  expect(list_near_wave(132, 2, 2, 8, 1, 32), 16, false);  // 64/8 d128 B32 page 16: P 33 -> 16
  expect(list_near_wave(132, 2, 2, 8, 1, 17), 16, false);
  expect(list_near_wave(132, 2, 2, 8, 1, 16), 0, false);   // served at P 33
  expect(list_near_wave(132, 2, 2, 1, 1, 200), 132, false);  // D 64 16/1 B200: P 264 -> 132
  expect(list_near_wave(132, 1, 2, 8, 1, 12), 33, true);     // 64/8 d128 B12 contiguous: P 16 -> 33
  expect(list_near_wave(132, 1, 1, 2, 1, 40), 0, false);     // D 256 32/2 B40: one CTA an SM only
  expect(list_near_wave(132, 1, 2, 1, 1, 1), 0, false);
  expect(list_near_wave(2048, 1, 2, 1, 1, cuda_engine::kListMaxBatch + 1), 0, false);
}

// Random batches in the band: the plan fits the grid (list_slot_bound of the band's wave), at most
// kListMaxSplits splits a sequence, no CTA above the chunk; the 32-bit chunk (the decode CTAs') is the
// host's; the CTAs' order of evaluation (guard, then the equal-lengths closed form or the search) is
// list_chunk_near_wave; and lengths within 1.25x of their mean -- equal ones always -- keep one
// split a sequence: the ordinary plan of a batch in the band.
TEST(Sm90DecodeWorkList, NearWaveBoundsAndOneSplitForNearUniform) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 4000; ++trial) {
    const int split_wave = 1 + static_cast<int>(rng() % 2);
    const int64_t kv_heads = 1 + static_cast<int64_t>(rng() % 8);
    const int sms = 132;
    const int wave = cuda_engine::list_plane_wave(sms, split_wave, kv_heads, 1);
    const int64_t batch = wave / 2 + 1 + static_cast<int64_t>(rng() % std::max(1, wave - wave / 2));
    const cuda_engine::NearWave w = cuda_engine::list_near_wave(sms, split_wave, 2, kv_heads, 1, batch);
    if (batch < 2) continue;
    ASSERT_GT(w.plane_wave, 0) << trial << ": B " << batch << " P " << wave;
    const int64_t len = 1 + static_cast<int64_t>(rng() % 40000);
    const uint32_t shape = rng() % 4;  // 0 equal, 1 near-uniform, 2 mixed, 3 a few long among short
    std::vector<int64_t> n(static_cast<size_t>(batch));
    for (auto& x : n) {
      const int64_t keys = shape == 0   ? len
                           : shape == 1 ? len - static_cast<int64_t>(rng() % (len / 6 + 1))
                           : shape == 2 ? static_cast<int64_t>(rng() % (len + 1))
                                        : (rng() % 16 == 0 ? len : static_cast<int64_t>(rng() % 200));
      x = (keys + 63) / 64;
    }
    const Plan p = near_plan_of(n, w.plane_wave, w.near_uniform_guard);
    ASSERT_LE(p.slots, cuda_engine::list_slot_bound(w.plane_wave, batch)) << trial;
    ASSERT_LE(p.max_splits, kListMaxSplits) << trial;
    ASSERT_LE(p.longest_cta, std::max<int64_t>(p.chunk, 0)) << trial;
    const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
    const int64_t max_n = *std::max_element(n.begin(), n.end());
    const int64_t mean = (total + batch - 1) / batch;
    if (shape <= 1 && max_n <= mean + mean / 4) {
      ASSERT_EQ(p.slots, batch) << trial << ": not one split a sequence";
    }
    auto count64 = [&](int64_t c) {
      int64_t f = 0;
      for (int64_t x : n) f += list_splits_of(x, c);
      return f;
    };
    auto count32 = [&](int c) { return static_cast<int>(count64(c)); };
    if (w.near_uniform_guard) {
      const int near = cuda_engine::list_near_uniform_chunk<int>(static_cast<int>(total), static_cast<int>(max_n),
                                                                 static_cast<int>(batch));
      const int device = near > 0                      ? near
                         : total == max_n * batch ? cuda_engine::list_chunk_equal<int>(static_cast<int>(max_n),
                                                                                        static_cast<int>(batch),
                                                                                        w.plane_wave)
                                                  : list_chunk<int>(static_cast<int>(total), static_cast<int>(max_n),
                                                                    static_cast<int>(batch), w.plane_wave, count32);
      ASSERT_EQ(device, p.chunk) << trial;
    } else {
      ASSERT_EQ(list_chunk<int>(static_cast<int>(total), static_cast<int>(max_n), static_cast<int>(batch),
                                w.plane_wave, count32),
                p.chunk)
          << trial;
    }
  }
}

// The bench's rows in the band (132 SMs, one new token, d128): the plan each gets.
//   8/1 B128 x 8K contiguous / page 64 (P 132, split wave 1, two CTAs an SM): P' 264 with the guard;
//     mixed: c 44, 264 CTAs of <= 44 tiles (the ordinary plan: 128 CTAs, the longest 128 tiles);
//     uniform: c 128, one split a sequence (the ordinary plan).
//   64/8 B32 x 32K page 16 (P 33, split wave 2): P'' 16, several waves; mixed: c 71, 144 CTAs a plane
//     of <= 71 tiles (the ordinary plan: 32 a plane, the longest 512); uniform: one split a sequence.
TEST(Sm90DecodeWorkList, NearWaveBenchRows) {
  const cuda_engine::NearWave w8 = cuda_engine::list_near_wave(132, 1, 2, 1, 1, 128);
  ASSERT_EQ(w8.plane_wave, 264);
  ASSERT_TRUE(w8.near_uniform_guard);
  const Plan mixed8 = near_plan_of(tiles_of(kBenchMixed128x8K, 128), w8.plane_wave, true);
  EXPECT_EQ(mixed8.chunk, 44);
  EXPECT_EQ(mixed8.slots, 264);
  EXPECT_EQ(mixed8.longest_cta, 44);
  const Plan uniform8 = near_plan_of(std::vector<int64_t>(128, 128), w8.plane_wave, true);
  EXPECT_EQ(uniform8.chunk, 128);
  EXPECT_EQ(uniform8.slots, 128);
  // Without the guard the one-wave rule at P' would cut the uniform batch in two (not the ordinary plan).
  EXPECT_EQ(plan_of(std::vector<int64_t>(128, 128), w8.plane_wave).slots, 256);
  // Session 9's one-wave plan at P 132 (why it lost): room for 4 more CTAs, the longest 127 tiles.
  const Plan old8 = plan_of(tiles_of(kBenchMixed128x8K, 128), 132);
  EXPECT_EQ(old8.chunk, 127);
  EXPECT_EQ(old8.longest_cta, 127);

  const cuda_engine::NearWave w64 = cuda_engine::list_near_wave(132, 2, 2, 8, 1, 32);
  ASSERT_EQ(w64.plane_wave, 16);
  ASSERT_FALSE(w64.near_uniform_guard);
  const Plan mixed64 = near_plan_of(tiles_of(kBenchMixed32x32K, 32), w64.plane_wave, false);
  EXPECT_EQ(mixed64.chunk, 71);
  EXPECT_EQ(mixed64.slots, 144);
  EXPECT_LE(mixed64.slots, list_slot_bound(16, 32));
  EXPECT_EQ(mixed64.longest_cta, 71);
  EXPECT_EQ(near_plan_of(std::vector<int64_t>(32, 512), w64.plane_wave, false).slots, 32);
}

}  // namespace
}  // namespace groupattn::test
