// The sm90 prefill kernel (Hopper, sm_90a), issue 3. Head dim 64, 128 or 256 (D == Dv), batched or
// varlen Q and K/V (and seqlens_k), MHA/GQA/MQA (query head h reads KV head h / group), causal
// bottom-right, window, softcap, scale, O + LSE. History and measurements: docs/PREFILL_SM90.md.
//
//   Q   [B, Sq, Hq, D] or [total_q, Hq, D]   one CTA per (kBlockM-row query tile, query head, sequence)
//   K,V [B, Sk, Hkv, D] or [total_k, Hkv, D] KV tiles of kBlockN keys by TMA, kStages-deep ring
//   out like Q (Q's dtype), lse fp32 [Hq, total query tokens]
//
// 384 threads: warps 0-3 and 4-7 are two consumer warpgroups (64 query rows each, 240 registers
// after setmaxnreg), warps 8-11 the producer warpgroup (24 registers; one thread issues the
// copies). Head dim 64: 192-row query tiles, 512 threads, three consumer warpgroups at 160
// registers (warps 0-11), the producer warps 12-15; the GEMM turns go round robin. Per KV tile, each consumer warpgroup: S = Q K^T (wgmma m64nNk16, fp32); scale /
// softcap / mask; online softmax along its rows (thread-local, then the quad); O += P V with P
// packed in registers as the A operand (RS, m64nDk16). Overlap: inside a warpgroup, tile i's
// S product and tile i-1's O product are issued together and tile i's softmax runs under the O
// product; across the two warpgroups, named-barrier turns order their GEMM issues (pingpong), so
// one's softmax runs under the other's products. Every warp arrives on the stage's empty barrier
// when its O product is done. Each step's measured effect: docs/PREFILL_SM90.md.
//
// Packed decode (PrefillTraits::kPackedDecode, the sm90 decode engine's multi-token path,
// decode_traits.h packed_rows_form; docs/DECODE_SM90.md sections 12 and 16; head dim 64, 128 or
// 256, KV tile packed_decode_tile): the same loop on other rows and keys.
//   Q   [B, Sq, Hq, D], Sq <= 16            rows r = token * group + head-in-group of one KV head,
//                                           read by the consumer threads (no Q map)
//   grid (row block x split, Hkv, B)        each CTA: its split's KV tiles (split_range), 64-row
//                                           K/V boxes (paged: one page lookup per box)
//   out / lse as above, or (num_splits > 1) fp32 partials in the portable engine's layout, merged
//   by its combine kernel (decode_combine.cuh)
// Row r's mask is that of token r / group (bottom-right causal, window): the visible-key interval
// stays non-decreasing in r, which the tile and mask logic below relies on.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "attention/engines/sm90/decode_combine.cuh"
#include "attention/engines/sm90/decode_traits.h"
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/prefill_phase_stamps.cuh"
#include "attention/engines/sm90/prefill_traits.h"
#include "cuda/cuda_check.h"
#include "cuda/fast_math.cuh"
#include "cuda/mma_sm80.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q_to_f16.cuh"
#include "cuda/sm90/hopper.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace groupattn::sm90_engine {

// Launch flags of the prefill kernel (its last argument, from PrefillLaunch): the grid order, and
// whether the producer prefetches a later CTA's Q into L2 (prefill_detail::prefetch_q_ahead).
inline constexpr int kLaunchHeadsFastest = 1;
inline constexpr int kLaunchQAhead = 2;
// fp8 packed decode: section 17's form (the producer warpgroup widens K and V; with one consumer
// warpgroup the second exits) instead of section 21's (with one consumer warpgroup the second widens
// V). The A/B switch of docs/DECODE_SM90.md section 21 (GROUPATTN_SM90_FP8_CONVERTER_WGS=1).
inline constexpr int kLaunchFp8OneConverterWg = 4;
// Prefill: thread 0 issues Q and the first KV tile before the CTA's __syncthreads
// (prefill_detail::issue_first_loads; PrefillLaunch::early_first_loads).
inline constexpr int kLaunchEarlyLoads = 8;
// Prefill: the staged epilogue writes O into shared memory with stmatrix (store_o_staged).
inline constexpr int kLaunchStsmEpilogue = 16;
// (O by TMA store, PrefillLaunch::tma_store_o, is a second kernel, sm90_prefill_kernel<Traits, true>,
// not a flag: compiled into the one kernel behind a flag it lengthened the shared D 128 loop by 12
// SASS instructions per tile, ptxas allocating differently, with the flag off as well.)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace prefill_detail {

namespace hw = ::groupattn::cuda::sm90;
using cuda_engine::KernelParams;
using cuda_engine::KeyInterval;
using cuda_engine::SeqInfo;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr uint32_t kFullMask = 0xffffffffu;
// fp8 K/V (Traits::kFp8Kv): k(stage) / v(stage) are the converted K / V tiles `stage`; full /
// empty guard the V tiles, k_full(stage) / k_empty(stage) the K tiles, fp8_full / fp8_empty the
// fp8 ring (fp8_k / fp8_v: one slot's tiles).
// Split K/V (Traits::kSplitKv): full / empty guard the V half of each stage, k_full(stage) /
// k_empty(stage) its K half.
template <class Traits>
struct Smem {
  unsigned char* base;  // 1024-byte aligned
  __device__ unsigned char* q() const { return base + Traits::kQOffset; }
  __device__ unsigned char* k(int stage) const {
    if constexpr (Traits::kFp8Kv) {
      return base + Traits::kStageOffset + (Traits::kStages + stage) * Traits::kTileBytes;
    } else {
      return base + Traits::kStageOffset + stage * Traits::kStageBytes;
    }
  }
  __device__ unsigned char* v(int stage) const {
    if constexpr (Traits::kFp8Kv) {
      return base + Traits::kStageOffset + stage * Traits::kTileBytes;
    } else {
      return k(stage) + Traits::kTileBytes;
    }
  }
  __device__ uint64_t* q_full() const { return reinterpret_cast<uint64_t*>(base + Traits::kBarOffset); }
  __device__ uint64_t* full(int stage) const { return q_full() + 1 + stage; }
  __device__ uint64_t* empty(int stage) const { return q_full() + 1 + Traits::kStages + stage; }
  __device__ unsigned char* fp8_k(int slot) const { return base + Traits::kFp8Offset + slot * Traits::kFp8StageBytes; }
  __device__ unsigned char* fp8_v(int slot) const { return fp8_k(slot) + Traits::kFp8TileBytes; }
  __device__ uint64_t* k_full(int stage) const { return q_full() + 1 + 2 * Traits::kStages + stage; }
  __device__ uint64_t* k_empty(int stage) const { return k_full(Traits::kKSlots) + stage; }
  __device__ uint64_t* fp8_full(int slot) const { return k_full(2 * Traits::kKSlots) + slot; }
  __device__ uint64_t* fp8_empty(int slot) const { return fp8_full(Traits::kFp8Stages) + slot; }
  // Traits::kFirstKBarrier: the first KV tile's K with early first loads (after every other barrier).
  __device__ uint64_t* first_k_full() const { return fp8_full(2 * Traits::kFp8Stages); }
};

// A CTA's work: a 128-row query tile of one query head of one sequence (packed decode: 128
// packed rows of one KV head's group), and the KV tiles [blk_begin, blk_end) its rows see (packed
// decode: within its split). Producer and consumers derive it the same way, so they agree on every
// load (a work without KV tiles loads nothing, not even Q).
struct Work {
  SeqInfo s;
  int h, kvh, m0, blk_begin, blk_end;
  // rows: the sequence's rows in this kernel's numbering (q_len; packed decode: q_len x group).
  // wgs: consumer warpgroups that take part (2; packed decode: 1 when the CTA has <= 64 rows).
  int b, rows, wgs, split, kv_group;
  // Tensor-map coordinates of the sequence's first row: batched views are rank-4 maps (row 0 of
  // outer index b), varlen ones rank-3 views mapped with outer = 1 (row cu_seqlens[b] of outer 0).
  int q_row0, q_outer, kv_row0, kv_outer;
  bool has_rows;
  __device__ bool has_tiles() const { return blk_begin < blk_end; }
};

// The query token of row r: r itself, or (packed decode) r / group.
template <class Traits>
__device__ __forceinline__ int row_token(int r, int group) {
  if constexpr (Traits::kPackedDecode) return r / group;
  (void)group;
  return r;
}

// Packed decode: grid (row block x split, KV head, sequence). Rows r = token * group + head in
// the group, so the visible keys of rows m0 .. m0 + n - 1 are those of tokens m0 / group ..
// (m0 + n - 1) / group, non-decreasing as in prefill.
template <class Traits>
__device__ __forceinline__ Work packed_decode_work(const KernelParams& p) {
  Work w;
  w.b = static_cast<int>(blockIdx.z);
  w.s = cuda_engine::seq_info(p, w.b);
  const int m_block = static_cast<int>(blockIdx.x) / p.num_splits;
  w.split = static_cast<int>(blockIdx.x) % p.num_splits;
  w.kv_group = static_cast<int>(blockIdx.y);
  w.h = -1;  // per row: kv_group * group + r % group
  w.kvh = cuda_engine::kv_head_of(w.kv_group * p.group, p.group, p.heads_kv);
  w.q_row0 = w.kv_row0 = 0;  // batched Q and K/V (or paged: rows come per page)
  w.q_outer = w.kv_outer = w.b;
  w.rows = w.s.q_len * p.group;
  w.m0 = m_block * Traits::kBlockM;
  w.has_rows = w.m0 < w.rows;
  w.wgs = w.rows - w.m0 > Traits::kRowsPerWg ? Traits::kConsumerWgs : 1;
  w.blk_begin = w.blk_end = 0;
  if (w.has_rows) {
    const int rows = min(Traits::kBlockM, w.rows - w.m0);
    const KeyInterval first = cuda_engine::visible_keys(p, w.s, w.m0 / p.group);
    const KeyInterval last = cuda_engine::visible_keys(p, w.s, (w.m0 + rows - 1) / p.group);
    const int n_blocks = (w.s.k_len + Traits::kBlockN - 1) / Traits::kBlockN;
    int split_begin = 0, split_end = 0;
    cuda_engine::split_range(n_blocks, w.split, p.num_splits, &split_begin, &split_end);
    if (first.lo <= last.hi) {
      w.blk_begin = max(split_begin, first.lo / Traits::kBlockN);
      w.blk_end = min(split_end, last.hi / Traits::kBlockN + 1);
    }
  }
  return w;
}

// The grid is (query tile, head, sequence), or (head, query tile, sequence) when heads_fastest;
// the last query tiles launched first (causal: they see the most keys); packed decode:
// packed_decode_work.
template <class Traits>
__device__ __forceinline__ Work cta_work(const KernelParams& p, bool heads_fastest) {
  if constexpr (Traits::kPackedDecode) {
    (void)heads_fastest;
    return packed_decode_work<Traits>(p);
  }
  const int b = static_cast<int>(blockIdx.z);
  Work w;
  w.s = cuda_engine::seq_info(p, b);
  w.b = b;
  w.split = w.kv_group = 0;
  w.wgs = Traits::kConsumerWgs;
  w.h = static_cast<int>(heads_fastest ? blockIdx.x : blockIdx.y);
  w.kvh = cuda_engine::kv_head_of(w.h, p.group, p.heads_kv);
  const bool q_varlen = p.cu_seqlens_q != nullptr, kv_varlen = p.cu_seqlens_k != nullptr;
  w.q_row0 = q_varlen ? static_cast<int>(w.s.q_token0) : 0;
  w.q_outer = q_varlen ? 0 : b;
  w.kv_row0 = kv_varlen ? p.cu_seqlens_k[b] : 0;
  w.kv_outer = kv_varlen ? 0 : b;
  const int m_blocks = static_cast<int>(heads_fastest ? gridDim.y : gridDim.x);
  w.m0 = (m_blocks - 1 - static_cast<int>(heads_fastest ? blockIdx.y : blockIdx.x)) * Traits::kBlockM;
  w.rows = w.s.q_len;
  w.has_rows = w.m0 < w.s.q_len;
  w.blk_begin = w.blk_end = 0;
  if (w.has_rows) {
    const int rows = min(Traits::kBlockM, w.s.q_len - w.m0);
    // lo and hi of the visible keys are non-decreasing in the row: the tile needs [lo(first), hi(last)].
    const KeyInterval first = cuda_engine::visible_keys(p, w.s, w.m0);
    const KeyInterval last = cuda_engine::visible_keys(p, w.s, w.m0 + rows - 1);
    if (first.lo <= last.hi) {
      w.blk_begin = first.lo / Traits::kBlockN;
      w.blk_end = last.hi / Traits::kBlockN + 1;
    }
  }
  return w;
}

