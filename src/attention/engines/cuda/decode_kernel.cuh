// The cuda engine's decode kernel (flash-decoding on mma.sync, sm80+): 1..kDecodeMaxTokens
// (launch.h) new query tokens per sequence; the (token, query head) pairs of one KV group packed
// into the 16 rows of one m16 MMA tile, the tile kernel's PackGQA order (any token count works).
//
//   Q   [.., T, Hq, D]    tile row r = packed row R = m_block * 16 + r of KV group blockIdx.y:
//                         token R / group, query head blockIdx.y * group + R % group
//   K,V [.., Sk, Hkv, D]  batched, varlen or paged; read once per (split, m-block)
//   out / lse, or o_partial / lse_partial when split: the tile kernel's formats (kernel_params.h)
//
// Grid (m_blocks * num_splits, Hkv, B), the m-block the fast index so m-blocks of one split (groups
// above 16 heads) read the same K/V at about the same time. Work-list mode (decode_list_kernel,
// p.seq_splits set; batches of mixed lengths, docs/ENGINES.md "Mixed lengths: the work list"):
// grid (m_blocks * slots, Hkv, 1), and each CTA computes from the lengths which sequence and 64-key
// blocks its slot holds (decode_work_list.cuh fold_list_slot, shared with the sm90 engine).
// 4 warps; the CTA's split is a range of 64-key blocks and warp w takes the 16-key sub-tile w of
// each: it streams its own sub-tiles through a private kStages-deep cp.async ring (no CTA barrier
// in the mainloop), computes S = Q K^T (16 x 16), masks (per row: causal among the new tokens),
// runs the online softmax and O += P V for its keys. At the end the warps' (max, sum, O) are
// merged through shared memory in warp order (deterministic).
//
// Rows are independent in the MMAs, and which keys a warp sees depends on the sequence and split
// only (sub-tile u goes to warp u mod 4); a sub-tile fully masked for a row leaves its state
// bitwise unchanged. So a row's result does not depend on the rows packed next to it: native GQA
// and the same problem with K/V copied up to every query head (group 1) give bitwise-equal rows.
//
// Why (docs/ENGINES.md, "one-token decode kernel"): the tile kernel gives a decode CTA one compute
// warp that works through 64-key tiles serially with one K and one V tile in flight; here four
// warps each have kStages - 1 to kStages sub-tiles in flight (a refill is issued before the wait for
// the sub-tile it follows) and a quarter of the dependent MMA chain. Paged K/V: block-table rows
// are read kStages + 1 refills ahead (docs/ENGINES.md, "Paged and D 256 decode: bytes in flight").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention/engines/cuda/decode_work_list.cuh"
#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "cuda/cp_async.cuh"
#include "cuda/fast_math.cuh"
#include "cuda/mma_sm80.cuh"
#include "cuda/pdl.cuh"

