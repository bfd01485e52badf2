// The 16-token chunk prep of the KDA chunked path as a device function, shared by the two-kernel
// path's prep kernel (kda_chunked.cu: results into the chunk block in global memory) and the fused
// small-problem kernel (kda_chunked_fused.cu: results into its shared-memory stage), plus the
// helpers both state passes use (tf32 operand storage, vector loads). The math is kda_chunked.cu's
// header, item 2: per chunk, L and Aqk in the token-parallel form (every exponent <= 0), Tm = (I +
// L)^-1, W = Tm Diag(beta) (k exp(Gamma)), U = Tm Diag(beta) V, Kh = k exp(Gamma_C - Gamma),
// Qt = scale q exp(Gamma), exp(Gamma_C).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_tf32_mma.cuh"
#include "kda/engines/cuda/kda_wgmma_image.cuh"

namespace groupattn::kda_cuda {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / kWarp;
inline constexpr int kMaxV = 128;
inline constexpr float kLog2e = 1.4426950408889634f;

// Prep: lane-owned channels of one row, vector loads (K = 128: 4 channels as a float4, 64: a float2).
template <int K>
__device__ __forceinline__ void load_lane(const float* src, float (&dst)[K / kWarp]) {
  static_assert(K == 64 || K == 128, "2 or 4 channels per lane");
  if constexpr (K == 128) {
    const float4 x = *reinterpret_cast<const float4*>(src);
    dst[0] = x.x, dst[1] = x.y, dst[2] = x.z, dst[3] = x.w;
  } else {
    const float2 x = *reinterpret_cast<const float2*>(src);
    dst[0] = x.x, dst[1] = x.y;
  }
}

// Precision of the state pass's tensor-core products: 1 = plain tf32 operands (default; simulated
// relative RMS error ~3e-4..5e-4 vs the fp64 recurrence on output and state, weak decays and a
// learned state included, against the 5e-3 budget), 3 = 3xTF32 (about fp32: ~2e-7).
// With 1, every mma operand is rounded to tf32 (to_tf32: nearest, NaN-safe) once where it is produced: W, Qt
// and Kh by the prep (instead of by each of the V / 16 state-pass CTAs at every step), the shared
// mirrors of S and D by the state pass's phases that write them; the fragment loads then pass the
// bits straight to mma.sync (the numerics are those of rounding at load, with no work there).
inline constexpr int kTf32Passes = 1;
using Acc = Tf32Acc<kTf32Passes>;

// The value an mma operand is stored as: tf32-rounded with plain tf32, fp32 with 3xTF32.
__device__ __forceinline__ float mma_operand(float x) {
  if constexpr (kTf32Passes == 1) {
    return __uint_as_float(to_tf32(x));
  } else {
    return x;
  }
}
// A fragment of stored operands (see mma_operand) as mma.sync registers: as-is with plain tf32 (already
// rounded), split into tf32 high and low parts with 3xTF32.
template <int N>
__device__ __forceinline__ Tf32Split<N> fragment(const float (&x)[N]) {
  if constexpr (kTf32Passes == 3) {
    return split_fragment<3>(x);
  } else {
    Tf32Split<N> f;
#pragma unroll
    for (int i = 0; i < N; ++i) f.hi[i] = __float_as_uint(x[i]), f.lo[i] = 0u;
    return f;
  }
}

// Prep's token tiles are 16 rows x K channels: thread tid owns row tid / 16 and the kPer = K / 16
// adjacent channels from (tid % 16) kPer (8 at K = 128, 4 at K = 64), so the 16 threads of a row
// are one half-warp and every load and store of the tile is one vector per tensor per thread.
template <int K>
struct PrepSlice {
  static constexpr int kPer = K * kChunk / kThreads;
  static constexpr int kRowThreads = K / kPer;  // a half-warp
  static_assert((kPer == 8 || kPer == 4) && kRowThreads == 16, "a row per half-warp, 4 or 8 channels each");
};

__device__ __forceinline__ bool aligned_to(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// N adjacent elements as floats: 16- or 8-byte vector loads when `vec` (the caller checked the
// alignment), else N scalar loads (views whose strides are not multiples of the vector).
template <int N, class T>
__device__ __forceinline__ void load_elems(const T* src, bool vec, float (&dst)[N]) {
  static_assert(N == 4 || N == 8, "8 or 16 bytes of bf16/f16");
  if (vec) {
    using Raw = std::conditional_t<N == 8, uint4, uint2>;
    const Raw raw = *reinterpret_cast<const Raw*>(src);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = to_float(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = to_float(src[i]);
  }
}
template <int N>
__device__ __forceinline__ void load_elems(const float* src, bool vec, float (&dst)[N]) {
  static_assert(N % 4 == 0, "whole float4s");
  if (vec) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
      const float4 x = reinterpret_cast<const float4*>(src)[j];
      dst[4 * j] = x.x, dst[4 * j + 1] = x.y, dst[4 * j + 2] = x.z, dst[4 * j + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}
// N floats to 16-byte-aligned memory (shared or global) as float4s.
template <int N>
__device__ __forceinline__ void store4(float* dst, const float (&x)[N]) {
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    reinterpret_cast<float4*>(dst)[j] = make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
  }
}

// Sum over the 16 threads of a row (one half-warp: xor offsets below 16 stay inside it).
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = 8; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// exp(x) for x <= 0 (every exponent the prep takes): one MUFU.EX2 (ex2.approx.ftz, ~2^-22 relative)
// instead of exp2f's four instructions; results below 2^-126 flush to 0, the limit they approach.
__device__ __forceinline__ float exp_nonpos(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * kLog2e));
  return y;
}

// exp(x) for |x| <= kPairAnchorBound (the anchored pair operands below): the same MUFU.EX2, which
// neither overflows (2^87) nor flushes (2^-87) in that range.
__device__ __forceinline__ float exp_anchored(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * kLog2e));
  return y;
}

