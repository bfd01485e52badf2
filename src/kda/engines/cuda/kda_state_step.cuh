// The 16-token state step of the KDA chunked path, shared by the two-kernel path's state pass
// (kda_chunked.cu) and the fused one-launch kernel (kda_chunked_fused.cu): one code for both, so the
// fused path's bitwise agreement with the two-kernel one (KdaCuda.FusedMatchesTwoKernelPath) holds
// by construction.
//
// A CTA of kThreads owns value columns e0 .. e0 + VT - 1 (VT = 16 or 32) of one (sequence, value
// head) and runs, per 16-token chunk, from a shared-memory stage holding the chunk's prep
// (kda_chunk_prep.cuh: W, Qt, Kh [16][K], this CTA's U [16][VT], Aqk [16][16], exp(Gamma_C) [K]):
//   D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D
// with the products on tensor cores (tf32 operands rounded once where they are produced,
// kTf32Passes), S (K x VT) in fp32 registers as m16n8 accumulator tiles and mirrored in shared
// memory as stored mma operands for the products that read it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {

// Shared-memory plan of the state step for head dim K, VT value columns per CTA and kStages chunk
// stages (2 to 4 for the state pass, which copies chunk j + kStages - 1's block in during chunk j;
// 1 for the fused kernel, whose prep of chunk j + 1 follows the step of chunk j). Floats; every tile 16-byte aligned
// (cp.async destinations, the prep's float4 stores). Row strides are padded so the mma fragment loads
// hit 32 distinct banks: W / Qt rows are read as A (row g, column t) -> stride = 4 mod 32; Kh is read
// transposed (row t, column g) -> stride = 8 mod 32; S and D are read as B (row t, column g) ->
// stride VT + 8 (24 or 40: t * stride + g spans the 32 banks).
template <int K, int VT, int kStages>
struct StatePlan {
  static constexpr int kQuarters = 4;                   // phase 1 splits K over 4 warps per product
  static constexpr int kRowWQ = K + 4;                  // W, Qt row stride
  static constexpr int kRowKh = K + 8;                  // Kh row stride
  static constexpr int kRowS = VT + 8;                  // S [K][VT], D and the partial products [16][VT]
  static constexpr int kNt = VT / 8;                    // n8 column tiles per CTA
  static constexpr int kCols = kChunk * VT / kThreads;  // phase 2: columns per thread (1 or 2)
  // One stage: the chunk's prep, the slice this CTA needs.
  static constexpr int kW = 0;
  static constexpr int kQt = kW + kChunk * kRowWQ;
  static constexpr int kKh = kQt + kChunk * kRowWQ;
  static constexpr int kU = kKh + kChunk * kRowKh;  // [16][VT], this CTA's V columns
  static constexpr int kA = kU + kChunk * VT;
  static constexpr int kEc = kA + kChunk * kChunk;
  static constexpr int kStage = kEc + K;
  // After the stages.
  static constexpr int kS = kStages * kStage;
  static constexpr int kP = kS + K * kRowS;  // partial W S and Qt S [2 products][4 K-quarters][16][kRowS]
  static constexpr int kD = kP + 2 * kQuarters * kChunk * kRowS;  // D (fp32, for the output rows)
  static constexpr int kDm = kD + kChunk * kRowS;                 // D as an mma operand
  static constexpr int kFloats = kDm + kChunk * kRowS;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  // The S update: (K / 16) x kNt output tiles of m16n8, a warp taking kTilesPerWarp column tiles of
  // one 16-row tile (so they share its A fragments).
  static constexpr int kTilesPerWarp = K / 16 * kNt / kWarps;
  static_assert(kStages >= 1 && kStages <= 4, "one stage, or up to three copies in flight");
  static_assert(kStage % 4 == 0 && kRowWQ % 4 == 0 && kRowKh % 4 == 0 && kQt % 4 == 0 && kKh % 4 == 0 &&
                    kU % 4 == 0 && kA % 4 == 0 && kEc % 4 == 0 && kS % 4 == 0,
                "16-byte aligned tiles and rows");
  static_assert(kRowWQ % 32 == 4 && kRowKh % 32 == 8 && (kRowS % 32 == 24 || kRowS % 32 == 8),
                "conflict-free fragment loads");
  static_assert(kTilesPerWarp >= 1 && kTilesPerWarp <= kNt && kNt % kTilesPerWarp == 0 &&
                    K / 16 * kNt % kWarps == 0,
                "S-update tiles split evenly over the warps, within one 16-row tile");
  static_assert(kWarps == 2 * kQuarters, "phase 1: 2 products x 4 K-quarters, one warp each");
  static_assert(K / kQuarters % 8 == 0, "whole k-steps per quarter");
  static_assert((VT == 16 || VT == 32) && kCols * kThreads == kChunk * VT, "whole columns per thread");
};