namespace groupattn::cuda_engine {

// kSplitV (D 256 only; docs/ENGINES.md "Session 12: D 256 decode rate"): 8 warps in 4 pairs. A
// pair takes the sub-tiles a warp of the 4-warp form takes and shares one ring: both warps compute
// the whole S = Q K^T and softmax of a sub-tile (the same instructions on the same data: the same
// bits), and warp h of the pair does O += P V and the O rescale for head-dim half h only. Each
// SM sub-partition then holds two warps instead of one, so one warp's dependent chains (MMA,
// shuffles, exp2, paged address shuffles) overlap the other's; the ring, its bytes in flight and
// the 64-key block are unchanged, and every O column goes through the same operations in the same
// order as in the 4-warp form, so the two forms give bitwise-equal results.
template <class T, int kHeadDim_, bool kSplitV_ = false>
struct DecodeTraits {
  using Element = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kSplitV = kSplitV_;
  static constexpr int kVParts = kSplitV ? 2 : 1;  // warps sharing a sub-tile (head-dim parts of P V)
  static constexpr int kKeyWarps = 4;              // warps (pairs when kSplitV) on different keys
  static constexpr int kWarps = kKeyWarps * kVParts;
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // mma.sync m16n8k16
  static constexpr int kRows = kMmaM;                      // packed rows per CTA (launch.h: kDecodeRows)
  static constexpr int kWarpKeys = kMmaK;                  // keys per warp step: one P V reduction step
  static constexpr int kBlockKeys = kKeyWarps * kWarpKeys;  // keys per CTA step; splits count in these
  // Ring depth per warp; all kStages stages are in flight while a warp waits (kStages - 1 while it
  // computes). Shared memory per CTA: D 64 5 stages 94 KB, D 128 3 stages 109 KB (two CTAs per SM
  // on sm90: 8 warps x 2-3 sub-tiles of 8 KB = 128-192 KB of K/V in flight), D 256 3 stages
  // 212 KB (one CTA: 4 warps x 2-3 sub-tiles of 16 KB = 128-192 KB).
  static constexpr int kStages = kHeadDim <= 64 ? 5 : 3;
  // Paged K/V: refills whose block-table rows are read ahead (two registers per lane each). A
  // table read queues behind the SM's in-flight copies, so it takes about a loaded latency even
  // when it hits L2; with kStages sub-tiles in flight a step is ~1 / kStages of that latency, so
  // kStages steps cover it, and one more is margin.
  static constexpr int kTableAhead = kStages + 1;
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  // Shared rows padded by one 16-byte chunk so the ldmatrix row addresses hit distinct banks.
  static constexpr int kRowStride = kHeadDim + kChunk;
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static constexpr int kRowsPerPass = cuda::kWarpSize / kChunksPerRow;  // sub-tile rows one warp copy covers
  static constexpr int kNTiles = kWarpKeys / kMmaN;  // S fragments per warp step (2)
  static constexpr int kDTiles = kHeadDim / kMmaN;   // O fragments of a row tile
  static constexpr int kVDTiles = kDTiles / kVParts;  // O fragments per warp (its head-dim part)
  static constexpr int kVCols = kHeadDim / kVParts;   // O columns per warp
  static constexpr int kKSteps = kHeadDim / kMmaK;   // Q K^T reduction steps
  // Q's A fragments stay in registers where they fit next to the O accumulator (D 64: 16, D 128:
  // 32 registers); D 256 re-reads them from shared memory every sub-tile.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  static constexpr int kQElems = kRows * kRowStride;
  static constexpr int kSubTileElems = kWarpKeys * kRowStride;  // one K or V sub-tile
  static constexpr int kStageElems = 2 * kSubTileElems;         // K then V
  static constexpr int kRingElems = kKeyWarps * kStages * kStageElems;
  // The merge after the mainloop reuses the ring: per key warp (pair), O rows (fp32, padded by 8
  // floats so the float2 fragment stores of rows g and g + 4 fall in different banks), then max
  // and sum.
  static constexpr int kMergeRowStride = kHeadDim + 8;
  static constexpr size_t kMergeBytes =
      static_cast<size_t>(kKeyWarps) * kRows * (kMergeRowStride + 2) * sizeof(float);
  static constexpr size_t kRingBytes = static_cast<size_t>(kRingElems) * sizeof(T);
  static constexpr size_t kSmemBytes =
      static_cast<size_t>(kQElems) * sizeof(T) + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes);
  // Threads per output row in the merge, and the O columns each writes.
  static constexpr int kMergeThreadsPerRow = kThreads / kRows;
  static constexpr int kMergeCols = kHeadDim / kMergeThreadsPerRow;

  static_assert(sizeof(T) == 2, "mma.sync path takes 16-bit inputs (bf16, fp16)");
  static_assert(kHeadDim % kMmaK == 0 && kDTiles % 2 == 0, "head dim must be a multiple of 16");
  static_assert(cuda::kWarpSize % kChunksPerRow == 0 && kWarpKeys % kRowsPerPass == 0,
                "a warp copies whole rows of a sub-tile per pass");
  static_assert(kThreads % kRows == 0 && kMergeCols % 2 == 0, "the merge writes pairs of O columns");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit an sm90 SM's shared memory");
  static_assert(kStages >= 2, "the ring needs a stage in flight while one is consumed");
  static_assert(kTableAhead >= 1, "the table queue holds at least the next refill");
  static_assert(kWarpKeys <= cuda::kWarpSize, "page_row: one lane per sub-tile row");
  static_assert(!kSplitV || kHeadDim == 256, "the split-V form is built for D 256 only");
  static_assert(kVDTiles % 2 == 0, "P V loads V fragments for two head-dim tiles at a time");
  static_assert(kWarpKeys % kVParts == 0 && kVCols % kChunk == 0 &&
                    cuda::kWarpSize % (kVCols / kChunk) == 0 && (kWarpKeys / kVParts) % kRowsPerPass == 0,
                "split-V copies: whole K rows and whole V row parts per pass");
};