// The chunk's pair sums L (k.k) and Aqk (q.k) as tensor-core products through one anchor, the chunk's
// token kAnchor: k_rd k_sd exp(Gamma_rd - Gamma_sd) = [k_rd exp(Gamma_rd - Gamma_ad)] [k_sd exp(Gamma_ad -
// Gamma_sd)]. Exact only while both factors stay in range, so a chunk takes it only when every
// |Gamma_rd - Gamma_ad| <= kPairAnchorBound (each half-chunk's decay, per channel) and every |k|, |q|
// <= kPairValueBound: then no factor exceeds e^60 2^32 ~ 2^119 or drops below e^-60 |x| (a flushed
// factor is a term below 2^-126 / e^-60 ~ 1e-12 of |x_s|). The lower bound -5 gate never exceeds 40 per
// half-chunk, nor -7.5; stronger chunks, and any chunk when DeviceParams::pair_anchor_bound < 0 (the
// switch), take the running-product loop. Pairs s > r give products up to e^120 (even inf), never
// stored.
inline constexpr int kAnchor = 7;
inline constexpr float kPairValueBound = 4294967296.f;  // 2^32

// Row r's outputs that both pair-sum forms store, from its slice of q, k, Gamma_r, Gamma_C and beta_r:
// Qt = scale q exp(Gamma_r) and Kh = k exp(Gamma_C - Gamma_r) (tf32 mma operands), and
// Diag(beta) K~ = beta k exp(Gamma_r) (kept in fp32 for W).
template <int N>
__device__ __forceinline__ void row_terms(const DeviceParams& p, const float (&q)[N], const float (&k)[N],
                                          const float (&gr)[N], const float (&gc)[N], float br, float (&qt)[N],
                                          float (&kh)[N], float (&bk)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float er = exp_nonpos(gr[i]);
    qt[i] = mma_operand(p.scale * q[i] * er);
    kh[i] = mma_operand(k[i] * exp_nonpos(gc[i] - gr[i]));
    bk[i] = br * k[i] * er;
  }
}

// gate_from_biased (kda_cuda_common.cuh) without slow-path calls, for the prep: the lower-bound
// gate's sigmoid as (x >= 0 ? 1 : e) / (1 + e) with e = exp(-|x|) <= 1 (no positive exponent) and a
// fast division by 1 + e in [1, 2] (2 ulp); the softplus gate as there.
__device__ __forceinline__ float prep_gate(const DeviceParams& p, float xd, float eA) {
  if (p.gate == kGateSoftplus) return -eA * softplusf_stable(xd);
  const float arg = p.A_log != nullptr ? eA * xd : xd;
  const float e = exp_nonpos(-fabsf(arg));
  return p.lower_bound * __fdividef(arg >= 0.f ? 1.f : e, 1.f + e);
}

