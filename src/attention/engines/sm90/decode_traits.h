// Shapes of the sm90 decode kernel, shared by the host (engine, launcher) and the device code.
// No CUDA types here.
//
//   KV tile    kBlockKV = 64 keys x kHeadDim (64, 128 or 256, D == Dv): wgmma's M side (swap-AB);
//              D / 64 128B-swizzled TMA boxes of [64 keys][64 d] per K and per V tile
//   columns    kN packed query columns (column n = new token n / group, query head n % group of
//              the KV head's group), 8..32; a sequence with more columns (group x new tokens up
//              to 128 x 16) takes several column blocks, each reading the KV tiles again (from L2
//              when the blocks run side by side)
//   stages     kStages K+V tiles in flight (TMA, mbarrier ring): decode_tile()
//   threads    one consumer warpgroup (128) + one producer warp (32)
//   occupancy  kCtasPerSm CTAs per SM (decode_tile()): D 64 and 128 two (shared memory <= half an
//              SM's, registers <= 204), D 256 one (a 64 KB K+V stage).
//              Measured on the H200 (docs/DECODE_SM90.md): with one CTA of 64 columns per SM the
//              consumer warp is alone on its scheduler and latency-bound (ncu: 0.13 issued
//              instructions per cycle, half the stalls on instruction fetch), 5.7 us per KV tile
//              against 1.1 us to stream it; a second CTA gives each scheduler a second warp and
//              the SM 2 x 3 tiles in flight instead of 4.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace groupattn::sm90_engine {

// Head dims (D == Dv) of 16-bit K/V, and the one head dim of an f8e4m3 K/V cache (its register
// fragment maps, decode_mainloop.cuh, are written for two 64-row halves of d).
inline constexpr std::array<int64_t, 3> kDecodeHeadDims = {64, 128, 256};
inline constexpr int kFp8HeadDim = 128;
inline constexpr int kBlockKV = 64;   // keys per KV tile (wgmma M)
inline constexpr int kMaxCols = 32;   // packed query columns per CTA (wgmma N)
inline constexpr int kMaxNewTokens = 16;
// The multi-token form (docs/DECODE_SM90.md sections 12 and 16): a 16-bit cache at head dim 64,
// 128 or 256, or an f8e4m3 cache at 128, with at least packed_decode_min_rows() packed query rows
// (group x new tokens) per KV head runs the packed-rows kernel (prefill_kernel.cuh,
// PrefillTraits<T, D, true>: query rows on wgmma's M side, KV tiles of packed_decode_tile(D), row
// softmax inside a quad); everything else this one (swap-AB, columns on N).
inline constexpr int64_t kPackedDecodeMinRows = 32;      // 16-bit K/V, head dim 128
inline constexpr int64_t kPackedDecodeMinRowsD64 = 17;   // 16-bit K/V, head dim 64
inline constexpr int64_t kPackedDecodeMinRowsD256 = 33;  // 16-bit K/V, head dim 256
inline constexpr int64_t kPackedDecodeMinRowsFp8 = 33;   // f8e4m3 K/V (head dim 128)
inline constexpr int kPackedDecodeHeadDim = 128;         // the one head dim of the fp8 packed form