// Pins A-fragment registers around the asynchronous wgmma region (as hw::fence_regs does for
// accumulators, HOPPER-PRIMITIVES.md section 2).
__device__ __forceinline__ void fence_u32(uint32_t (&r)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Accumulator map of wgmma (HOPPER-PRIMITIVES.md section 2), t = thread of the warpgroup:
//   row(t, i) = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2),  col(t, i) = 8 * (i / 4) + 2 * (t % 4) + i % 2
__device__ __forceinline__ int acc_half(int i) { return (i >> 1) & 1; }  // 0: row r, 1: row r + 8
__device__ __forceinline__ int acc_col(int i, int lane) { return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1); }

// One tile's scores before the online softmax, in place: the softcap (s -> cap * tanh(s * scale /
// cap), inv_cap = scale / cap) and the mask where the tile cuts some row's visible keys (vis: the
// thread's two rows; [common_lo, common_hi]: the keys every row of the warpgroup sees). Returns the
// multiplier into the log2 domain: scale x log2(e), or log2(e) after the softcap (which applied the
// scale). Every test on a uniform value sits outside the per-element loops: ncu of the first cut
// showed ~69 branches per warp and tile (one per element) and instruction-fetch stalls as the
// largest stall reason.
template <int kBlockN, int kS>
__device__ __forceinline__ float cap_and_mask_scores(float (&sacc)[kS], int blk, float softcap, float scale,
                                                     float inv_cap, const KeyInterval (&vis)[2],
                                                     int common_lo, int common_hi, int lane) {
  float mult = scale * kLog2e;
  if (softcap > 0.f) {
#pragma unroll
    for (int i = 0; i < kS; ++i) sacc[i] = softcap * tanhf(sacc[i] * inv_cap);
    mult = kLog2e;
  }
  const int j0 = blk * kBlockN;
  if (!(j0 >= common_lo && j0 + kBlockN - 1 <= common_hi)) {  // some key invisible to some row
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      const int j = j0 + acc_col(i, lane);
      const KeyInterval& v = vis[acc_half(i)];
      sacc[i] = (j < v.lo || j > v.hi) ? -INFINITY : sacc[i];
    }
  }
  return mult;
}

// Online softmax of one tile's scores in place (scores -> probabilities) for the thread's two rows
// (its kS / 2 values of each, then the quad: lanes 4q..4q+3), updating the running max and sum;
// alpha: how much each row's earlier O must shrink (applied by the caller once the previous tile's O
// product has completed). Scores enter the log2 domain through one FFMA inside the exponent:
// p = 2^(s * mult - m), m the row max of s * mult (mult > 0, so the max commutes with it).
// Each row reduces in one serial chain: four chains a row, combined as a tree, measured 1.4-3.6 %
// slower (session 21 call 1) -- ptxas then computes both rows' maxima before the first exponential,
// where with one chain it starts row 0's exponentials under row 1's max.
template <int kS>
__device__ __forceinline__ void online_softmax_rows(float (&sacc)[kS], float (&m_run)[2], float (&l_run)[2],
                                                    float mult, float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kS; ++i)
      if (acc_half(i) == r) mx = fmaxf(mx, sacc[i]);
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(m_run[r], mx * mult);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with no visible key yet
    alpha[r] = ::groupattn::cuda::fast_exp2(m_run[r] - m_use);
    m_run[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      if (acc_half(i) == r) {
        sacc[i] = ::groupattn::cuda::fast_exp2(fmaf(sacc[i], mult, -m_use));  // masked: -inf -> 0
        sum += sacc[i];
      }
    }
    l_run[r] = l_run[r] * alpha[r] + sum;
  }
}

// O *= alpha per row. At head dim 256 (kDBlocks 4: 128 products a thread) skipped where every row of
// the warp keeps its max -- alpha exactly 1, which after a long row's first tiles is most tiles;
// multiplying by 1 is the identity, so the skip changes no bit. One vote per warp and tile (the warp
// owns its rows' accumulators). Measured (session 21 calls 2-3, docs/PREFILL_SM90.md "The softmax's
// chains and the rescale"): D 256 -0.5 to -3.6 %, but D 128 full +0.4 to +2.0 % (the vote on the path
// to the next GEMM issue costs more than 64 products) and D 64 within noise: those keep it off.
template <int kDBlocks>
__device__ __forceinline__ void rescale_o(float (&o)[kDBlocks][32], const float (&alpha)[2]) {
  if constexpr (kDBlocks >= 4) {
    if (__all_sync(kFullMask, alpha[0] == 1.f && alpha[1] == 1.f)) return;
  }
#pragma unroll
  for (int hh = 0; hh < kDBlocks; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] *= alpha[acc_half(i)];
}

// The element type of O += P V's operands (P packed in registers, the V tiles): Q's type, or f16
// with an fp8 cache (PrefillTraits::kPvF16).
template <class Traits>
using PvElement = std::conditional_t<Traits::kPvF16, __half, typename Traits::Element>;

// The element type of S = Q K^T's operands (Q and the K tiles): Q's type, or f16 with an fp8 cache
// (PrefillTraits::kSF16; Q enters f16 scaled, load_packed_q).
template <class Traits>
using SElement = std::conditional_t<Traits::kSF16, __half, typename Traits::Element>;

template <class Traits>
using WgmmaS = hw::Wgmma<std::is_same_v<SElement<Traits>, __nv_bfloat16>, Traits::kBlockN, 0, 0>;

// Packed decode: one KV tile as kKvSubBoxes 64-row boxes per d block of K and of V (paged: each box
// inside one page, page_size being a multiple of 64; smaller pages: produce_packed_decode_runs
// below). Boxes wholly past the sequence's last key are not loaded (a paged sequence's block table
// may end there): their K rows are masked and their V rows zeroed like any row past k_len
// (zero_stale_v), whatever the stage held.
// packed_decode_boxes: the tile's boxes inside the sequence (>= 1); packed_decode_box_at: the map
// coordinates (row, outer) of the box starting at key `key`; load_packed_decode_box: that box of K
// or of V (`map`), every d block, into the tile at `dst`, arriving on `bar` (the caller expects
// the bytes).
template <class Traits>
__device__ __forceinline__ int packed_decode_boxes(const Work& w, int blk) {
  constexpr int kBoxRows = Traits::kKvBoxRows;
  return min(Traits::kKvSubBoxes, (w.s.k_len - blk * Traits::kBlockN + kBoxRows - 1) / kBoxRows);
}
__device__ __forceinline__ void packed_decode_box_at(const KernelParams& p, const Work& w, int key, int* row,
                                                     int* outer) {
  *row = key;
  *outer = w.kv_outer;
  if (p.block_table != nullptr) {
    *outer = p.block_table[w.b * p.block_table_stride + key / p.page_size];
    *row = key % p.page_size;
  }
}
template <class Traits>
__device__ __forceinline__ void load_packed_decode_box(unsigned char* dst, const CUtensorMap* map, const Work& w,
                                                       int row, int outer, uint64_t* bar) {
  for (int db = 0; db < Traits::kDBlocks; ++db)
    hw::tma_load_4d(dst + db * Traits::kKvBoxBytes, map, db * Traits::kSwizzleElems, w.kvh, row, outer, bar);
}

// Packed decode, one barrier pair per stage (D 64, 128): K and V of tile blk on full(stage).
template <class Traits>
__device__ __forceinline__ void produce_packed_decode_tile(const KernelParams& p, const Smem<Traits>& sm,
                                                           const CUtensorMap* tk, const CUtensorMap* tv,
                                                           const Work& w, int blk, int stage) {
  constexpr int kBoxRows = Traits::kKvBoxRows;
  const int boxes = packed_decode_boxes<Traits>(w, blk);
  hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(boxes * 2 * Traits::kDBlocks * kBoxRows * 128));
  for (int sb = 0; sb < boxes; ++sb) {
    int row, outer;
    packed_decode_box_at(p, w, blk * Traits::kBlockN + sb * kBoxRows, &row, &outer);
    const int off = sb * kBoxRows * 128;
    load_packed_decode_box<Traits>(sm.k(stage) + off, tk, w, row, outer, sm.full(stage));
    load_packed_decode_box<Traits>(sm.v(stage) + off, tv, w, row, outer, sm.full(stage));
  }
}

// Packed decode with split K/V barriers (D 256: one 64-row box per tile and d block; the caller
// has waited for the stage's K half): the K half on k_full, then, once the O product that read the
// stage's previous V is done (empty), the V half on full -- produce_split_tile's order. The box's
// coordinates are looked up once, before the wait (the producer runs on 24 registers).
template <class Traits>
__device__ __forceinline__ void produce_packed_decode_split_tile(const KernelParams& p, const Smem<Traits>& sm,
                                                                 const CUtensorMap* tk, const CUtensorMap* tv,
                                                                 const Work& w, int blk, int it) {
  static_assert(Traits::kKvSubBoxes == 1, "split K/V packed decode: one box per tile and d block");
  const int stage = it % Traits::kStages;
  int row, outer;
  packed_decode_box_at(p, w, blk * Traits::kBlockN, &row, &outer);
  hw::mbar_arrive_expect_tx(sm.k_full(stage), static_cast<uint32_t>(Traits::kTileBytes));
  load_packed_decode_box<Traits>(sm.k(stage), tk, w, row, outer, sm.k_full(stage));
  hw::mbar_wait(sm.empty(stage), (static_cast<uint32_t>(it / Traits::kStages) & 1u) ^ 1u);
  hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kTileBytes));
  load_packed_decode_box<Traits>(sm.v(stage), tv, w, row, outer, sm.full(stage));
}

// Packed decode on small pages (page_size a multiple of 8 but not of 64; 16-bit K/V; the engine
// sends these here only with GROUPATTN_SM90_DECODE_PACKED_SMALL_PAGES on, docs/DECODE_SM90.md
// section 22). The tensor maps' boxes are then runs of g = gcd(page_size, 64) rows (8..32), so a
// 128-key tile (D 256: 64) is kBlockN / g runs, each in one page at a slot of its own. One lane
// per run, as the swap-AB producer does (decode_mainloop.cuh produce, section 18): lane i looks up
// run i's page and issues its kDBlocks K and V boxes at row offset i x g of the tile (TMA's 128B
// swizzle is a function of the shared address and every run starts on a 1024-byte boundary, so the
// runs compose into the one-box layout). The lookups of tile t + 1 are loaded before the wait for
// tile t's stage, and lane 0 prefetches the table line kPackedTablePrefetchTiles ahead into L2 (a
// line holds 32 pages: 4 tiles of 128 keys at page 16). Runs starting at or past the sequence's
// end are not loaded (masked K rows, V rows zeroed by zero_stale_v, as for a whole 64-row box).
// Lane 0's expect_tx precedes every lane's issue (__syncwarp); the barriers count one arrival.
inline constexpr int kPackedTablePrefetchTiles = 8;

// Whether a packed-decode launch takes produce_packed_decode_runs: paged with runs below 64 rows.
__device__ __forceinline__ bool packed_decode_small_pages(const KernelParams& p) {
  return p.block_table != nullptr && p.page_size % 64 != 0;
}