// x = hi + lo for 3xTF32 by truncation: hi keeps x's top 10 significand bits (exact, one LOP), lo is
// x - hi (exact in fp32) truncated the same way, so both are valid tf32 whatever the tensor core does
// with low bits. Products lose ~2^-20 relative (the rounded split: ~2^-22) at 3 instructions per
// element instead of 9 (cvt.rna.tf32, sm_80's rounding, is 4 SASS instructions). NaN stays NaN.
template <int N>
__device__ __forceinline__ Tf32Split<N> split_trunc(const float (&x)[N]) {
  constexpr uint32_t kTf32Mask = 0xffffe000u;
  Tf32Split<N> f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    f.hi[i] = __float_as_uint(x[i]) & kTf32Mask;
    f.lo[i] = __float_as_uint(x[i] - __uint_as_float(f.hi[i])) & kTf32Mask;
  }
  return f;
}

// L and Aqk by the running-product loop (any gate; kPairAnchorBound's other form below). Warp w takes
// rows w and 15 - w (17 pairs (r, s <= r) per warp, balanced); each lane owns kPerLane adjacent
// channels and keeps row r's k and q in registers. The decay exp(Gamma_rd - Gamma_sd) = prod_{s < m
// <= r} exp(g_md) is carried down s = r, r - 1, .., 0 as a running product of per-token decays <= 1
// (one multiply per pair and channel instead of an exp): every factor is <= 1, so nothing can overflow
// at any gate strength (a strong decay underflows to 0, the correct limit), and there is no reference
// point. 15 roundings at most: ~1e-6 relative. The pairs go in groups of kGroup consecutive s, whose
// 2 kGroup lane-partial sums (k.k and q.k) are summed over the warp at once by a reduce-scatter (each
// xor step halves the values a lane carries): 9 shuffles per 4 pairs instead of 5 per pair, and no
// shuffle chain per pair. ks, qs: raw k and q; dec1: exp(g). Writes the lower triangles only.
template <int K>
__device__ __forceinline__ void pair_sums_loop(const DeviceParams& p, const float (&ks)[kChunk][K],
                                               const float (&qs)[kChunk][K], const float (&dec1)[kChunk][K],
                                               const float (&bs)[kChunk], float (&L)[kChunk][kChunk],
                                               float (&A)[kChunk][kChunk]) {
  constexpr int kPerLane = K / kWarp;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  static_assert(2 * kWarps == kChunk, "two rows per warp");
  constexpr int kGroup = 4;  // 2 kGroup = 8 values: xor 16, 8, 4 scatter them, xor 2, 1 finish the sums
  const int d0 = lane * kPerLane;
  for (int half = 0; half < 2; ++half) {
    const int r = half == 0 ? warp : kChunk - 1 - warp;
    float kr[kPerLane], qr[kPerLane], decay[kPerLane];
    load_lane<K>(&ks[r][d0], kr);
    load_lane<K>(&qs[r][d0], qr);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) decay[i] = 1.f;  // exp(Gamma_r - Gamma_r)
    const float br = bs[r];
    for (int sb = r; sb >= 0; sb -= kGroup) {  // s = sb - j, j < kGroup
      float x[2 * kGroup];  // x[j]: k_r . k_s, x[kGroup + j]: q_r . k_s (this lane's channels)
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const int s = sb - j;
        float kk = 0.f, qk = 0.f;
        if (s >= 0) {  // warp-uniform
          float kv[kPerLane];
          load_lane<K>(&ks[s][d0], kv);
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const float kd = kv[i] * decay[i];  // k_sd exp(Gamma_rd - Gamma_sd)
            kk += kr[i] * kd;
            qk += qr[i] * kd;
          }
          if (s > 0) {  // exp(Gamma_r - Gamma_{s-1}) = exp(Gamma_r - Gamma_s) exp(g_s)
            float a[kPerLane];
            load_lane<K>(&dec1[s][d0], a);
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) decay[i] *= a[i];
          }
        }
        x[j] = kk;
        x[kGroup + j] = qk;
      }
      // Reduce-scatter: at xor offset o the lanes with bit o set keep the upper half of their
      // values and the others the lower half, each adding its partner's copy of what it keeps.