// The packed rows per KV head from which the packed-rows form serves a cache of head dim
// `head_dim` (kDecodeHeadDims; f8e4m3: kFp8HeadDim only). Why these (DECODE_SM90.md sections 12, 15):
//   D 128  32: measured at 64/8 1 x 128K (section 12): swap-AB takes more than 32 columns as
//          several column blocks that each re-read the K/V tiles (5-7 tokens: 221.8 us against the
//          packed form's 127.0-129.3), and at 32 rows the packed form, half its m64 tile padding,
//          still won (126.6 against 135.5); at 16 rows it won by 3 % and at 8 they tied, too thin a
//          margin to move the cut without small-cache shapes measured.
//   D 64   17: swap-AB's chain per byte costs twice D 128's (16 KB tiles, the same softmax), and its
//          32-column tile already costs 1.33-1.40x its 16-column one (16/1 x 2 tokens, measured at
//          a3de7f4: B32 x 4K 27.0 against 19.3 us, B1 x 128K 38.3 against 28.7): every row count
//          that needs swap-AB's 32-column tile goes packed (a prediction, section 16).
//   D 256  33: a 64 KB tile hides swap-AB's chain better (32/2 x 2 tokens = 32 columns: 1.09-1.14x
//          one token, measured), so the cut is where swap-AB takes a second column block and
//          re-reads the tiles (x 4 tokens: 1.18-1.32x); the packed form's 64-key tiles and two
//          split-barrier stages are unmeasured, so no earlier (a prediction, section 16).
//   fp8    33: measured at 64/8 1 x 128K (section 17, session 8): swap-AB 114.9 us at 4 tokens (32
//          columns, one block) against the packed form's 149.4, but 208.8 at 6 tokens (48 columns:
//          two column blocks re-converting the tiles) against 149.8: the cut is where swap-AB
//          takes its second column block, as at D 256.
constexpr int64_t packed_decode_min_rows(int64_t head_dim, bool fp8) {
  if (fp8) return kPackedDecodeMinRowsFp8;
  if (head_dim == 64) return kPackedDecodeMinRowsD64;
  if (head_dim == 256) return kPackedDecodeMinRowsD256;
  return kPackedDecodeMinRows;
}

// Below the cut at head dims 64 and 256: from 16 rows (one token of group 16, two of group 8) the
// packed-rows form also streams faster than swap-AB's 16- or 32-column tiles once the call reads
// kPackedBelowCutMinKvBytes of K/V; below that its fixed cost per call (~11 us against swap-AB's ~8
// at 4-17 MB) loses. Measured in session 20 (DECODE_SM90.md section 31; contiguous K/V without
// lengths, one token unless marked; us swap-AB / packed):
//   >= 64 MiB  d64 16/1 B8 x 32K 27.6 / 25.7, B32 x 32K 70.9 / 70.0, B128 x 8K 71.2 / 67.1; 8/1 x 2
//              tokens B32 x 32K 73.2 / 70.9; d256 32/2 B1 x 32K 28.8 / 26.9, B2 x 16K, B4 x 8K, B8 x 4K,
//              B16 x 2K 1.6-2.5 us less, B32 x 4K 72.2 / 70.2, B1 x 128K 72.5 / 70.5, B128 x 8K 482.7 /
//              470.5; 32 rows (32/2 x 2) B8 x 4K 39.2 / 28.2, B32 x 4K 83.4 / 73.1; 16/2 x 2 B32 x 4K
//              73.8 / 71.1
//   < 64 MiB   d64 B1 x 8K 10.3 / 11.4, B8 x 8K 11.9 / 13.5, B16 x 4K 11.0 / 12.8, B16 x 1K 7.8 / 10.8,
//              B1 x 128K 19.6 / 19.9 (but B1 x 32K 13.6 / 12.3, B32 x 4K 18.1 / 17.7); d256 B1 x 8K
//              16.6 / 19.5, B8 x 1K 12.8 / 17.5
// The bound is the host's (the longest length); the packed form plans every sequence by it, so the
// engine keeps swap-AB wherever swap-AB would balance mixed lengths with its work list, and on pages
// of fewer than 64 keys, where the packed form's per-page runs lose at D 256 (sm90_engine.cu
// plan_call). D 128 keeps its cut of 32: at 16 rows the packed form won 0.2-2.1 % at >= 64 MiB
// (session 20 call 3), inside the suite's noise.
inline constexpr int64_t kPackedBelowCutMinRows = 16;
inline constexpr int64_t kPackedBelowCutMinKvBytes = int64_t{64} << 20;
constexpr bool packed_rows_below_cut(int64_t head_dim, bool fp8, int64_t rows, int64_t kv_bytes) {
  return !fp8 && (head_dim == 64 || head_dim == 256) && rows >= kPackedBelowCutMinRows &&
         rows < packed_decode_min_rows(head_dim, false) && kv_bytes >= kPackedBelowCutMinKvBytes;
}

