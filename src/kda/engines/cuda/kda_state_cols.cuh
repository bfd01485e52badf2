// The 16-token state step with one CTA barrier a step: each warp owns 8 value columns and all K
// rows of them (kda_state_step.cuh splits each product over 8 warps by K-quarter and pays three CTA
// barriers and a shared round trip of the partial sums a step; docs/ENGINES.md "Session 14: a state
// step without the partials").
//
// A CTA of 2 warps (ColsPlan, KS = 1) owns value columns e0 .. e0 + 15 of one (sequence, value head);
// warp w owns e0 + 8 w .. + 7 and holds S (K x 8) in fp32 registers as K / 16 m16n8 accumulator
// tiles. Per 16-token chunk, from a shared-memory stage holding the chunk's prep (W, Qt [16][K],
// Kh [16][K], the CTA's U [16][16], Aqk [16][16], exp(Gamma_C) [K]), each warp alone computes
//   D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D
// for its columns: W S and Qt S with S from the warp's own shared mirror (tf32, the B operand),
// D by warp shuffles (fp32) to the B layout (through the warp's shared slice until session 17:
// -0.5 to -0.7 %), Aqk D and Kh^T D in plain tf32 on the same rounded D (Aqk D was 3xTF32, about
// fp32, until session 17: plain tf32 took the chunked call 1.2-2.0 % faster and its output's relative
// RMS error from 1.66e-3 to 1.68-1.69e-3 at lower bound -5, the bf16 rounding of the output still most
// of it; docs/ENGINES.md "Session 17").
// Only __syncwarp orders a warp's mirrors; the CTA barrier is the copy ring's (a stage is refilled
// after both warps have left it).
//
// Fragment loads as float4: in W S and Qt S the k index of each pair of k8 steps is permuted so
// that lane (g, t) takes physical columns 16 p + 4 t .. + 3 (k step 2 p: logical t -> 4 t,
// t + 4 -> 4 t + 1; step 2 p + 1: t -> 4 t + 2, t + 4 -> 4 t + 3) of both A (W or Qt rows g and
// g + 8) and B (S rows, the mirror's column g) -- a product's sum over k does not depend on the
// order of k. W / Qt rows are K + 16 floats apart (a quarter-warp's 8 float4 reads hit 8 distinct
// bank quads); the S mirror is [8 columns][K] with the bank quads of each column XOR-swizzled so
// that both its scalar stores (from the accumulator layout) and its float4 loads are
// conflict-free (s_pos below).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {

inline constexpr int kColsVT = 16;  // value columns per CTA

// Shared memory (floats) and warps of the kernel for head dim K, NS stages and KS splits of K (1:
// a warp owns all K rows of its 8 columns; 2: two warps share 8 columns, K / 2 rows each, and add
// their partial W S / Qt S through shared memory under a 64-thread named barrier): NS stages, then
// each warp's S mirror [8][K / KS] and (KS 2) its partial sums [8][32].
template <int K, int NS, int KS = 1>
struct ColsPlan {
  static constexpr int kHeadDim = K;
  static constexpr int kSplits = KS;
  static constexpr int kKH = K / KS;              // S rows a warp owns
  static constexpr int kWarps = 2 * KS;           // warp w: columns 8 (w % 2), rows kKH (w / 2) ..
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kRowWQ = K + 16;        // W, Qt rows: float4 loads by rows g, g + 8
  static constexpr int kRowKh = K + 8;         // Kh read transposed (row t, column g): 8 t + g banks
  static constexpr int kRowA = kChunk + 4;     // Aqk read as A (row g, column t): 20 g + t banks
  static constexpr int kW = 0;
  static constexpr int kQt = kW + kChunk * kRowWQ;
  static constexpr int kKh = kQt + kChunk * kRowWQ;
  static constexpr int kU = kKh + kChunk * kRowKh;  // [16][kColsVT]
  static constexpr int kA = kU + kChunk * kColsVT;
  static constexpr int kEc = kA + kChunk * kRowA;
  static constexpr int kStage = kEc + K;
  static constexpr int kMirrors = NS * kStage;
  static constexpr int kX = 8 * kKH;                    // inside a warp's slice, after S
  static constexpr int kWarpFloats = kX + (KS > 1 ? 8 * kWarp : 0);  // partial sums [8][lane]
  static constexpr int kFloats = kMirrors + kWarps * kWarpFloats;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  static_assert(NS >= 2 && NS <= 4, "a copy in flight during each step");
  static_assert(kRowWQ % 32 == 16 && kRowKh % 32 == 8 && kRowA % 32 == 20, "conflict-free fragment loads");
  static_assert(kStage % 4 == 0 && kQt % 4 == 0 && kKh % 4 == 0 && kU % 4 == 0 && kA % 4 == 0 && kEc % 4 == 0 &&
                    kWarpFloats % 4 == 0,
                "16-byte aligned tiles and rows");
  static_assert(KS == 1 || KS == 2, "all of K a warp, or halves");
  static_assert(kKH % 32 == 0, "the S mirror's swizzle spans 8 bank quads of each column");
};

