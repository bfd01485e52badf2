// sm90 decode: the CTA's work, its shared-memory map, the TMA producer and the two GEMMs of the
// consumer warpgroup (swap-AB: KV positions on wgmma's M side). See decode_kernel.cuh for the
// algorithm as a whole.
//
//   S^T [64 keys x kN] = K [64 x D] . Q^T [D x kN]        (D = kHeadDim: 64, 128 or 256)
//       SS wgmma m64nNk16, D / 16 k-steps. A = K tile, K-major over d (D / 64 TMA boxes [64 keys]
//       [64 d], 128B swizzle); B = packed Q rows [kN][D], K-major over d (D / 64 [kN][64] blocks
//       written by the consumer threads in the same swizzled layout).       -- verified forms
//   O^T [D x kN] += V^T [D x 64 keys] . P^T [64 keys x kN]
//       SS wgmma, D / 64 m64 blocks of d, 4 k-steps over keys each. A = V^T read straight from the
//       V tile ([64 keys][64 d] boxes: M = d contiguous, i.e. A MN-major, imm-trans-a = 1); B = P^T
//       stored by the consumer threads as [kN][64 keys], K-major over keys. The head dim changes
//       only the number of boxes, k-steps and m64 blocks: every box is the same [64][64] operand.
//   Why this form: O^T = V^T P^T puts d on M, so A must be V^T. V arrives by TMA as [keys][d] with d
//   contiguous, i.e. A is M-major. The RS form (A from registers) has no transpose and would need
//   V^T gathered into registers (ldmatrix.trans from a swizzled tile, per k-step, per d half);
//   the SS form takes imm-trans-a = 1, which PTX (wgmma.mma_async, "imm-trans-a, imm-trans-b")
//   allows for .f16/.bf16 operands read through descriptors, with the same canonical MN-major
//   128B layout for A as for B. P^T, produced in the accumulator layout (keys on rows), is stored
//   by the threads as B [kN][64 keys], K-major: the verified B form. HOPPER-PRIMITIVES.md verifies
//   the MN-major descriptor only as B (tB = 1, probe test g); as A (tA = 1) it is documented but
//   not probed: the first thing to check on hardware. Fallback using verified forms only: O =
//   P V with A = P [64 query rows, zero-padded][64 keys] (the same P smem buffer, K-major) and
//   B = V MN-major (tB = 1, N = 128), at the cost of padding the query side to 64 rows.
//
// fp8 (e4m3) K/V, D = 128 only: both A operands come from registers (the RS form, which takes
// 16-bit A only): each thread loads its fragment's bytes of the fp8 tile straight from the
// 128B-swizzled TMA box and converts e4m3 pairs to 16-bit pairs (MmaElement) in registers (exact), so no
// converted copy of the tile is written to shared memory and no barrier is spent on one. The B
// operands (Q, P^T) and the accumulator maps stay as above; two permutations, free because a sum
// does not care about the order of its terms, make every thread's loads contiguous:
//   S^T: k-step kk, fragment column c = 8 hi + 2 q + e (q = lane % 4) is head dim
//        d = 32 q + 4 kk + 2 hi + e, so a thread's k-steps are 32 contiguous bytes of each of its
//        two key rows (two 16-byte loads per row); load_q stores Q in the same d order.
//   O^T: accumulator row m = 16 w + g + 8 t of d half h (w = warp, g = lane / 4) is head dim
//        d = 32 w + 4 g + 2 h + t, so a thread's four d of a key are one 4-byte word; keys stay in
//        order (P^T unchanged) and byte permutes pair the words of keys 2 q, 2 q + 1 (and + 8, + 9)
//        into fragments. The epilogue writes row m of half h to that d.
//   Both load patterns touch 32 distinct banks per warp instruction thanks to the swizzle.
// The GEMMs of the fp8 form run in f16 (MmaElement): e4m3 -> f16 is one instruction a pair, where
// e4m3 -> bf16 takes four (e4m3 -> f16 -> two f32 -> bf16), and the conversions were most of the
// consumer's instructions a tile. A bf16 Q enters f16 scaled by 2^e (load_q), P^T is stored in
// f16 (10 fraction bits instead of bf16's 7), and the scale 2^-e joins the score scale.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "attention/engines/sm90/decode_phase_stamps.cuh"
#include "attention/engines/sm90/decode_traits.h"
#include "cuda/cp_async.cuh"
#include "cuda/q_to_f16.cuh"
#include "cuda/sm90/hopper.cuh"
#include "cuda/sm90/wgmma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace groupattn::sm90_engine {

