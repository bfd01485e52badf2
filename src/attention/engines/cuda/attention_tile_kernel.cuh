// The cuda engine's attention kernel (FlashAttention-2 style, mma.sync, sm80+). One kernel serves
// prefill and decode, MHA/GQA/MQA: query heads of one KV group are packed into the tile rows.
//
//   Q   [.., Sq, Hq, D]   rows of a tile: packed row R = token * group + head_in_group (PackGQA),
//   K,V [.., Sk, Hkv, D]  so one CTA reads each K/V tile of its KV head once for the whole group.
//   out [.., Sq, Hq, Dv] in Q's dtype, lse fp32 [Hq, total_q] (natural log)  -- num_splits == 1
//   o_partial fp32 [S, total_q*Hq, Dv], lse_partial [S, total_q*Hq]            -- num_splits  > 1
//
// Grid (m_blocks * num_splits, Hkv, B); 4 warps, each owning 16 or 32 packed rows (one or two
// m16 MMA tiles: with two, every K and V fragment read from shared memory feeds two MMAs, the
// FlashAttention-2 forward shape of 128 rows per CTA). Per KV tile of the CTA's split: S = Q K^T
// on tensor cores, scale / softcap / mask in fp32, online softmax (running max and sum per row, in
// log2 units), P rounded to the input type, O += P V on tensor cores. K and V tiles arrive by
// cp.async in two groups so V's copy overlaps Q K^T; MMA operands come from shared memory by
// ldmatrix (V transposed on load).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "cuda/cp_async.cuh"
#include "cuda/fast_math.cuh"
#include "cuda/mma_sm80.cuh"
#include "cuda/pdl.cuh"

namespace groupattn::cuda_engine {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Tile configuration for one (element type, head dim, packed rows per warp); D == Dv. The host
// picks the rows per warp (launch.h, tile_rows): 32 for prefill-shaped problems, 16 for decode.
template <class T, int kHeadDim_, int kRowsPerWarp_>
struct TileTraits {
  using Element = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // mma.sync m16n8k16
  static constexpr int kRowsPerWarp = kRowsPerWarp_;
  // m16 tiles per warp: each K / V fragment loaded from shared memory feeds this many MMAs.
  static constexpr int kMTiles = kRowsPerWarp / kMmaM;
  // Rows a thread owns: g + 8 * r + 16 * mt (r in {0, 1}, mt < kMTiles), g = lane / 4.
  static constexpr int kRowsPerThread = 2 * kMTiles;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;  // packed query rows per CTA
  // Keys per tile (launch.h, tile_keys): 128 at D 64, 64 otherwise, the same for both tile heights
  // so a row's online-softmax steps (and so its bits) do not depend on the variant. A tile's fixed
  // costs -- two barriers, the cp.async waits, the row max / sum shuffles, the O rescale (kDTiles x
  // 4 FMUL per m-tile) -- are paid once per kBlockN keys, while its MMAs scale with kBlockN x D:
  // 128 keys at D 64 and 64 at D 256 put the same number of MMAs behind each (docs/ENGINES.md,
  // "Prefill per-tile fixed costs").
  static constexpr int kBlockN = kHeadDim == 64 ? 128 : 64;
  // Left to itself, ptxas capped the 16-row D <= 64 kernel at 128 registers (4 CTAs per SM) and
  // spilled 20 B; asking for 3 CTAs let it use 150 without spilling. With 128-key tiles at D 64 its
  // scores doubled and 3 CTAs (168 registers) spilled 4 B: it asks for 2 (244 registers). The
  // others are left alone: 0 emits no hint (3 spills there; even an explicit 1 moved D 128 from 167
  // to 181 registers). The 16-row D 32 kernel asks for 4 (it held 4 CTAs at 125 registers; an
  // intermediate session-6 version needed 133 without the hint), which costs it nothing: 122
  // registers, no spill.
  static constexpr int kMinCtasPerSm = kRowsPerWarp == 16 && kHeadDim <= 64 ? (kHeadDim <= 32 ? 4 : 2) : 0;
  // Warps in pairs for P V (PairPvTraits below); off here.
  static constexpr bool kPairPv = false;
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  // Shared rows padded by one 16-byte chunk: rows stay 16-byte aligned and consecutive rows start
  // 4 banks apart, so the fragment loads (8 rows x 4 words) hit 32 distinct banks.
  static constexpr int kRowStride = kHeadDim + kChunk;
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static constexpr int kNTiles = kBlockN / kMmaN;   // S fragments per warp
  static constexpr int kDTiles = kHeadDim / kMmaN;  // O fragments per warp
  static constexpr int kKSteps = kHeadDim / kMmaK;  // Q K^T reduction steps
  static constexpr int kPSteps = kBlockN / kMmaK;   // P V reduction steps
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBlockM + 2 * kBlockN) * kRowStride * sizeof(T);