template <class Traits>
struct DecodeKernel {
  using T = typename Traits::Element;
  using Mma = cuda::MmaType<T>;
  static constexpr int kRows = Traits::kRows, kStages = Traits::kStages;
  static constexpr int kRowStride = Traits::kRowStride, kChunk = Traits::kChunk;
  static constexpr int kChunksPerRow = Traits::kChunksPerRow, kThreads = Traits::kThreads;
  static constexpr int kKeyWarps = Traits::kKeyWarps, kWarpKeys = Traits::kWarpKeys;
  static constexpr int kVParts = Traits::kVParts;
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;

  // Paged K/V: where row `lane % 16` of sub-tile u lives (block-table entry and slot in the page);
  // {0, 0} when not paged or past the sequence. Read kTableAhead sub-tiles before the copies that
  // use it, so the table's round trip overlaps the ring instead of sitting in front of every refill.
  struct PageRow {
    int page = 0;
    int slot = 0;
  };
  static __device__ __forceinline__ PageRow page_row(const KernelParams& p, const SeqInfo& s, int b, int u,
                                                     int lane) {
    PageRow pr;
    const int j = u * kWarpKeys + lane % kWarpKeys;
    if (p.block_table != nullptr && j < s.k_len) {
      const int page_idx = j / p.page_size;  // key j: page block_table[b][j / page_size], slot j % page_size
      pr.page = p.block_table[b * p.block_table_stride + page_idx];
      pr.slot = j - page_idx * p.page_size;
    }
    return pr;
  }

  // Copies keys [u * 16, +16) of KV head `kvh` into the K and V sub-tiles of one ring stage, by
  // the 32 lanes of one warp (warp-uniform call: paged rows are shuffled from lane r's `pr`, which
  // page_row filled for this u); keys past the sequence are zero-filled (their scores are masked).
  static __device__ __forceinline__ void load_sub_tile(const KernelParams& p, const SeqInfo& s, int kvh,
                                                       int u, int lane, PageRow pr, T* k_dst, T* v_dst) {
    const T* k = static_cast<const T*>(p.k);
    const T* v = static_cast<const T*>(p.v);
    const bool paged = p.block_table != nullptr;
    const int ch = lane % kChunksPerRow;  // each lane copies one fixed 16-byte column
#pragma unroll
    for (int pass = 0; pass < kWarpKeys / Traits::kRowsPerPass; ++pass) {
      const int r = lane / kChunksPerRow + pass * Traits::kRowsPerPass;
      const int j = u * kWarpKeys + r;
      const bool valid = j < s.k_len;
      int64_t k_row = 0, v_row = 0;
      if (paged) {  // uniform over the warp: every lane takes part in the shuffles
        const int64_t page = __shfl_sync(cuda::kFullWarpMask, pr.page, r);
        const int64_t slot = __shfl_sync(cuda::kFullWarpMask, pr.slot, r);
        k_row = page * p.k_batch_stride + slot * p.k_row_stride;
        v_row = page * p.v_batch_stride + slot * p.v_row_stride;
      } else {
        k_row = s.k_offset + static_cast<int64_t>(j) * p.k_row_stride;
        v_row = s.v_offset + static_cast<int64_t>(j) * p.v_row_stride;
      }
      const T* k_src = valid ? k + k_row + kvh * p.k_head_stride + ch * kChunk : k;
      const T* v_src = valid ? v + v_row + kvh * p.v_head_stride + ch * kChunk : v;
      cuda::cp_async_16_or_zero(k_dst + r * kRowStride + ch * kChunk, k_src, valid);
      cuda::cp_async_16_or_zero(v_dst + r * kRowStride + ch * kChunk, v_src, valid);
    }
  }