using cuda_engine::KernelParams;
using cuda_engine::KeyInterval;
using cuda_engine::SeqInfo;
namespace hw = ::groupattn::cuda::sm90;

// Named barriers of the consumer warpgroup (0 is __syncthreads).
inline constexpr uint32_t kBarMax = 1, kBarOperands = 2, kBarSum = 3;

// The 16-bit type both GEMMs take: f16 for an fp8 cache (DecodeTraits::kF16Mma), else Q's.
template <class Traits>
using MmaElement = std::conditional_t<Traits::kF16Mma, __half, typename Traits::Element>;

// What one CTA computes: query columns [col0, col0 + cols) of (sequence b, KV group kv_group)
// against KV tiles [blk_begin, blk_end) of its split.
struct CtaWork {
  SeqInfo s;
  int b = 0, kv_group = 0, kvh = 0, split = 0;
  int col0 = 0, cols = 0;
  int blk_begin = 0, blk_end = 0;
  // Global query token of the sequence's first row in the split partials: q_token0, or 0 in the
  // work-list mode (partials per slot of the sequence's own rows).
  int64_t part_token0 = 0;
  // Keys every column of the CTA sees ([lo of the last token, hi of the first]): tiles inside need
  // no per-element mask.
  int common_lo = 0, common_hi = -1;
};

template <class Traits>
struct SmemMap {
  unsigned char* base;  // 1024-byte aligned
  // The stage's K and V tiles (16-bit: kDBlocks [64][64] boxes each; fp8: one [64][128] byte box each).
  __device__ unsigned char* k(int stage) const { return base + stage * Traits::kRingStageBytes; }
  __device__ unsigned char* v(int stage) const {
    return k(stage) + (Traits::kFp8 ? Traits::kFp8TileBytes : Traits::kTileBytes);
  }
  __device__ unsigned char* q() const { return base + Traits::kQOffset; }
  __device__ unsigned char* p() const { return base + Traits::kPOffset; }
  // [3][warps][kN] floats: two buffers of per-warp column maxima (alternating tiles), then sums
  __device__ float* red_max(int it) const {
    return reinterpret_cast<float*>(base + Traits::kRedOffset) + (it & 1) * Traits::kConsumerWarps * Traits::kN;
  }
  __device__ float* red_sum() const {
    return reinterpret_cast<float*>(base + Traits::kRedOffset) + 2 * Traits::kConsumerWarps * Traits::kN;
  }
  // The cluster exchange, in the ring once the last tile is consumed (DecodeTraits::kCluster*).
  __device__ float* cluster_stats() const { return reinterpret_cast<float*>(base + Traits::kClusterStatsOffset); }
  __device__ float* cluster_factors() const { return reinterpret_cast<float*>(base + Traits::kClusterFactorOffset); }
  __device__ float* cluster_part() const { return reinterpret_cast<float*>(base + Traits::kClusterPartOffset); }
  __device__ uint64_t* full(int stage) const { return reinterpret_cast<uint64_t*>(base + Traits::kBarOffset) + stage; }
  __device__ uint64_t* empty(int stage) const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarOffset) + Traits::kStages + stage;
  }
};