// Pages of a multiple of 8 but not of 64 keys (16-bit; the packed form's per-page runs, section 22):
// at D 128 with exactly 32 rows swap-AB needs one 32-column block, and where HBM is the limit it
// beats the per-page producer, which tops out near 3.1 TB/s. Measured at page 16 x 4 tokens, session
// 10 (packed against swap-AB, us; K/V bytes = B x L x Hkv x D x 4):
//     67 MB   8/1 B32 x 4K 29.3 / 37.5, 8/1 B1 x 128K 32.0 / 47.4      packed
//    134 MB   8/1 B8 x 32K 51.5 / 54.7, 8/1 B32 x 8K 50.6 / 56.6       packed
//    268 MB   8/1 B16 x 32K 92.9 / 87.1, 8/1 B32 x 16K 92.8 / 89.0     swap-AB
//   >= 537 MB 8/1 B32 x 32K 174 / 152, 64/8 B4 x 32K 179 / 151, B32 x 32K 1355 / 998   swap-AB
// so the cut moves to 33 rows where the host's K/V bound reaches kSmallPagesSwapAbMinKvBytes (between
// the last packed and the first swap-AB point). D 64 (17) and D 256 (33) keep theirs: the packed
// form won every row measured there.
inline constexpr int64_t kSmallPagesSwapAbMinKvBytes = int64_t{192} << 20;
constexpr int64_t packed_decode_min_rows_small_pages(int64_t head_dim, int64_t kv_bytes) {
  if (head_dim == 128 && kv_bytes >= kSmallPagesSwapAbMinKvBytes) return kPackedDecodeMinRows + 1;
  return packed_decode_min_rows(head_dim, false);
}

// The form a decode problem the engine supports runs, chosen here only (sm90_engine.cu; the CPU
// tier's selection test): packed rows when the packed query rows per KV head (group x new tokens,
// the longest sequence's) reach packed_decode_min_rows (fp8: at head dim 128 only, its tiles
// widened to 16 bits in shared memory by the producer warpgroup, DECODE_SM90.md sections 13, 17);
// swap-AB for the rest.
constexpr bool packed_rows_form(int64_t head_dim, bool fp8, int64_t group, int64_t max_new_tokens) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && (!fp8 || head_dim == kFp8HeadDim) &&
         group * max_new_tokens >= packed_decode_min_rows(head_dim, fp8);
}

// The ring and the occupancy per head dim and K/V element, the one place they are chosen.
//   stages       K+V tiles in flight per CTA
//   ctas_per_sm  CTAs one SM holds (__launch_bounds__, the shared-memory budget)
//   split_wave   CTAs per SM the split planner fills in its one wave
// Bytes in flight per SM stay ~192 KB across head dims:
//   D 128 16-bit  32 KB stages x 3, two CTAs per SM (sections 3 and 8 of docs/DECODE_SM90.md); the
//                 planner's wave is one CTA per SM, measured as fast or faster (section 8)
//   fp8 (D 128)   16 KB stages x 6, two CTAs per SM, a wave of two (section 9, measured)
//   D 64 16-bit   16 KB stages x 6, two CTAs per SM, a wave of two: the fp8 tile's bytes, so the
//                 same per-byte cost of the consumer's per-tile chain (section 10: 3807 GB/s at
//                 16/1 B32 x 32K; the wave of two not yet timed against a wave of one)
//   D 256 16-bit  64 KB stages x 3 (192 KB): one CTA per SM, a wave of one (section 10: 3212 GB/s
//                 at 32/2 1 x 128K)
struct DecodeTile {
  int stages, ctas_per_sm, split_wave;
};
constexpr DecodeTile decode_tile(int head_dim, bool fp8) {
  if (fp8) return DecodeTile{6, 2, 2};
  if (head_dim == 64) return DecodeTile{6, 2, 2};
  if (head_dim == 256) return DecodeTile{3, 1, 1};
  return DecodeTile{3, 2, 1};
}