// This thread's S tiles, as fp32 accumulator fragments: tile i = warp * kTilesPerWarp + jj covers S
// rows 16 (i / kNt) .. + 15 and columns 8 (i % kNt) .. + 7.
template <class P>
using StateTiles = float[P::kTilesPerWarp][4];

// The mma fragment coordinates of an element of this warp's tile jj: rows d and d + 8, columns c
// and c + 1.
template <class P>
struct TileAt {
  int d, c;
  __device__ __forceinline__ TileAt(int warp, int jj, int g, int t) {
    const int i = warp * P::kTilesPerWarp + jj;
    d = i / P::kNt * 16 + g;
    c = i % P::kNt * 8 + 2 * t;
  }
};

// S[d][e] (e < VT) <- the initial state of row `row_in` (0 without one), columns e0 .. e0 + VT - 1.
template <int K, int VT, class P>
__device__ __forceinline__ void read_initial_state(const DeviceParams& p, int64_t row_in, int hv, int e0,
                                                   int tid, float* S) {
  for (int i = tid; i < K * VT; i += kThreads) {
    // V-first rows are K-contiguous: d fastest; K-first rows are V-contiguous: column fastest.
    const int d = p.v_first ? i % K : i / VT, ee = p.v_first ? i / K : i % VT;
    const int64_t at = state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, row_in, hv, d, e0 + ee);
    S[d * P::kRowS + ee] = row_in >= 0 ? p.s_in[at] : 0.f;
  }
}

// The fp32 tiles of this warp from the (fp32) mirror.
template <class P>
__device__ __forceinline__ void take_tiles(const float* S, StateTiles<P>& s, int warp, int g, int t) {
#pragma unroll
  for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
    const TileAt<P> a(warp, jj, g, t);
    s[jj][0] = S[a.d * P::kRowS + a.c];
    s[jj][1] = S[a.d * P::kRowS + a.c + 1];
    s[jj][2] = S[(a.d + 8) * P::kRowS + a.c];
    s[jj][3] = S[(a.d + 8) * P::kRowS + a.c + 1];
  }
}

// The mirror of this warp's tiles: as stored mma operands (kAsOperand) for the products, or fp32
// for the final state.
template <class P, bool kAsOperand>
__device__ __forceinline__ void mirror_tiles(float* S, const StateTiles<P>& s, int warp, int g, int t) {
#pragma unroll
  for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
    const TileAt<P> a(warp, jj, g, t);
    S[a.d * P::kRowS + a.c] = kAsOperand ? mma_operand(s[jj][0]) : s[jj][0];
    S[a.d * P::kRowS + a.c + 1] = kAsOperand ? mma_operand(s[jj][1]) : s[jj][1];
    S[(a.d + 8) * P::kRowS + a.c] = kAsOperand ? mma_operand(s[jj][2]) : s[jj][2];
    S[(a.d + 8) * P::kRowS + a.c + 1] = kAsOperand ? mma_operand(s[jj][3]) : s[jj][3];
  }
}