// Paged K/V gathered by the producer warp (paged_gather(page_size): runs shorter than
// kMinTmaBoxRows keys): lane l copies 16-byte chunk l % kLanesPerRow of key rows
// l / kLanesPerRow + kRowsPerPass * pass with cp.async into the stage, at the position the TMA
// box's 128B swizzle would give it (chunk c of row r: d block c / 8, row offset r x 128, 16-byte
// chunk (c % 8) ^ (r % 8)); keys at or past the sequence's end are zero-filled (no global read).
// Each lane then arrives on full[stage] once its copies land (cp.async.mbarrier.arrive.noinc; the
// barrier counts kProducerLanes arrivals in this mode). outer / slot: the pages of keys lane and
// lane + 32 of the tile (produce()).
template <class Traits>
__device__ __forceinline__ void gather_tile(const KernelParams& p, const CtaWork& w, const SmemMap<Traits>& sm,
                                            int stage, int j0, const int (&outer)[2], const int (&slot)[2],
                                            int lane) {
  constexpr int kElemBytes = Traits::kFp8 ? 1 : 2;
  constexpr int kChunks = Traits::kHeadDim * kElemBytes / 16;  // 16-byte chunks per key row: 8, 16 or 32
  constexpr int kLanesPerRow = kChunks;
  constexpr int kRowsPerPass = kProducerLanes / kLanesPerRow;
  constexpr int kDBoxStride = Traits::kFp8 ? 0 : Traits::kBoxBytes;
  static_assert(kChunks % 8 == 0 && kChunks <= kProducerLanes, "one 16-byte chunk per lane and key row");
  constexpr unsigned kAll = 0xffffffffu;
  const int c = lane % kLanesPerRow;
  const auto* k = static_cast<const char*>(p.k) + (w.kvh * p.k_head_stride * kElemBytes + c * 16);
  const auto* v = static_cast<const char*>(p.v) + (w.kvh * p.v_head_stride * kElemBytes + c * 16);
  // The previous round's wgmma read this stage through the async proxy; these are generic writes.
  hw::fence_proxy_async_smem();
#pragma unroll 4
  for (int pass = 0; pass < Traits::kBlockKV / kRowsPerPass; ++pass) {
    const int r = pass * kRowsPerPass + lane / kLanesPerRow;  // key j0 + r
    const int page = __shfl_sync(kAll, r < 32 ? outer[0] : outer[1], r % 32);
    const int s = __shfl_sync(kAll, r < 32 ? slot[0] : slot[1], r % 32);
    const bool valid = j0 + r < w.s.k_len;
    const int dst = (c / 8) * kDBoxStride + r * 128 + (((c % 8) ^ (r % 8)) << 4);
    const int64_t k_off = (page * p.k_batch_stride + s * p.k_row_stride) * kElemBytes;
    const int64_t v_off = (page * p.v_batch_stride + s * p.v_row_stride) * kElemBytes;
    cuda::cp_async_16_or_zero(sm.k(stage) + dst, k + k_off, valid);
    cuda::cp_async_16_or_zero(sm.v(stage) + dst, v + v_off, valid);
  }
  hw::cp_async_mbar_arrive_noinc(sm.full(stage));
}

// The block-table entries of a paged tile's runs lane and lane + 32 (runs that start at or past
// the sequence's end: page 0, never loaded), or for batched K/V (batch, row) of each run.
template <class Traits>
__device__ __forceinline__ void run_coords(const KernelParams& p, const CtaWork& w, const int32_t* table, int blk,
                                           int box_rows, int lane, int (&outer)[2], int (&row)[2]) {
  const int j0 = blk * Traits::kBlockKV;
  const int live = min(Traits::kBlockKV / box_rows, (w.s.k_len - j0 + box_rows - 1) / box_rows);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = j0 + (lane + 32 * h) * box_rows;
    outer[h] = w.b;
    row[h] = key;
    if (table != nullptr) {
      outer[h] = lane + 32 * h < live ? table[key / p.page_size] : 0;
      row[h] = key % p.page_size;
    }
  }
}

// Asks L2 to fetch the line holding `ptr` (a hint: no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<uint64_t>(ptr)) : "memory");
}

// Tiles ahead of the producer whose block-table line is prefetched into L2 (paged K/V). A 128-byte
// line holds 32 entries, i.e. 8 tiles at page 16 and 32 at page 64; each line is read by the
// CTAs of one (sequence, split) only, so without the prefetch every 8th tile at page 16 waited for
// an HBM round trip (~1-2 us under load) with the stage already free (docs/DECODE_SM90.md section 18).
inline constexpr int kTablePrefetchTiles = 8;

// One run's boxes into a stage, landing at byte offset dst of its K and V tiles: one box per 64-wide
// d block (fp8: one box of 128-byte rows), K then V, all completing on the stage's full barrier.
// (row, outer): the run's coordinates in the K/V maps (batched: key row, sequence; paged: slot, page).
template <class Traits>
__device__ __forceinline__ void load_run_boxes(const SmemMap<Traits>& sm, int stage, int dst,
                                               const CUtensorMap* tmap_k, const CUtensorMap* tmap_v, int kvh,
                                               int row, int outer) {
  constexpr int kDBoxes = Traits::kFp8 ? 1 : Traits::kDBlocks;
  constexpr int kDElems = Traits::kFp8 ? 0 : Traits::kSwizzleElems;
  constexpr int kDBoxStride = Traits::kFp8 ? 0 : Traits::kBoxBytes;
#pragma unroll
  for (int db = 0; db < kDBoxes; ++db)
    hw::tma_load_4d(sm.k(stage) + dst + db * kDBoxStride, tmap_k, db * kDElems, kvh, row, outer,
                    sm.full(stage));
#pragma unroll
  for (int db = 0; db < kDBoxes; ++db)
    hw::tma_load_4d(sm.v(stage) + dst + db * kDBoxStride, tmap_v, db * kDElems, kvh, row, outer,
                    sm.full(stage));
}