  // Split-V form: warp h of a pair copies K rows [h * 8, +8) (both warps read all of K: the pair
  // barrier after the wait makes them visible) and V columns [h * kVCols, +kVCols) of all 16 rows
  // (only warp h reads them). Same sources, zero fill and shared-memory slots as load_sub_tile.
  static __device__ __forceinline__ void load_sub_tile_part(const KernelParams& p, const SeqInfo& s, int kvh,
                                                            int u, int lane, int h, PageRow pr, T* k_dst,
                                                            T* v_dst) {
    const T* k = static_cast<const T*>(p.k);
    const T* v = static_cast<const T*>(p.v);
    const bool paged = p.block_table != nullptr;
    constexpr int kKRows = kWarpKeys / kVParts;                // K rows per warp
    constexpr int kVChunks = Traits::kVCols / kChunk;          // 16-byte chunks of a V row part
    constexpr int kVRowsPerPass = cuda::kWarpSize / kVChunks;  // V row parts per warp copy
    static_assert(kKRows / Traits::kRowsPerPass == kWarpKeys / kVRowsPerPass,
                  "one K and one V copy per pass");
    const int k_ch = lane % kChunksPerRow;
    const int v_ch = h * kVChunks + lane % kVChunks;
#pragma unroll
    for (int pass = 0; pass < kKRows / Traits::kRowsPerPass; ++pass) {
      const int kr = h * kKRows + lane / kChunksPerRow + pass * Traits::kRowsPerPass;
      const int vr = lane / kVChunks + pass * kVRowsPerPass;
      const int kj = u * kWarpKeys + kr, vj = u * kWarpKeys + vr;
      const bool k_valid = kj < s.k_len, v_valid = vj < s.k_len;
      int64_t k_row = 0, v_row = 0;
      if (paged) {  // uniform over the warp: every lane takes part in the shuffles
        const int64_t k_page = __shfl_sync(cuda::kFullWarpMask, pr.page, kr);
        const int64_t k_slot = __shfl_sync(cuda::kFullWarpMask, pr.slot, kr);
        const int64_t v_page = __shfl_sync(cuda::kFullWarpMask, pr.page, vr);
        const int64_t v_slot = __shfl_sync(cuda::kFullWarpMask, pr.slot, vr);
        k_row = k_page * p.k_batch_stride + k_slot * p.k_row_stride;
        v_row = v_page * p.v_batch_stride + v_slot * p.v_row_stride;
      } else {
        k_row = s.k_offset + static_cast<int64_t>(kj) * p.k_row_stride;
        v_row = s.v_offset + static_cast<int64_t>(vj) * p.v_row_stride;
      }
      const T* k_src = k_valid ? k + k_row + kvh * p.k_head_stride + k_ch * kChunk : k;
      const T* v_src = v_valid ? v + v_row + kvh * p.v_head_stride + v_ch * kChunk : v;
      cuda::cp_async_16_or_zero(k_dst + kr * kRowStride + k_ch * kChunk, k_src, k_valid);
      cuda::cp_async_16_or_zero(v_dst + vr * kRowStride + v_ch * kChunk, v_src, v_valid);
    }
  }