// Split-KV reduction of the swap-AB kernel (docs/DECODE_SM90.md section 14), chosen here only:
//   workspace  every split writes fp32 partial O and LSE to the workspace and the combine kernel
//              merges them (a second launch, programmatic dependent)
//   cluster    the num_splits CTAs of one (column block, KV head, sequence) are one thread-block
//              cluster: they exchange column maxima and sums through distributed shared memory,
//              each sums the splits' rescaled partials for its share of O (fixed split order) and
//              writes O and LSE itself -- no workspace traffic, no second kernel
// Cluster sizes: 8 is portable; 16 (non-portable, cudaFuncAttributeNonPortableClusterSizeAllowed,
// run on the H200 by the probe, HOPPER-PRIMITIVES.md section 10) only where two CTAs share an SM
// (D 64, D 128, fp8: 16 CTAs on >= 8 SMs of one GPC); D 256 holds one CTA per SM, so 8. The
// launcher also asks the runtime (cudaOccupancyMaxActiveClusters, once per device and kernel) that
// the grid's clusters are resident at once (automatic counts; forced: one cluster) and otherwise
// takes the workspace mode (decode_kernel.cuh launch_decode_n).
inline constexpr int kMaxClusterSplits = 16;
constexpr int max_cluster_splits(int64_t head_dim, bool fp8) {
  return decode_tile(static_cast<int>(head_dim), fp8).ctas_per_sm >= 2 ? kMaxClusterSplits : 8;
}
// Whether a swap-AB launch of `num_splits` splits and `ctas` CTAs in all (batch x KV heads x column
// blocks x splits) reduces in a cluster. The count must fit a cluster. A caller-forced count that
// fits always does (so benchmarks and tests reach the mode at any count; "sm90-split" pins the
// workspace mode). An automatic one also needs the grid to be at most one wave of one CTA per SM:
// then no CTA waits for an SM, so CTAs idling at the cluster barrier until their cluster's slowest
// split is done hold back nothing, and the fixed cost the mode removes (the combine kernel's
// launch and wait, the workspace write and read: a few us) is a large share of the time. Past a
// wave the kernel streams for tens of us and a waiting CTA would delay the next wave's. And the
// longest split must be short (<= kClusterMaxTilesPerSplit KV tiles): measured at b47c4d8 (H200),
// 64/8 B1 x 128K one token (16 splits of 128 tiles, 128 CTAs, one wave) took 148.4 us in clusters
// against 123.8 in the workspace mode -- clusters of 16 on 128 of 132 SMs do not all find one SM
// per CTA, so some SMs stream two splits' tiles for the whole long split -- while the short-split
// shapes the mode is for gained (8 tiles per split: 8/1 B1 x 8K 12.2 -> 10.0 us, 16/1 d64 B1 x 8K
// 12.6 -> 9.8, 64/8 B1 x 8K 16.0 -> 15.2). Between 8 and 128 tiles nothing is measured yet.
inline constexpr int64_t kClusterMaxTilesPerSplit = 8;
constexpr bool cluster_reduction(int num_splits, int64_t ctas, int64_t tiles_per_split, int sm_count,
                                 int64_t head_dim, bool fp8, bool forced) {
  if (num_splits < 2 || num_splits > max_cluster_splits(head_dim, fp8)) return false;
  return forced || (ctas <= sm_count && tiles_per_split <= kClusterMaxTilesPerSplit);
}

// KV tiles thread 0 issues before the CTA barrier where KernelParams::early_first_tiles is set
// (batched K/V, head dims 64 and 128 and fp8; decode_kernel.cuh). One: measured on the H200
// (docs/DECODE_SM90.md section 33) the first tile alone took 0.3-1.0 us off one-token rows (-3.5 us
// on a four-wave list row), while the whole first round (3 tiles at D 128 / 256, 6 at D 64 and fp8:
// 12-24 TMA issues from one thread ahead of the barrier) lost up to 2.1 us (fp8 64/8 B1 x 8K 15.5
// against 13.4 us). Not at D 256, whose one tile is 8 boxes: -0.3 to +0.3 us there.
inline constexpr int kEarlyTiles = 1;
constexpr bool early_tiles_serve(int head_dim, bool fp8) { return fp8 || head_dim <= 128; }