// Batched K/V (no block table): KV tile blk into its first-round stage, as produce() would load it
// (one 64-key run: the whole tile's K and V boxes; rows past the cache are zero-filled by the map
// and counted), issued by the thread that initialised the barriers before the CTA barrier
// (KernelParams::early_first_tiles). produce() then starts after the tiles issued this way.
template <class Traits>
__device__ void issue_tile_batched(const CtaWork& w, const SmemMap<Traits>& sm, const CUtensorMap* tmap_k,
                                   const CUtensorMap* tmap_v, int blk, int stage) {
  constexpr int kDBoxes = Traits::kFp8 ? 1 : Traits::kDBlocks;
  hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kBlockKV * 128 * kDBoxes * 2));
  load_run_boxes<Traits>(sm, stage, 0, tmap_k, tmap_v, w.kvh, blk * Traits::kBlockKV, w.b);
}

// Producer (the producer warp): for each KV tile, wait until its stage is free, then fill it with
// the tile's K and V. A tile's 64 keys come as runs of box_rows keys:
//   batched    one run of 64, rows j0.. of sequence b
//   paged      box_rows = paged_box_rows(page_size) = gcd(page_size, 64); run i holds keys
//              j0 + i g .. + g - 1, all in page block_table[b][(j0 + i g) / page_size] at slot
//              (j0 + i g) % page_size (g divides page_size, so a run never crosses a page)
// The lanes look up the tile's pages together (lane l: runs l and l + 32), one tile ahead: the
// entries of tile t + 1 are loaded before the wait for tile t's stage, so the table's latency
// overlaps the wait instead of following it (with the stage free and the HBM idle for this CTA),
// and lane 0 prefetches the table line kTablePrefetchTiles ahead into L2. Then, unless the pages
// are small enough to gather (gather_tile, with runs of one key), lane 0 announces the stage's
// bytes and lane i TMAs run i's boxes, one per 64-wide d block (fp8: one box of 128-byte rows), K
// then V, landing at row offset (i x box_rows) of the tile: up to 8 lanes issue side by side
// instead of lane 0 issuing 64 / box_rows x D / 64 x 2 boxes in a row (16 at page 16, D 128).
// (Lane 0's expect_tx precedes every issue (__syncwarp); the phase cannot complete before that
// arrival anyway, as the barrier counts one arrival.)
// Why sub-boxes compose into the one-box layout: TMA's 128B swizzle is a function of the shared
// address (PTX ISA, "Swizzling Modes": a destination off the 1024-byte pattern boundary gets the
// base offset (dstMem / 128) % 8), so row r of the tile gets chunk c at c ^ (r % 8) whichever box
// wrote it; every destination is 128-byte aligned (rows are 128 bytes; tiles 1024-aligned).
// Runs that start at or past the sequence's end are not loaded (the stage keeps older rows
// there; as for the rows past k_len inside a loaded box, their scores are masked by selection and
// their V rows zeroed before O^T), and the stage's expected bytes count only the loaded boxes.
// skip: the CTA's first tiles already issued (issue_tile_batched, one a stage of the first round).
template <class Traits>
__device__ void produce(const KernelParams& p, const CtaWork& w, const SmemMap<Traits>& sm,
                        const CUtensorMap* tmap_k, const CUtensorMap* tmap_v, int lane, int skip) {
  constexpr int kRowBytes = 128;  // one key row of one box: 64 16-bit d, or 128 fp8 d (one swizzle row)
  constexpr int kDBoxes = Traits::kFp8 ? 1 : Traits::kDBlocks;  // boxes across d per run
  static_assert(Traits::kBlockKV / kMinTmaBoxRows <= kProducerLanes, "one lane per TMA run");
  const bool paged = p.block_table != nullptr;
  const bool gather = paged && paged_gather(p.page_size);
  const int box_rows = !paged ? Traits::kBlockKV : gather ? 1 : paged_box_rows(p.page_size);
  const int runs = Traits::kBlockKV / box_rows;  // 1..64
  const uint32_t run_bytes = static_cast<uint32_t>(box_rows * kRowBytes * kDBoxes * 2);  // K and V
  const int32_t* table = paged ? p.block_table + w.b * p.block_table_stride : nullptr;
  int outer[2], row[2];  // runs lane and lane + 32 of the current tile: (batch | page, row | slot)
  if (w.blk_begin + skip < w.blk_end)
    run_coords<Traits>(p, w, table, w.blk_begin + skip, box_rows, lane, outer, row);
  for (int blk = w.blk_begin + skip, it = skip; blk < w.blk_end; ++blk, ++it) {
    const int stage = it % Traits::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Traits::kStages) & 1u;
    int next_outer[2] = {outer[0], outer[1]}, next_row[2] = {row[0], row[1]};
    if (blk + 1 < w.blk_end) run_coords<Traits>(p, w, table, blk + 1, box_rows, lane, next_outer, next_row);
    if (paged && lane == 0) {
      const int ahead = (blk + kTablePrefetchTiles) * Traits::kBlockKV;  // a key of this sequence, so in the table
      if (ahead < w.s.k_len) prefetch_l2(table + ahead / p.page_size);
    }
    hw::mbar_wait(sm.empty(stage), phase ^ 1u);  // the first round passes at once
    const int j0 = blk * Traits::kBlockKV;
    const int live = min(runs, (w.s.k_len - j0 + box_rows - 1) / box_rows);  // runs starting before k_len
    if (gather) {
      gather_tile<Traits>(p, w, sm, stage, j0, outer, row, lane);
    } else {
      if (lane == 0) hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(live) * run_bytes);
      __syncwarp();
      GA_DECODE_STAMP(lane == 0 && it == 0, kProducerIssue);
      if (lane < live) {  // live <= 64 / kMinTmaBoxRows: run `lane`'s coordinates are outer[0], row[0]
        load_run_boxes<Traits>(sm, stage, lane * box_rows * kRowBytes, tmap_k, tmap_v, w.kvh, row[0],
                               outer[0]);
      }
    }
    GA_DECODE_STAMP(lane == 0 && it == 0, kProducerFirst);
    GA_DECODE_STAMP(lane == 0 && blk + 1 == w.blk_end, kProducerLast);
    GA_DECODE_STAMP(lane == 0 && it == Traits::kStages, kRefillIssued);