template <class Traits>
__device__ void produce_packed_decode_runs(const KernelParams& p, const Smem<Traits>& sm, const CUtensorMap* tk,
                                           const CUtensorMap* tv, const Work& w, int lane) {
  static_assert(Traits::kPackedDecode && !Traits::kFp8Kv, "16-bit packed decode only");
  static_assert(Traits::kBlockN / 8 <= 32, "one lane per run of >= 8 rows");
  if (!w.has_tiles()) return;
  const int box_rows = min(Traits::kKvBoxRows, p.page_size & -p.page_size);  // gcd(page_size, 64), >= 8
  const int runs = Traits::kBlockN / box_rows;
  const int32_t* table = p.block_table + w.b * p.block_table_stride;
  // Run `lane` of tile blk: (page, slot); lanes past the tile's runs or the sequence look nothing up
  // (a key past k_len may lie past the table's row).
  auto coords = [&](int blk, int* outer, int* row) {
    const int key = blk * Traits::kBlockN + lane * box_rows;
    if (lane < runs && key < w.s.k_len) {
      *outer = table[key / p.page_size];
      *row = key % p.page_size;
    }
  };
  int outer = 0, row = 0;
  coords(w.blk_begin, &outer, &row);
  const int dst = lane * box_rows * 128;  // run `lane`'s first row in each d block of the tile
  for (int blk = w.blk_begin, it = 0; blk < w.blk_end; ++blk, ++it) {
    const int stage = it % Traits::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Traits::kStages) & 1u;
    int next_outer = outer, next_row = row;
    if (blk + 1 < w.blk_end) coords(blk + 1, &next_outer, &next_row);
    if (lane == 0) {
      const int ahead = (blk + kPackedTablePrefetchTiles) * Traits::kBlockN;  // a key of this sequence
      if (ahead < w.s.k_len) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<uint64_t>(table + ahead / p.page_size))
                     : "memory");
      }
    }
    const int live = min(runs, (w.s.k_len - blk * Traits::kBlockN + box_rows - 1) / box_rows);
    const auto half_bytes = static_cast<uint32_t>(live * box_rows * 128 * Traits::kDBlocks);  // K (or V) of the tile
    if constexpr (Traits::kSplitKv) {  // D 256: K on k_full once the stage's K is free, V once its V is
      hw::mbar_wait(sm.k_empty(stage), phase ^ 1u);
      if (lane == 0) hw::mbar_arrive_expect_tx(sm.k_full(stage), half_bytes);
      __syncwarp();
      if (lane < live) load_packed_decode_box<Traits>(sm.k(stage) + dst, tk, w, row, outer, sm.k_full(stage));
      hw::mbar_wait(sm.empty(stage), phase ^ 1u);
      if (lane == 0) hw::mbar_arrive_expect_tx(sm.full(stage), half_bytes);
      __syncwarp();
      if (lane < live) load_packed_decode_box<Traits>(sm.v(stage) + dst, tv, w, row, outer, sm.full(stage));
    } else {
      hw::mbar_wait(sm.empty(stage), phase ^ 1u);
      if (lane == 0) hw::mbar_arrive_expect_tx(sm.full(stage), 2 * half_bytes);
      __syncwarp();
      if (lane < live) {
        load_packed_decode_box<Traits>(sm.k(stage) + dst, tk, w, row, outer, sm.full(stage));
        load_packed_decode_box<Traits>(sm.v(stage) + dst, tv, w, row, outer, sm.full(stage));
      }
    }
    outer = next_outer;
    row = next_row;
  }
}

// Split K/V (Traits::kSplitKv; the caller has waited for the stage's K half to be free): the K
// half on k_full, then, once every O product that read the stage's previous V is done (empty),
// the V half on full.
template <class Traits>
__device__ __forceinline__ void produce_split_tile(const Smem<Traits>& sm, const CUtensorMap* tk,
                                                   const CUtensorMap* tv, const Work& w, int blk, int it) {
  const int stage = it % Traits::kStages, row = w.kv_row0 + blk * Traits::kBlockN;
  hw::mbar_arrive_expect_tx(sm.k_full(stage), static_cast<uint32_t>(Traits::kTileBytes));
  for (int db = 0; db < Traits::kDBlocks; ++db)
    hw::tma_load_4d(sm.k(stage) + db * Traits::kKvBoxBytes, tk, db * Traits::kSwizzleElems, w.kvh, row,
                    w.kv_outer, sm.k_full(stage));
  hw::mbar_wait(sm.empty(stage), (static_cast<uint32_t>(it / Traits::kStages) & 1u) ^ 1u);
  hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kTileBytes));
  for (int db = 0; db < Traits::kDBlocks; ++db)
    hw::tma_load_4d(sm.v(stage) + db * Traits::kKvBoxBytes, tv, db * Traits::kSwizzleElems, w.kvh, row,
                    w.kv_outer, sm.full(stage));
}

// The work's Q (prefill), on q_full.
template <class Traits>
__device__ __forceinline__ void load_q(const Smem<Traits>& sm, const CUtensorMap* tq, const Work& w) {
  hw::mbar_arrive_expect_tx(sm.q_full(), static_cast<uint32_t>(Traits::kQBytes));
  for (int db = 0; db < Traits::kDBlocks; ++db) {
    for (int wg = 0; wg < Traits::kConsumerWgs; ++wg) {
      hw::tma_load_4d(sm.q() + db * Traits::kQBlockBytes + wg * Traits::kRowsPerWg * 128, tq,
                      db * Traits::kSwizzleElems, w.h, w.q_row0 + w.m0 + wg * Traits::kRowsPerWg, w.q_outer,
                      sm.q_full());
    }
  }
}

// One K or V tile (prefill, 16-bit): kDBlocks boxes of rows row .. row + kBlockN - 1 into dst, on bar
// (the caller expects the bytes).
template <class Traits>
__device__ __forceinline__ void load_kv_half(unsigned char* dst, const CUtensorMap* map, const Work& w, int row,
                                             uint64_t* bar) {
  for (int db = 0; db < Traits::kDBlocks; ++db)
    hw::tma_load_4d(dst + db * Traits::kKvBoxBytes, map, db * Traits::kSwizzleElems, w.kvh, row, w.kv_outer, bar);
}

// Early first loads (Traits::kEarlyFirstLoads, kLaunchEarlyLoads): thread 0, right after it has
// initialised the barriers and before the CTA's __syncthreads, issues the work's Q and its first KV
// tile into stage 0 (the producer then starts at the second tile). The stamps (docs/PREFILL_SM90.md,
// "Where a short CTA's time goes") put ~0.85 us between a CTA's entry and the producer's first TMA
// (the CTA barrier waits for every warp; then setmaxnreg and the producer's index math), all of it
// before the first S product. Q and K come first and K lands on its own barrier (first_k_full;
// split K/V stages: k_full(0)), so the first S product waits for Q + K (64 KB at D 128) instead of
// Q + K + V (96 KB); V's 32 KB land under it (consume waits for full(0) after the first softmax).
// The same loads as the producer's, in the same order: results are bitwise those of the plain form.
template <class Traits>
__device__ __forceinline__ void issue_first_loads(const Smem<Traits>& sm, const CUtensorMap* tq,
                                                  const CUtensorMap* tk, const CUtensorMap* tv, const Work& w) {
  hw::fence_proxy_async_smem();  // the barrier inits above before the async proxy completes on them
  load_q<Traits>(sm, tq, w);
  const int row = w.kv_row0 + w.blk_begin * Traits::kBlockN;
  uint64_t* const k_bar = Traits::kSplitKv ? sm.k_full(0) : sm.first_k_full();
  hw::mbar_arrive_expect_tx(k_bar, static_cast<uint32_t>(Traits::kTileBytes));
  load_kv_half<Traits>(sm.k(0), tk, w, row, k_bar);
  hw::mbar_arrive_expect_tx(sm.full(0), static_cast<uint32_t>(Traits::kTileBytes));
  load_kv_half<Traits>(sm.v(0), tv, w, row, sm.full(0));
}

// Producer (one elected thread): the work's Q (packed decode: the consumers load it), then its KV
// tiles into the ring, from tile index first_it (1: issue_first_loads issued Q and tile 0).
template <class Traits>
__device__ void produce(const KernelParams& p, const Smem<Traits>& sm, const CUtensorMap* tq, const CUtensorMap* tk,
                        const CUtensorMap* tv, const Work& w, int first_it) {
  if (!w.has_tiles()) return;
  if constexpr (!Traits::kPackedDecode) {
    if (first_it == 0) load_q<Traits>(sm, tq, w);
  }
  for (int blk = w.blk_begin + first_it, it = first_it; blk < w.blk_end; ++blk, ++it) {
    const int stage = it % Traits::kStages;
    if constexpr (Traits::kSplitKv) {
      hw::mbar_wait(sm.k_empty(stage), (static_cast<uint32_t>(it / Traits::kStages) & 1u) ^ 1u);
    } else {
      hw::mbar_wait(sm.empty(stage), (static_cast<uint32_t>(it / Traits::kStages) & 1u) ^ 1u);
    }
    if constexpr (Traits::kPackedDecode && Traits::kSplitKv) {
      produce_packed_decode_split_tile<Traits>(p, sm, tk, tv, w, blk, it);
      continue;
    } else if constexpr (Traits::kPackedDecode) {
      produce_packed_decode_tile<Traits>(p, sm, tk, tv, w, blk, stage);
      continue;
    }
    if constexpr (Traits::kSplitKv) {
      produce_split_tile<Traits>(sm, tk, tv, w, blk, it);
      continue;
    }
    hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kStageBytes));
    const int row = w.kv_row0 + blk * Traits::kBlockN;
    load_kv_half<Traits>(sm.k(stage), tk, w, row, sm.full(stage));
    load_kv_half<Traits>(sm.v(stage), tv, w, row, sm.full(stage));
  }
}

// Q is the one operand a prefill CTA reads from HBM (each query tile once; K/V are L2 hits, 87.6 %
// hit rate in ncu at 64/8 S2048, bench/results/ncu-prefill-s2048-integ11.txt), and it is waited
// for before the first S product: an HBM latency in every CTA's prologue, which the plain grid
// cannot hide (one CTA per SM). The producer, once its last tile is issued, brings into L2 the Q
// tile of the CTA %nsmid places later in launch order -- about the one the block scheduler starts
// when this CTA (or its neighbour) exits, a few tiles later -- so that CTA's own Q load reads L2.
// Batched Q only (varlen rows would need cu_seqlens_q); a hint: nothing waits for it, results are
// unchanged. Registers: the producer runs on 24 after setmaxnreg, so the index math stays small.
template <class Traits>
__device__ __forceinline__ void prefetch_q_ahead(const CUtensorMap* tq, bool heads_fastest) {
  unsigned nsm;
  asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  const uint64_t gx = gridDim.x, gy = gridDim.y;
  const uint64_t ahead = blockIdx.x + gx * (blockIdx.y + gy * blockIdx.z) + nsm;
  if (ahead >= gx * gy * gridDim.z) return;
  const int bx = static_cast<int>(ahead % gx), by = static_cast<int>((ahead / gx) % gy);
  const int bz = static_cast<int>(ahead / (gx * gy));
  // cta_work's mapping: head, and query tile m_blocks - 1 - index (the last tiles first).
  const int h = heads_fastest ? bx : by;
  const int m_tiles = static_cast<int>(heads_fastest ? gy : gx);
  const int m0 = (m_tiles - 1 - (heads_fastest ? by : bx)) * Traits::kBlockM;
  for (int db = 0; db < Traits::kDBlocks; ++db)
    for (int wg = 0; wg < Traits::kConsumerWgs; ++wg)
      hw::tma_prefetch_l2_4d(tq, db * Traits::kSwizzleElems, h, m0 + wg * Traits::kRowsPerWg, bz);
}

// ---- fp8 K/V (Traits::kFp8Kv): the producer warpgroup loads fp8 tiles and widens them ----
//
// fp8 ring: slot t % kFp8Stages holds tile t's K and V, [128 keys][128 d] bytes each (128-byte
// rows, 128B-swizzled: chunk c of row r at c ^ (r % 8)), as two 64-row TMA boxes of the decode
// engine's fp8 maps (box {128 d, 1 head, 64 rows, 1}; paged: one page per box). Boxes wholly past
// the sequence are not loaded; the converters never read their rows (zeros are written instead).
template <class Traits>
__device__ __forceinline__ void produce_fp8_tile(const KernelParams& p, const Smem<Traits>& sm, const CUtensorMap* tk,
                                                 const CUtensorMap* tv, const Work& w, int blk, int slot) {
  constexpr int kBoxRows = Traits::kKvBoxRows;
  constexpr int kBoxBytes = kBoxRows * Traits::kHeadDim;  // one byte per element
  const int key0 = blk * Traits::kBlockN;
  const int boxes = min(Traits::kKvSubBoxes, (w.s.k_len - key0 + kBoxRows - 1) / kBoxRows);  // >= 1
  hw::mbar_arrive_expect_tx(sm.fp8_full(slot), static_cast<uint32_t>(boxes * 2 * kBoxBytes));
  for (int sb = 0; sb < boxes; ++sb) {
    int row, outer;
    packed_decode_box_at(p, w, key0 + sb * kBoxRows, &row, &outer);
    hw::tma_load_4d(sm.fp8_k(slot) + sb * kBoxBytes, tk, 0, w.kvh, row, outer, sm.fp8_full(slot));
    hw::tma_load_4d(sm.fp8_v(slot) + sb * kBoxBytes, tv, 0, w.kvh, row, outer, sm.fp8_full(slot));
  }
}

