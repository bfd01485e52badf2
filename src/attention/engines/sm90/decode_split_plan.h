// The automatic split-KV count of the swap-AB decode kernel (docs/DECODE_SM90.md section 15).
// Host only, no CUDA types: a pure function of the machine size and the problem's tile counts, so
// the CPU tier tests it (tests/cpu/sm90_decode_form_test.cpp).
//
// Why a cost model and not only "fill one wave": a split's partial costs the combine kernel a
// serial step. The combine walks a row's splits 8 at a time (combine_kernel.cuh kSplitBatch), one
// warp per (token, query head) row, so with few rows its time is ~0.82 us per 8 splits however
// many rows run beside it (H200: 8/1 B1 x 128K, 128 splits, 37.7 us against 8/1 B32 x 4K, the
// same 128 CTAs of 16 tiles and the same 64 MiB but 4 splits, 25.4 us: 12.3 us for 15 more
// batches; the a552d4d split sweeps agree). So 128 splits cost ~13 us of combine where 64 CTAs of
// twice the tiles would already stream near the HBM rate. The model below prices a split count as
//
//   stream(S) + reduce(S)
//   stream(S) = smooth max of (a CTA's tiles x tile_us, the K/V bytes at kHbmBytesPerUs)
//   reduce(S) = 0 (S = 1) | kClusterReduceUs (cluster mode, decode_traits.h cluster_reduction) |
//               kCombineLaunchUs + kCombineBatchUs x ceil(S / 8) (workspace mode; above 16 splits
//               2 + ceil(ceil(S / 8) / 8) batches, the one-CTA-per-row combine)
//
// and the planner takes the cheapest, keeping the wave-filling count (cuda_engine::
// balanced_num_splits over decode_tile().split_wave, the rule of sections 8-14) unless the model
// says the cheapest saves at least kMinPlanGainUs. Every constant is an H200 figure (132 SMs,
// 4.4 TB/s); on another sm_90 part the same rule runs with that part's SM count and H200 costs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/engines/cuda/split_planner.h"
#include "attention/engines/sm90/decode_traits.h"