// Position of S[d][n] (n < 8, this warp's columns) in the warp's mirror: column n's K floats, bank
// quad (d / 4) XOR h(n) with h(n) = (n & 6) ^ 4 (n & 1). Stores: lanes (g, t) write column 2 t (or
// 2 t + 1) at d = 16 i + g: h spreads the four t over distinct quads. Loads: lanes (g, t) read the
// quad of d = 16 p + 4 t in column g: the two g of a quarter-warp differ in h's bit 2.
template <int K>
__device__ __forceinline__ int s_pos(int n, int d) {
  const int h = (n & 6) ^ ((n & 1) << 2);
  return n * K + ((((d >> 2) ^ h)) << 2) + (d & 3);
}

// The mirror positions a lane uses, once per kernel: with d = 16 i + x (x < 16), s_pos(n, d) =
// s_pos(n, x + 16 (i & 1)) + 16 (i & ~1) -- the XOR touches the quad's low 3 bits only, i.e. d's
// bits 2..4 -- so every position is one of two per-lane bases (even / odd i) plus a compile-time
// offset: stores of q (rows g + 8 (q >> 1), column 2 t + (q & 1)) and loads (column g, the quad of
// d = 4 t in pair p).
template <int K>
struct MirrorBases {
  int st[2][4];  // [i & 1][q]
  int ld[2];     // [p & 1]
  __device__ __forceinline__ MirrorBases(int g, int t) {
#pragma unroll
    for (int odd = 0; odd < 2; ++odd) {
#pragma unroll
      for (int q = 0; q < 4; ++q) st[odd][q] = s_pos<K>(2 * t + (q & 1), 16 * odd + g + 8 * (q >> 1));
      ld[odd] = s_pos<K>(g, 16 * odd + 4 * t);
    }
  }
  __device__ __forceinline__ int store(int i, int q) const { return st[i & 1][q] + 16 * (i & ~1); }
  __device__ __forceinline__ int load(int pp) const { return ld[pp & 1] + 16 * (pp & ~1); }
};

// Copies chunk block `blk` (this CTA's columns e0 .. e0 + 15 of U) into `stage` (cp.async, one
// commit group). The rows of W, Qt, Kh go as 16-byte pieces, thread tid taking row tid / (K / 4)
// at column 4 (tid % (K / 4)) and every (threads / (K / 4))-th row after it: each piece's shared
// and global offsets are the thread's base plus a compile-time step (no per-copy address arithmetic
// beyond one add); one piece of U by each of the first 64 threads and one of Aqk by each of the
// last 64, exp(Gamma_C) by the first K / 4.
template <class P>
struct ColsCopyLane {
  static constexpr int K = P::kHeadDim;
  int s_wq, s_kh, g_row;  // shared offsets in W / Qt and in Kh of the first row's piece; its global offset
  int s_u, s_a, g_u, g_a;
  __device__ __forceinline__ ColsCopyLane(int tid, int V, int e0) {
    constexpr int kQuads = K / 4;
    const int r = tid / kQuads, c4 = tid % kQuads * 4;
    s_wq = r * P::kRowWQ + c4;
    s_kh = r * P::kRowKh + c4;
    g_row = r * K + c4;
    // U by threads 0..63, Aqk by the last 64 (the same threads with 64 threads in all).
    const int ru = tid % 64 / 4, cu = tid % 4 * 4;
    s_u = ru * kColsVT + cu;
    s_a = ru * P::kRowA + cu;
    g_u = ru * V + e0 + cu;
    g_a = ru * kChunk + cu;
  }
};