// Row `row_out` of the final state (columns e0 .. e0 + VT - 1) <- the fp32 mirror.
template <int K, int VT, class P>
__device__ __forceinline__ void write_final_state(const DeviceParams& p, int64_t row_out, int hv, int e0,
                                                  int tid, const float* S) {
  for (int i = tid; i < K * VT; i += kThreads) {
    const int d = p.v_first ? i % K : i / VT, ee = p.v_first ? i / K : i % VT;
    const int64_t at = state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, row_out, hv, d, e0 + ee);
    p.s_out[at] = S[d * P::kRowS + ee];
  }
}

// The state's setup before the first chunk, after read_initial_state and a barrier: every warp takes
// its fp32 tiles, then the mirror becomes the stored mma operand (no barrier after: the caller's
// next one precedes any read of it).
template <class P>
__device__ __forceinline__ void tiles_from_initial_state(float* S, StateTiles<P>& s, int warp, int g, int t) {
  take_tiles<P>(S, s, warp, g, t);
  __syncthreads();  // every warp has its fp32 tiles; the mirror becomes the stored mma operand
  mirror_tiles<P, true>(S, s, warp, g, t);
}

// One chunk's step from stage `st` (K, VT, P = StatePlan<K, VT, stages>, smem the plan's base):
//   1. warp (product, K-quarter): partial W S or Qt S over a quarter of K, all VT / 8 column tiles
//   2. thread (r, columns e + 16 c): D = U - W S (to shared), then O = Qt S + Aqk D (fp32, CUDA
//      cores) stored to orow[16 c] when `row_live` (a real token)
//   3. warp: its S tiles <- exp(Gamma_C) * S + Kh^T D, mirrored back to shared
// separated by barriers. Entry: the stage and the S mirror are complete (a barrier since their
// writes). Exit: no barrier after phase 3 -- the caller's next one ends every read of the stage, the
// mirror, D and the partials.
template <class T, int K, int VT, class P>
__device__ __forceinline__ void state_step(const float* st, float* smem, StateTiles<P>& s, T* orow,
                                           bool row_live, float bad, int tid) {
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const int r = tid / 16, e = tid % 16;  // phase 2: this thread's row and first column (then e + 16 c)
  float* S = smem + P::kS;
  float* Pp = smem + P::kP;
  float* D = smem + P::kD;
  float* Dm = smem + P::kDm;

  {  // Phase 1: warp = (product, K-quarter), all 8-column tiles (sharing the A fragments).
    const int prod = warp / P::kQuarters, kq = warp % P::kQuarters;
    const float* A = st + (prod == 0 ? P::kW : P::kQt);
    Acc acc[P::kNt];
#pragma unroll
    for (int kk = 0; kk < K / P::kQuarters; kk += 8) {
      const int k0 = kq * (K / P::kQuarters) + kk;
      const float a[4] = {A[g * P::kRowWQ + k0 + t], A[(g + 8) * P::kRowWQ + k0 + t],
                          A[g * P::kRowWQ + k0 + t + 4], A[(g + 8) * P::kRowWQ + k0 + t + 4]};
      const Tf32Split<4> as = fragment(a);
#pragma unroll
      for (int nt = 0; nt < P::kNt; ++nt) {
        const float b[2] = {S[(k0 + t) * P::kRowS + nt * 8 + g], S[(k0 + t + 4) * P::kRowS + nt * 8 + g]};
        acc[nt].mma(as, fragment(b));
      }
    }
    float* out = Pp + (prod * P::kQuarters + kq) * kChunk * P::kRowS + 2 * t;
#pragma unroll
    for (int nt = 0; nt < P::kNt; ++nt) {
      *reinterpret_cast<float2*>(out + g * P::kRowS + nt * 8) = make_float2(acc[nt].sum(0), acc[nt].sum(1));
      *reinterpret_cast<float2*>(out + (g + 8) * P::kRowS + nt * 8) =
          make_float2(acc[nt].sum(2), acc[nt].sum(3));
    }
  }
  __syncthreads();

  // Phase 2: D = U - W S (the true writes beta_r r_r of the chunk), then the output row; this
  // thread's columns are e + 16 c.
  const int part = kChunk * P::kRowS;
  float qs[P::kCols];
#pragma unroll
  for (int c = 0; c < P::kCols; ++c) {
    const int at = r * P::kRowS + e + 16 * c;
    float ws = 0.f;
    qs[c] = 0.f;
#pragma unroll
    for (int kq = 0; kq < P::kQuarters; ++kq) {
      ws += Pp[kq * part + at];
      qs[c] += Pp[(P::kQuarters + kq) * part + at];
    }
    const float dv = st[P::kU + r * VT + e + 16 * c] - ws;
    D[at] = dv;
    Dm[at] = mma_operand(dv);
  }
  __syncthreads();
  {
    // O = Qt S + Aqk D, rows k <= r of D (predicated, fully unrolled), as 4 chains of <= 4 FMAs.
    const float* arow = st + P::kA + r * kChunk;
#pragma unroll
    for (int c = 0; c < P::kCols; ++c) {
      const int col = e + 16 * c;
      float chain[4] = {qs[c], 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k <= r) chain[k % 4] += arow[k] * D[k * P::kRowS + col];
      }
      const float o = (chain[0] + chain[1]) + (chain[2] + chain[3]);
      if (row_live) orow[16 * c] = from_float<T>(o + bad);
    }
  }

  // Phase 3: S <- Diag(exp(Gamma_C)) S + Kh^T D on this warp's tiles (A = Kh^T: A[d][r] = Kh[r][d]).
  {
    const int i0 = warp * P::kTilesPerWarp, m0 = i0 / P::kNt * 16;  // first tile; all share rows m0..
    const float* kh = st + P::kKh;
    const float ea = st[P::kEc + m0 + g], eb = st[P::kEc + m0 + g + 8];
    Acc acc[P::kTilesPerWarp];
#pragma unroll
    for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
      acc[jj].hh[0] = ea * s[jj][0];
      acc[jj].hh[1] = ea * s[jj][1];
      acc[jj].hh[2] = eb * s[jj][2];
      acc[jj].hh[3] = eb * s[jj][3];
    }