// The boxes produce_fp8_tile would load for tile blk, into L2 only (Traits::kFp8PrefetchTiles): when
// the tile's turn in the ring comes, its TMA loads read L2 instead of HBM. The same boxes (those
// inside the sequence; paged: the page of each), so nothing past a block table's end is touched.
template <class Traits>
__device__ __forceinline__ void prefetch_fp8_tile(const KernelParams& p, const CUtensorMap* tk,
                                                  const CUtensorMap* tv, const Work& w, int blk) {
  constexpr int kBoxRows = Traits::kKvBoxRows;
  const int key0 = blk * Traits::kBlockN;
  const int boxes = min(Traits::kKvSubBoxes, (w.s.k_len - key0 + kBoxRows - 1) / kBoxRows);  // >= 1
  for (int sb = 0; sb < boxes; ++sb) {
    int row, outer;
    packed_decode_box_at(p, w, key0 + sb * kBoxRows, &row, &outer);
    hw::tma_prefetch_l2_4d(tk, 0, w.kvh, row, outer);
    hw::tma_prefetch_l2_4d(tv, 0, w.kvh, row, outer);
  }
}

// Two e4m3 values (bits 0-7, 8-15 of `pair`) -> an Element pair (low half = bits 0-7), exact: one
// cvt to f16 (every e4m3 value, subnormals included, is a normal f16 or zero); for bf16 then each
// f16 -> f32 and the f32's high 16 bits, which are its bf16 exactly (an e4m3 value has at most 4
// significant bits, so the low 16 bits of its f32 are zero; NaN stays NaN: the cvt gives a quiet
// NaN, whose top mantissa bit is in the high half). One conversion-unit instruction per pair,
// where the swap-AB path's f32 -> bf16 pack takes a second (decode_mainloop.cuh, e4m3x2_to).
template <class T>
__device__ __forceinline__ uint32_t widen_e4m3x2(uint32_t pair) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  const __half2 h2(raw);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __byte_perm(__float_as_uint(__low2float(h2)), __float_as_uint(__high2float(h2)), 0x7632u);
  } else {
    return *reinterpret_cast<const uint32_t*>(&h2);
  }
}

// Converter thread u: key row u of one fp8 tile (at src) -> row u of the tile of Out at dst (its two
// 64-wide d blocks kKvBoxBytes apart, 128-byte rows, chunk cc at cc ^ (u % 8): the layout TMA gives
// the 16-bit path, which the GEMMs read). fp8 chunk c (d 16c .. 16c + 15) becomes 16-bit chunks
// 2 (c % 4) and 2 (c % 4) + 1 of d block c / 4. A warp's lanes take 32 consecutive rows, so the 8
// lanes of each 16-byte access phase hit 8 distinct chunks (the swizzle): no bank conflicts.
// Rows past the sequence (live == false) become zeros, fp8 bytes unread: P = 0 times a stale V row
// must stay 0, and a zero K row keeps its (masked) scores finite.
template <class Traits, class Out>
__device__ __forceinline__ void widen_row(unsigned char* dst, const unsigned char* src, int u, bool live) {
  constexpr int kChunks = Traits::kHeadDim / 16;  // 16-byte fp8 chunks of one row
  const int x = u % 8;
  unsigned char* row = dst + u * 128;
  // 16-bit chunk cc of d block b of the row (the swizzled slot of 16-byte chunk cc).
  auto chunk = [&](int b, int cc) {
    return reinterpret_cast<uint4*>(row + b * Traits::kKvBoxBytes + ((cc ^ x) << 4));
  };
  if (!live) {
#pragma unroll
    for (int c = 0; c < 2 * kChunks; ++c) *chunk(c / 8, c % 8) = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  // The row's loads in batches of kBatch, each batch's loads before its conversions and stores: a
  // load latency per batch, not per chunk (section 13's form tested `live` inside the chunk loop,
  // and the branch per chunk made each chunk wait for its own load: 8 load latencies per row in
  // SASS). Half the row per batch keeps the converter inside its 56 registers.
  constexpr int kBatch = kChunks / 2;
#pragma unroll
  for (int c0 = 0; c0 < kChunks; c0 += kBatch) {
    uint4 f[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      f[j] = *reinterpret_cast<const uint4*>(src + u * 128 + (((c0 + j) ^ x) << 4));
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = c0 + j, cc = 2 * (c % 4);
      *chunk(c / 4, cc) = make_uint4(widen_e4m3x2<Out>(f[j].x), widen_e4m3x2<Out>(f[j].x >> 16),
                                     widen_e4m3x2<Out>(f[j].y), widen_e4m3x2<Out>(f[j].y >> 16));
      *chunk(c / 4, cc + 1) = make_uint4(widen_e4m3x2<Out>(f[j].z), widen_e4m3x2<Out>(f[j].z >> 16),
                                         widen_e4m3x2<Out>(f[j].w), widen_e4m3x2<Out>(f[j].w >> 16));
    }
  }
}

// Which halves of each fp8 tile a converter warpgroup widens (docs/DECODE_SM90.md section 21):
// kKAndV, the producer warpgroup alone (two consumer warpgroups, or the A/B switch); with one
// consumer warpgroup the producer warpgroup widens K (kK) and the idle consumer warpgroup V (kV), in
// parallel, each at one warp per scheduler.
enum class Fp8Role { kKAndV, kK, kV };

// A converter warpgroup with an fp8 cache (thread u = 0..127): thread 0 keeps the fp8 ring full
// (kFp8Stages tiles ahead) and kFp8PrefetchTiles more tiles on their way into L2; every thread
// widens key row u of each tile t, K into converted K tile t % kKSlots once every consumer warp's S
// product of tile t - kKSlots (the tile's last reader) is done (k_empty), V into converted V tile
// t % kStages once the O product that read it two tiles ago is done (empty). With two K tiles K(t)
// is widened while S(t - 1) runs, so the consumers' S(t) does not wait for it. Each warp publishes
// its rows with fence.proxy.async (generic stores -> wgmma's async-proxy reads), a warp barrier
// and one arrival (k_full / full count kConverterWarps), then frees the fp8 slot (fp8_empty,
// counted the same way) after both halves of the tile are read. Split roles (kK, kV): the K
// warpgroup's thread 0 issues the first loads and prefetches, the V warpgroup's thread 0 the
// refills (V(t) waits for O(t - 2), so the V side usually reads a slot last); fp8_empty counts the
// warps of both. Deadlock-free: K(t) waits for fp8_full(t) and S(t - 2), V(t) for fp8_full(t) and
// O(t - 2), and the refill of tile t + kF for both sides' tile t; none of these waits on the other
// side's later work (S(t - 2) and O(t - 2) need only K(t - 2), V(t - 2) and V(t - 3)).
template <class Traits>
__device__ void convert_fp8(const KernelParams& p, const Smem<Traits>& sm, const CUtensorMap* tk, const CUtensorMap* tv,
                            const Work& w, int u, Fp8Role role) {
  constexpr int kF = Traits::kFp8Stages, kKs = Traits::kKSlots;
  const bool widen_k = role != Fp8Role::kV, widen_v = role != Fp8Role::kK;
  const int lane = u % 32;
  const int tiles = w.blk_end - w.blk_begin;
  if (tiles <= 0) return;
  if (widen_k && u == 0) {
    for (int t = 0; t < min(kF, tiles); ++t) produce_fp8_tile<Traits>(p, sm, tk, tv, w, w.blk_begin + t, t);
    for (int t = kF; t < min(kF + Traits::kFp8PrefetchTiles, tiles); ++t)
      prefetch_fp8_tile<Traits>(p, tk, tv, w, w.blk_begin + t);
  }
  __syncwarp();
  auto publish = [&](uint64_t* bar) {
    hw::fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) hw::mbar_arrive(bar);
  };
  for (int t = 0; t < tiles; ++t) {
    const int blk = w.blk_begin + t, slot = t % kF, ks = t % kKs, vs = t % Traits::kStages;
    const bool live = blk * Traits::kBlockN + u < w.s.k_len;
    hw::mbar_wait(sm.fp8_full(slot), static_cast<uint32_t>(t / kF) & 1u);
    if (widen_k) {
      // The first kKSlots tiles pass at once (a fresh barrier completes the phase before phase 0).
      hw::mbar_wait(sm.k_empty(ks), (static_cast<uint32_t>(t / kKs) & 1u) ^ 1u);
      hw::fence_proxy_async_smem();  // wgmma's reads of the old tile (async proxy) before these writes
      widen_row<Traits, SElement<Traits>>(sm.k(ks), sm.fp8_k(slot), u, live);
      publish(sm.k_full(ks));
    }
    if (widen_v) {
      hw::mbar_wait(sm.empty(vs), (static_cast<uint32_t>(t / Traits::kStages) & 1u) ^ 1u);
      hw::fence_proxy_async_smem();
      widen_row<Traits, PvElement<Traits>>(sm.v(vs), sm.fp8_v(slot), u, live);
      publish(sm.full(vs));
    }
    if (lane == 0) hw::mbar_arrive(sm.fp8_empty(slot));  // (publish's warp barrier ordered the lanes' reads)
    // Refill the slot with tile t + kF once every warp has read it.
    if (widen_v && u == 0 && t + kF < tiles) {
      hw::mbar_wait(sm.fp8_empty(slot), static_cast<uint32_t>(t / kF) & 1u);
      produce_fp8_tile<Traits>(p, sm, tk, tv, w, blk + kF, slot);
      if (t + kF + Traits::kFp8PrefetchTiles < tiles)
        prefetch_fp8_tile<Traits>(p, tk, tv, w, blk + kF + Traits::kFp8PrefetchTiles);
    }
    __syncwarp();
  }
}

// S = Q K^T for warpgroup wg's 64 rows (fresh accumulators), issued only: the caller fences,
// commits and waits. k-step kk: d block kk / 4, +32 bytes per step inside a block (descriptor
// + 2), on both operands.
template <class Traits>
__device__ __forceinline__ void issue_scores(float (&s)[Traits::kBlockN / 2], const Smem<Traits>& sm, int stage,
                                             int wg) {
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    const uint64_t da =
        hw::desc_kmajor_sw128(sm.q() + (kk / 4) * Traits::kQBlockBytes + wg * Traits::kRowsPerWg * 128) + 2 * (kk % 4);
    const uint64_t db = hw::desc_kmajor_sw128(sm.k(stage) + (kk / 4) * Traits::kKvBoxBytes) + 2 * (kk % 4);
    WgmmaS<Traits>::mma(s, da, db, kk > 0 ? 1 : 0);
  }
}

// O += P V, RS form, issued only: A = P from registers (k-step kk = accumulator registers
// 8kk..8kk+7 of S, packed pairwise: pfrag[kk]), B = V read MN-major over all D at once (at D 128
// and 256 the 64-wide d boxes kKvBoxBytes apart = the descriptor's LBO; k-step kk = 16 key rows =
// +2048 bytes). One instruction per k-step: m64n64k16, m64n128k16 or m64n256k16.
template <class Traits>
__device__ __forceinline__ void issue_output(float (&o)[Traits::kDBlocks][32],
                                             const uint32_t (&pfrag)[Traits::kBlockN / 16][4], const Smem<Traits>& sm,
                                             int stage) {
  constexpr bool kBf16 = std::is_same_v<PvElement<Traits>, __nv_bfloat16>;
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
    const uint64_t db =
        hw::desc_mnmajor_sw128(sm.v(stage) + kk * 16 * 128, static_cast<uint32_t>(Traits::kKvBoxBytes));
    if constexpr (Traits::kDBlocks == 4) {
      hw::WgmmaRs256<kBf16, 1>::mma(o, pfrag[kk], db, 1);
    } else if constexpr (Traits::kDBlocks == 2) {
      hw::WgmmaRs128<kBf16, 1>::mma(o, pfrag[kk], db, 1);
    } else {
      hw::WgmmaRs64<kBf16, 1>::mma(o[0], pfrag[kk], db, 1);
    }
  }
}

