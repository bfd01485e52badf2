// The 16-token state step with the next chunk's products one step ahead (issue 4, session 16): the
// K-halves column kernel (kda_state_cols.cuh, KS = 2) with its serial chain cut from "W S over K,
// the halves' exchange, D, Kh^T D, the mirror" to one 16 x 16 product a step.
//
// Per chunk j (stage j: W_j, Qt_j, Kh_j, U_j, Aqk_j, exp(Gamma_C) = E_j; the prep's, unchanged):
//   D_j = U_j - W_j S_j;  O_j = Qt_j S_j + Aqk_j D_j;  S_{j+1} = E_j S_j + Kh_j^T D_j.
// Since S_{j+1} = E_j S_j + Kh_j^T D_j,
//   W_{j+1} S_{j+1} = X_{j+1} + M_{j+1} D_j,  X_{j+1} = W_{j+1} (E_j S_j),  M_{j+1} = W_{j+1} Kh_j^T,
// and X_{j+1}, M_{j+1} (16 x 16) and Qt_{j+1} S_{j+1} need only S_j, D_j and the two stages. So step
// j computes D_j = U_j - (X_j + M_j D_{j-1}) (one k = 16 product on the chain), O_j, S_{j+1}, and
// then -- off the chain, from stage j + 1 -- X_{j+1}, Qt_{j+1} S_{j+1} and M_{j+1}, which the next
// step finds ready. The copy ring keeps chunks j and j + 1 resident during step j (the next block
// lands NS - 2 steps after it is issued). Numerics: the products of W with S are split into W (E S)
// and (W Kh^T) D, each on tf32-rounded operands (M rounded once where it is formed), instead of W on
// tf32(S): the same class of rounding as the K-halves kernel, not its bits.
//
// A CTA of 4 warps owns value columns e0 .. e0 + 15 of one (sequence, value head): warp w owns
// columns 8 (w % 2) .. + 7 and S rows K / 2 (w / 2) .. + K / 2 - 1 (the K-halves kernel's split);
// the two warps of a column group add their partial sums (X, Qt S and their M tile) under a named
// barrier. M's columns (chunk j's tokens) are split by column group: warp w forms M's columns
// 8 (w % 2) .. + 7 over its half of K.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_state_cols.cuh"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {

// Shared memory (floats): NS stages laid out as ColsPlan's (cols_load_stage copies them), then per
// warp its S mirror, its (E S) mirror, D [16][8] and its partial sums [12][lane], then M of the
// current and the next chunk [2][16][kRowM].
template <int K, int NS>
struct AheadPlan {
  using Stage = ColsPlan<K, NS, 2>;
  static constexpr int kHeadDim = K;
  static constexpr int kKH = K / 2;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kRowWQ = Stage::kRowWQ, kRowKh = Stage::kRowKh, kRowA = Stage::kRowA;
  static constexpr int kW = Stage::kW, kQt = Stage::kQt, kKh = Stage::kKh, kU = Stage::kU, kA = Stage::kA,
                       kEc = Stage::kEc, kStage = Stage::kStage;
  static constexpr int kMirrors = NS * kStage;
  static constexpr int kSp = 8 * kKH;        // the (E S) mirror, after the S mirror
  static constexpr int kDm = 2 * 8 * kKH;    // D [16][8]
  static constexpr int kX = kDm + kChunk * 8;  // partial sums [12][lane]: X (4), Qt S (4), M (4)
  static constexpr int kWarpFloats = kX + 12 * kWarp;
  static constexpr int kRowM = kChunk + 4;  // M read as A (row g, column t): 20 g + t banks
  static constexpr int kM = kMirrors + kWarps * kWarpFloats;
  static constexpr int kFloats = kM + 2 * kChunk * kRowM;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  static_assert(NS >= 3 && NS <= 4, "chunks j and j + 1 resident during step j, the next in flight");
  static_assert(kWarpFloats % 4 == 0 && kM % 4 == 0 && kRowM % 32 == 20, "aligned, conflict-free");
};

// What one step hands the next (per lane, the C-fragment positions rows g, g + 8, columns 2 t, + 1 of
// the warp's 8): X_{j+1} and Qt_{j+1} S_{j+1} summed over K, and D_j as tf32 B fragments.
struct AheadCarry {
  float x[4] = {0.f, 0.f, 0.f, 0.f}, q[4] = {0.f, 0.f, 0.f, 0.f};
  Tf32Split<2> d[2] = {};
};