  // The warps sharing key warp kw's ring meet here (the 4-warp form: its own lanes). Named
  // barriers 1..kKeyWarps (0 is __syncthreads').
  static __device__ __forceinline__ void sync_key_warp(int kw) {
    if constexpr (kVParts == 1) {
      __syncwarp();
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(1 + kw), "n"(kVParts * cuda::kWarpSize) : "memory");
    }
  }

  // kList: the work-list mode (a separate instantiation, so the ordinary kernel is unchanged).
  template <bool kList>
  static __device__ void run(const KernelParams& p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* q_s = reinterpret_cast<T*>(smem_raw);
    T* ring = q_s + Traits::kQElems;

    const int m_block = blockIdx.x % p.m_blocks;
    const int split = blockIdx.x / p.m_blocks;  // work-list mode: the slot of the (KV head, m-block) plane
    const int kv_group = blockIdx.y;            // query heads [kv_group * group, +group)
    int b = blockIdx.z;
    int list_begin = 0, list_end = 0, list_k_len = -1;
    if constexpr (kList) {
      // Every warp computes the slot's entry (the same integers in every CTA; no barrier).
      const int lane = static_cast<int>(threadIdx.x % cuda::kWarpSize);
      const ListSlot e =
          fold_list_slot<Traits::kBlockKeys>(p, load_list_lane(p, lane), p.list_plane_wave, split, lane);
      // The combine's {count, first slot} of the sequence: written by its split 0 in plane (0, 0)
      // before any return below; the combine reads it after the whole grid has completed.
      if (e.b >= 0 && e.split == 0 && m_block == 0 && kv_group == 0 && threadIdx.x == 0) {
        int32_t* seq = const_cast<int32_t*>(p.seq_splits) + 2 * e.b;
        seq[0] = e.splits;
        seq[1] = e.first;
      }
      if (e.b < 0) return;  // a slot past the plan's last (the grid is sized for list_slot_bound)
      b = e.b;
      list_begin = e.begin;
      list_end = e.end;
      list_k_len = e.k_len;
    }
    const SeqInfo s = seq_info(p, b, list_k_len);          // (the list's plan loaded the K length)
    const int row0 = m_block * kRows;                      // packed row of tile row 0
    const int rows = min(kRows, s.q_len * p.group - row0);  // real rows of this tile (varlen: fewer)
    if (rows <= 0) return;  // varlen: a sequence with fewer (or no) query tokens
    const int head_base = kv_group * p.group;  // query head of packed row R: head_base + R % group
    const int kvh = kv_head_of(head_base, p.group, p.heads_kv);

    const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
    const int g = lane / 4, t = lane % 4;  // fragment row group and column pair
    // Key warp (the 4-warp form: the warp; split-V: the pair, warps 2 kw and 2 kw + 1, which sit on
    // different SM sub-partitions) and this warp's head-dim part of P V (0 in the 4-warp form).
    const int kw = warp / kVParts, vh = warp % kVParts;

    // Sub-tiles (16 keys) this CTA visits: its split's 64-key blocks, cut to the keys its rows
    // see. Both ends of a row's interval grow with its token, so the union over the tile is
    // [lo(first row), hi(last row)] and the intersection [lo(last row), hi(first row)]. Warp w
    // takes the sub-tiles with index = w mod 4, so each step of the four warps reads one 64-key
    // block.
    const KeyInterval vis_first = visible_keys(p, s, row0 / p.group);
    const KeyInterval vis_last = visible_keys(p, s, (row0 + rows - 1) / p.group);
    const int all_lo = vis_last.lo, all_hi = vis_first.hi;  // keys every row of the tile sees
    const int n_blocks = (s.k_len + Traits::kBlockKeys - 1) / Traits::kBlockKeys;
    int blk_begin = 0, blk_end = 0;
    if constexpr (kList) {
      blk_begin = list_begin;
      blk_end = min(list_end, n_blocks);
    } else {
      split_range(n_blocks, split, p.num_splits, &blk_begin, &blk_end);
    }
    int u_begin = blk_begin * kKeyWarps, u_end = blk_end * kKeyWarps;
    if (vis_first.lo <= vis_last.hi) {
      u_begin = max(u_begin, vis_first.lo / kWarpKeys);
      u_end = min(u_end, vis_last.hi / kWarpKeys + 1);
    } else {
      u_end = u_begin;
    }
    // This thread's rows g and g + 8: their visible keys (rows past the tile's end: none).
    KeyInterval row_vis[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tr = g + 8 * r;
      row_vis[r] = tr < rows ? visible_keys(p, s, (row0 + tr) / p.group) : KeyInterval{0, -1};
    }
    const int u_first = u_begin + ((kw - u_begin % kKeyWarps) + kKeyWarps) % kKeyWarps;
    const int n_steps = u_first < u_end ? (u_end - 1 - u_first) / kKeyWarps + 1 : 0;  // this warp's sub-tiles

    // Q rows: tile row r <- Q[token R / group, head head_base + R % group], R = row0 + r; rows
    // past the tile's end are zero-filled.
    const T* q = static_cast<const T*>(p.q);
    for (int c = threadIdx.x; c < kRows * kChunksPerRow; c += kThreads) {
      const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
      const bool valid = r < rows;
      const int tok = (row0 + r) / p.group, head = head_base + (row0 + r) % p.group;
      const T* src = valid ? q + s.q_offset + tok * p.q_row_stride + head * p.q_head_stride + ch * kChunk : q;
      cuda::cp_async_16_or_zero(q_s + r * kRowStride + ch * kChunk, src, valid);
    }
    cuda::cp_async_commit();  // group: Q

    T* warp_ring = ring + kw * kStages * Traits::kStageElems;
    auto stage_k = [&](int i) { return warp_ring + (i % kStages) * Traits::kStageElems; };
    auto u_of = [&](int i) { return u_first + i * kKeyWarps; };  // sub-tile of this warp's step i
    // Paged: the table rows of the prologue's sub-tiles and of the next kTableAhead refills (steps
    // kStages - 1 + a; ahead[0] is the next one), all read before the first copy so their round
    // trips overlap. Past the warp's last step they are unused (page_row reads nothing past k_len).
    PageRow first[kStages - 1];
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) first[i] = page_row(p, s, b, u_of(i), lane);
    PageRow ahead[Traits::kTableAhead];