namespace groupattn::sm90_engine {

// The K/V read rate of the large decode shapes (64/8 B32 x 32K: 4.46 TB/s, 64/8 B1 x 128K: 4.35).
inline constexpr double kHbmBytesPerUs = 4.4e6;
// The combine kernel: per batch of kCombineSplitBatch splits of one row (serial in its warp), and
// its launch plus the wait for the decode grid (sections 8 and 14: the a552d4d sweep's slope; 12.2
// us workspace against 10.0 us cluster at 16 splits).
inline constexpr int kCombineSplitBatch = 8;  // == cuda_engine::kSplitBatch (static_assert in decode_combine.cuh)
// Above 16 splits the combine runs one CTA of 8 warps per row (combine_wide_kernel): the LSE max and
// sum, then each warp's ceil(S / 8) splits in batches of 8, so ~2 + ceil(ceil(S / 8) / 8) round trips
// instead of ceil(S / 8) (a prediction from the batch cost above, not yet measured).
inline constexpr int kCombineWideWarps = 8;       // == cuda_engine::kWideWarps
inline constexpr int kCombineWideMinSplits = 17;  // == cuda_engine::kWideMinSplits
inline constexpr double kCombineBatchUs = 0.82;
inline constexpr double kCombineLaunchUs = 1.4;
// The cluster reduction in place of both (two cluster barriers, DSMEM reads; section 14).
inline constexpr double kClusterReduceUs = 1.3;
// A costed count replaces the wave-filling one only when the model says it saves this much: the
// model matches the split sweeps to ~1 us, so smaller predicted gains are noise.
inline constexpr double kMinPlanGainUs = 1.5;
// Shortest split the costed planner considers (the sweeps measured 4-tile splits as fast per tile
// as 8-tile ones: 8/1 B1 x 8K, 32 splits 11.3 us = 16 splits).
inline constexpr int64_t kMinCostedTilesPerSplit = 4;

// A CTA's time per 64-key tile (us) when few SMs stream (one CTA per SM, the HBM not the limit):
// the swapped kernel's per-tile chain, which grows with the column tile (the column softmax across
// the four consumer warps) and the head dim. Measured (H200, GPU time per call differences):
//   D 128 kN 8   0.48  split sweeps (8/1 B1 x 8K 8 -> 16 splits; 8/1 B2 x 32K 8 -> 16)
//   D 128 kN 16  0.75  8/1 and 64/8 B1 x 8K, 2 tokens against 1 (8 tiles per CTA either way)
//   D 64  kN 16  0.40  16/1 d64 B1 x 8K against 8/1 d128 B1 x 8K (both 16 x 8 tiles, cluster)
//   D 64  kN 32  0.96  16/1 d64 B1 x 8K, 2 tokens against 1
//   D 256 kN 16  1.30  32/2 d256 B1 x 8K (32 CTAs x 8 tiles, 21.5 us less the fixed costs)
//   D 256 kN 32  2.60  32/2 d256 B1 x 8K, 2 tokens against 1
//   fp8 kN 8     0.72  64/8 fp8 B1 x 128K --splits 16 (under load: an upper bound)
// Not measured, set at or above their neighbours so the planner errs towards the wave-filling
// count: D 128 kN 32 1.6, D 64 kN 8 0.40, D 256 kN 8 1.30, fp8 kN 16 1.1 and kN 32 1.6.
constexpr double split_tile_us(int head_dim, int col_tile, bool fp8) {
  const int k = col_tile <= 8 ? 0 : (col_tile <= 16 ? 1 : 2);
  constexpr double kD128[3] = {0.48, 0.75, 1.6};
  constexpr double kD64[3] = {0.40, 0.40, 0.96};
  constexpr double kD256[3] = {1.30, 1.30, 2.60};
  constexpr double kFp8[3] = {0.72, 1.1, 1.6};
  if (fp8) return kFp8[k];
  if (head_dim == 64) return kD64[k];
  if (head_dim == 256) return kD256[k];
  return kD128[k];
}

// One swap-AB decode problem as the planner sees it.
struct DecodeSplitShape {
  int sm_count = 0;
  int64_t batch = 0, kv_heads = 0;
  int64_t m_blocks = 0;  // column blocks per (sequence, KV head)
  int64_t n_blocks = 0;  // 64-key tiles of the longest sequence
  int head_dim = 128;
  int col_tile = 8;
  bool fp8 = false;
  // Paged K/V that fills a wave of two (split_wave_of): pages not a multiple of the 64-key tile
  // (boxes of gcd(page_size, 64) < 64 rows, or the gathered path: more work per byte on the producer
  // warp's critical path), and with GROUPATTN_SM90_DECODE_PAGED_WAVE_TWO on (the default) every page
  // size (the block-table reads; section 29). The engine sets it (sm90_engine.cu split_shape).
  bool paged = false;
};

// CTAs per SM the wave-filling count fills (decode_tile().split_wave), except that paged K/V
// (DecodeSplitShape::paged) takes a wave of two wherever two CTAs fit an SM (D 64, D 128, fp8; D 256
// holds one). Why
// (docs/DECODE_SM90.md section 18): at one CTA per SM a CTA's ring keeps ~2 stages (64 KB at D 128)
// in flight, just what the SM's share of the HBM rate needs at the loaded latency (~33 KB/us x
// ~2 us), so every cycle the producer spends between a stage's release and its last box issue
// (16 boxes at page 16, D 128) is lost bandwidth: 64/8 B1 x 128K page 16 2818 GB/s against 4176
// contiguous, at one CTA per SM; the same page size at two CTAs per SM (64/8 B32 x 32K) 4251
// against 4474. A second CTA doubles the bytes in flight per SM and covers one producer's gaps with
// the other's stream. Page 64 too (section 29): 64/8 B1 x 128K 136.0 us at 16 splits against 130.2
// at 33 (session 19, forced counts), where contiguous K/V loses at 33 (124.6 against 125.9).
inline int split_wave_of(const DecodeSplitShape& s) {
  const DecodeTile t = decode_tile(s.head_dim, s.fp8);
  return s.paged && t.ctas_per_sm >= 2 ? std::max(t.split_wave, 2) : t.split_wave;
}

// CTAs of a launch with `splits` splits (batch x KV heads x column blocks x splits).
inline int64_t split_ctas(const DecodeSplitShape& s, int splits) { return s.batch * s.kv_heads * s.m_blocks * splits; }

// Whether an automatic count reduces in a cluster (decode_traits.h cluster_reduction).
inline bool auto_split_cluster(const DecodeSplitShape& s, int splits) {
  if (splits < 1 || s.n_blocks < 1) return false;
  const int64_t tiles = (s.n_blocks + splits - 1) / splits;
  return cluster_reduction(splits, split_ctas(s, splits), tiles, s.sm_count, s.head_dim, s.fp8, /*forced=*/false);
}

// The model's split-dependent time (us) of a launch with `splits` splits (see the file comment):
// the fixed costs every split count pays (launch, first tile, epilogue) are left out.
inline double split_cost_us(const DecodeSplitShape& s, int splits) {
  const int64_t tiles = (s.n_blocks + splits - 1) / splits;  // the longest split's
  const double per_cta = static_cast<double>(tiles) * split_tile_us(s.head_dim, s.col_tile, s.fp8);
  const double tile_bytes = 2.0 * kBlockKV * s.head_dim * (s.fp8 ? 1 : 2);  // K and V
  const double hbm = static_cast<double>(s.batch * s.kv_heads * s.n_blocks) * tile_bytes / kHbmBytesPerUs;
  // Smooth maximum (4-norm): where the two are equal the split sweeps measured ~1.15-1.2x either
  // (8/1 B2 x 32K at 32 splits, 8/1 B2 x 128K at 32), not 1x. sqrt is exact, so the plan is the
  // same on every host.
  const double stream = std::sqrt(std::sqrt(per_cta * per_cta * per_cta * per_cta + hbm * hbm * hbm * hbm));
  if (splits <= 1) return stream;
  if (auto_split_cluster(s, splits)) return stream + kClusterReduceUs;
  int batches = (splits + kCombineSplitBatch - 1) / kCombineSplitBatch;
  if (splits >= kCombineWideMinSplits) {
    const int per_warp = (splits + kCombineWideWarps - 1) / kCombineWideWarps;
    batches = 2 + (per_warp + kCombineSplitBatch - 1) / kCombineSplitBatch;
  }
  return stream + kCombineLaunchUs + kCombineBatchUs * batches;
}

// The automatic split count. The wave-filling count (at most one wave of split_wave CTAs per SM,
// >= 8 tiles per split, the fewest splits with the shortest longest split) unless the cheapest
// count of at most one CTA per SM, >= kMinCostedTilesPerSplit tiles per split and <=
// cuda_engine::kMaxSplits saves kMinPlanGainUs by the model. Grids of more than one CTA per SM (D 64
// and fp8 fill a wave of two, and paged K/V: split_wave_of) keep the wave-filling count: the model
// has no term for two CTAs sharing an SM.
//
// The cheapest count is found among few candidates, not all (host cost per call): 1; for each
// combine batch count k the largest count of that batch count (8k or the cap; the stream time
// only falls as the count grows, the combine cost is the same inside a batch), reduced to the
// fewest splits of the same longest split; and the largest count that reduces in a cluster (its
// cost is constant, the stream only falls). The CPU tier checks this against every count.
inline int auto_decode_splits(const DecodeSplitShape& s) {
  if (s.sm_count <= 0 || s.batch <= 0 || s.kv_heads <= 0 || s.m_blocks <= 0 || s.n_blocks <= 0) return 1;
  const int64_t rows = s.batch * s.kv_heads * s.m_blocks;  // CTAs per split
  cuda_engine::SplitProblem sp;
  sp.sm_count = s.sm_count * split_wave_of(s);
  sp.batch = static_cast<int>(std::min<int64_t>(s.batch, 1 << 30));
  sp.kv_heads = static_cast<int>(std::min<int64_t>(s.kv_heads, 1 << 30));
  sp.m_blocks = static_cast<int>(std::min<int64_t>(s.m_blocks, 1 << 30));
  sp.n_blocks = static_cast<int>(std::min<int64_t>(s.n_blocks, 1 << 30));
  const int wave = cuda_engine::balanced_num_splits(sp, 8);
  if (rows * wave > s.sm_count) return wave;

  const int64_t most = std::min<int64_t>({static_cast<int64_t>(cuda_engine::kMaxSplits),
                                          s.n_blocks / kMinCostedTilesPerSplit, s.sm_count / rows});
  const int hi = static_cast<int>(std::max<int64_t>(1, most));
  auto fewest = [&](int splits) {  // the fewest splits with the same longest split
    const int64_t tiles = (s.n_blocks + splits - 1) / splits;
    return static_cast<int>((s.n_blocks + tiles - 1) / tiles);
  };
  int best = wave;
  double best_cost = split_cost_us(s, wave);
  const double wave_cost = best_cost;
  auto consider = [&](int splits) {
    const double c = split_cost_us(s, splits);
    if (c < best_cost) best = splits, best_cost = c;
  };
  consider(1);
  for (int top = std::min(kCombineSplitBatch, hi);; top = std::min(top + kCombineSplitBatch, hi)) {
    consider(fewest(top));
    if (top == hi) break;
  }
  for (int splits = std::min(hi, kMaxClusterSplits); splits >= 2; --splits) {
    if (auto_split_cluster(s, splits)) {
      consider(splits);
      break;
    }
  }
  return wave_cost - best_cost >= kMinPlanGainUs ? best : wave;
}

}  // namespace groupattn::sm90_engine