// W_n (E S) or W_n S, Qt_n S and (kWithM) M = W_n Kh_c^T over this warp's half of K, summed with the
// partner's (half 0's partial first, in both warps); half 0 stores M's tile (tf32) at m_out.
// nx: the stage with W_n and Qt_n; kh_stage: the stage with Kh_c; Sx, Sq: the mirrors W and Qt read.
template <class P, bool kWithM>
__device__ __forceinline__ void ahead_products(const float* nx, const float* kh_stage, const float* Sx,
                                               const float* Sq, const ColsWarp& w, const MirrorBases<P::kKH>& mb,
                                               AheadCarry& c, float* m_out, int g, int t) {
  constexpr int KH = P::kKH;
  Acc xs[2], qs[2], ms[2];
  const int n0 = w.c0;  // M's column tile (chunk c's tokens) of this column group
#pragma unroll
  for (int pp = 0; pp < KH / 16; ++pp) {
    const int col = w.k_lo + 16 * pp + 4 * t;  // the permuted k order of kda_state_cols.cuh
    const float4 w0 = *reinterpret_cast<const float4*>(nx + P::kW + g * P::kRowWQ + col);
    const float4 w1 = *reinterpret_cast<const float4*>(nx + P::kW + (g + 8) * P::kRowWQ + col);
    const float4 q0 = *reinterpret_cast<const float4*>(nx + P::kQt + g * P::kRowWQ + col);
    const float4 q1 = *reinterpret_cast<const float4*>(nx + P::kQt + (g + 8) * P::kRowWQ + col);
    const float4 sx = *reinterpret_cast<const float4*>(Sx + mb.load(pp));
    const float4 sq = *reinterpret_cast<const float4*>(Sq + mb.load(pp));
    const Tf32Split<4> aw0 = fragment<4>({w0.x, w1.x, w0.y, w1.y}), aw1 = fragment<4>({w0.z, w1.z, w0.w, w1.w});
    xs[0].mma(aw0, fragment<2>({sx.x, sx.y}));
    xs[1].mma(aw1, fragment<2>({sx.z, sx.w}));
    qs[0].mma(fragment<4>({q0.x, q1.x, q0.y, q1.y}), fragment<2>({sq.x, sq.y}));
    qs[1].mma(fragment<4>({q0.z, q1.z, q0.w, q1.w}), fragment<2>({sq.z, sq.w}));
    if constexpr (kWithM) {  // B = Kh_c^T: B[k = d][n = s] = Kh_c[s][d], row n0 + g of Kh_c
      const float4 kh = *reinterpret_cast<const float4*>(kh_stage + P::kKh + (n0 + g) * P::kRowKh + col);
      ms[0].mma(aw0, fragment<2>({kh.x, kh.y}));
      ms[1].mma(aw1, fragment<2>({kh.z, kh.w}));
    }
  }
  float part[12];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    part[q] = xs[0].sum(q) + xs[1].sum(q);
    part[4 + q] = qs[0].sum(q) + qs[1].sum(q);
    part[8 + q] = kWithM ? ms[0].sum(q) + ms[1].sum(q) : 0.f;
  }
  const int lane = 4 * g + t;
#pragma unroll
  for (int i = 0; i < 12; ++i) w.X[i * kWarp + lane] = part[i];
  // Immediate barrier ids (a register id makes ptxas reserve all 16 of the CTA's barriers).
  if (w.bar == 1) {
    asm volatile("bar.sync 1, 64;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 64;\n" ::: "memory");
  }
  float full[12];
#pragma unroll
  for (int i = 0; i < 12; ++i) {
    const float other = w.Xpartner[i * kWarp + lane];
    full[i] = w.half == 0 ? part[i] + other : other + part[i];
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) c.x[q] = full[q], c.q[q] = full[4 + q];
  if (kWithM && w.half == 0) {  // M's tile: rows g, g + 8, columns n0 + 2 t, + 1
    *reinterpret_cast<float2*>(m_out + g * P::kRowM + n0 + 2 * t) =
        make_float2(mma_operand(full[8]), mma_operand(full[9]));
    *reinterpret_cast<float2*>(m_out + (g + 8) * P::kRowM + n0 + 2 * t) =
        make_float2(mma_operand(full[10]), mma_operand(full[11]));
  }
}