// Pins the registers an in-flight wgmma group may touch (accumulators and A fragments) at the
// points where the asynchronous region starts and ends (HOPPER-PRIMITIVES.md section 2).
template <class Traits>
__device__ __forceinline__ void fence_output(float (&o)[Traits::kDBlocks][32],
                                             uint32_t (&pfrag)[Traits::kBlockN / 16][4]) {
#pragma unroll
  for (int hh = 0; hh < Traits::kDBlocks; ++hh) hw::fence_regs(o[hh]);
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) fence_u32(pfrag[kk]);
}

// Packed decode: warpgroup wg's 64 rows of Q into its part of the Q blocks, in the layout the
// prefill's TMA boxes give (row n of block db at n * 128 bytes, 16-byte chunk c at c ^ (n % 8):
// 128B swizzle, K-major). Row r = m0 + 64 wg + n is token r / group, query head kv_group * group +
// r % group; rows past the sequence's are zero. Any group works (a TMA box {64 d, group, tokens}
// would need group x tokens-per-box = 64). Returns what the scores must be multiplied by: 1, or for
// a bf16 Q going to an f16 S product (SElement) 2^-e, where the rows were stored as Q x 2^e rounded
// to f16, e from the warpgroup's largest |q| (cuda/q_to_f16.cuh: the rule and why the scores stay
// exact). bar: a named barrier of the warpgroup's 128 threads (the caller's, used again after).
template <class Traits>
__device__ __forceinline__ float load_packed_q(const KernelParams& p, const Work& w, const Smem<Traits>& sm,
                                               int wg, int tid_in_wg, uint32_t bar) {
  using T = typename Traits::Element;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;  // 16-byte chunks
  constexpr int kChunksPerBlock = Traits::kSwizzleElems / 8;
  constexpr int kPerThread = Traits::kRowsPerWg * kChunksPerRow / 128;
  static_assert(Traits::kRowsPerWg * kChunksPerRow % 128 == 0, "whole chunks per thread");
  const T* q = static_cast<const T*>(p.q);
  uint4 val[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {  // every load in flight before the first store
    const int c = tid_in_wg + 128 * j, n = c / kChunksPerRow, ch = c % kChunksPerRow;
    const int r = w.m0 + wg * Traits::kRowsPerWg + n;
    val[j] = make_uint4(0u, 0u, 0u, 0u);
    if (r < w.rows) {
      const int token = r / p.group, head = w.kv_group * p.group + r % p.group;
      val[j] = *reinterpret_cast<const uint4*>(q + w.s.q_offset + static_cast<int64_t>(token) * p.q_row_stride +
                                               static_cast<int64_t>(head) * p.q_head_stride + ch * 8);
    }
  }
  float unscale = 1.f;
  if constexpr (!std::is_same_v<T, SElement<Traits>>) {  // bf16 Q, f16 S: the warpgroup's max |q| first
    // Written out rather than through cuda::scale_q_to_f16 (the swap-AB form's): the same steps,
    // but that build of this kernel measured 113.8 us against this one's 108.3 at 64/8 B1 x 128K, 8
    // tokens, with the bf16-S twin at 130.3 / 130.5 beside each (session 19 calls 8 and 6; one
    // sample, not explained), so the kernel stays as measured.
    float qmax = 0.f;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      for (const uint32_t x : {val[j].x, val[j].y, val[j].z, val[j].w})
        qmax = fmaxf(qmax, cuda::bf16x2_abs_max(x));
    }
    // The four warps' maxima in the first bytes of the warpgroup's own Q rows, before the rows.
    uint32_t* red = reinterpret_cast<uint32_t*>(sm.q() + wg * Traits::kRowsPerWg * 128);
    const uint32_t warp_max = cuda::warp_max_bits(qmax);
    if (tid_in_wg % 32 == 0) red[tid_in_wg / 32] = warp_max;
    hw::named_bar_sync(bar, 128);
    const uint32_t all_max =
        cuda::warp_max_bits(__uint_as_float(max(max(red[0], red[1]), max(red[2], red[3]))));
    hw::named_bar_sync(bar, 128);  // every thread has read them before the rows overwrite them
    const int e = cuda::f16_q_exponent(__uint_as_float(all_max));
    const float up = cuda::pow2f(e);
    unscale = cuda::pow2f(-e);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      val[j] =
          make_uint4(cuda::bf16x2_to_f16x2_scaled(val[j].x, up), cuda::bf16x2_to_f16x2_scaled(val[j].y, up),
                     cuda::bf16x2_to_f16x2_scaled(val[j].z, up), cuda::bf16x2_to_f16x2_scaled(val[j].w, up));
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int c = tid_in_wg + 128 * j, n = c / kChunksPerRow, ch = c % kChunksPerRow;
    const int db = ch / kChunksPerBlock, cc = ch % kChunksPerBlock;
    *reinterpret_cast<uint4*>(sm.q() + db * Traits::kQBlockBytes + (wg * Traits::kRowsPerWg + n) * 128 +
                              ((cc ^ (n % 8)) * 16)) = val[j];
  }
  hw::fence_proxy_async_smem();  // generic stores -> wgmma operand reads (the warpgroup's barrier follows)
  return unscale;
}

// Epilogue of one consumer warpgroup (Traits::kStagedEpilogue): its normalised O (row r of the
// thread's two: scaled by inv[r]) as 16-bit pairs into its own 64 rows of the Q blocks -- the Q
// layout, row n of d block db at n * 128 bytes, 16-byte chunk c at c ^ (n % 8) (the 8 rows a warp
// writes per register pair hit 8 distinct chunks: no bank conflicts) -- then 16-byte chunks to
// the output, consecutive lanes along a row (a warp stores 512 contiguous bytes of d 256). The
// caller's last wgmma_wait covers its last S product, the only reader of those rows (wgmma's
// completion orders its async-proxy reads before these generic writes); rows past the sequence
// are not stored. kTmaO (Traits::kTmaStoreO, batched Q): each warp's own 16 rows leave by TMA
// stores through the O map `to` instead, whose row extent is the sequence length (rows past it
// are not written).
template <class Traits, bool kTmaO>
__device__ __forceinline__ void store_o_staged(const KernelParams& p, const Work& w, const Smem<Traits>& sm,
                                               float (&o)[Traits::kDBlocks][32], const float (&inv)[2],
                                               int wg, int warp_in_wg, int lane, bool stsm, const CUtensorMap* to) {
  using T = typename Traits::Element;
  using Store = ::groupattn::cuda::MmaType<T>;
  // Row n of d block db at rows + db * kQBlockBytes + n * 128; the thread's rows: n0 and n0 + 8.
  unsigned char* rows = sm.q() + wg * Traits::kRowsPerWg * 128;
  // Not at D 64: its consumers' 160 registers spilled 20 bytes with both forms compiled in.
  if (Traits::kConsumerWgs == 2 && stsm) {
    // stmatrix (kLaunchStsmEpilogue): 8-column block j of the warp's 16 rows is two 8x8 matrices
    // (rows 0-7: registers 4j, 4j + 1; rows 8-15: 4j + 2, 4j + 3, packed), each lane holding its
    // row lane / 4, columns 2 (lane % 4) .. + 1 as stmatrix expects; one x4 stores blocks 2q and
    // 2q + 1. Lane l addresses row 16 warp_in_wg + l % 8 + 8 ((l / 8) % 2) of block 2q + l / 16,
    // whose 16-byte chunk sits at (2q + l / 16) ^ (l % 8) = c0 ^ 2q: the same bytes at the same
    // places as the 4-byte stores below, 8 instructions per d block instead of 32 and their
    // addresses (D 128 at 1.45 us per epilogue in the stamps; ~670 SASS instructions).
    const int n = 16 * warp_in_wg + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int c0 = (lane >> 4) ^ (lane & 7);
    unsigned char* row = rows + n * 128;
#pragma unroll
    for (int hh = 0; hh < Traits::kDBlocks; ++hh) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i0 = 8 * q, i1 = 8 * q + 4;  // registers of blocks 2q and 2q + 1
        hw::stmatrix_x4(row + hh * Traits::kQBlockBytes + ((c0 ^ (2 * q)) << 4),
                        Store::pack(o[hh][i0] * inv[0], o[hh][i0 + 1] * inv[0]),
                        Store::pack(o[hh][i0 + 2] * inv[1], o[hh][i0 + 3] * inv[1]),
                        Store::pack(o[hh][i1] * inv[0], o[hh][i1 + 1] * inv[0]),
                        Store::pack(o[hh][i1 + 2] * inv[1], o[hh][i1 + 3] * inv[1]));
      }
    }
  } else {
    const int n0 = 16 * warp_in_wg + lane / 4;
#pragma unroll
    for (int hh = 0; hh < Traits::kDBlocks; ++hh) {
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int n = n0 + 8 * acc_half(i), col = acc_col(i, lane);
        const float scale = inv[acc_half(i)];
        unsigned char* dst =
            rows + hh * Traits::kQBlockBytes + n * 128 + (((col / 8) ^ (n % 8)) * 16) + (col % 8) * 2;
        *reinterpret_cast<uint32_t*>(dst) = Store::pack(o[hh][i] * scale, o[hh][i + 1] * scale);
      }
    }
  }
  if constexpr (kTmaO) {
    // Both forms above write only the warp's own rows 16 warp_in_wg .. + 15 of the warpgroup's 64,
    // so a warp barrier orders them before the copy: no warpgroup barrier, no read-back, no
    // 16-byte global stores (~290 of the D 128 epilogue's SASS instructions per thread), and each
    // warp's rows leave as soon as it has written them. One lane issues the warp's kDBlocks boxes
    // and waits until the TMA unit has read them (the CTA's shared memory must outlive the reads;
    // the global writes complete on their own and are visible when the kernel ends).
    (void)p;
    hw::fence_proxy_async_smem();  // each writer: generic stores -> the async proxy's reads
    __syncwarp();
    const int row = w.m0 + wg * Traits::kRowsPerWg + Traits::kOBoxRows * warp_in_wg;  // the box's first row
    if (lane == 0 && row < w.rows) {
      const unsigned char* box = rows + Traits::kOBoxRows * warp_in_wg * 128;
      // Map coordinates (d, head, row of the sequence, sequence): batched Q, sequence blockIdx.z.
#pragma unroll
      for (int hh = 0; hh < Traits::kDBlocks; ++hh)
        hw::tma_store_4d(to, hh * Traits::kSwizzleElems, w.h, row, static_cast<int>(blockIdx.z),
                         box + hh * Traits::kQBlockBytes);
      hw::bulk_commit_group();
      hw::bulk_wait_group_read_all();
    }
  } else {
    (void)to;
    constexpr uint32_t kBarOut = 6;  // + wg: the warpgroup's own rows, its own barrier
    hw::named_bar_sync(kBarOut + wg, 128);
    constexpr int kChunksPerRow = Traits::kHeadDim / 8;  // 16-byte chunks of one output row
    constexpr int kPerThread = Traits::kRowsPerWg * kChunksPerRow / 128;
    static_assert(Traits::kRowsPerWg * kChunksPerRow % 128 == 0, "whole chunks per thread");
    // Chunk c = t + 128 j: row c / kChunksPerRow, d 8 (c % kChunksPerRow) .. + 7.
    const int t = 32 * warp_in_wg + lane;
    uint4 val[kPerThread];
  #pragma unroll
    for (int j = 0; j < kPerThread; ++j) {  // every shared-memory read in flight before the first store
      const int c = t + 128 * j, n = c / kChunksPerRow, ch = c % kChunksPerRow;
      val[j] = *reinterpret_cast<const uint4*>(rows + (ch / 8) * Traits::kQBlockBytes + n * 128 +
                                               (((ch % 8) ^ (n % 8)) * 16));
    }
    T* out = static_cast<T*>(p.out) + w.s.o_offset + static_cast<int64_t>(w.h) * p.o_head_stride;
  #pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int c = t + 128 * j, n = c / kChunksPerRow, ch = c % kChunksPerRow;
      const int row = w.m0 + wg * Traits::kRowsPerWg + n;  // query token of the sequence
      if (row < w.rows)
        *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * p.o_row_stride + ch * 8) = val[j];
    }

  }
}