#pragma unroll
      for (int o = 16, n = kGroup; o >= 4; o /= 2, n /= 2) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < n; ++i) {
          const float keep = upper ? x[n + i] : x[i], send = upper ? x[i] : x[n + i];
          x[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
      }
      x[0] += __shfl_xor_sync(0xffffffffu, x[0], 2);
      x[0] += __shfl_xor_sync(0xffffffffu, x[0], 1);
      // Lane 4 v + u (u < 4) now holds value v (lane bits 4, 3, 2): kind v / kGroup, s = sb - v % kGroup.
      const int v = lane / 4, s = sb - v % kGroup;
      const bool is_l = v < kGroup;  // L (strictly lower: s < r) or Aqk (s <= r)
      if (lane % 4 == 0 && s >= 0 && (!is_l || s < r)) (is_l ? L : A)[r][s] = (is_l ? br : p.scale) * x[0];
    }
  }
}

// L and Aqk through the anchor (kPairAnchorBound) on tensor cores, every entry written (the upper
// triangles 0). Ak: k exp(Gamma_r - Gamma_a), Aq: q exp(Gamma_r - Gamma_a), Bk: k exp(Gamma_a - Gamma_r).
template <int K>
__device__ __forceinline__ void pair_sums_anchored(const DeviceParams& p, const float (&Ak)[kChunk][K],
                                                   const float (&Aq)[kChunk][K], const float (&Bk)[kChunk][K],
                                                   const float (&bs)[kChunk], float (&L)[kChunk][kChunk],
                                                   float (&A)[kChunk][kChunk]) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  // 4 output tiles of m16n8 (L or Aqk x columns 0-7 or 8-15), each over K in two halves: warp w
  // takes tile w % 4 and half w / 4, in 3xTF32 (split_trunc, about fp32). Lane (g, t) reads one
  // float4 of 4 adjacent channels per row: within a pair of k8 steps, channel c0 + 4t + i is k
  // index t (i = 0, 2) or t + 4 (i = 1, 3) of step i / 2, the same permutation for A and B.
  const int g = lane / 4, t = lane % 4, tile = warp % 4, half = warp / 4;
  const bool is_l = tile < 2;
  const int n0 = 8 * (tile % 2);
  const float(*X)[K] = is_l ? Ak : Aq;
  Tf32Acc<3> acc;
#pragma unroll
  for (int j = 0; j < K / 32; ++j) {
    const int c0 = half * (K / 2) + 16 * j;
    const float4 a0 = *reinterpret_cast<const float4*>(&X[g][c0 + 4 * t]);
    const float4 a1 = *reinterpret_cast<const float4*>(&X[g + 8][c0 + 4 * t]);
    const float4 b = *reinterpret_cast<const float4*>(&Bk[n0 + g][c0 + 4 * t]);
    const float xa0[4] = {a0.x, a1.x, a0.y, a1.y}, xb0[2] = {b.x, b.y};
    acc.mma(split_trunc(xa0), split_trunc(xb0));
    const float xa1[4] = {a0.z, a1.z, a0.w, a1.w}, xb1[2] = {b.z, b.w};
    acc.mma(split_trunc(xa1), split_trunc(xb1));
  }
  // C fragment: rows g, g + 8, columns n0 + 2t, + 1. The upper half's raw sums go through the
  // output array; the lower half adds them to its own (a fixed order), scales and masks.
  float(*O)[kChunk] = is_l ? L : A;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {n0 + 2 * t, n0 + 2 * t + 1, n0 + 2 * t, n0 + 2 * t + 1};
  if (half == 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) O[rows[i]][cols[i]] = acc.sum(i);
  }
  __syncthreads();
  if (half == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rows[i], c = cols[i];
      const float sum = acc.sum(i) + O[r][c];
      O[r][c] = is_l ? (c < r ? bs[r] * sum : 0.f) : (c <= r ? p.scale * sum : 0.f);
    }
  }
}