// Paged K/V: rows per TMA box, g = gcd(page_size, kBlockKV) (the largest power of two <= 64 that
// divides page_size). A 64-key tile starts at a multiple of 64, so its keys split into 64 / g runs
// of g keys, each starting at a multiple of g and therefore inside one page (g divides page_size):
// one box per run, from that run's page, landing at the run's row offset in the tile (128-byte rows).
// page_size a multiple of 64: one box per tile, as for batched K/V.
constexpr int paged_box_rows(int64_t page_size) {
  int g = 1;
  while (g < kBlockKV && page_size % (2 * g) == 0) g *= 2;
  return g;
}
static_assert(paged_box_rows(1) == 1 && paged_box_rows(16) == 16 && paged_box_rows(48) == 16 &&
                  paged_box_rows(96) == 32 && paged_box_rows(64) == 64 && paged_box_rows(192) == 64 &&
                  paged_box_rows(12) == 4,
              "paged_box_rows: gcd(page_size, 64)");

// Paged K/V whose runs are shorter than kMinTmaBoxRows keys (page_size not a multiple of 8: 1, 2,
// 4, 12, odd sizes) is gathered instead: the producer warp's 32 lanes copy the tile's key rows with
// cp.async (16 bytes a lane, one key row per 8 to 32 lanes) into the same swizzled layout. One TMA
// box per run would cost 64 / g x D / 64 x 2 box issues per tile from one thread (256 per 32 KB
// stage at g = 1, D 128), a few instructions each: more than the producer warp can issue in the
// ~1-2 us a stage takes to stream. The gathered path arrives on the stage's full barrier with
// cp.async.mbarrier.arrive.noinc from every lane (the barrier counts kProducerLanes arrivals).
inline constexpr int kMinTmaBoxRows = 8;
inline constexpr int kProducerLanes = 32;
constexpr bool paged_gather(int64_t page_size) { return paged_box_rows(page_size) < kMinTmaBoxRows; }

// Column tile for a problem with `cols` packed query columns per (sequence, KV head): the next
// power of two >= cols, between 8 and kMaxCols.
constexpr int column_tile(int64_t cols) {
  int n = 8;
  while (n < cols && n < kMaxCols) n *= 2;
  return n;
}

// kHeadDim_: D == Dv, one of kDecodeHeadDims. kFp8_: the K/V cache is f8e4m3 (D 128 only): the
// ring holds fp8 K and V tiles ([64 keys][128 d] bytes, one 128B-swizzled TMA box each, half the
// bytes of a 16-bit stage, so twice the stages in the same shared memory). The consumer threads load them
// straight into wgmma's register A fragments, converting e4m3 -> the GEMMs' 16-bit type in registers (exact),
// and run the RS form of both GEMMs (decode_mainloop.cuh); no converted copy in shared memory.
// Per-(sequence, KV head) scales fold into the score scale (k) and the output (v).
// kF16Mma_ (fp8 only, the default there): both GEMMs run in f16 whatever Q's dtype -- an e4m3 pair
// becomes an f16 pair in one instruction, a bf16 pair takes four -- with a bf16 Q entering f16
// scaled by a power of two (load_q, decode_mainloop.cuh; docs/DECODE_SM90.md section 28). false:
// the GEMMs in Q's dtype (the form before session 19, kept for the A/B switch
// GROUPATTN_SM90_DECODE_FP8_BF16_MMA).
template <class T, int kHeadDim_, int kN_, bool kFp8_ = false, bool kF16Mma_ = kFp8_>
struct DecodeTraits {
  using Element = T;
  static constexpr int kN = kN_;
  static constexpr bool kFp8 = kFp8_;
  static constexpr bool kF16Mma = kF16Mma_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockKV = sm90_engine::kBlockKV;
  static constexpr int kStages = decode_tile(kHeadDim_, kFp8_).stages;
  static constexpr int kCtasPerSm = decode_tile(kHeadDim_, kFp8_).ctas_per_sm;
  static constexpr int kConsumerWarps = 4;  // one warpgroup
  static constexpr int kConsumerThreads = kConsumerWarps * 32;
  static constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
  static constexpr int kProducerWarp = kConsumerWarps;