  static_assert(sizeof(T) == 2, "mma.sync path takes 16-bit inputs (bf16, fp16)");
  static_assert(kRowsPerWarp == 16 || kRowsPerWarp == 32, "a warp owns one or two m16 MMA tiles");
  static_assert(kRowsPerWarp == 16 || kHeadDim <= 128,
                "two m16 tiles of a 256-wide O accumulator do not fit the register file");
  static_assert(kHeadDim % kMmaK == 0 && kHeadDim % kChunk == 0, "head dim must be a multiple of 16");
  static_assert(kBlockN % kMmaK == 0, "key tile must be a multiple of the MMA K");
  static_assert(kNTiles % 2 == 0 && kDTiles % 2 == 0, "ldmatrix.x4 loads two 8-wide tiles at once");
  static_assert((kRowStride * sizeof(T)) % 16 == 0, "shared rows must stay 16-byte aligned for cp.async");
  static_assert(kThreads % kChunksPerRow == 0 && kBlockN % (kThreads / kChunksPerRow) == 0,
                "each thread copies one 16-byte column of whole passes over the K/V tile rows");
};

// The D 256 prefill form by default (on since session 13's measurement; the switch
// GROUPATTN_CUDA_PREFILL_D256_PAIR_PV=0, launch.h, turns it off; docs/ENGINES.md "Session 12: cuda
// prefill against FA2") whose warps do P V in pairs: Q K^T and the softmax (in phases,
// TileKernel::softmax_phased) stay per warp (16 rows x all keys, so row maxima need no exchange),
// then each warp stores its P tile and alphas in shared memory, and after a barrier of the pair
// each warp computes O for the pair's 32 rows over half the head dim. Every V fragment read from
// shared memory then feeds two MMAs, as in the 128-row D 128 tile: ldmatrix per warp and KV tile 144 ->
// 116 (4 of them the partner's P; + 16 32-bit P stores), shared-memory bytes per MMA ~352 -> ~306
// (docs/ENGINES.md "Session 12: cuda prefill against FA2"). Each O element goes through
// the same MMAs, rescales and normalisation in the same order as in the one-warp form: bitwise the
// same results. O stays 128 fp32 registers per thread (2 m-tiles x half the head dim).
template <class Base>
struct PairPvTraits : Base {
  static constexpr bool kPairPv = true;
  // P tile of the CTA [kBlockM][kBlockN] in the input type, rows padded by 16 bytes (consecutive
  // rows 4 banks apart: the 32-bit stores of a warp and the ldmatrix rows hit distinct banks), then
  // the rows' alphas [kBlockM] and final row sums [kBlockM] in fp32.
  static constexpr int kPRowStride = Base::kBlockN + Base::kChunk;
  static constexpr size_t kPBytes = static_cast<size_t>(Base::kBlockM) * kPRowStride * sizeof(typename Base::Element);
  static constexpr size_t kSmemBytes = Base::kSmemBytes + kPBytes + 2 * Base::kBlockM * sizeof(float);
  static_assert(Base::kMTiles == 1 && Base::kWarps % 2 == 0, "pairs of one-m-tile warps");
  static_assert((Base::kNTiles & (Base::kNTiles - 1)) == 0, "the row-max tree halves the S fragments");
  static_assert((Base::kDTiles / 2) % 2 == 0, "each warp's half of the head dim is whole ldmatrix.x4 pairs");
  static_assert(Base::kSmemBytes % 16 == 0 && kPBytes % 16 == 0, "P and the row floats stay 16-byte aligned");
};

template <class Traits>
struct TileKernel {
  using T = typename Traits::Element;
  using Mma = cuda::MmaType<T>;
  static constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  static constexpr int kRowStride = Traits::kRowStride, kChunk = Traits::kChunk;
  static constexpr int kChunksPerRow = Traits::kChunksPerRow, kThreads = Traits::kThreads;
  static constexpr int kRowsPerWarp = Traits::kRowsPerWarp, kMTiles = Traits::kMTiles;
  static constexpr int kRows = Traits::kRowsPerThread;
  // O accumulator of a thread: [m-tile][d-tile][4]. Pair form: the pair's two m-tiles over this
  // warp's half of the head dim (the same 128 registers at D 256).
  static constexpr bool kPair = Traits::kPairPv;
  static constexpr int kOMTiles = kPair ? 2 : kMTiles;
  static constexpr int kODTiles = kPair ? Traits::kDTiles / 2 : Traits::kDTiles;