// One chunk's step for this warp. st: chunk j's stage; nx: chunk j + 1's (nullptr at the last
// chunk); m_cur: M_j (zeros at the first chunk, as D_{-1}); m_next: where M_{j + 1} goes. Entry: the
// carry holds X_j, Qt_j S_j and D_{j-1}, m_cur is complete (a CTA barrier since its stores). Exit: S
// = S_{j+1} in registers and mirrored, the carry for chunk j + 1; no barrier after (the caller's
// orders the mirrors, the partial sums and m_next before the next step).
template <class T, class P>
__device__ __forceinline__ void ahead_step(const float* st, const float* nx, const ColsWarp& w, ColsState<P::kKH>& S,
                                           AheadCarry& c, const MirrorBases<P::kKH>& mb, const float* m_cur,
                                           float* m_next, T* orow, int64_t o_st, int64_t rows_here, float bad, int g,
                                           int t) {
  constexpr int KH = P::kKH;
  const int c0 = w.c0;
  float* Sm = w.Sm;
  float* Sp = w.Sm + P::kSp;
  float* Dm = w.Dm;
  // The chain: D_j = U_j - (X_j + M_j D_{j-1}).
  Acc pd;
#pragma unroll
  for (int q = 0; q < 4; ++q) pd.hh[q] = c.x[q];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int s0 = 8 * kk + t;
    pd.mma(fragment<4>({m_cur[g * P::kRowM + s0], m_cur[(g + 8) * P::kRowM + s0], m_cur[g * P::kRowM + s0 + 4],
                        m_cur[(g + 8) * P::kRowM + s0 + 4]}),
           c.d[kk]);
  }
  float dv[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
    dv[q] = st[P::kU + row * kColsVT + c0 + col] - pd.sum(q);
  }
  *reinterpret_cast<float2*>(Dm + g * 8 + 2 * t) = make_float2(dv[0], dv[1]);
  *reinterpret_cast<float2*>(Dm + (g + 8) * 8 + 2 * t) = make_float2(dv[2], dv[3]);
  __syncwarp();
  // D as B fragments (row = token t / t + 4 of each k step, column g): fp32 for Aqk D, tf32 for the
  // S update and the next step's M D.
  float db[2][2];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) db[kk][0] = Dm[(8 * kk + t) * 8 + g], db[kk][1] = Dm[(8 * kk + t + 4) * 8 + g];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) c.d[kk] = fragment<2>({mma_operand(db[kk][0]), mma_operand(db[kk][1])});

  // O_j = Qt_j S_j + Aqk_j D_j (Aqk masked above the diagonal; 3xTF32 as in kda_state_cols.cuh).
  Tf32Acc<3> ad;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int s0 = 8 * kk + t, s1 = s0 + 4;
    const float* a = st + P::kA;
    const float av[4] = {s0 <= g ? a[g * P::kRowA + s0] : 0.f, s0 <= g + 8 ? a[(g + 8) * P::kRowA + s0] : 0.f,
                         s1 <= g ? a[g * P::kRowA + s1] : 0.f, s1 <= g + 8 ? a[(g + 8) * P::kRowA + s1] : 0.f};
    ad.mma(split_trunc(av), split_trunc(db[kk]));
  }
  float o[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) o[q] = c.q[q] + ad.sum(q) + bad;
  if (w.half == 0) {
    if (g < rows_here) orow[0] = from_float<T>(o[0]), orow[1] = from_float<T>(o[1]);
    if (g + 8 < rows_here) orow[8 * o_st] = from_float<T>(o[2]), orow[8 * o_st + 1] = from_float<T>(o[3]);
  }

  // S_{j+1} = E_j S_j + Kh_j^T D_j; E_j S_j mirrored for X_{j+1}. (The mirrors' last reads were the
  // previous step's products, before the caller's barrier.)
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
    for (int q = 0; q < 4; ++q) Sp[mb.store(i, q)] = mma_operand(acc.hh[q]);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int r0 = 8 * kk + t;
      acc.mma(fragment<4>({kh[r0 * P::kRowKh + m0 + g], kh[r0 * P::kRowKh + m0 + g + 8],
                           kh[(r0 + 4) * P::kRowKh + m0 + g], kh[(r0 + 4) * P::kRowKh + m0 + g + 8]}),
              c.d[kk]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) S.s[i][q] = acc.sum(q);
  }
  cols_mirror<KH>(Sm, S, mb);
  if (nx == nullptr) return;  // the last chunk: nothing ahead
  __syncwarp();  // every lane's mirror stores before the products read them
  ahead_products<P, true>(nx, st, Sp, Sm, w, mb, c, m_next, g, t);
}

}  // namespace groupattn::kda_cuda