  static constexpr int kSwizzleElems = 64;  // 16-bit elements per 128-byte swizzled row
  static constexpr int kDBlocks = kHeadDim / kSwizzleElems;  // 64-wide blocks of d: 1, 2 or 4
  // One K or V tile: kDBlocks boxes of [kBlockKV rows][64], box b at b * kBoxBytes.
  static constexpr int kBoxBytes = kBlockKV * 128;
  static constexpr int kTileBytes = kDBlocks * kBoxBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K then V, as the GEMMs read them
  // The TMA ring: 16-bit K and V tiles, or (kFp8) fp8 ones.
  static constexpr int kFp8TileBytes = kBlockKV * kHeadDim;  // 1 byte per element, 128-byte rows
  static constexpr int kRingStageBytes = kFp8 ? 2 * kFp8TileBytes : kStageBytes;
  // Q: kN rows (columns of S^T) K-major over d, as kDBlocks blocks of [kN][64].
  static constexpr int kQBlockBytes = kN * 128;
  static constexpr int kQBytes = kDBlocks * kQBlockBytes;
  // P^T: kN rows K-major over the tile's 64 keys (one 128-byte row each).
  static constexpr int kPBytes = kN * 128;
  // Cross-warp exchange: per-warp column maxima (double buffered) and the final sums.
  static constexpr int kRedBytes = 3 * kConsumerWarps * kN * 4;

  static constexpr int kQOffset = kStages * kRingStageBytes;
  static constexpr int kPOffset = kQOffset + kQBytes;
  static constexpr int kRedOffset = kPOffset + kPBytes;
  static constexpr int kBarOffset = kRedOffset + kRedBytes;
  static constexpr int kBarBytes = 2 * kStages * 8;  // full[], empty[]
  // Cluster reduction (cluster_reduction()): after the last tile the ring is free and holds, from
  // its start, the column maxima and sums [2][kN] (read by the peers), the split factors
  // [kMaxClusterSplits][kN] (this CTA's), and the unnormalised O^T partial as [kN][D + 4] floats
  // (read by the peers; the pad of 4 makes the epilogue's stores conflict-free and keeps rows
  // 16-byte aligned for float4 reads).
  static constexpr int kClusterStatsOffset = 0;
  static constexpr int kClusterFactorOffset = kClusterStatsOffset + 2 * kN * 4;
  static constexpr int kClusterPartStride = kHeadDim + 4;  // floats per column
  static constexpr int kClusterPartOffset = kClusterFactorOffset + kMaxClusterSplits * kN * 4;
  static constexpr int kClusterBytes = kClusterPartOffset + kN * kClusterPartStride * 4;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBarOffset + kBarBytes) + 1024;  // + alignment slack

  static_assert(sizeof(T) == 2, "wgmma path takes 16-bit inputs (bf16, fp16)");
  static_assert(kN >= 8 && kN <= kMaxCols && kN % 8 == 0, "wgmma N: a multiple of 8, here at most kMaxCols");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "head dim: one of kDecodeHeadDims (O^T = V^T P^T takes one m64 block per 64 d)");
  static_assert(!kFp8 || kHeadDim == kFp8HeadDim, "the fp8 fragment maps cover two m64 halves of d = 128");
  static_assert(!kF16Mma || kFp8, "f16 GEMMs for a 16-bit cache: its tiles go to wgmma as they are");
  static_assert(kBlockKV == 64, "the KV tile is wgmma's M = 64");
  static_assert(kFp8TileBytes % 1024 == 0, "fp8 tiles are 128B-swizzled TMA boxes (1024-byte aligned)");
  static_assert(kBoxBytes % 1024 == 0 && kQBlockBytes % 1024 == 0 && kPBytes % 1024 == 0,
                "128B-swizzled operands start on 1024-byte boundaries (descriptor base offset 0)");
  static_assert(kRedOffset % 16 == 0 && kBarOffset % 8 == 0, "exchange buffer and mbarrier alignment");
  static_assert(kClusterBytes <= kStages * kRingStageBytes && kClusterPartOffset % 16 == 0,
                "the cluster exchange fits the ring, partial rows 16-byte aligned");
  static_assert(kStages >= 2, "the ring overlaps the next tile's copy with this tile's GEMMs");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
  // 228 KB per SM, 1 KB of it reserved per CTA.
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "kCtasPerSm CTAs must fit one SM's shared memory");
};

}  // namespace groupattn::sm90_engine