  // Copies key/value rows [blk * kBlockN, +kBlockN) of one KV head into `dst`; rows past the
  // sequence are zero-filled (their scores are masked, and zero keeps 0 * V finite).
  // Thread x copies chunk x % kChunksPerRow of rows x / kChunksPerRow + pass * kRowsPerPass: a warp
  // covers whole rows (D 128: 2 rows x 256 B, 16 sectors of whole 128-byte lines), and each pass's
  // shared destination is a compile-time offset from one address. This runs twice per KV tile, so
  // its instruction count matters: contiguous K/V (a uniform branch) step one 64-bit source pointer
  // by a fixed row stride, ~3 instructions per 16-byte copy (IADD, IADD.X, LDGSTS) on a tile inside
  // the sequence. Recomputing each row's address through the paged / contiguous branch cost ~40 per
  // copy, ~40 % of the D 128 mainloop's instructions (docs/ENGINES.md, "Prefill mainloop cost").
  // `head` is the tensor's base pointer advanced to KV head kvh (kvh * head stride).
  static __device__ __forceinline__ void load_kv_tile(const KernelParams& p, const SeqInfo& s, int b, int blk,
                                                      const T* head, int64_t offset, int64_t row_stride,
                                                      int64_t page_stride, T* dst) {
    constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    constexpr int kPasses = kBlockN / kRowsPerPass;
    const int ch = threadIdx.x % kChunksPerRow;
    const int r0 = threadIdx.x / kChunksPerRow;  // tile row of pass 0
    T* d = dst + r0 * kRowStride + ch * kChunk;
    const int j0 = blk * kBlockN + r0;  // key of pass 0
    if (p.block_table == nullptr) {
      // contiguous: key j at head + offset + j * row_stride (+ column)
      const T* src = head + offset + ch * kChunk + static_cast<int64_t>(j0) * row_stride;
      const int64_t pass_step = kRowsPerPass * row_stride;
      if ((blk + 1) * kBlockN <= s.k_len) {  // uniform: every row of the tile is a key
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          cuda::cp_async_16(d + pass * kRowsPerPass * kRowStride, src);
          src += pass_step;
        }
      } else {
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const bool valid = j0 + pass * kRowsPerPass < s.k_len;
          cuda::cp_async_16_or_zero(d + pass * kRowsPerPass * kRowStride, valid ? src : head, valid);
          src += pass_step;
        }
      }
    } else {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int j = j0 + pass * kRowsPerPass;
        const bool valid = j < s.k_len;
        const T* src = head;
        if (valid) {
          // paged: key j lives in page block_table[b][j / page_size], slot j % page_size
          const int64_t page = p.block_table[b * p.block_table_stride + j / p.page_size];
          src = head + page * page_stride + static_cast<int64_t>(j % p.page_size) * row_stride + ch * kChunk;
        }
        cuda::cp_async_16_or_zero(d + pass * kRowsPerPass * kRowStride, src, valid);
      }
    }
  }

  // The pair form's online-softmax update of one KV tile for all kRows rows of the thread, in phases:
  // the row maxima as balanced trees, their shuffles side by side, every alpha (returned for the
  // pair's hand-over and rescale), then the exponentials, row sums and P fragments row by row. The
  // operations on each row and their order are the per-row form's (run()), so are the bits (max is
  // exact in any order; the sums keep their order). sc holds the scores, already softcapped and
  // masked; mult is the factor into log2 units.
  static __device__ __forceinline__ void softmax_phased(float (&sc)[kMTiles][Traits::kNTiles][4], float mult,
                                                        float (&m_run)[kRows], float (&l_run)[kRows],
                                                        uint32_t (&pa)[kMTiles][Traits::kPSteps][4],
                                                        float (&alpha)[kRows]) {
    constexpr int kNTiles = Traits::kNTiles;
    float mx[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int mt = i / 2, r = i % 2;
      // the thread's 2 * kNTiles scores of row i: a tree of depth log2(2 kNTiles), not a chain
      float v[kNTiles];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) v[nt] = fmaxf(sc[mt][nt][2 * r], sc[mt][nt][2 * r + 1]);
#pragma unroll
      for (int w = kNTiles / 2; w >= 1; w /= 2)
#pragma unroll
        for (int k = 0; k < w; ++k) v[k] = fmaxf(v[k], v[k + w]);
      mx[i] = v[0];
    }
    // the 4 threads of a row are lanes 4g..4g+3; every row's shuffle in flight at once
#pragma unroll
    for (int i = 0; i < kRows; ++i) mx[i] = fmaxf(mx[i], __shfl_xor_sync(cuda::kFullWarpMask, mx[i], 1));