#pragma unroll
    for (int h = 0; h < 2; ++h) outer[h] = next_outer[h], row[h] = next_row[h];
  }
  // A gathering lane leaves only once its last copies have landed (their mbarrier arrivals are
  // tied to this thread's cp.async operations).
  if (gather) asm volatile("cp.async.wait_all;" ::: "memory");
}

// Consumer threads copy the CTA's packed Q rows into the swizzled K-major B layout: row n (column
// of S^T) = token (col0 + n) / group, head kv_group * group + (col0 + n) % group; rows past the
// CTA's columns are zero. 16-byte chunk c of row n lands at chunk c ^ (n % 8) (128B swizzle).
// fp8: the row's head dims in the order of the S^T fragment columns (see the header): logical
// chunk ch (k-step ch / 2, half hi = ch % 2) holds d = 32 q + 4 (ch / 2) + 2 hi + {0, 1}, q = 0..3.
// Returns the factor the scores must be multiplied by: 1, or for a bf16 Q going to f16 GEMMs
// (MmaElement) 2^-e, the CTA's rows stored as Q x 2^e rounded to f16 (cuda/q_to_f16.cuh: the rule
// for e and why the scores stay exact).
template <class Traits>
__device__ float load_q(const KernelParams& p, const CtaWork& w, const SmemMap<Traits>& sm, int tid) {
  using T = typename Traits::Element;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;  // 16-byte chunks
  constexpr int kChunksPerBlock = Traits::kSwizzleElems / 8;
  constexpr int kChunks = Traits::kN * kChunksPerRow;
  const T* q = static_cast<const T*>(p.q);
  const auto load_chunk = [&](int c) {
    const int n = c / kChunksPerRow, ch = c % kChunksPerRow;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (n < w.cols) {
      const int col = w.col0 + n;
      const int token = col / p.group, head = w.kv_group * p.group + col % p.group;
      const T* row = q + w.s.q_offset + static_cast<int64_t>(token) * p.q_row_stride +
                     static_cast<int64_t>(head) * p.q_head_stride;
      if constexpr (Traits::kFp8) {
        const int d0 = 4 * (ch / 2) + 2 * (ch % 2);
        val = make_uint4(*reinterpret_cast<const uint32_t*>(row + d0), *reinterpret_cast<const uint32_t*>(row + d0 + 32),
                         *reinterpret_cast<const uint32_t*>(row + d0 + 64),
                         *reinterpret_cast<const uint32_t*>(row + d0 + 96));
      } else {
        val = *reinterpret_cast<const uint4*>(row + ch * 8);
      }
    }
    return val;
  };
  const auto store_chunk = [&](int c, uint4 val) {
    const int n = c / kChunksPerRow, ch = c % kChunksPerRow;
    const int db = ch / kChunksPerBlock, cc = ch % kChunksPerBlock;
    *reinterpret_cast<uint4*>(sm.q() + db * Traits::kQBlockBytes + n * 128 + ((cc ^ (n % 8)) * 16)) = val;
  };
  float unscale = 1.f;
  if constexpr (std::is_same_v<T, MmaElement<Traits>>) {
    // store_chunk's stores written out: with the call, the 16-bit kernels' Q prologue compiled to
    // different SASS than the one measured (session 19).
    for (int c = tid; c < kChunks; c += Traits::kConsumerThreads) {
      const int n = c / kChunksPerRow, ch = c % kChunksPerRow;
      const uint4 val = load_chunk(c);
      const int db = ch / kChunksPerBlock, cc = ch % kChunksPerBlock;
      *reinterpret_cast<uint4*>(sm.q() + db * Traits::kQBlockBytes + n * 128 + ((cc ^ (n % 8)) * 16)) = val;
    }
  } else {  // a bf16 Q for f16 GEMMs: the CTA's max |q| first, then the scaled chunks
    static_assert(kChunks % Traits::kConsumerThreads == 0, "whole chunks a thread");
    constexpr int kPerThread = kChunks / Traits::kConsumerThreads;
    uint4 vals[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) vals[i] = load_chunk(tid + i * Traits::kConsumerThreads);
    static_assert(Traits::kConsumerWarps == 4, "four warps' maxima");
    // The warps' maxima in red_sum, which the epilogue first uses after many barriers.
    unscale = cuda::scale_q_to_f16(vals, reinterpret_cast<uint32_t*>(sm.red_sum()), tid,
                                   [] { hw::named_bar_sync(kBarMax, Traits::kConsumerThreads); });
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) store_chunk(tid + i * Traits::kConsumerThreads, vals[i]);
  }
  hw::fence_proxy_async_smem();  // generic stores -> wgmma operand reads (a barrier follows)
  return unscale;
}