#pragma unroll
    for (int a = 0; a < Traits::kTableAhead; ++a) {
      ahead[a] = page_row(p, s, b, u_of(kStages - 1 + a), lane);
    }
    // Prologue: sub-tiles 0 .. kStages - 2 in flight, one group each (empty past the warp's last).
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < n_steps) {
        T* dst = stage_k(i);
        if constexpr (kVParts == 1) {
          load_sub_tile(p, s, kvh, u_of(i), lane, first[i], dst, dst + Traits::kSubTileElems);
        } else {
          load_sub_tile_part(p, s, kvh, u_of(i), lane, vh, first[i], dst, dst + Traits::kSubTileElems);
        }
      }
      cuda::cp_async_commit();
    }
    cuda::cp_async_wait<kStages - 1>();  // Q landed (this thread's copies); the sub-tiles may not have
    __syncthreads();                     // every thread's Q copies are visible

    // A = Q for reduction step ks: lane l addresses row l % 16, column half l / 16.
    auto load_q = [&](uint32_t(&a)[4], int ks) {
      cuda::ldmatrix_x4(a, q_s + (lane % 16) * kRowStride + ks * Traits::kMmaK + (lane / 16) * 8);
    };
    uint32_t q_frag[Traits::kQInRegisters ? Traits::kKSteps : 1][4];
    if constexpr (Traits::kQInRegisters) {
#pragma unroll
      for (int ks = 0; ks < Traits::kKSteps; ++ks) load_q(q_frag[ks], ks);
    }

    float o_acc[Traits::kVDTiles][4];  // O columns [vh * kVCols, +kVCols) of rows g, g + 8
#pragma unroll
    for (int dt = 0; dt < Traits::kVDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[dt][e] = 0.f;
    // Row r of this thread is tile row g + 8 r (elements 2r, 2r + 1 of each fragment).
    float m_run[2] = {-INFINITY, -INFINITY};  // running max of the row's scores, log2 units
    float l_run[2] = {0.f, 0.f};              // this thread's share of the row's running sum

    // Keys [all_lo, all_hi] are visible to every row: a sub-tile inside needs no mask.
    const float mult_plain = p.scale * kLog2e;
    for (int i = 0; i < n_steps; ++i) {
      // Refill the stage step i - 1 used with sub-tile i + kStages - 1 *before* waiting for
      // sub-tile i, so kStages sub-tiles (not kStages - 1) are in flight during the wait. The
      // stage is free once every lane is past step i - 1 (its ldmatrix reads fed step i - 1's
      // MMAs; split-V: every lane of the pair). Always commit a group, so the wait below keeps
      // counting steps.
      sync_key_warp(kw);
      if (i + kStages - 1 < n_steps) {
        T* dst = stage_k(i + kStages - 1);
        if constexpr (kVParts == 1) {
          load_sub_tile(p, s, kvh, u_of(i + kStages - 1), lane, ahead[0], dst, dst + Traits::kSubTileElems);
        } else {
          load_sub_tile_part(p, s, kvh, u_of(i + kStages - 1), lane, vh, ahead[0], dst,
                             dst + Traits::kSubTileElems);
        }
      }
      cuda::cp_async_commit();
      // Shift the table queue and read the entry kTableAhead refills ahead; its first use is then
      // that many steps away.
#pragma unroll
      for (int a = 0; a + 1 < Traits::kTableAhead; ++a) ahead[a] = ahead[a + 1];
      ahead[Traits::kTableAhead - 1] = page_row(p, s, b, u_of(i + kStages - 1 + Traits::kTableAhead), lane);
      // Sub-tile i landed (this lane's copies; i + 1 .. i + kStages - 1 may still be in flight),
      // then every lane's (split-V: the pair's, whose K rows both warps read).
      cuda::cp_async_wait<kStages - 1>();
      sync_key_warp(kw);

      const T* k_s = stage_k(i);
      const T* v_s = k_s + Traits::kSubTileElems;
      float sc[Traits::kNTiles][4];
#pragma unroll
      for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < Traits::kKSteps; ++ks) {
        // B = K^T for keys 0-7 and 8-15: lane l addresses key (l % 8) + (l / 16) * 8, head-dim
        // half (l / 8) % 2.
        uint32_t kb[4];
        cuda::ldmatrix_x4(kb, k_s + (lane % 8 + (lane / 16) * 8) * kRowStride + ks * Traits::kMmaK +
                                  ((lane / 8) % 2) * 8);
        if constexpr (Traits::kQInRegisters) {
          Mma::mma(sc[0], q_frag[ks], kb[0], kb[1]);
          Mma::mma(sc[1], q_frag[ks], kb[2], kb[3]);
        } else {
          uint32_t a[4];
          load_q(a, ks);
          Mma::mma(sc[0], a, kb[0], kb[1]);
          Mma::mma(sc[1], a, kb[2], kb[3]);
        }
      }

      float mult = mult_plain;
      if (p.softcap > 0.f) {
        const float inv_cap = p.scale / p.softcap;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[nt][e] = p.softcap * tanhf(sc[nt][e] * inv_cap);
        mult = kLog2e;
      }
      const int j0 = (u_first + i * kKeyWarps) * kWarpKeys;
      if (!(all_lo <= j0 && j0 + kWarpKeys - 1 <= all_hi)) {  // uniform over the warp
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = j0 + nt * Traits::kMmaN + 2 * t + (e % 2);  // key of element e (row g + 8 (e / 2))
            const KeyInterval& rv = row_vis[e / 2];
            sc[nt][e] = (j < rv.lo || j > rv.hi) ? -INFINITY : sc[nt][e];
          }
      }
      // Online softmax per row; P rounded to the input type as the A fragment of P V (C layout
      // == A layout: S tile nt gives registers 2 nt + r).
      uint32_t pa[4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(fmaxf(sc[0][2 * r], sc[0][2 * r + 1]), fmaxf(sc[1][2 * r], sc[1][2 * r + 1]));
        // the 4 threads of a row are lanes 4g..4g+3
        mx = fmaxf(mx, __shfl_xor_sync(cuda::kFullWarpMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(cuda::kFullWarpMask, mx, 2));
        const float m_new = fmaxf(m_run[r], mx * mult);        // mult > 0: the max commutes with it
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no visible key yet
        const float alpha = cuda::fast_exp2(m_run[r] - m_use);
        m_run[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt) {
          sc[nt][2 * r] = cuda::fast_exp2(fmaf(sc[nt][2 * r], mult, -m_use));  // masked: -inf -> 0
          sc[nt][2 * r + 1] = cuda::fast_exp2(fmaf(sc[nt][2 * r + 1], mult, -m_use));
          sum += sc[nt][2 * r] + sc[nt][2 * r + 1];
          pa[2 * nt + r] = Mma::pack(sc[nt][2 * r], sc[nt][2 * r + 1]);
        }
        l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < Traits::kVDTiles; ++dt) {
          o_acc[dt][2 * r] *= alpha;
          o_acc[dt][2 * r + 1] *= alpha;
        }
      }