#pragma unroll
    for (int k0 = 0; k0 < kChunk; k0 += 8) {
      const float a[4] = {kh[(k0 + t) * P::kRowKh + m0 + g], kh[(k0 + t) * P::kRowKh + m0 + g + 8],
                          kh[(k0 + t + 4) * P::kRowKh + m0 + g], kh[(k0 + t + 4) * P::kRowKh + m0 + g + 8]};
      const Tf32Split<4> as = fragment(a);
#pragma unroll
      for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
        const int nt = (i0 + jj) % P::kNt;
        const float b[2] = {Dm[(k0 + t) * P::kRowS + nt * 8 + g], Dm[(k0 + t + 4) * P::kRowS + nt * 8 + g]};
        acc[jj].mma(as, fragment(b));
      }
    }
#pragma unroll
    for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
      const int nt = (i0 + jj) % P::kNt;
#pragma unroll
      for (int q = 0; q < 4; ++q) s[jj][q] = acc[jj].sum(q);
      float* srow = S + (m0 + g) * P::kRowS + nt * 8 + 2 * t;
      *reinterpret_cast<float2*>(srow) = make_float2(mma_operand(s[jj][0]), mma_operand(s[jj][1]));
      *reinterpret_cast<float2*>(srow + 8 * P::kRowS) =
          make_float2(mma_operand(s[jj][2]), mma_operand(s[jj][3]));
    }
  }
}

// After the last chunk (its barrier ended every read of the mirror): row `row_out` of the final state
// <- the fp32 register tiles (the mirror holds the stored mma operands), through the mirror.
template <int K, int VT, class P>
__device__ __forceinline__ void store_final_state(const DeviceParams& p, int64_t row_out, int hv, int e0,
                                                  int tid, float* S, const StateTiles<P>& s) {
  const int warp = tid / kWarp, lane = tid % kWarp;
  mirror_tiles<P, false>(S, s, warp, lane / 4, lane % 4);
  __syncthreads();
  write_final_state<K, VT, P>(p, row_out, hv, e0, tid, S);
}

}  // namespace groupattn::kda_cuda