#pragma unroll
    for (int i = 0; i < kRows; ++i) mx[i] = fmaxf(mx[i], __shfl_xor_sync(cuda::kFullWarpMask, mx[i], 2));
    float m_use[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float m_new = fmaxf(m_run[i], mx[i] * mult);  // mult > 0: the max commutes with it
      m_use[i] = m_new == -INFINITY ? 0.f : m_new;         // row with no visible key yet
      alpha[i] = cuda::fast_exp2(m_run[i] - m_use[i]);
      m_run[i] = m_new;
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int mt = i / 2, r = i % 2;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        sc[mt][nt][2 * r] = cuda::fast_exp2(fmaf(sc[mt][nt][2 * r], mult, -m_use[i]));  // masked: -inf -> 0
        sc[mt][nt][2 * r + 1] = cuda::fast_exp2(fmaf(sc[mt][nt][2 * r + 1], mult, -m_use[i]));
        sum += sc[mt][nt][2 * r] + sc[mt][nt][2 * r + 1];
        pa[mt][nt / 2][2 * (nt % 2) + r] = Mma::pack(sc[mt][nt][2 * r], sc[mt][nt][2 * r + 1]);
      }
      l_run[i] = l_run[i] * alpha[i] + sum;
    }
  }

  // The pair form's hand-over after the softmax: this warp's P tile and alphas go to shared memory,
  // the pair meets at its barrier, and O (the pair's rows, this warp's half of the head dim) is
  // scaled by each row's alpha, skipped when all 32 rows kept their maxima (one vote; a row with
  // alpha == 1 multiplied alongside the others keeps its bits). The P tile is rewritten only after
  // the next tile's barrier B, which the partner passes after its P V of this tile.
  static __device__ __forceinline__ void pair_publish_and_rescale(const uint32_t (&pa)[kMTiles][Traits::kPSteps][4],
                                                                  const float (&alpha)[kRows], T* p_s,
                                                                  float* alpha_s, int warp, int g, int t,
                                                                  float (&o_acc)[kOMTiles][kODTiles][4]) {
    constexpr int kPRowStride = Traits::kPRowStride;
    // register 2 * (nt % 2) + r of pa[0][nt / 2] holds row g + 8 r, keys nt * 8 + 2t, +1 of this
    // warp's 16 rows (the A-fragment layout): one 32-bit store each
    T* p_warp = p_s + warp * Traits::kMmaM * kPRowStride;
#pragma unroll
    for (int ps = 0; ps < Traits::kPSteps; ++ps)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        *reinterpret_cast<uint32_t*>(p_warp + (g + 8 * (e % 2)) * kPRowStride + ps * Traits::kMmaK +
                                     (e / 2) * 8 + 2 * t) = pa[0][ps][e];
    if (t == 0) {
      alpha_s[warp * Traits::kMmaM + g] = alpha[0];
      alpha_s[warp * Traits::kMmaM + 8 + g] = alpha[1];
    }
    pair_barrier(warp);
    // o_acc[0] holds this warp's rows, o_acc[1] the partner's (warp ^ 1): static register indices
    float a[2][2];  // alpha of row g + 8 r of m-tile m
    bool settled = true;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      a[0][r] = alpha[r];
      a[1][r] = alpha_s[(warp ^ 1) * Traits::kMmaM + 8 * r + g];
      settled = settled && a[0][r] == 1.f && a[1][r] == 1.f;
    }
    if (!__all_sync(cuda::kFullWarpMask, settled)) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int dt = 0; dt < kODTiles; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o_acc[m][dt][e] *= a[m][e / 2];
    }
  }

  // Elements of the pair form's P tile (0 in the other forms, which have none).
  static constexpr int pair_p_elems() {
    if constexpr (kPair) return kBlockM * Traits::kPRowStride;
    return 0;
  }

  // Barrier of warps 0, 1 (id 1) or 2, 3 (id 2); 0 is __syncthreads'. Literal ids let ptxas count
  // 3 barriers instead of reserving all 16 for an id held in a register.
  static __device__ __forceinline__ void pair_barrier(int warp) {
    static_assert(Traits::kWarps == 4, "two pairs");
    if (warp < 2) {
      asm volatile("bar.sync 1, %0;" ::"n"(2 * cuda::kWarpSize) : "memory");
    } else {
      asm volatile("bar.sync 2, %0;" ::"n"(2 * cuda::kWarpSize) : "memory");
    }
  }

  static __device__ void run(const KernelParams& p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* q_s = reinterpret_cast<T*>(smem_raw);
    T* k_s = q_s + kBlockM * kRowStride;
    T* v_s = k_s + kBlockN * kRowStride;
    // pair form only: the P tile, then the rows' alphas and final sums (PairPvTraits)
    [[maybe_unused]] T* p_s = v_s + kBlockN * kRowStride;
    [[maybe_unused]] float* alpha_s = reinterpret_cast<float*>(p_s + pair_p_elems());
    [[maybe_unused]] float* l_s = alpha_s + kBlockM;

    const int m_block = blockIdx.x / p.num_splits;
    const int split = blockIdx.x % p.num_splits;
    const int kv_group = blockIdx.y;  // query heads [kv_group * group, +group)
    const int b = blockIdx.z;
    const SeqInfo s = seq_info(p, b);
    const int packed_rows = s.q_len * p.group;
    const int row0 = m_block * kBlockM;
    if (row0 >= packed_rows) return;  // this tile lies past the sequence's queries
    const int kvh = kv_head_of(kv_group * p.group, p.group, p.heads_kv);

    const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
    const int g = lane / 4, t = lane % 4;  // fragment row group and column pair
    const int warp_row0 = row0 + warp * kRowsPerWarp;

    // This thread's rows: row i = 2 * mt + r is packed row warp_row0 + 16 * mt + 8 * r + g, held in
    // elements 2r, 2r+1 of the S fragments sc[mt][..] and O fragments o_acc[mt][..]. Its token,
    // head and visible keys are recomputed where needed (masked tiles, epilogue) instead of held in
    // registers through the mainloop, which the two-m-tile O accumulator fills.
    auto row_of = [&](int i) { return warp_row0 + Traits::kMmaM * (i / 2) + 8 * (i % 2) + g; };

    // KV tiles this CTA visits: its split's slice, cut to the keys any of its rows can see.
    const int last_row = min(row0 + kBlockM, packed_rows) - 1;
    const KeyInterval first_vis = visible_keys(p, s, row0 / p.group);
    const KeyInterval last_vis = visible_keys(p, s, last_row / p.group);
    const int n_blocks = (s.k_len + kBlockN - 1) / kBlockN;
    int blk_begin = 0, blk_end = 0;
    split_range(n_blocks, split, p.num_splits, &blk_begin, &blk_end);
    if (first_vis.lo <= last_vis.hi) {
      blk_begin = max(blk_begin, first_vis.lo / kBlockN);
      blk_end = min(blk_end, last_vis.hi / kBlockN + 1);
    } else {
      blk_end = blk_begin;
    }
    // Keys [unmasked_lo, unmasked_hi] are visible to every valid row of the CTA (both interval
    // ends grow with the row): a tile inside needs no mask. Rows past packed_rows are never
    // written, so what they compute does not matter.
    const int unmasked_lo = last_vis.lo, unmasked_hi = first_vis.hi;

    const T* q = static_cast<const T*>(p.q);
    const T* k_head = static_cast<const T*>(p.k) + kvh * p.k_head_stride;
    const T* v_head = static_cast<const T*>(p.v) + kvh * p.v_head_stride;

    float o_acc[kOMTiles][kODTiles][4];
#pragma unroll
    for (int mt = 0; mt < kOMTiles; ++mt)
#pragma unroll
      for (int dt = 0; dt < kODTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[mt][dt][e] = 0.f;
    float m_run[kRows], l_run[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      m_run[i] = -INFINITY;  // running max of the row's scores, log2 units
      l_run[i] = 0.f;        // this thread's share of the row's running sum
    }

    if (blk_begin < blk_end) {
      for (int c = threadIdx.x; c < kBlockM * kChunksPerRow; c += kThreads) {
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const int R = row0 + r;
        const bool valid = R < packed_rows;
        const int h = kv_group * p.group + R % p.group;
        // packed row R -> Q[token R / group, head h]
        const T* src = valid ? q + s.q_offset + static_cast<int64_t>(R / p.group) * p.q_row_stride +
                                   h * p.q_head_stride + ch * kChunk
                             : q;
        cuda::cp_async_16_or_zero(q_s + r * kRowStride + ch * kChunk, src, valid);
      }
      load_kv_tile(p, s, b, blk_begin, k_head, s.k_offset, p.k_row_stride, p.k_batch_stride, k_s);
      cuda::cp_async_commit();  // group: Q and the first K
    }

    const T* q_warp = q_s + warp * kRowsPerWarp * kRowStride;
    // Warps whose rows all lie past the sequence's packed rows (decode: group * Sq < kBlockM) only
    // help with the copies; their MMAs would be wasted. An active warp's second m-tile may lie past
    // them too: its Q rows are zero-filled and its rows fully masked, so it computes harmless zeros.
    const bool warp_active = warp_row0 < packed_rows;
    // Two barriers per KV tile (FlashAttention-2's order). Each one both publishes a copy that
    // landed and frees the other buffer: after barrier A every warp is past the previous tile's
    // P V (V may be refilled) and K of this tile is visible; after barrier B every warp is past
    // Q K^T (K may be refilled) and V is visible. V's copy overlaps Q K^T and the mask; the next
    // K's copy overlaps the softmax and P V. At most one copy group is in flight at each wait.
    for (int blk = blk_begin; blk < blk_end; ++blk) {
      const bool has_next = blk + 1 < blk_end;
      cuda::cp_async_wait<0>();  // K of this tile (and Q) landed
      __syncthreads();           // barrier A
      load_kv_tile(p, s, b, blk, v_head, s.v_offset, p.v_row_stride, p.v_batch_stride, v_s);
      cuda::cp_async_commit();

      // S = Q K^T on every warp, inactive ones included (their Q rows are zero-filled: S = 0, which
      // keeps the softmax below finite). Branching around it made ptxas zero S on every path (one
      // CS2R per 2 scores, 64 per tile at D 64 x 32 rows); without the branch the first k-step's
      // MMAs take a zero accumulator (RZ) and nothing is zeroed.
      float sc[kMTiles][Traits::kNTiles][4];
      {
#pragma unroll
        for (int ks = 0; ks < Traits::kKSteps; ++ks) {
          // A = Q rows of m-tile mt: lane l addresses row 16 mt + (l % 16), column half (l / 16)
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt)
            cuda::ldmatrix_x4(a[mt], q_warp + (Traits::kMmaM * mt + lane % 16) * kRowStride +
                                         ks * Traits::kMmaK + (lane / 16) * 8);
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; nt += 2) {
            // B = K^T for key tiles nt, nt+1: lane l addresses key nt*8 + (l % 8) + (l / 16) * 8,
            // head-dim half (l / 8) % 2; registers: b0, b1 of tile nt, then of tile nt+1. One load
            // serves every m-tile of the warp.
            uint32_t kb[4];
            cuda::ldmatrix_x4(kb, k_s + (nt * Traits::kMmaN + lane % 8 + (lane / 16) * 8) * kRowStride +
                                      ks * Traits::kMmaK + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              if (ks == 0) {
                Mma::mma_zero_c(sc[mt][nt], a[mt], kb[0], kb[1]);
                Mma::mma_zero_c(sc[mt][nt + 1], a[mt], kb[2], kb[3]);
              } else {
                Mma::mma(sc[mt][nt], a[mt], kb[0], kb[1]);
                Mma::mma(sc[mt][nt + 1], a[mt], kb[2], kb[3]);
              }
            }
          }
        }
      }

      // Softcap and mask in fp32, then the online-softmax update per row. Scale and log2(e) enter
      // as one FFMA inside the exponent (p = 2^(s * mult - m), m the row max of s * mult), and the
      // uniform tests (softcap; does this tile cut one of the CTA's rows?) sit outside the
      // element loops: the same change made the sm90 prefill kernel 2.7x faster
      // (docs/PREFILL_SM90.md).
      float mult = p.scale * kLog2e;
      if (p.softcap > 0.f) {
        const float inv_cap = p.scale / p.softcap;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[mt][nt][e] = p.softcap * tanhf(sc[mt][nt][e] * inv_cap);
        mult = kLog2e;
      }
      const int j0 = blk * kBlockN;
      if (!(unmasked_lo <= j0 && j0 + kBlockN - 1 <= unmasked_hi)) {  // uniform over the CTA
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const int mt = i / 2, r = i % 2;
          const int R = row_of(i);
          const KeyInterval vis = R < packed_rows ? visible_keys(p, s, R / p.group) : KeyInterval{1, 0};
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; ++nt) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int j = j0 + nt * Traits::kMmaN + 2 * t + c;  // key of element 2r + c
              sc[mt][nt][2 * r + c] = (j < vis.lo || j > vis.hi) ? -INFINITY : sc[mt][nt][2 * r + c];
            }
          }
        }
      }

      cuda::cp_async_wait<0>();  // V of this tile landed
      __syncthreads();           // barrier B
      if (has_next) {
        load_kv_tile(p, s, b, blk + 1, k_head, s.k_offset, p.k_row_stride, p.k_batch_stride, k_s);
        cuda::cp_async_commit();
      }

      // P rounded to the input type as the A fragments of P V: two adjacent S fragments (16 keys)
      // form one A fragment (C layout == A layout), row r of it in registers r and 2 + r. Packing
      // each row as soon as its exponentials are done frees the fp32 scores early.
      uint32_t pa[kMTiles][Traits::kPSteps][4];
      if constexpr (kPair) {
        float alpha[kRows];
        softmax_phased(sc, mult, m_run, l_run, pa, alpha);
        pair_publish_and_rescale(pa, alpha, p_s, alpha_s, warp, g, t, o_acc);
      } else {
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const int mt = i / 2, r = i % 2;
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; ++nt)
            mx = fmaxf(mx, fmaxf(sc[mt][nt][2 * r], sc[mt][nt][2 * r + 1]));
          // the 4 threads of a row are lanes 4g..4g+3
          mx = fmaxf(mx, __shfl_xor_sync(cuda::kFullWarpMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(cuda::kFullWarpMask, mx, 2));
          const float m_new = fmaxf(m_run[i], mx * mult);        // mult > 0: the max commutes with it
          const float m_use = m_new == -INFINITY ? 0.f : m_new;  // row with no visible key yet
          const float alpha = cuda::fast_exp2(m_run[i] - m_use);
          m_run[i] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < Traits::kNTiles; ++nt) {
            sc[mt][nt][2 * r] = cuda::fast_exp2(fmaf(sc[mt][nt][2 * r], mult, -m_use));  // masked: -inf -> 0
            sc[mt][nt][2 * r + 1] = cuda::fast_exp2(fmaf(sc[mt][nt][2 * r + 1], mult, -m_use));
            sum += sc[mt][nt][2 * r] + sc[mt][nt][2 * r + 1];
            pa[mt][nt / 2][2 * (nt % 2) + r] = Mma::pack(sc[mt][nt][2 * r], sc[mt][nt][2 * r + 1]);
          }
          l_run[i] = l_run[i] * alpha + sum;
          // O *= alpha. Once a row's maximum settles its alpha is exactly 1 and the multiply changes
          // no bit, so when the 8 rows i of the warp all kept their maxima (a warp-uniform vote) the
          // 2 * kDTiles multiplies are skipped: same result, fewer instructions.
          if (!__all_sync(cuda::kFullWarpMask, alpha == 1.f)) {
#pragma unroll
            for (int dt = 0; dt < Traits::kDTiles; ++dt) {
              o_acc[mt][dt][2 * r] *= alpha;
              o_acc[mt][dt][2 * r + 1] *= alpha;
            }
          }
        }
      }

      if constexpr (kPair) {
        const int half = warp & 1;  // head-dim columns [half * kODTiles * 8, +kODTiles * 8)
        if (row0 + (warp & ~1) * kRowsPerWarp < packed_rows) {  // the pair has rows
#pragma unroll
          for (int ps = 0; ps < Traits::kPSteps; ++ps) {
            // A of the partner's rows from its P tile: lane l addresses row 16 (warp ^ 1) + (l % 16),
            // key column ps * 16 + (l / 16) * 8 (the Q K^T A layout); this warp's own A is pa.
            uint32_t pb[4];
            cuda::ldmatrix_x4(pb, p_s + ((warp ^ 1) * Traits::kMmaM + lane % 16) * Traits::kPRowStride +
                                      ps * Traits::kMmaK + (lane / 16) * 8);
#pragma unroll
            for (int dt = 0; dt < kODTiles; dt += 2) {
              // B = V for head-dim tiles half * kODTiles + dt, +1 (addressed as in the one-warp form)
              uint32_t vb[4];
              cuda::ldmatrix_x4_trans(
                  vb, v_s + (ps * Traits::kMmaK + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride +
                          (half * kODTiles + dt) * Traits::kMmaN + (lane / 16) * 8);
              Mma::mma(o_acc[0][dt], pa[0][ps], vb[0], vb[1]);
              Mma::mma(o_acc[0][dt + 1], pa[0][ps], vb[2], vb[3]);
              Mma::mma(o_acc[1][dt], pb, vb[0], vb[1]);
              Mma::mma(o_acc[1][dt + 1], pb, vb[2], vb[3]);
            }
          }
        }
      } else if (warp_active) {
#pragma unroll
        for (int ps = 0; ps < Traits::kPSteps; ++ps) {
#pragma unroll
          for (int dt = 0; dt < Traits::kDTiles; dt += 2) {
            // B = V (keys x head dim, transposed on load) for head-dim tiles dt, dt+1: lane l
            // addresses key ps*16 + (l % 8) + ((l / 8) % 2) * 8, head-dim column dt*8 + (l / 16) * 8.
            // One load serves every m-tile of the warp.
            uint32_t vb[4];
            cuda::ldmatrix_x4_trans(
                vb, v_s + (ps * Traits::kMmaK + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride +
                        dt * Traits::kMmaN + (lane / 16) * 8);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              Mma::mma(o_acc[mt][dt], pa[mt][ps], vb[0], vb[1]);
              Mma::mma(o_acc[mt][dt + 1], pa[mt][ps], vb[2], vb[3]);
            }
          }
        }
      }
    }
    cuda::allow_dependent_launch();

    // Epilogue: finish the row sums, normalise, write O and LSE (or the split's partials). The
    // sequence's output offsets are read again rather than held in registers through the mainloop.
    const SeqInfo so = seq_info(p, b);
    if constexpr (kPair) {
      // this warp's rows' sums, finished and handed to the partner (its O columns need them too)
      float l_own[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(cuda::kFullWarpMask, l, 1);
        l += __shfl_xor_sync(cuda::kFullWarpMask, l, 2);
        l_own[r] = l;
      }
      if (t == 0) {
        l_s[warp * Traits::kMmaM + g] = l_own[0];
        l_s[warp * Traits::kMmaM + 8 + g] = l_own[1];
      }
      pair_barrier(warp);
      const int col0 = (warp & 1) * kODTiles * Traits::kMmaN;  // this warp's head-dim half
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int w = m == 0 ? warp : warp ^ 1;  // m-tile 0: own rows, 1: the partner's
          const int R = row0 + w * kRowsPerWarp + 8 * r + g;
          if (R >= packed_rows) continue;
          const float l = m == 0 ? l_own[r] : l_s[w * Traits::kMmaM + 8 * r + g];
          const int token = R / p.group;  // packed row -> (token, head in group)
          const int head = kv_group * p.group + R % p.group;
          const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
          const int64_t q_token = so.q_token0 + token;
          // LSE by the row's own warp (m_run is its)
          const float lse = l > 0.f ? (m_run[r] + log2f(l)) * kLn2 : -INFINITY;
          if (p.num_splits == 1) {
            char* out_row = static_cast<char*>(p.out) +
                            (so.o_offset + token * p.o_row_stride + head * p.o_head_stride) * sizeof(T);
            T* o = reinterpret_cast<T*>(out_row) + col0;
#pragma unroll
            for (int dt = 0; dt < kODTiles; ++dt)
              Mma::store2(o + dt * Traits::kMmaN + 2 * t, o_acc[m][dt][2 * r] * inv, o_acc[m][dt][2 * r + 1] * inv);
            if (m == 0 && p.lse != nullptr && t == 0)
              p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
          } else {
            const int64_t prow = static_cast<int64_t>(split) * p.partial_rows + q_token * p.heads_q + head;
            if (m == 0 && t == 0) p.lse_partial[prow] = lse;
            if (l > 0.f) {  // the combine kernel reads O only of splits with a finite LSE
              float* o = p.o_partial + prow * Traits::kHeadDim + col0;
#pragma unroll
              for (int dt = 0; dt < kODTiles; ++dt)
                *reinterpret_cast<float2*>(o + dt * Traits::kMmaN + 2 * t) =
                    make_float2(o_acc[m][dt][2 * r] * inv, o_acc[m][dt][2 * r + 1] * inv);
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int mt = i / 2, r = i % 2;
        float l = l_run[i];
        l += __shfl_xor_sync(cuda::kFullWarpMask, l, 1);
        l += __shfl_xor_sync(cuda::kFullWarpMask, l, 2);
        const int R = row_of(i);
        if (R >= packed_rows) continue;
        const int token = R / p.group;  // packed row -> (token, head in group)
        const int head = kv_group * p.group + R % p.group;
        const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
        const float lse = l > 0.f ? (m_run[i] + log2f(l)) * kLn2 : -INFINITY;
        const int64_t q_token = so.q_token0 + token;
        if (p.num_splits == 1) {
          char* out_row = static_cast<char*>(p.out) +
                          (so.o_offset + token * p.o_row_stride + head * p.o_head_stride) * sizeof(T);
          T* o = reinterpret_cast<T*>(out_row);
#pragma unroll
          for (int dt = 0; dt < Traits::kDTiles; ++dt)
            Mma::store2(o + dt * Traits::kMmaN + 2 * t, o_acc[mt][dt][2 * r] * inv,
                        o_acc[mt][dt][2 * r + 1] * inv);
          if (p.lse != nullptr && t == 0) p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
        } else {
          const int64_t prow = static_cast<int64_t>(split) * p.partial_rows + q_token * p.heads_q + head;
          if (t == 0) p.lse_partial[prow] = lse;
          if (l > 0.f) {  // the combine kernel reads O only of splits with a finite LSE
            float* o = p.o_partial + prow * Traits::kHeadDim;
#pragma unroll
            for (int dt = 0; dt < Traits::kDTiles; ++dt)
              *reinterpret_cast<float2*>(o + dt * Traits::kMmaN + 2 * t) =
                  make_float2(o_acc[mt][dt][2 * r] * inv, o_acc[mt][dt][2 * r + 1] * inv);
          }
        }
      }
    }
  }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinCtasPerSm)
    attention_tile_kernel(const KernelParams p) {
  TileKernel<Traits>::run(p);
}

}  // namespace groupattn::cuda_engine