template <class P>
__device__ __forceinline__ void cols_load_stage(float* stage, const float* blk, const ChunkLayout& l,
                                                const ColsCopyLane<P>& c, int tid) {
  constexpr int K = ColsCopyLane<P>::K;
  constexpr int kQuads = K / 4, kRowsPerIt = P::kThreads / kQuads;
  static_assert(P::kThreads % kQuads == 0 && kChunk % kRowsPerIt == 0 && kChunk * kColsVT / 4 == 64 &&
                    kChunk * kChunk / 4 == 64 && P::kThreads >= 64,
                "whole pieces per thread");
  const float *w = blk + l.w + c.g_row, *qt = blk + l.qt + c.g_row, *kh = blk + l.kh + c.g_row;
  // Shared byte addresses: the stage's converted once, the rest compile-time offsets from two bases.
  const uint32_t s0 = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
  const uint32_t swq = s0 + 4u * static_cast<uint32_t>(c.s_wq), skh = s0 + 4u * static_cast<uint32_t>(c.s_kh);
  constexpr uint32_t kF = sizeof(float);
#pragma unroll
  for (int it = 0; it < kChunk / kRowsPerIt; ++it) {
    const int rs = it * kRowsPerIt;  // rows past the thread's first
    cp_async16_shared(swq + kF * (P::kW + rs * P::kRowWQ), w + rs * K);
    cp_async16_shared(swq + kF * (P::kQt + rs * P::kRowWQ), qt + rs * K);
    cp_async16_shared(skh + kF * (P::kKh + rs * P::kRowKh), kh + rs * K);
  }
  if (tid < 64) cp_async16_shared(s0 + kF * (P::kU + c.s_u), blk + l.u + c.g_u);
  if (tid >= P::kThreads - 64) cp_async16_shared(s0 + kF * (P::kA + c.s_a), blk + l.aqk + c.g_a);
  if (tid < kQuads) cp_async16_shared(s0 + kF * (P::kEc + tid * 4), blk + l.ec + tid * 4);
  cp_async_commit();
}

template <int K>
struct ColsState {
  float s[K / 16][4];  // tile i: S rows 16 i + g (+ 8), columns 2 t (+ 1) of the warp's 8
};

// The warp's S mirror (tf32-rounded stored operands) from its fp32 tiles.
template <int K>
__device__ __forceinline__ void cols_mirror(float* Sm, const ColsState<K>& st, const MirrorBases<K>& mb) {
#pragma unroll
  for (int i = 0; i < K / 16; ++i) {
#pragma unroll
    for (int q = 0; q < 4; ++q) Sm[mb.store(i, q)] = mma_operand(st.s[i][q]);
  }
}

// Where a warp works: its 8 columns (c0 in the CTA's 16), its rows k_lo .. k_lo + kKH - 1 of S, its
// shared slice (S mirror, D, partial sums) and, with KS = 2, its partner's (the other half of K of
// the same columns, named barrier 1 + column group) and which half it is.
struct ColsWarp {
  int c0, k_lo, half, bar;
  float *Sm, *X;
  const float* Xpartner;
};