#pragma unroll
      for (int dt = 0; dt < Traits::kVDTiles; dt += 2) {
        // B = V (keys x head dim, transposed on load) for this warp's head-dim tiles dt, dt + 1:
        // lane l addresses key (l % 8) + ((l / 8) % 2) * 8, head-dim column vh * kVCols + dt * 8 +
        // (l / 16) * 8.
        uint32_t vb[4];
        cuda::ldmatrix_x4_trans(vb, v_s + (lane % 8 + ((lane / 8) % 2) * 8) * kRowStride +
                                        vh * Traits::kVCols + dt * Traits::kMmaN + (lane / 16) * 8);
        Mma::mma(o_acc[dt], pa, vb[0], vb[1]);
        Mma::mma(o_acc[dt + 1], pa, vb[2], vb[3]);
      }
    }
    cuda::cp_async_wait<0>();  // only empty groups can be left, but the ring is reused below
    __syncthreads();           // every warp is done with its ring
    cuda::allow_dependent_launch();

    // Merge the key warps: each writes its unnormalised O rows (split-V: each warp of the pair its
    // columns), its row max and its row sum (split-V: warp 0 of the pair; both hold the same bits).
    float* o_m = reinterpret_cast<float*>(ring);                     // [key warp][row][kMergeRowStride]
    float* m_m = o_m + kKeyWarps * kRows * Traits::kMergeRowStride;  // [key warp][row]
    float* l_m = m_m + kKeyWarps * kRows;                            // [key warp][row]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      float l = l_run[r];
      l += __shfl_xor_sync(cuda::kFullWarpMask, l, 1);
      l += __shfl_xor_sync(cuda::kFullWarpMask, l, 2);
      float* o_row = o_m + (kw * kRows + row) * Traits::kMergeRowStride + vh * Traits::kVCols;