// fp8: one tile's bytes a thread needs, loaded straight from the stage (then the stage can be
// freed), as 32-bit words of four e4m3 values each.
//   k[r][kk]   key row 16 w + g + 8 r, d = 32 q + 4 kk .. + 3 (S^T k-step kk; two 16-byte loads per row)
//   v[kk][i]   key 16 kk + 2 q + {0, 1, 8, 9}[i], d = 32 w + 4 g .. + 3 (O^T k-step kk)
struct Fp8Words {
  uint32_t k[2][8];
  uint32_t v[4][4];
};

template <class Traits>
__device__ __forceinline__ void load_fp8_words(Fp8Words& f, const SmemMap<Traits>& sm, int stage, int warp,
                                               int lane) {
  const int g = lane / 4, q = lane % 4;
  const unsigned char* k = sm.k(stage);
  const unsigned char* v = sm.v(stage);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * warp + g + 8 * r;  // row % 8 == g
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint4 x = *reinterpret_cast<const uint4*>(k + row * 128 + (((2 * q + c) ^ g) << 4));
      f.k[r][4 * c + 0] = x.x;
      f.k[r][4 * c + 1] = x.y;
      f.k[r][4 * c + 2] = x.z;
      f.k[r][4 * c + 3] = x.w;
    }
  }
  const int chunk = 2 * warp + g / 4, in_chunk = 4 * (g % 4);  // byte 32 w + 4 g of a row
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = 16 * kk + 2 * q + (i % 2) + 8 * (i / 2);
      f.v[kk][i] = *reinterpret_cast<const uint32_t*>(v + key * 128 + ((chunk ^ (key % 8)) << 4) + in_chunk);
    }
  }
}