// One chunk's step for this warp from stage `st`. Entry: the stage is complete and the warp's S
// mirror holds S (both since a barrier / __syncwarp). Exit: S updated in registers and mirrored
// (the caller's next barrier orders the mirror's stores before the next step's loads, and the
// partner's reads of the partial sums before their next writes).
// orow: this lane's output row g of the chunk at its first column; rows_here: the chunk's real
// tokens (rows >= it are padding and not stored). With KS = 2 both warps of a column group compute
// the same D and O from the same sums (partial of half 0 + partial of half 1, in that order); half
// 0 stores O.
template <class T, class P>
__device__ __forceinline__ void cols_step(const float* st, const ColsWarp& w, ColsState<P::kKH>& S,
                                          const MirrorBases<P::kKH>& mb, T* orow, int64_t o_st, int64_t rows_here,
                                          float bad, int g, int t) {
  constexpr int KH = P::kKH;
  const int c0 = w.c0;
  float* Sm = w.Sm;
  // W S and Qt S (1xTF32 on stored operands) over this warp's rows of S: two accumulators each, one
  // per k step of a pair.
  Acc ws[2], qs[2];
#pragma unroll
  for (int pp = 0; pp < KH / 16; ++pp) {
    const int col = w.k_lo + 16 * pp + 4 * t;
    const float4 w0 = *reinterpret_cast<const float4*>(st + P::kW + g * P::kRowWQ + col);
    const float4 w1 = *reinterpret_cast<const float4*>(st + P::kW + (g + 8) * P::kRowWQ + col);
    const float4 q0 = *reinterpret_cast<const float4*>(st + P::kQt + g * P::kRowWQ + col);
    const float4 q1 = *reinterpret_cast<const float4*>(st + P::kQt + (g + 8) * P::kRowWQ + col);
    const float4 sb = *reinterpret_cast<const float4*>(Sm + mb.load(pp));
    const Tf32Split<2> b0 = fragment<2>({sb.x, sb.y}), b1 = fragment<2>({sb.z, sb.w});
    ws[0].mma(fragment<4>({w0.x, w1.x, w0.y, w1.y}), b0);
    ws[1].mma(fragment<4>({w0.z, w1.z, w0.w, w1.w}), b1);
    qs[0].mma(fragment<4>({q0.x, q1.x, q0.y, q1.y}), b0);
    qs[1].mma(fragment<4>({q0.z, q1.z, q0.w, q1.w}), b1);
  }
  float wsum[4], qsum[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) wsum[q] = ws[0].sum(q) + ws[1].sum(q), qsum[q] = qs[0].sum(q) + qs[1].sum(q);
  if constexpr (P::kSplits == 2) {  // add the other half's partial sums, half 0's first in both warps
    const int lane = 4 * g + t;
#pragma unroll
    for (int q = 0; q < 4; ++q) w.X[q * kWarp + lane] = wsum[q], w.X[(4 + q) * kWarp + lane] = qsum[q];
    // Immediate barrier ids (a register id makes ptxas reserve all 16 of the CTA's barriers).
    if (w.bar == 1) {
      asm volatile("bar.sync 1, 64;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 2, 64;\n" ::: "memory");
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float ow = w.Xpartner[q * kWarp + lane], oq = w.Xpartner[(4 + q) * kWarp + lane];
      wsum[q] = w.half == 0 ? wsum[q] + ow : ow + wsum[q];
      qsum[q] = w.half == 0 ? qsum[q] + oq : oq + qsum[q];
    }
  }
  // D = U - W S at rows g, g + 8 and columns 2 t, 2 t + 1 (fp32).
  float dv[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
    dv[q] = st[P::kU + row * kColsVT + c0 + col] - wsum[q];
  }
  // D as B fragments (row = token t / t + 4 of each k step, column g), fp32 here, rounded below.
  // Lane (g', t') holds D[g'][2 t' + (q & 1)] (q < 2) and D[g' + 8][..] (q >= 2); lane (g, t) needs
  // D[8 kk + t][g] and D[8 kk + t + 4][g], held by lanes 4 t + g / 2 and 4 (t + 4) + g / 2 as their
  // value (g & 1) + 2 kk. Each source serves two destinations (g even, odd) different values: both
  // are sent and the destination picks. No shared-memory round trip on the chain.
  float db[2][2];
  {
    constexpr unsigned kAll = 0xffffffffu;
    const int lo = 4 * t + (g >> 1), hi = lo + 16;
    const bool odd = (g & 1) != 0;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const float l0 = __shfl_sync(kAll, dv[2 * kk], lo), l1 = __shfl_sync(kAll, dv[2 * kk + 1], lo);
      const float h0 = __shfl_sync(kAll, dv[2 * kk], hi), h1 = __shfl_sync(kAll, dv[2 * kk + 1], hi);
      db[kk][0] = odd ? l1 : l0;
      db[kk][1] = odd ? h1 : h0;
    }
  }
  // D rounded to tf32 once, the B operand of both Aqk D and Kh^T D.
  Tf32Split<2> bk[2];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) bk[kk] = fragment<2>({mma_operand(db[kk][0]), mma_operand(db[kk][1])});

  // O = Qt S + Aqk D; Aqk is lower triangular (s <= r): the entries above the diagonal are masked
  // (the prep does not define them). Plain tf32.
  Tf32Acc<1> ad;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int s0 = 8 * kk + t, s1 = s0 + 4;
    const float* a = st + P::kA;
    const float av[4] = {s0 <= g ? a[g * P::kRowA + s0] : 0.f, s0 <= g + 8 ? a[(g + 8) * P::kRowA + s0] : 0.f,
                         s1 <= g ? a[g * P::kRowA + s1] : 0.f, s1 <= g + 8 ? a[(g + 8) * P::kRowA + s1] : 0.f};
    ad.mma(split_fragment<1>(av), bk[kk]);
  }
  float o[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) o[q] = qsum[q] + ad.sum(q) + bad;
  if (w.half == 0) {
    if (g < rows_here) orow[0] = from_float<T>(o[0]), orow[1] = from_float<T>(o[1]);
    if (g + 8 < rows_here) orow[8 * o_st] = from_float<T>(o[2]), orow[8 * o_st + 1] = from_float<T>(o[3]);
  }

  // S <- Diag(exp(Gamma_C)) S + Kh^T D (A = Kh^T: A[d][r] = Kh[r][d]).
  const float* kh = st + P::kKh;
#pragma unroll
  for (int i = 0; i < KH / 16; ++i) {
    const int m0 = w.k_lo + 16 * i;
    const float ea = st[P::kEc + m0 + g], eb = st[P::kEc + m0 + g + 8];
    Acc acc;
    acc.hh[0] = ea * S.s[i][0];
    acc.hh[1] = ea * S.s[i][1];
    acc.hh[2] = eb * S.s[i][2];
    acc.hh[3] = eb * S.s[i][3];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int r0 = 8 * kk + t;
      acc.mma(fragment<4>({kh[r0 * P::kRowKh + m0 + g], kh[r0 * P::kRowKh + m0 + g + 8],
                           kh[(r0 + 4) * P::kRowKh + m0 + g], kh[(r0 + 4) * P::kRowKh + m0 + g + 8]}),
              bk[kk]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) S.s[i][q] = acc.sum(q);
  }
  __syncwarp();  // every lane's reads of the old mirror are done
  cols_mirror<KH>(Sm, S, mb);
}

}  // namespace groupattn::kda_cuda