#pragma unroll
      for (int dt = 0; dt < Traits::kVDTiles; ++dt)
        *reinterpret_cast<float2*>(o_row + dt * Traits::kMmaN + 2 * t) = make_float2(o_acc[dt][2 * r], o_acc[dt][2 * r + 1]);
      if (t == 0 && vh == 0) {
        m_m[kw * kRows + row] = m_run[r];
        l_m[kw * kRows + row] = l;
      }
    }
    __syncthreads();

    // Thread x finishes row x / kMergeThreadsPerRow, columns [c0, c0 + kMergeCols): the warps'
    // parts rescaled to the common max and summed in key-warp order.
    const int row = threadIdx.x / Traits::kMergeThreadsPerRow;
    const int c0 = (threadIdx.x % Traits::kMergeThreadsPerRow) * Traits::kMergeCols;
    if (row >= rows) return;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kKeyWarps; ++w) m_max = fmaxf(m_max, m_m[w * kRows + row]);
    float factor[kKeyWarps];
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < kKeyWarps; ++w) {
      const float m_w = m_m[w * kRows + row];
      factor[w] = m_w == -INFINITY ? 0.f : cuda::fast_exp2(m_w - m_max);  // a warp that saw no key: 0
      l += l_m[w * kRows + row] * factor[w];
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
    const float lse = l > 0.f ? (m_max + log2f(l)) * kLn2 : -INFINITY;
    const int tok = (row0 + row) / p.group;
    const int head = head_base + (row0 + row) % p.group;
    const SeqInfo so = seq_info(p, b);
    const int64_t q_token = so.q_token0 + tok;
    auto o_at = [&](int c) {
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < kKeyWarps; ++w)
        x += o_m[(w * kRows + row) * Traits::kMergeRowStride + c] * factor[w];
      return x * inv;
    };
    if (!kList && p.num_splits == 1) {
      T* o = static_cast<T*>(p.out) + so.o_offset + tok * p.o_row_stride + head * p.o_head_stride;
#pragma unroll
      for (int c = c0; c < c0 + Traits::kMergeCols; c += 2) Mma::store2(o + c, o_at(c), o_at(c + 1));
      if (p.lse != nullptr && c0 == 0) p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
    } else {
      // Work-list mode: slot `split` holds one sequence's rows, at its own token (row_splits).
      const int64_t part_token = kList ? static_cast<int64_t>(tok) : q_token;
      const int64_t prow = static_cast<int64_t>(split) * p.partial_rows + part_token * p.heads_q + head;
      if (c0 == 0) p.lse_partial[prow] = lse;
      if (l > 0.f) {  // the combine kernel reads O only of splits with a finite LSE
        float* o = p.o_partial + prow * Traits::kHeadDim;
#pragma unroll
        for (int c = c0; c < c0 + Traits::kMergeCols; c += 2)
          *reinterpret_cast<float2*>(o + c) = make_float2(o_at(c), o_at(c + 1));
      }
    }
  }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) decode_kernel(const KernelParams p) {
  DecodeKernel<Traits>::template run<false>(p);
}

// The work-list mode (p.seq_splits, p.list_plane_wave; grid (m_blocks * slots, Hkv, 1)).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) decode_list_kernel(const KernelParams p) {
  DecodeKernel<Traits>::template run<true>(p);
}

// The split-V form's kernels (Traits::kSplitV): one CTA an SM is all its shared memory allows, and
// saying so lets ptxas use up to 255 registers a thread (without it, it keeps 256 threads to 128
// registers and spills). Separate kernels, so the 4-warp form's are unchanged.
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) decode_split_v_kernel(const KernelParams p) {
  static_assert(Traits::kSplitV, "decode_kernel runs the 4-warp form");
  DecodeKernel<Traits>::template run<false>(p);
}
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) decode_split_v_list_kernel(const KernelParams p) {
  static_assert(Traits::kSplitV, "decode_list_kernel runs the 4-warp form");
  DecodeKernel<Traits>::template run<true>(p);
}

// The kernels of a form: ordinary and work-list mode.
template <class Traits>
constexpr auto decode_kernel_of() {
  if constexpr (Traits::kSplitV) {
    return &decode_split_v_kernel<Traits>;
  } else {
    return &decode_kernel<Traits>;
  }
}
template <class Traits>
constexpr auto decode_list_kernel_of() {
  if constexpr (Traits::kSplitV) {
    return &decode_split_v_list_kernel<Traits>;
  } else {
    return &decode_list_kernel<Traits>;
  }
}

}  // namespace groupattn::cuda_engine