// One consumer warpgroup's part of the work: its 64 query rows against the work's KV tiles, then
// their O and LSE (packed decode with several splits: the split's fp32 partials).
// kTmaO: the staged epilogue's O by TMA store through `to` (store_o_staged).
template <class Traits, bool kTmaO>
__device__ void consume(const KernelParams& p, const Work& w, const Smem<Traits>& sm, int wg, int warp_in_wg,
                        int lane, bool first_k_own, bool stsm_epilogue, const CUtensorMap* to) {
  if constexpr (Traits::kTrimLiveValues) {
    // Lane 0's (the same in the whole warp): ptxas then derives the turn barriers and the
    // warpgroup's rows and addresses in uniform registers.
    wg = __shfl_sync(kFullMask, wg, 0);
    warp_in_wg = __shfl_sync(kFullMask, warp_in_wg, 0);
  }
  const SeqInfo& s = w.s;
  const int m0 = w.m0, blk_begin = w.blk_begin, blk_end = w.blk_end;
  using T = typename Traits::Element;
  using Store = ::groupattn::cuda::MmaType<T>;  // store2 (O)
  using PStore = ::groupattn::cuda::MmaType<PvElement<Traits>>;  // pack (P, the RS A fragment)
  constexpr int kS = Traits::kBlockN / 2;  // S accumulator registers per thread
  // The thread's two rows: r and r + 8 (query tokens of the sequence; packed decode: packed rows,
  // of token row_token(r)).
  const int row_base = m0 + wg * Traits::kRowsPerWg + 16 * warp_in_wg + lane / 4;
  KeyInterval vis[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    vis[r] = row < w.rows ? cuda_engine::visible_keys(p, s, row_token<Traits>(row, p.group)) : KeyInterval{0, -1};
  }
  // Keys every valid row of the warpgroup sees (lo and hi are non-decreasing in the row): tiles
  // inside need no per-element test.
  const int wg_first = m0 + wg * Traits::kRowsPerWg;
  const int wg_last = min(wg_first + Traits::kRowsPerWg, w.rows) - 1;
  int common_lo = 1, common_hi = 0;  // empty unless the warpgroup has rows
  if (wg_first <= wg_last) {
    common_lo = cuda_engine::visible_keys(p, s, row_token<Traits>(wg_last, p.group)).lo;
    common_hi = cuda_engine::visible_keys(p, s, row_token<Traits>(wg_first, p.group)).hi;
  }
  // Traits::kSkipUnseenTiles: the tiles [blk_begin, own_end) are computed, the rest of the CTA's
  // are passed (no row of this warpgroup sees their keys: hi is non-decreasing in the row). At
  // least the first tile is computed, so the loop keeps its shape (first S, overlapped steps, last O).
  // (The lane-0 shuffle lets ptxas treat own_end as warp-uniform: without it the loop counter and
  // the stage's descriptors left the uniform datapath, +36 instructions per tile at D 64.)
  int own_end = blk_end;
  if constexpr (Traits::kSkipUnseenTiles) {
    const int hi =
        wg_first <= wg_last ? cuda_engine::visible_keys(p, s, row_token<Traits>(wg_last, p.group)).hi : -1;
    const int end = max(blk_begin + 1, min(blk_end, hi < 0 ? 0 : hi / Traits::kBlockN + 1));
    own_end = __shfl_sync(kFullMask, end, 0);
  }

  float o[Traits::kDBlocks][32];
#pragma unroll
  for (int hh = 0; hh < Traits::kDBlocks; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float sacc[kS];
  // fp8 K/V: the products are of the stored keys and values, so the (sequence, KV head)'s key
  // scale joins the score scale and its value scale multiplies O at the end (as the swap-AB form,
  // decode_softmax.cuh and decode_epilogue.cuh); the widening itself is exact.
  [[maybe_unused]] float k_scale = 1.f, v_scale = 1.f;
  if constexpr (Traits::kFp8Kv) {
    k_scale = p.k_scale[w.b * p.k_scale_b_stride + w.kvh * p.k_scale_h_stride];
    v_scale = p.v_scale[w.b * p.v_scale_b_stride + w.kvh * p.v_scale_h_stride];
  }

  // Packed decode with a bf16 Q and an f16 S product (SElement): Q goes in as Q x 2^e, so it is
  // loaded here, before the score scale that 2^-e joins (loading it where the other forms do, and
  // scaling `scale` and `inv_cap` there, spilled 8 bytes of the 224-register consumers).
  constexpr bool kScaledQ =
      Traits::kPackedDecode && !std::is_same_v<typename Traits::Element, SElement<Traits>>;
  constexpr uint32_t kBarQ = 4;  // + wg: each warpgroup reads only its own Q rows
  float q_unscale = 1.f;
  if constexpr (kScaledQ) {
    if (blk_begin < blk_end) {
      q_unscale = load_packed_q<Traits>(p, w, sm, wg, 32 * warp_in_wg + lane, kBarQ + wg);
      hw::named_bar_sync(kBarQ + wg, 128);
    }
    k_scale *= q_unscale;
  }
  // Softcap: s -> cap * tanh(s * scale / cap). The quotient once, before the loop: the IEEE
  // division's slow path is a subroutine call, whose return address spilled inside the loop at
  // 160 registers (three consumer warpgroups, D 64).
  float scale = p.scale;
  if constexpr (Traits::kFp8Kv) scale *= k_scale;
  const float inv_cap = p.softcap > 0.f ? scale / p.softcap : 0.f;

  // Softmax of one tile's scores (sacc, in place: scores -> probabilities), updating the running
  // max and sum; alpha: how much the rows' earlier O must shrink (applied by the caller, once the
  // previous tile's O product has completed).
  auto softmax_tile = [&](int blk, float(&alpha)[2]) {
    const float mult = cap_and_mask_scores<Traits::kBlockN>(sacc, blk, p.softcap, scale, inv_cap, vis,
                                                            common_lo, common_hi, lane);
    online_softmax_rows(sacc, m_run, l_run, mult, alpha);
  };
  auto pack_p = [&](uint32_t (&pf)[Traits::kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pf[kk][r] = PStore::pack(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
  };
  // Pingpong turns, round robin: warpgroup wg issues its GEMMs only after syncing on its turn
  // barrier, then releases the next one's (wg + 1 modulo the warpgroups taking part). Every
  // warpgroup takes T = tiles + 1 turns (S of the first tile; S and the previous O; the last O).
  // Warpgroup 0 goes first: the last warpgroup pre-arrives once on warpgroup 0's barrier and skips
  // its arrive after its last turn, so every barrier gets exactly T releases and none is left
  // half-arrived when the CTA exits. Named barrier ids of the kernel: 0 __syncthreads, 1 / 2 / 9
  // the turns of warpgroups 0 / 1 / 2, 3 kBarZeroV, 4 + wg packed decode's Q, 6 + wg the epilogue.
  constexpr uint32_t kTurnThreads = 2 * 128;  // the warpgroup whose turn it is + the one before it
  auto turn_bar = [](int g) { return g == 2 ? 9u : 1u + static_cast<uint32_t>(g); };
  // (Measured at a552d4d: +0.7 to +4.2 % over no turns on five shapes, docs/PREFILL_SM90.md.)
  // Packed decode with one warpgroup taking part: no turns.
  const bool pingpong = !Traits::kPackedDecode || w.wgs == 2;
  const int last_wg = w.wgs - 1;
  auto turn_begin = [&] {
    if (pingpong) hw::named_bar_sync(turn_bar(wg), kTurnThreads);
  };
  auto turn_end = [&](bool last) {
    if (pingpong && !(last && wg == last_wg)) hw::named_bar_arrive(turn_bar(wg == last_wg ? 0 : wg + 1), kTurnThreads);
  };
  // The tile holding the sequence's last key also holds rows past it: the next sequence's keys
  // (varlen) or stale cache rows (seqlens_k) -- zeros only where the map itself ends. Their scores
  // are masked, but P = 0 times a non-finite V row would still be NaN: the consumer warpgroups
  // zero those V rows (each 128-byte row is one whole swizzle row, so the layout does not matter),
  // fence them for the async proxy and sync before any issues a product that reads them.
  // Before the turn barrier, so the two barriers cannot wait on each other.
  constexpr uint32_t kBarZeroV = 3;
  const int zero_threads = 128 * w.wgs;  // the warpgroups taking part (prefill: all of them)
  [[maybe_unused]] auto zero_stale_v = [&](int blk, int stage) {
    const int valid = s.k_len - blk * Traits::kBlockN;  // rows of this tile inside the sequence
    if (valid >= Traits::kBlockN) return;
    const int ctid = wg * 128 + 32 * warp_in_wg + lane;  // 0 .. zero_threads - 1 over the consumer warpgroups
    constexpr int kChunksPerBox = Traits::kBlockN * 128 / 16;
    for (int c = valid * 8 + ctid; c < kChunksPerBox; c += zero_threads) {
#pragma unroll
      for (int db = 0; db < Traits::kDBlocks; ++db)
        reinterpret_cast<uint4*>(sm.v(stage) + db * Traits::kKvBoxBytes)[c] = make_uint4(0, 0, 0, 0);
    }
    hw::fence_proxy_async_smem();
    hw::named_bar_sync(kBarZeroV, static_cast<uint32_t>(zero_threads));
  };
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) hw::mbar_arrive(sm.empty(stage));
  };
  // A tile's operands before its S product: 16-bit, the stage (K and V by TMA; stale V rows
  // zeroed); split K/V, the stage's K half; fp8, the stage's converted K tile (the converters fill
  // it once every warp's S of the tile kKSlots earlier is done: release_k). The V tile of tile it
  // (split K/V: the stage's V half, its stale rows zeroed; fp8: the converted V tile) is waited for
  // (wait_v) just before the O product that reads it, one tile later; release() frees it (and the
  // combined 16-bit stage).
  auto wait_k = [&](int blk, int it, int stage) {
    if constexpr (Traits::kFp8Kv || Traits::kSplitKv) {
      (void)blk;
      hw::mbar_wait(sm.k_full(stage), static_cast<uint32_t>(it / Traits::kStages) & 1u);
    } else {
      hw::mbar_wait(sm.full(stage), static_cast<uint32_t>(it / Traits::kStages) & 1u);
      zero_stale_v(blk, stage);
    }
  };
  auto wait_v = [&](int blk, int it, int stage) {
    if constexpr (Traits::kFp8Kv || Traits::kSplitKv)
      hw::mbar_wait(sm.full(stage), static_cast<uint32_t>(it / Traits::kStages) & 1u);
    if constexpr (Traits::kSplitKv) zero_stale_v(blk, stage);
    (void)blk;
    (void)it;
    (void)stage;
  };
  // After every S product that read the tile's K (fp8: the stage's converted K tile; split K/V: the
  // stage's K half, which the producer then refills while the V half is still read).
  auto release_k = [&](int stage) {
    if constexpr (Traits::kFp8Kv || Traits::kSplitKv) {
      __syncwarp();
      if (lane == 0) hw::mbar_arrive(sm.k_empty(stage));
    }
    (void)stage;
  };

  // Intra-warpgroup overlap: tile it's S = Q K^T and tile it-1's O += P V are issued together;
  // the softmax of tile it runs while the O product is still on the tensor cores. Order per tile:
  // O(it-1) done -> free its stage -> O *= alpha(it) -> P(it) becomes the next A operand.
  if (blk_begin < blk_end) {
    if constexpr (Traits::kPackedDecode) {
      if constexpr (!kScaledQ) {  // (a scaled Q was loaded above)
        (void)load_packed_q<Traits>(p, w, sm, wg, 32 * warp_in_wg + lane, kBarQ + wg);
        hw::named_bar_sync(kBarQ + wg, 128);
      }
    } else {
      hw::mbar_wait(sm.q_full(), 0u);
      GA_PREFILL_STAMP(wg == 0 && warp_in_wg == 0 && lane == 0, kQLanded);
    }
    uint32_t pfrag[Traits::kBlockN / 16][4];
    float alpha[2];
    if (pingpong && wg == last_wg) hw::named_bar_arrive(turn_bar(0), kTurnThreads);
    int prev_stage = 0;
    // Early first loads (issue_first_loads) with combined stage barriers: tile 0's K has its own
    // barrier, and its V (full(0), then its stale rows zeroed) is waited for after the first softmax.
    if (Traits::kFirstKBarrier && first_k_own) {
      hw::mbar_wait(sm.first_k_full(), 0u);
    } else {
      wait_k(blk_begin, 0, 0);
    }
    GA_PREFILL_STAMP(wg == 0 && warp_in_wg == 0 && lane == 0, kFirstK);
    hw::fence_regs(sacc);
    turn_begin();
    hw::wgmma_fence();
    issue_scores<Traits>(sacc, sm, prev_stage, wg);
    hw::wgmma_commit();
    turn_end(false);
    hw::wgmma_wait<0>();
    hw::fence_regs(sacc);
    GA_PREFILL_STAMP(wg == 0 && warp_in_wg == 0 && lane == 0, kFirstS0);
    GA_PREFILL_STAMP(wg == 1 && warp_in_wg == 0 && lane == 0, kFirstS1);
    release_k(prev_stage);
    softmax_tile(blk_begin, alpha);  // O is still zero: nothing to rescale
    pack_p(pfrag);
    // Where the next tile's wait_k (and its stale-V barrier) sits: between the turns, every
    // consumer warpgroup passes it after its first turn.
    if (Traits::kFirstKBarrier && first_k_own) wait_k(blk_begin, 0, 0);
    // Traits::kPinnedOverlap: tile blk's K is waited for at the end of the previous iteration,
    // between the softmax and wgmma_wait<0>, so that ptxas cannot hoist the wait above the softmax.
    if constexpr (Traits::kPinnedOverlap) {
      if (blk_begin + 1 < own_end) wait_k(blk_begin + 1, 1, 1 % Traits::kStages);
    }
    for (int blk = blk_begin + 1, it = 1; blk < own_end; ++blk, ++it) {
      const int stage = it % Traits::kStages;
      if constexpr (!Traits::kPinnedOverlap) wait_k(blk, it, stage);
      wait_v(blk - 1, it - 1, prev_stage);
      hw::fence_regs(sacc);
      fence_output<Traits>(o, pfrag);
      turn_begin();
      hw::wgmma_fence();
      issue_scores<Traits>(sacc, sm, stage, wg);
      hw::wgmma_commit();
      issue_output<Traits>(o, pfrag, sm, prev_stage);
      hw::wgmma_commit();
      turn_end(false);
      hw::wgmma_wait<1>();  // the scores (the older group) are done; O += P V may still run
      hw::fence_regs(sacc);
      release_k(stage);
      softmax_tile(blk, alpha);
      if constexpr (Traits::kPinnedOverlap) {
        if (blk + 1 < own_end) wait_k(blk + 1, it + 1, (it + 1) % Traits::kStages);
      }
      hw::wgmma_wait<0>();
      fence_output<Traits>(o, pfrag);
      release(prev_stage);
      rescale_o(o, alpha);
      pack_p(pfrag);  // after the wait: P(it-1)'s registers are free again
      prev_stage = stage;
    }
    wait_v(own_end - 1, own_end - blk_begin - 1, prev_stage);
    // Passed tiles (Traits::kSkipUnseenTiles) keep every warpgroup's sequence of barriers the same:
    // turn k of every warpgroup is preceded by the wait for tile blk_begin + k (and the stale-V
    // barrier all consumer warpgroups meet there) -- here the wait for tile own_end precedes this
    // warpgroup's turn for its last O product, which the others take for S(own_end). (With the wait
    // one turn later a computing warpgroup would sit in the stale-V barrier before a turn its
    // successor needs: a deadlock.)
    if (own_end < blk_end) wait_k(own_end, own_end - blk_begin, (own_end - blk_begin) % Traits::kStages);
    fence_output<Traits>(o, pfrag);
    turn_begin();
    hw::wgmma_fence();
    issue_output<Traits>(o, pfrag, sm, prev_stage);
    hw::wgmma_commit();
    turn_end(own_end == blk_end);
    hw::wgmma_wait<0>();
    fence_output<Traits>(o, pfrag);
    release(prev_stage);
    // Then one turn per passed tile (every warpgroup takes tiles + 1 turns), and each passed tile's
    // release the producer counts on -- after its wait, so it lands in the tile's phase.
    for (int blk = own_end, it = own_end - blk_begin; blk < blk_end; ++blk, ++it) {
      release(it % Traits::kStages);
      if (blk + 1 < blk_end) wait_k(blk + 1, it + 1, (it + 1) % Traits::kStages);
      turn_begin();
      turn_end(blk + 1 == blk_end);
    }
    GA_PREFILL_STAMP(wg == 0 && warp_in_wg == 0 && lane == 0, kLoopEnd0);
    GA_PREFILL_STAMP(wg == 1 && warp_in_wg == 0 && lane == 0, kLoopEnd1);
  }

  // Epilogue: row sums over the quad, normalise, write LSE and O (prefill: through shared memory,
  // store_o_staged; packed decode: pairs of adjacent d from registers); packed decode with several
  // splits: the split's partials, which the combine kernel (launched as a dependent of this grid;
  // it waits for the grid to finish) merges.
  if constexpr (Traits::kPackedDecode) cuda::allow_dependent_launch();
  if constexpr (Traits::kStagedEpilogue) {
    float inv[2];
    // The LSE column of the sequence's first query; Traits::kTrimLiveValues: re-derived here
    // rather than held through the loop (its 64 bits were the last values ptxas spilled).
    int64_t q_token0 = s.q_token0;
    if constexpr (Traits::kTrimLiveValues) q_token0 = cuda_engine::seq_info(p, w.b).q_token0;
    if constexpr (kTmaO) {
      // LSE after O has left: the form's proxy fence (MEMBAR.ALL.CTA) then has no global store of
      // this thread before it to order. The same values as below.
      float lse[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(kFullMask, l, 1);
        l += __shfl_xor_sync(kFullMask, l, 2);
        inv[r] = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
        lse[r] = l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
      }
      store_o_staged<Traits, true>(p, w, sm, o, inv, wg, warp_in_wg, lane, stsm_epilogue, to);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row_base + 8 * r;
        if (row < w.rows && p.lse != nullptr && (lane & 3) == 0)
          p.lse[w.h * p.lse_head_stride + (q_token0 + row) * p.lse_row_stride] = lse[r];
      }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(kFullMask, l, 1);
        l += __shfl_xor_sync(kFullMask, l, 2);
        inv[r] = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
        const int row = row_base + 8 * r;
        if (row < w.rows && p.lse != nullptr && (lane & 3) == 0) {
          p.lse[w.h * p.lse_head_stride + (q_token0 + row) * p.lse_row_stride] =
              l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
        }
      }
      store_o_staged<Traits, false>(p, w, sm, o, inv, wg, warp_in_wg, lane, stsm_epilogue, to);
    }
    GA_PREFILL_STAMP(wg == 0 && warp_in_wg == 0 && lane == 0, kEpiEnd0);
    GA_PREFILL_STAMP(wg == 1 && warp_in_wg == 0 && lane == 0, kEpiEnd1);
    GA_PREFILL_STAMP_NS(wg == 0 && warp_in_wg == 0 && lane == 0, kEndNs);
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      const int row = row_base + 8 * r;
      if (row >= w.rows) continue;
      const int tok = row_token<Traits>(row, p.group);
      const int h = Traits::kPackedDecode ? w.kv_group * p.group + row % p.group : w.h;  // query head
      float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
      if constexpr (Traits::kFp8Kv) inv *= v_scale;
      if constexpr (Traits::kPackedDecode) {
        if (p.num_splits > 1) {
          // The portable engine's partial layout: row (split, global query token, query head).
          const int64_t prow =
              static_cast<int64_t>(w.split) * p.partial_rows + (s.q_token0 + tok) * p.heads_q + h;
          if ((lane & 3) == 0) p.lse_partial[prow] = l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
          if (!(l > 0.f)) continue;  // the combine reads O only of splits with a finite LSE
          float* dst = p.o_partial + prow * Traits::kHeadDim;
#pragma unroll
          for (int hh = 0; hh < Traits::kDBlocks; ++hh) {
#pragma unroll
            for (int i = 0; i < 32; i += 2) {
              if (acc_half(i) != r) continue;
              *reinterpret_cast<float2*>(dst + 64 * hh + acc_col(i, lane)) =
                  make_float2(o[hh][i] * inv, o[hh][i + 1] * inv);
            }
          }
          continue;
        }
      }
      T* out = static_cast<T*>(p.out) + s.o_offset + static_cast<int64_t>(tok) * p.o_row_stride +
               static_cast<int64_t>(h) * p.o_head_stride;
#pragma unroll
      for (int hh = 0; hh < Traits::kDBlocks; ++hh) {
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
          if (acc_half(i) != r) continue;
          const int d = 64 * hh + acc_col(i, lane);
          Store::store2(out + d, o[hh][i] * inv, o[hh][i + 1] * inv);
        }
      }
      if (p.lse != nullptr && (lane & 3) == 0) {
        p.lse[h * p.lse_head_stride + (s.q_token0 + tok) * p.lse_row_stride] =
            l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
      }
    }
  }
}