// Keys [valid, 64) of the tile lie past the sequence (the next sequence's rows, a page's unused
// slots, anything, possibly fp8 NaNs): their V words become 0 so 0 * V stays 0 in O^T. The K side
// needs nothing: those scores are masked by selection.
__device__ __forceinline__ void zero_fp8_v_tail(Fp8Words& f, int valid, int lane) {
  const int q = lane % 4;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = 16 * kk + 2 * q + (i % 2) + 8 * (i / 2);
      if (key >= valid) f.v[kk][i] = 0u;
    }
  }
}

// Two e4m3 values (bits 0-7, 8-15 of `pair`) -> an Element pair (low half = bits 0-7). Exact:
// every e4m3 value (subnormals included) is an f16 (a normal one, or zero) and a bf16 (at most 4
// significant bits, exponent -9..8), so no hop (e4m3 -> f16, and for bf16 f16 -> f32 -> bf16)
// rounds.
template <class T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint32_t pair) {
  const __half2 h2 = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 b2 = __float22bfloat162_rn(__half22float2(h2));
    return *reinterpret_cast<const uint32_t*>(&b2);
  } else {
    return *reinterpret_cast<const uint32_t*>(&h2);
  }
}

// S^T A fragments of the 8 k-steps (HOPPER-PRIMITIVES.md section 2, RS map): register 0 / 1 =
// rows r / r + 8, columns 2q, 2q + 1 = the low two bytes of word kk; registers 2 / 3 = columns
// 2q + 8, 2q + 9 = its high two bytes.
template <class Traits>
__device__ __forceinline__ void k_fragments(uint32_t (&a)[8][4], const Fp8Words& f) {
  using T = MmaElement<Traits>;
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    a[kk][0] = e4m3x2_to<T>(f.k[0][kk]);
    a[kk][1] = e4m3x2_to<T>(f.k[1][kk]);
    a[kk][2] = e4m3x2_to<T>(f.k[0][kk] >> 16);
    a[kk][3] = e4m3x2_to<T>(f.k[1][kk] >> 16);
  }
}

// O^T A fragments of d half h, k-step kk: register 0 / 1 = rows m / m + 8 (d bytes 2h / 2h + 1 of
// the words), keys 2q, 2q + 1; registers 2 / 3 the same for keys 2q + 8, 2q + 9. __byte_perm
// 0x5140 pairs bytes 0 and 1 of two keys' words, 0x7362 bytes 2 and 3.
template <class Traits>
__device__ __forceinline__ void v_fragments(uint32_t (&a)[2][4][4], const Fp8Words& f) {
  using T = MmaElement<Traits>;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t sel = h == 0 ? 0x5140u : 0x7362u;
      const uint32_t lo = __byte_perm(f.v[kk][0], f.v[kk][1], sel);  // keys 2q, 2q + 1
      const uint32_t hi = __byte_perm(f.v[kk][2], f.v[kk][3], sel);  // keys 2q + 8, 2q + 9
      a[h][kk][0] = e4m3x2_to<T>(lo);
      a[h][kk][1] = e4m3x2_to<T>(lo >> 16);
      a[h][kk][2] = e4m3x2_to<T>(hi);
      a[h][kk][3] = e4m3x2_to<T>(hi >> 16);
    }
  }
}