// Where one chunk's prep writes its results, a policy type Dst: the chunk block in global memory for
// the two-kernel path (kda_chunked.cu's BlockDst), the fused kernel's shared-memory stage
// (kda_chunked_fused.cu). base() is asked once, where the results are stored; the float offsets
// from it: w(r), qt(r), kh(r) of row r (K floats each), u(r) (value columns u0() .. u0() + u_cols()
// - 1, u_cols a multiple of 8: a fused CTA computes only its own V-tile's), aqk() (16 x 16
// contiguous), ec() (K floats); w_row() and u_row() are w(r + 1) - w(r) and u(r + 1) - u(r);
// every row 16-byte aligned. kImage true: the block is kda_wgmma_image.cuh's image for the sm_90
// state pass instead, written through its put functions (the offsets are then not asked; u0() and
// u_cols() still are). (Offsets from one base rather than six
// pointers: the prep kernel runs at <= 51 registers, and the offsets are kernel parameters or
// compile-time constants.)
template <class T, int K, class Dst>
__device__ __forceinline__ void chunk_prep(const DeviceParams& p, const SeqSpan& sq, int64_t first, int hv,
                                           const Dst& dst) {
  using S = PrepSlice<K>;
  constexpr int kPer = S::kPer;
  const int64_t t0 = sq.bos + first;                                                  // chunk start along T
  const int C = static_cast<int>(sq.len - first < kChunk ? sq.len - first : kChunk);  // rows of this chunk
  const int h = hv / p.group;  // GVA: value head hv reads qk head hv / (HV / H)
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;

  __shared__ __align__(16) float ks[kChunk][K], qs[kChunk][K], G[kChunk][K], vs[kChunk][kMaxV];
  __shared__ __align__(16) float dec1[kChunk][K];  // exp(g): the per-token decay, <= 1
  __shared__ __align__(16) float bs[kChunk], L[kChunk][kChunk], A[kChunk][kChunk];
  // Tm = (I + L)^-1 lives in dec1's first 256 floats: dec1 is dead once the pair sums have read it
  // (a barrier precedes the substitution that writes Tm). The 1 KiB saved lets 5 CTAs share an SM
  // at K = 128 (46080 bytes a CTA fitted 4: 5 x (45 + 1 reserved) KiB > 228): prep 140.1 -> 134.0 us
  // at T 4096 H 16 (session 24 call 5, Nsight).
  float(*Tm)[kChunk] = reinterpret_cast<float(*)[kChunk]>(&dec1[0][0]);
  __shared__ __align__(16) float Ga[2][K];  // Gamma at the anchor token and at the chunk's end

  const T* qb = static_cast<const T*>(p.q) + sq.batch * p.q_sb + h * p.q_sh;
  const T* kb = static_cast<const T*>(p.k) + sq.batch * p.k_sb + h * p.k_sh;
  const T* vb = static_cast<const T*>(p.v) + sq.batch * p.v_sb + hv * p.v_sh + dst.u0();
  const float* gb = p.g + sq.batch * p.g_sb + hv * p.g_sh;
  const float* dtb = p.dt_bias != nullptr ? p.dt_bias + hv * p.dt_sh : nullptr;
  // Vector loads need every row start of this (batch, head) on the vector size: the tests' default
  // views and packed tensors are; a view with odd strides takes the scalar loads (same values).
  constexpr size_t kQkBytes = kPer * sizeof(T), kVBytes = 4 * sizeof(T);
  const bool vec_qk = aligned_to(qb, kQkBytes) && aligned_to(kb, kQkBytes) && p.q_st % kPer == 0 &&
                      p.k_st % kPer == 0 && aligned_to(gb, 16) && p.g_st % 4 == 0 &&
                      (dtb == nullptr || aligned_to(dtb, 16));
  const bool vec_v = aligned_to(vb, kVBytes) && p.v_st % 4 == 0;

  // v's columns u0 .. u0 + u_cols - 1 in pieces of 4 (u_cols = 64 or 128: 1 or 2 per thread; 16: a
  // quarter of the threads) and beta, first: their 64-bit addresses are dead before the gate math
  // (whose slow-path calls would make them spill). Every piece's load (and beta's) before any
  // store, so that their round trips overlap (a loop of load-then-store paid one a piece: the prep's
  // largest stall, session 25's profile).
  const int UC = dst.u_cols();
  {
    constexpr int kPieces = kChunk * kMaxV / 4 / kThreads;  // per thread, at most
    float x[kPieces][4], b = 0.f;
    if (tid < C) b = p.beta[sq.batch * p.b_sb + (t0 + tid) * p.b_st + hv * p.b_sh];
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const int i = tid + j * kThreads, r = i / (UC / 4), e = i % (UC / 4) * 4;
#pragma unroll
      for (int c = 0; c < 4; ++c) x[j][c] = 0.f;
      if (r < C) load_elems<4>(vb + (t0 + r) * p.v_st + e, vec_v, x[j]);
    }
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const int i = tid + j * kThreads, r = i / (UC / 4), e = i % (UC / 4) * 4;
      if (i < kChunk * UC / 4) store4(&vs[r][e], x[j]);
    }
    if (tid < kChunk) bs[tid] = tid < C ? effective_beta(p, b) : 0.f;
  }
  {  // Token tiles, this thread's slice: k and q (l2-normalised), then the effective gate g and exp(g).
    const int r = tid / S::kRowThreads, d0 = tid % S::kRowThreads * kPer;
    const int64_t t = t0 + r;
    // The gate's inputs load with q and k (one round trip for all): g plus dt_bias, and A_log.
    float kx[kPer], qx[kPer], gx[kPer], a_log = 0.f;
    if (r < C) {
      load_elems<kPer>(kb + t * p.k_st + d0, vec_qk, kx);
      load_elems<kPer>(qb + t * p.q_st + d0, vec_qk, qx);
      load_elems<kPer>(gb + t * p.g_st + d0, vec_qk, gx);
      if (p.gate != kGateLogDecay) {
        if (p.A_log != nullptr) a_log = p.A_log[hv];
        if (dtb != nullptr) {
          float dt[kPer];
          load_elems<kPer>(dtb + d0, vec_qk, dt);
#pragma unroll
          for (int i = 0; i < kPer; ++i) gx[i] += dt[i];
        }
      }
    } else {  // padded rows: k = q = 0, g = 0 (decay 1)
#pragma unroll
      for (int i = 0; i < kPer; ++i) kx[i] = qx[i] = gx[i] = 0.f;
    }
    if (p.l2norm) {  // x / sqrt(sum x^2 + 1e-6) per token row, before the scale (uniform branch)
      float kk = 0.f, qq = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) kk += kx[i] * kx[i], qq += qx[i] * qx[i];
      const float rk = rsqrtf(row_sum(kk) + 1e-6f), rq = rsqrtf(row_sum(qq) + 1e-6f);
#pragma unroll
      for (int i = 0; i < kPer; ++i) kx[i] *= rk, qx[i] *= rq;
    }
    store4(&ks[r][d0], kx);
    store4(&qs[r][d0], qx);
    if (r < C && p.gate != kGateLogDecay) {  // effective_gate, exp(A_log[hv]) once per thread
      const float eA = p.A_log != nullptr ? expf(a_log) : 1.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) gx[i] = prep_gate(p, gx[i], eA);
    }
    store4(&G[r][d0], gx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) gx[i] = exp_nonpos(gx[i]);
    store4(&dec1[r][d0], gx);
  }
  if (tid < kChunk * kChunk) {
    L[tid / kChunk][tid % kChunk] = 0.f;
    A[tid / kChunk][tid % kChunk] = 0.f;
  }
  __syncthreads();

  if (tid < K) {  // Gamma: chunk-local cumsum; fp32 sums of g <= 0 stay non-increasing along r
    float acc = G[0][tid];
    for (int r = 1; r < kChunk; ++r) {
      G[r][tid] = acc += G[r][tid];
      if (r == kAnchor) Ga[0][tid] = acc;
    }
    Ga[1][tid] = acc;
  }
  __syncthreads();

  // Which form the pair sums take (kPairAnchorBound): the test over this thread's slice, then one
  // CTA-wide vote (a barrier, after which each thread may overwrite its own slices).
  bool anchored;
  {
    const int rs = tid / S::kRowThreads, ds = tid % S::kRowThreads * kPer;  // this thread's slice
    bool far = !(p.pair_anchor_bound >= 0.f);
#pragma unroll
    for (int j = 0; j < kPer; j += 4) {  // in float4 pieces: fewer live registers (51 at most)
      float gr[4], ga[4], kx[4], qx[4];
      load_elems<4>(&G[rs][ds + j], true, gr);
      load_elems<4>(&Ga[0][ds + j], true, ga);
      load_elems<4>(&ks[rs][ds + j], true, kx);
      load_elems<4>(&qs[rs][ds + j], true, qx);
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // NaN fails every test: such a chunk takes the loop, as before
        far |= !(fabsf(gr[i] - ga[i]) <= p.pair_anchor_bound) || !(fabsf(kx[i]) <= kPairValueBound) ||
               !(fabsf(qx[i]) <= kPairValueBound);
      }
    }
    anchored = !__syncthreads_or(far);
  }
  {
    // This slice's stored rows Qt and Kh, both forms. Anchored: also Diag(beta) K~ over k in ks and
    // the three product operands over the slices they came from (own slice only: no other thread
    // reads them before the next barrier): qs <- q exp(Gamma_r - Gamma_a), G <- k exp(Gamma_r -
    // Gamma_a), dec1 <- k exp(Gamma_a - Gamma_r).
    const int rs = tid / S::kRowThreads, ds = tid % S::kRowThreads * kPer;
    float* blk = dst.base();
    const float br = bs[rs];
#pragma unroll
    for (int j = 0; j < kPer; j += 4) {  // in float4 pieces: fewer live registers
      const int d = ds + j;
      float gr[4], gc[4], kx[4], qx[4], qt[4], kh[4], bk[4];
      load_elems<4>(&G[rs][d], true, gr);
      load_elems<4>(&Ga[1][d], true, gc);  // padded rows keep Gamma, so Gamma_15 = Gamma_C
      load_elems<4>(&ks[rs][d], true, kx);
      load_elems<4>(&qs[rs][d], true, qx);
      row_terms(p, qx, kx, gr, gc, br, qt, kh, bk);
      if constexpr (Dst::kImage) {  // the sm_90 state pass's shared-memory image (kda_wgmma_image.cuh)
        store4(blk + wgmma_image::qt_at(rs, d), qt);
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_image::put_kh(blk, rs, d + i, kh[i]);
      } else {
        store4(blk + dst.qt(rs) + d, qt);
        store4(blk + dst.kh(rs) + d, kh);
      }
      if (anchored) {
        store4(&ks[rs][d], bk);
        float ga[4];
        load_elems<4>(&Ga[0][d], true, ga);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float f = gr[i] - ga[i];
          const float up = exp_anchored(f), down = exp_anchored(-f);
          qt[i] = qx[i] * up;
          kh[i] = kx[i] * up;
          bk[i] = kx[i] * down;
        }
        store4(&qs[rs][d], qt);
        store4(&G[rs][d], kh);
        store4(&dec1[rs][d], bk);
      }
    }
  }
  __syncthreads();
  if (anchored) {
    pair_sums_anchored<K>(p, G, qs, dec1, bs, L, A);
  } else {
    pair_sums_loop<K>(p, ks, qs, dec1, bs, L, A);
    __syncthreads();
    // Diag(beta) K~ over k in ks (own slice), once the loop has read every row of k.
    const int rs = tid / S::kRowThreads, ds = tid % S::kRowThreads * kPer;
    float gr[kPer], kx[kPer];
    load_elems<kPer>(&G[rs][ds], true, gr);
    load_elems<kPer>(&ks[rs][ds], true, kx);
    const float br = bs[rs];
#pragma unroll
    for (int i = 0; i < kPer; ++i) kx[i] = br * kx[i] * exp_nonpos(gr[i]);
    store4(&ks[rs][ds], kx);
  }
  __syncthreads();

  // Tm = (I + L)^-1, unit lower, by forward substitution: lane s of warp 0 owns column s in
  // registers, x_r = -sum_{m<r} L[r][m] x_m for r > s (the terms m < s are exact zeros, so the
  // sum equals the one from m = s), L's rows broadcast from shared memory.
  if (warp == 0 && lane < kChunk) {
    const int s = lane;
    float x[kChunk];
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      float lr[kChunk], acc = 0.f;
      load_elems<kChunk>(&L[r][0], true, lr);
#pragma unroll
      for (int m = 0; m < r; ++m) acc += lr[m] * x[m];
      x[r] = r == s ? 1.f : r < s ? 0.f : -acc;
      Tm[r][s] = x[r];
    }
  }

  float* blk = dst.base();  // this chunk's results
  if constexpr (Dst::kImage) {
    if (tid < K) wgmma_image::put_ec(blk, tid, exp_nonpos(Ga[1][tid]));
    if (tid < kChunk * kChunk)
      wgmma_image::put_aqk(blk, tid / kChunk, tid % kChunk, A[tid / kChunk][tid % kChunk]);
  } else {
    if (tid < K) blk[dst.ec() + tid] = exp_nonpos(Ga[1][tid]);
    if (tid < kChunk * kChunk) blk[dst.aqk() + tid] = A[tid / kChunk][tid % kChunk];
  }
  __syncthreads();

  // W = Tm (Diag(beta) K~) and U = Tm Diag(beta) V on tensor cores: (K + u_cols) / 8 output tiles of
  // m16n8 (the W tiles first), warp w taking tiles w, w + 8, ..; 2 k-steps of m16n8k8 each, in the
  // truncated 3xTF32 form (split_trunc: ~2^-20 relative, about fp32; W is rounded to tf32 after).
  {
    const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
    Tf32Split<4> a[2];                     // Tm's A fragments, both k-steps, shared by every tile
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int k0 = 8 * kk;
      const float x[4] = {Tm[g][k0 + t], Tm[g + 8][k0 + t], Tm[g][k0 + t + 4], Tm[g + 8][k0 + t + 4]};
      a[kk] = split_trunc(x);
    }
    for (int tile = warp; tile < (K + UC) / 8; tile += kWarps) {
      const bool is_w = tile < K / 8;  // warp-uniform
      const int n0 = is_w ? 8 * tile : 8 * tile - K, col = n0 + g;  // B column of this lane
      Tf32Acc<3> acc;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const int m0 = 8 * kk + t, m1 = m0 + 4;  // B rows (tokens) of this lane
        const float x[2] = {is_w ? ks[m0][col] : bs[m0] * vs[m0][col],
                            is_w ? ks[m1][col] : bs[m1] * vs[m1][col]};
        acc.mma(a[kk], split_trunc(x));
      }
      // C fragment: rows g and g + 8, columns n0 + 2t, + 1.
      if constexpr (Dst::kImage) {
        float c[4] = {acc.sum(0), acc.sum(1), acc.sum(2), acc.sum(3)};
        const int e = n0 + 2 * t;
        if (is_w) {  // W is an mma operand, U is not
#pragma unroll
          for (int q = 0; q < 4; ++q) c[q] = mma_operand(c[q]);
          *reinterpret_cast<float2*>(blk + wgmma_image::w_at(g, e)) = make_float2(c[0], c[1]);
          *reinterpret_cast<float2*>(blk + wgmma_image::w_at(g + 8, e)) = make_float2(c[2], c[3]);
        } else {
          wgmma_image::put_u(blk, g, e, c[0]);
          wgmma_image::put_u(blk, g, e + 1, c[1]);
          wgmma_image::put_u(blk, g + 8, e, c[2]);
          wgmma_image::put_u(blk, g + 8, e + 1, c[3]);
        }
      } else {
        const int stride = is_w ? dst.w_row() : dst.u_row();
        float* out = blk + (is_w ? dst.w(0) : dst.u(0)) + g * stride + n0 + 2 * t;
        float c[4] = {acc.sum(0), acc.sum(1), acc.sum(2), acc.sum(3)};
        if (is_w) {  // W is an mma operand, U is not
#pragma unroll
          for (int q = 0; q < 4; ++q) c[q] = mma_operand(c[q]);
        }
        *reinterpret_cast<float2*>(out) = make_float2(c[0], c[1]);
        *reinterpret_cast<float2*>(out + 8 * stride) = make_float2(c[2], c[3]);
      }
    }
  }
}

}  // namespace groupattn::kda_cuda