template <class Traits, bool kTmaO>
__device__ void prefill_cta(const KernelParams& p, const CUtensorMap* tq, const CUtensorMap* tk,
                            const CUtensorMap* tv, const CUtensorMap* to, int flags) {
  const bool heads_fastest = (flags & kLaunchHeadsFastest) != 0;
  const bool early_loads = Traits::kEarlyFirstLoads && (flags & kLaunchEarlyLoads) != 0;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  GA_PREFILL_STAMP(threadIdx.x == 0, kStart);
  GA_PREFILL_STAMP_NS(threadIdx.x == 0, kStartNs);
  GA_PREFILL_STAMP_SMID(threadIdx.x == 0);
  const Smem<Traits> sm{hw::align_1024(smem_raw)};
  const Work w = cta_work<Traits>(p, heads_fastest);
  GA_PREFILL_STAMP_VALUE(threadIdx.x == 0, kTiles, static_cast<unsigned long long>(w.blk_end - w.blk_begin));
  if (!w.has_rows) return;  // the whole CTA, before any barrier
  // fp8 with one consumer warpgroup: the other widens V (Fp8Role), unless the A/B switch says not.
  const bool v_converter_wg = Traits::kFp8Kv && w.wgs == 1 && (flags & kLaunchFp8OneConverterWg) == 0;

  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    hw::mbar_init(sm.q_full(), 1);
    // full: one TMA arrival (+ bytes); fp8: the converted V tile's, one arrival per converter warp.
    const uint32_t full_count = Traits::kFp8Kv ? Traits::kConverterWarps : 1;
    for (int st = 0; st < Traits::kStages; ++st) {
      hw::mbar_init(sm.full(st), full_count);
      hw::mbar_init(sm.empty(st), 4 * w.wgs);  // every warp of the consumer warpgroups taking part
      if constexpr (Traits::kSplitKv) {        // the stage's K half: one TMA arrival, every warp
        hw::mbar_init(sm.k_full(st), 1);
        hw::mbar_init(sm.k_empty(st), 4 * w.wgs);
      }
    }
    if constexpr (Traits::kFp8Kv) {
      for (int st = 0; st < Traits::kKSlots; ++st) {
        hw::mbar_init(sm.k_full(st), Traits::kConverterWarps);
        hw::mbar_init(sm.k_empty(st), 4 * w.wgs);
      }
      for (int st = 0; st < Traits::kFp8Stages; ++st) {
        hw::mbar_init(sm.fp8_full(st), 1);
        hw::mbar_init(sm.fp8_empty(st), Traits::kConverterWarps * (v_converter_wg ? 2u : 1u));
      }
    }
    if constexpr (Traits::kFirstKBarrier) hw::mbar_init(sm.first_k_full(), 1);
    hw::mbar_init_fence();
    if constexpr (Traits::kEarlyFirstLoads) {
      if (early_loads && w.has_tiles()) {
        GA_PREFILL_STAMP(true, kProducerStart);
        issue_first_loads<Traits>(sm, tq, tk, tv, w);
      }
    }
  }
  if (warp == Traits::kProducerWarp && lane == 0) {
    if constexpr (!Traits::kPackedDecode) hw::prefetch_tensormap(tq);  // (packed decode: no Q map)
    if constexpr (kTmaO) hw::prefetch_tensormap(to);
    hw::prefetch_tensormap(tk);
    hw::prefetch_tensormap(tv);
  }
  __syncthreads();

  if (warp >= Traits::kProducerWarp) {  // the producer warpgroup: one thread issues every copy (small pages: a warp)
    hw::setmaxnreg_dec<Traits::kProducerRegs>();
    if constexpr (Traits::kFp8Kv) {  // ... and with an fp8 cache all four warps widen the tiles
      convert_fp8<Traits>(p, sm, tk, tv, w, tid - Traits::kConsumerThreads,
                          v_converter_wg ? Fp8Role::kK : Fp8Role::kKAndV);
    } else {
      if constexpr (Traits::kPackedDecode) {
        // Packed decode re-derives the work here, after setmaxnreg: its values are then born
        // inside the producer's 24 registers. Taken from before the fork they stay where the
        // consumers' allocation put them, and at D 256 (O alone 128 of the consumers' 240)
        // ptxas spilled 4 bytes for the paged lookups (the values are the same: cta_work is a
        // function of the launch and of the lengths, which nothing writes during the kernel).
        // Small pages: the whole producer warp, one lane per run (produce_packed_decode_runs).
        if (warp == Traits::kProducerWarp) {
          if (packed_decode_small_pages(p)) {
            produce_packed_decode_runs<Traits>(p, sm, tk, tv, cta_work<Traits>(p, heads_fastest), lane);
          } else if (lane == 0) {
            produce<Traits>(p, sm, tq, tk, tv, cta_work<Traits>(p, heads_fastest), 0);
          }
        }
      } else if (warp == Traits::kProducerWarp && lane == 0) {
        GA_PREFILL_STAMP(!early_loads, kProducerStart);
        produce<Traits>(p, sm, tq, tk, tv, w, early_loads ? 1 : 0);
        GA_PREFILL_STAMP(true, kProducerDone);
        if ((flags & kLaunchQAhead) != 0 && p.cu_seqlens_q == nullptr) prefetch_q_ahead<Traits>(tq, heads_fastest);
      }
    }
  } else {
    if (warp / 4 >= w.wgs) {  // packed decode, <= 64 rows: the second warpgroup has none ...
      if constexpr (Traits::kFp8Kv) {  // ... and with an fp8 cache it widens V (entry registers)
        if (v_converter_wg) convert_fp8<Traits>(p, sm, tk, tv, w, tid - 4 * 32 * w.wgs, Fp8Role::kV);
      }
      return;
    }
    hw::setmaxnreg_inc<Traits::kConsumerRegs>();
    GA_PREFILL_STAMP(warp == 0 && lane == 0, kReady);
    consume<Traits, kTmaO>(p, w, sm, warp / 4, warp % 4, lane, early_loads, (flags & kLaunchStsmEpilogue) != 0, to);
  }
}

}  // namespace prefill_detail
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// flags: kLaunchHeadsFastest, the grid is (Hq, m_blocks, B) instead of (m_blocks,
// Hq, B); kLaunchQAhead, prefetch_q_ahead; kLaunchEarlyLoads, issue_first_loads;
// kLaunchStsmEpilogue, store_o_staged with stmatrix (PrefillLaunch).
// Packed decode: kLaunchFp8OneConverterWg or 0.
// kTmaO (Traits::kTmaStoreO only; PrefillLaunch::tma_store_o, batched Q): O leaves by TMA stores
// through tmap_o. Without it tmap_o is not read (the launcher passes a copy of another map); it
// comes after flags so that the other parameters keep their offsets.
template <class Traits, bool kTmaO = false>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm90_prefill_kernel(const cuda_engine::KernelParams p, const __grid_constant__ CUtensorMap tmap_q,
                        const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                        const int flags, const __grid_constant__ CUtensorMap tmap_o) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kTmaO || Traits::kTmaStoreO, "the TMA store of O: prefill at D 128 / 256 only");
  prefill_detail::prefill_cta<Traits, kTmaO>(p, &tmap_q, &tmap_k, &tmap_v, &tmap_o, flags);