// Rows [valid, 64) of the stage's V tile hold keys past the sequence (the next sequence's rows, a
// page's unused slots, anything): zero them so 0 * V stays 0 in O^T. The K side needs nothing:
// those scores are masked by selection.
template <class Traits>
__device__ void zero_v_tail(const SmemMap<Traits>& sm, int stage, int valid, int tid) {
  const int rows = Traits::kBlockKV - valid;
  for (int c = tid; c < Traits::kDBlocks * rows * 8; c += Traits::kConsumerThreads) {
    const int db = c / (rows * 8), r = valid + (c / 8) % rows, ch = c % 8;
    *reinterpret_cast<uint4*>(sm.v(stage) + db * Traits::kBoxBytes + r * 128 + ch * 16) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// Per (sequence, KV head) dequantization scales of an fp8 cache (1 otherwise).
template <class Traits>
__device__ __forceinline__ float kv_scale(const float* s, int64_t b_stride, int64_t h_stride, const CtaWork& w) {
  if constexpr (Traits::kFp8) return s[w.b * b_stride + w.kvh * h_stride];
  return 1.f;
}

template <class Traits>
using WgmmaOf = hw::Wgmma<std::is_same_v<MmaElement<Traits>, __nv_bfloat16>, Traits::kN, 0, 0>;
template <class Traits>
using WgmmaTransAOf = hw::Wgmma<std::is_same_v<MmaElement<Traits>, __nv_bfloat16>, Traits::kN, 1, 0>;

// S^T = K Q^T for the stage's K tile (fresh accumulators). k-step kk: d block kk / 4, +32 bytes
// per step inside a block (descriptor + 2).
template <class Traits>
__device__ __forceinline__ void gemm_scores(float (&s)[Traits::kN / 2], const SmemMap<Traits>& sm, int stage) {
  hw::fence_regs(s);
  hw::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    const uint64_t da = hw::desc_kmajor_sw128(sm.k(stage) + (kk / 4) * Traits::kBoxBytes) + 2 * (kk % 4);
    const uint64_t db = hw::desc_kmajor_sw128(sm.q() + (kk / 4) * Traits::kQBlockBytes) + 2 * (kk % 4);
    WgmmaOf<Traits>::mma(s, da, db, kk > 0 ? 1 : 0);
  }
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_regs(s);
}

// O^T += V^T P^T. m64 block h of d: A = V box h as MN-major (k-step kk = key rows 16kk.. = +2048
// bytes, descriptor + 128); B = P^T [kN][64 keys] K-major (k-step kk = +32 bytes, descriptor + 2).
template <class Traits>
__device__ __forceinline__ void gemm_output(float (&o)[Traits::kDBlocks][Traits::kN / 2],
                                            const SmemMap<Traits>& sm, int stage) {
#pragma unroll
  for (int h = 0; h < Traits::kDBlocks; ++h) hw::fence_regs(o[h]);
  hw::wgmma_fence();
#pragma unroll
  for (int h = 0; h < Traits::kDBlocks; ++h) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockKV / 16; ++kk) {
      const uint64_t da =
          hw::desc_mnmajor_sw128(sm.v(stage) + h * Traits::kBoxBytes, static_cast<uint32_t>(Traits::kBoxBytes)) +
          128 * kk;
      const uint64_t db = hw::desc_kmajor_sw128(sm.p()) + 2 * kk;
      WgmmaTransAOf<Traits>::mma(o[h], da, db, 1);
    }
  }
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
#pragma unroll
  for (int h = 0; h < Traits::kDBlocks; ++h) hw::fence_regs(o[h]);
}

template <class Traits>
using WgmmaRsOf = hw::WgmmaRs<std::is_same_v<MmaElement<Traits>, __nv_bfloat16>, Traits::kN, 0>;

// fp8: S^T = K Q^T with A = the K fragments (RS form), B = Q as in gemm_scores. Issues and
// commits only: the caller waits (wait_scores) after converting the V fragments meanwhile.
template <class Traits>
__device__ __forceinline__ void issue_scores_rs(float (&s)[Traits::kN / 2], uint32_t (&a)[8][4],
                                                const SmemMap<Traits>& sm) {
  hw::fence_regs(s);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) hw::fence_regs(a[kk]);
  hw::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    const uint64_t db = hw::desc_kmajor_sw128(sm.q() + (kk / 4) * Traits::kQBlockBytes) + 2 * (kk % 4);
    WgmmaRsOf<Traits>::mma(s, a[kk], db, kk > 0 ? 1 : 0);
  }
  hw::wgmma_commit();
}

template <class Traits>
__device__ __forceinline__ void wait_scores_rs(float (&s)[Traits::kN / 2], uint32_t (&a)[8][4]) {
  hw::wgmma_wait<0>();
  hw::fence_regs(s);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) hw::fence_regs(a[kk]);
}

// fp8: O^T += V^T P^T with A = the V fragments (RS form), B = P^T as in gemm_output.
template <class Traits>
__device__ __forceinline__ void gemm_output_rs(float (&o)[2][Traits::kN / 2], uint32_t (&a)[2][4][4],
                                               const SmemMap<Traits>& sm) {
  hw::fence_regs(o[0]);
  hw::fence_regs(o[1]);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) hw::fence_regs(a[h][kk]);
  hw::wgmma_fence();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockKV / 16; ++kk) {
      const uint64_t db = hw::desc_kmajor_sw128(sm.p()) + 2 * kk;
      WgmmaRsOf<Traits>::mma(o[h], a[h][kk], db, 1);
    }
  }
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_regs(o[0]);
  hw::fence_regs(o[1]);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) hw::fence_regs(a[h][kk]);
}

}  // namespace groupattn::sm90_engine

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