#else
  (void)p;
  (void)tmap_q;
  (void)tmap_k;
  (void)tmap_v;
  (void)flags;
  (void)tmap_o;
#endif
}

// The persistent form's launcher (prefill_persistent.cuh, which the translation units that instantiate
// launch_prefill at head dim 128 include).
template <class Traits>
Status launch_prefill_persistent(const cuda_engine::KernelParams& p, const PrefillLaunch& l, cudaStream_t stream);

template <class Traits>
Status launch_prefill_traits(const cuda_engine::KernelParams& p, const PrefillLaunch& l, cudaStream_t stream) {
  if constexpr (Traits::kPersistentForm) {
    if (l.persistent_grid > 0 && l.tma_store_o && l.o_tmap != nullptr && p.cu_seqlens_q == nullptr &&
        p.cu_seqlens_k == nullptr && p.seqlens_k == nullptr && p.window_left < 0 && p.window_right < 0 &&
        (!p.causal || p.seqlen_q - p.seqlen_k < Traits::kBlockM))
      return launch_prefill_persistent<Traits>(p, l, stream);
  }
  const auto m_blocks = static_cast<unsigned>(p.m_blocks), heads = static_cast<unsigned>(p.heads_q);
  const dim3 grid(l.heads_fastest ? heads : m_blocks, l.heads_fastest ? m_blocks : heads,
                  static_cast<unsigned>(p.batch));
  const int flags = (l.heads_fastest ? kLaunchHeadsFastest : 0) | (l.q_prefetch_ahead ? kLaunchQAhead : 0) |
                    (l.early_first_loads ? kLaunchEarlyLoads : 0) | (l.stsm_epilogue ? kLaunchStsmEpilogue : 0);
  const auto& q_map = *static_cast<const CUtensorMap*>(l.q_tmap);
  const auto& k_map = *static_cast<const CUtensorMap*>(l.k_tmap);
  const auto& v_map = *static_cast<const CUtensorMap*>(l.v_tmap);
  if constexpr (Traits::kTmaStoreO) {
    if (l.tma_store_o && l.o_tmap != nullptr && p.cu_seqlens_q == nullptr) {
      constexpr auto kTmaKernel = sm90_prefill_kernel<Traits, true>;
      GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kTmaKernel>(static_cast<int>(Traits::kSmemBytes)));
      kTmaKernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(
          p, q_map, k_map, v_map, flags, *static_cast<const CUtensorMap*>(l.o_tmap));
      return cuda::last_launch_status("sm90_prefill_kernel (O by TMA store)");
    }
  }
  GA_RETURN_IF_ERROR(
      cuda::set_max_dynamic_smem_once<sm90_prefill_kernel<Traits>>(static_cast<int>(Traits::kSmemBytes)));
  sm90_prefill_kernel<Traits><<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p, q_map, k_map, v_map,
                                                                                      flags, q_map);
  return cuda::last_launch_status("sm90_prefill_kernel");
}

// Head dim 256 with l.d256_n80: the 80-key form (PrefillTraitsD256N80, its own kernels; K/V maps
// of 80-row boxes).
template <class T, int kHeadDim>
Status launch_prefill_head_dim(const cuda_engine::KernelParams& p, const PrefillLaunch& l,
                               cudaStream_t stream) {
  if constexpr (kHeadDim == 256) {
    if (l.d256_n80) return launch_prefill_traits<PrefillTraitsD256N80<T>>(p, l, stream);
  }
  return launch_prefill_traits<PrefillTraits<T, kHeadDim>>(p, l, stream);
}

// Head dim 256 compiles in its own translation units (inst_prefill_{bf16,f16}_d256.cu), so the
// d128 ones (which also hold d64) do not build its kernel as well.
extern template Status launch_prefill_head_dim<__nv_bfloat16, 256>(const cuda_engine::KernelParams&,
                                                                   const PrefillLaunch&, cudaStream_t);
extern template Status launch_prefill_head_dim<__half, 256>(const cuda_engine::KernelParams&,
                                                            const PrefillLaunch&, cudaStream_t);

template <class T>
Status launch_prefill(const cuda_engine::KernelParams& p, const PrefillLaunch& l, cudaStream_t stream) {
  if (l.head_dim == 64) return launch_prefill_head_dim<T, 64>(p, l, stream);
  if (l.head_dim == 256) return launch_prefill_head_dim<T, 256>(p, l, stream);
  return launch_prefill_head_dim<T, 128>(p, l, stream);
}

// The sm90 decode engine's multi-token path (grid: m_blocks row blocks x num_splits, Hkv, B), then
// the split combine. The kernel takes no Q map in this mode: the K map fills its slot (the V map the
// unread O map's). kFp8: an
// f8e4m3 cache (head dim 128; the decode engine's fp8 maps, boxes of 64 rows of 128 bytes).
template <class Traits>
Status launch_decode_packed_traits(const cuda_engine::KernelParams& p, const DecodeLaunch& l,
                                   cudaStream_t stream) {
  using T = typename Traits::Element;
  constexpr bool kFp8 = Traits::kFp8Kv;
  auto* kernel = sm90_prefill_kernel<Traits>;
  GA_RETURN_IF_ERROR(
      cuda::set_max_dynamic_smem_once<sm90_prefill_kernel<Traits>>(static_cast<int>(Traits::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(p.m_blocks * p.num_splits), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  const auto& k_map = *static_cast<const CUtensorMap*>(l.k_tmap);
  const int flags = kFp8 && l.fp8_one_converter_wg ? kLaunchFp8OneConverterWg : 0;
  const auto& v_map = *static_cast<const CUtensorMap*>(l.v_tmap);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p, k_map, k_map, v_map, flags, v_map);
  GA_RETURN_IF_ERROR(cuda::last_launch_status(kFp8 ? "sm90_prefill_kernel (packed decode, fp8 K/V)"
                                                   : "sm90_prefill_kernel (packed decode)"));
  if (p.num_splits == 1) return Status::Ok();
  return launch_split_combine<T, Traits::kHeadDim>(p, stream);
}

template <class T, int kHeadDim, bool kFp8>
Status launch_decode_packed_kv(const cuda_engine::KernelParams& p, const DecodeLaunch& l,
                               cudaStream_t stream) {
  if constexpr (kFp8 && std::is_same_v<T, __nv_bfloat16>) {  // the A/B switch's S in bf16
    if (l.fp8_bf16_mma) return launch_decode_packed_traits<PrefillTraitsFp8QTypeS<T>>(p, l, stream);
  }
  return launch_decode_packed_traits<PrefillTraits<T, kHeadDim, /*kPackedDecode=*/true, kFp8>>(p, l, stream);
}

// The fp8 K/V kernels compile in their own translation units (inst_decode_packed_fp8_{bf16,f16}.cu),
// and so do the 16-bit head-dim-256 ones (inst_decode_packed_{bf16,f16}_d256.cu); head dims 64 and
// 128 compile in inst_decode_packed_{bf16,f16}.cu, which hold the dispatch.
extern template Status launch_decode_packed_kv<__nv_bfloat16, kPackedDecodeHeadDim, true>(
    const cuda_engine::KernelParams&, const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_packed_kv<__half, kPackedDecodeHeadDim, true>(const cuda_engine::KernelParams&,
                                                                                    const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_packed_kv<__nv_bfloat16, 256, false>(const cuda_engine::KernelParams&,
                                                                          const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_packed_kv<__half, 256, false>(const cuda_engine::KernelParams&,
                                                                   const DecodeLaunch&, cudaStream_t);

// l.head_dim: 64, 128 or 256 (16-bit K/V; the engine declines others); l.fp8: head dim 128.
template <class T>
Status launch_decode_packed(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream) {
  if (l.fp8) return launch_decode_packed_kv<T, kPackedDecodeHeadDim, true>(p, l, stream);
  if (l.head_dim == 64) return launch_decode_packed_kv<T, 64, false>(p, l, stream);
  if (l.head_dim == 256) return launch_decode_packed_kv<T, 256, false>(p, l, stream);
  return launch_decode_packed_kv<T, kPackedDecodeHeadDim, false>(p, l, stream);
}

}  // namespace groupattn::sm90_engine
