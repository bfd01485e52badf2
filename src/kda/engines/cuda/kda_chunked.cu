// KDA chunked prefill (research/kda.md 3.1; the fp64 blueprint is src/kda/reference_chunked.cpp).
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Three kernels, fp32 arithmetic on bf16/f16 inputs:
//  1. chunk map (one thread): chunk_offsets[n] = sum_{m<n} ceil(len_m / 16). Varlen only: dense
//     sequences all have T tokens, so the kernels compute n * ceil(T / 16) (chunk_offset()) and
//     the call saves a launch (host time, issue 11).
//  2. prep (kda_chunk_prep.cuh), grid (chunk, value head): per 16-token chunk with Gamma the chunk-local cumsum of the
//     effective gate, L[r][s] = beta_r sum_d k_rd k_sd exp(Gamma_rd - Gamma_sd) (s < r) and
//     Aqk[r][s] = scale sum_d q_rd k_sd exp(Gamma_rd - Gamma_sd) (s <= r) elementwise per channel
//     (the token-parallel form: no reference point, every exponent <= 0, so no gate strength can
//     overflow it); Tm = (I + L)^-1 by forward substitution; W = Tm Diag(beta) (k exp(Gamma)),
//     U = Tm Diag(beta) V (tensor cores, no exponential inside), Kh = k exp(Gamma_C - Gamma),
//     Qt = scale q exp(Gamma), exp(Gamma_C). One 16-byte load per tensor per thread for the tiles.
//     A partial last chunk is padded with k = q = v = beta = g = 0, which leaves every real row exact.
//  3. state pass, grid (sequence x V-tile of 16, value head), sequential over the sequence's chunks:
//     D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D, the products on tensor
//     cores with tf32 operands rounded once where they are produced (kTf32Passes: 1 = plain tf32,
//     the default; 3 = 3xTF32, about fp32; kda_tf32_mma.cuh), S in fp32 registers, and the next
//     chunk's block prefetched into a second shared-memory stage (cp.async) during each step.
// The state pass is one serial chain per (sequence, value head, V-tile): few heads and long
// sequences leave SMs idle (splitting it is a later step, issue 4).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {
namespace {

__global__ void kda_chunk_map_kernel(const DeviceParams p, int64_t* chunk_offsets) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t acc = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    chunk_offsets[n] = acc;
    acc += (seq_span(p, n).len + kChunk - 1) / kChunk;
  }
  chunk_offsets[p.N] = acc;
}

// The prep's destination (kda_chunk_prep.cuh): the block of (chunk blockIdx.x, value head
// blockIdx.y), all V columns of U.
template <int K>
struct BlockDst {
  float* blocks;
  const ChunkLayout& l;  // the kernel's parameter
  int HV, V;
  __device__ __forceinline__ float* base() const {
    return blocks + (static_cast<int64_t>(blockIdx.x) * HV + blockIdx.y) * l.block_floats;
  }
  __device__ __forceinline__ int64_t w(int r) const { return l.w + r * K; }
  __device__ __forceinline__ int64_t qt(int r) const { return l.qt + r * K; }
  __device__ __forceinline__ int64_t kh(int r) const { return l.kh + r * K; }
  __device__ __forceinline__ int64_t u(int r) const { return l.u + r * V; }
  __device__ __forceinline__ int64_t aqk() const { return l.aqk; }
  __device__ __forceinline__ int64_t ec() const { return l.ec; }
  __device__ __forceinline__ int w_row() const { return K; }
  __device__ __forceinline__ int u_row() const { return V; }
  __device__ __forceinline__ int u0() const { return 0; }
  __device__ __forceinline__ int u_cols() const { return V; }
};

// 5 CTAs per SM (44 KiB of shared memory each at K = 128): at most 51 registers.
constexpr int kPrepMinBlocks = 5;

template <class T, int K>
__global__ void __launch_bounds__(kThreads, kPrepMinBlocks)
    kda_chunk_prep_kernel(const DeviceParams p, const int64_t* chunk_offsets, float* blocks, const ChunkLayout l) {
  const int64_t c = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y);
  if (c >= chunk_offset(p, chunk_offsets, p.N)) return;  // the grid is sized by an upper bound
  // The sequence owning chunk c: the last n with chunk_offset(n) <= c (empty sequences skipped).
  int64_t lo = 0, hi = p.N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (chunk_offset(p, chunk_offsets, mid) <= c) lo = mid; else hi = mid - 1;
  }
  const int64_t first = (c - chunk_offset(p, chunk_offsets, lo)) * kChunk;  // chunk start inside the sequence
  chunk_prep<T, K>(p, seq_span(p, lo), first, hv, BlockDst<K>{blocks, l, p.HV, p.V});
}

// Shared-memory plan of the state pass for head dim K and VT value columns per CTA (16 or 32; floats;
// every tile 16-byte aligned for cp.async). Row strides are padded so the mma fragment loads hit 32
// distinct banks: W / Qt rows are read as A (row g, column t) -> stride = 4 mod 32; Kh is read
// transposed (row t, column g) -> stride = 8 mod 32; S and D are read as B (row t, column g) ->
// stride VT + 8 (24 or 40: t * stride + g spans the 32 banks).
template <int K, int VT>
struct StatePlan {
  static constexpr int kQuarters = 4;   // phase 1 splits K over 4 warps per product
  static constexpr int kRowWQ = K + 4;  // W, Qt row stride
  static constexpr int kRowKh = K + 8;  // Kh row stride
  static constexpr int kRowS = VT + 8;  // S [K][VT], D and the partial products [16][VT]
  static constexpr int kNt = VT / 8;    // n8 column tiles per CTA
  static constexpr int kCols = kChunk * VT / kThreads;  // phase 2: columns per thread (1 or 2)
  // One stage: the chunk block's slice this CTA needs.
  static constexpr int kW = 0;
  static constexpr int kQt = kW + kChunk * kRowWQ;
  static constexpr int kKh = kQt + kChunk * kRowWQ;
  static constexpr int kU = kKh + kChunk * kRowKh;  // [16][VT], this CTA's V columns
  static constexpr int kA = kU + kChunk * VT;
  static constexpr int kEc = kA + kChunk * kChunk;
  static constexpr int kStage = kEc + K;
  // After the two stages.
  static constexpr int kS = 2 * kStage;
  static constexpr int kP = kS + K * kRowS;  // partial W S and Qt S [2 products][4 K-quarters][16][kRowS]
  static constexpr int kD = kP + 2 * kQuarters * kChunk * kRowS;  // D (fp32, for the output rows)
  static constexpr int kDm = kD + kChunk * kRowS;                 // D as an mma operand
  static constexpr int kFloats = kDm + kChunk * kRowS;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  // The S update: (K / 16) x kNt output tiles of m16n8, a warp taking kTilesPerWarp column tiles of
  // one 16-row tile (so they share its A fragments).
  static constexpr int kTilesPerWarp = K / 16 * kNt / kWarps;
  static_assert(kStage % 4 == 0 && kRowWQ % 4 == 0 && kRowKh % 4 == 0 && kU % 4 == 0 && kA % 4 == 0 &&
                    kEc % 4 == 0,
                "16-byte cp.async destinations");
  static_assert(kRowWQ % 32 == 4 && kRowKh % 32 == 8 && (kRowS % 32 == 24 || kRowS % 32 == 8),
                "conflict-free fragment loads");
  static_assert(kTilesPerWarp >= 1 && kTilesPerWarp <= kNt && kNt % kTilesPerWarp == 0 &&
                    K / 16 * kNt % kWarps == 0,
                "S-update tiles split evenly over the warps, within one 16-row tile");
  static_assert(kWarps == 2 * kQuarters, "phase 1: 2 products x 4 K-quarters, one warp each");
  static_assert(K / kQuarters % 8 == 0, "whole k-steps per quarter");
  static_assert((VT == 16 || VT == 32) && kCols * kThreads == kChunk * VT, "whole columns per thread");
};

// Issues the cp.async copies of chunk block `blk` (this CTA's V columns e0..e0+VT-1) into `stage`.
// Each thread's pieces are fixed by tid and compile-time counts (no division, no per-copy 64-bit
// block arithmetic): K / 32 pieces of each of W, Qt, Kh for K = 128 (2 x 3), 1 x 3 for K = 64.
template <int K, int VT>
__device__ __forceinline__ void load_stage(float* stage, const float* blk, const ChunkLayout& l, int V,
                                           int e0, int tid) {
  using P = StatePlan<K, VT>;
  constexpr int kQuads = K / 4;           // 16-byte pieces per row of W / Qt / Kh
  constexpr int kPieces = kChunk * kQuads;  // per matrix
  static_assert(kPieces % kThreads == 0, "whole pieces per thread");
  const float *w = blk + l.w, *qt = blk + l.qt, *kh = blk + l.kh;
#pragma unroll
  for (int it = 0; it < kPieces / kThreads; ++it) {
    const int i = tid + it * kThreads, r = i / kQuads, c4 = i % kQuads * 4;
    cp_async16(stage + P::kW + r * P::kRowWQ + c4, w + r * K + c4);
    cp_async16(stage + P::kQt + r * P::kRowWQ + c4, qt + r * K + c4);
    cp_async16(stage + P::kKh + r * P::kRowKh + c4, kh + r * K + c4);
  }
  constexpr int kUPieces = kChunk * VT / 4, kAPieces = kChunk * kChunk / 4;
  static_assert(kThreads >= kUPieces + kAPieces + kQuads, "one small copy per thread");
  if (tid < kUPieces) {  // U [r][e0 + c4 .. + 3]
    const int r = tid / (VT / 4), c4 = tid % (VT / 4) * 4;
    cp_async16(stage + P::kU + r * VT + c4, blk + l.u + r * V + e0 + c4);
  } else if (tid < kUPieces + kAPieces) {  // Aqk, contiguous 16 x 16
    const int i = (tid - kUPieces) * 4;
    cp_async16(stage + P::kA + i, blk + l.aqk + i);
  } else if (tid < kUPieces + kAPieces + kQuads) {  // exp(Gamma_C)
    const int i = (tid - kUPieces - kAPieces) * 4;
    cp_async16(stage + P::kEc + i, blk + l.ec + i);
  }
  cp_async_commit();
}

// The state pass, one CTA per (sequence, value head, V-tile of VT = 16 or 32 columns), sequential
// over the chunks, with the next chunk's block copied into the other stage (cp.async) while this one
// is computed. S (K x VT) lives in registers as m16n8 accumulator tiles (fp32) and is mirrored in
// shared memory (as stored mma operands) for the products that read it. Per chunk, three phases
// separated by __syncthreads:
//   1. warp (product, K-quarter): partial W S or Qt S over a quarter of K, all VT / 8 column tiles
//   2. thread (r, columns e + 16 c): D = U - W S (to shared), then O = Qt S + Aqk D (fp32, CUDA cores)
//   3. warp: its S tiles <- exp(Gamma_C) * S + Kh^T D, mirrored back to shared
// VT = 32 reads each chunk block's W / Qt / Kh (24 KiB at K = 128) once per 32 columns instead of
// once per 16: half the L2 traffic and half the CTAs (launch_chunked_t picks it when there are
// enough CTAs to fill the GPU).
// VT = 32 runs 2 CTAs per SM (102 KiB of shared memory each at K = 128): at most 128 registers.
template <class T, int K, int VT>
__global__ void __launch_bounds__(kThreads, VT == 32 ? 2 : 1)
    kda_chunk_state_kernel(const DeviceParams p, const int64_t* chunk_offsets, const float* blocks, const ChunkLayout l) {
  using P = StatePlan<K, VT>;
  extern __shared__ __align__(16) float smem[];
  // blockIdx.x = sequence * (V / VT) + V-tile: the V / VT CTAs of one (sequence, value head) are
  // adjacent in launch order, so they run together and read each chunk block from L2 once it has
  // come from HBM for the first of them (sequence-major order left them in different waves).
  const int tiles = p.V / VT;
  const int64_t n = blockIdx.x / tiles;
  const int hv = static_cast<int>(blockIdx.y);
  const int e0 = static_cast<int>(blockIdx.x % tiles) * VT;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const int r = tid / 16, e = tid % 16;  // phase 2: this thread's row and first column (then e + 16 c)
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);  // rows.out is read again after the loop (fewer live registers)
  const float bad = rows.bad ? NAN : 0.f;
  float* S = smem + P::kS;
  float* Pp = smem + P::kP;
  float* D = smem + P::kD;
  float* Dm = smem + P::kDm;

  const int64_t c0 = chunk_offset(p, chunk_offsets, n), nc = chunk_offset(p, chunk_offsets, n + 1) - c0;
  const int64_t block_step = static_cast<int64_t>(p.HV) * l.block_floats;  // chunk c -> c + 1
  const float* next_block = blocks + (c0 * p.HV + hv) * l.block_floats;   // chunk j + 1's, in the loop
  if (nc > 0) load_stage<K, VT>(smem, next_block, l, p.V, e0, tid);
  for (int i = tid; i < K * VT; i += kThreads) {
    // V-first rows are K-contiguous: d fastest; K-first rows are V-contiguous: column fastest.
    const int d = p.v_first ? i % K : i / VT, ee = p.v_first ? i / K : i % VT;
    const int64_t at = state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, e0 + ee);
    S[d * P::kRowS + ee] = rows.in >= 0 ? p.s_in[at] : 0.f;
  }
  cp_async_wait_all();
  __syncthreads();

  // Phase 3's tiles of this warp: tile i = warp * kTilesPerWarp + jj covers S rows 16 (i / kNt) ..
  // + 15 and columns 8 (i % kNt) .. + 7; s holds its accumulator fragment.
  float s[P::kTilesPerWarp][4];
#pragma unroll
  for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
    const int i = warp * P::kTilesPerWarp + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
    s[jj][0] = S[d * P::kRowS + c];
    s[jj][1] = S[d * P::kRowS + c + 1];
    s[jj][2] = S[(d + 8) * P::kRowS + c];
    s[jj][3] = S[(d + 8) * P::kRowS + c + 1];
  }
  __syncthreads();  // every warp has its fp32 tiles; the mirror becomes the stored mma operand
#pragma unroll
  for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
    const int i = warp * P::kTilesPerWarp + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
    S[d * P::kRowS + c] = mma_operand(s[jj][0]);
    S[d * P::kRowS + c + 1] = mma_operand(s[jj][1]);
    S[(d + 8) * P::kRowS + c] = mma_operand(s[jj][2]);
    S[(d + 8) * P::kRowS + c + 1] = mma_operand(s[jj][3]);
  }
  __syncthreads();

  // This thread's output row r of chunk j (its first column), advanced by 16 tokens per chunk.
  T* orow = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + (sq.bos + r) * p.o_st + e0 + e;
  const int64_t orow_step = kChunk * p.o_st;
  int64_t rows_left = sq.len - r;  // tokens of the sequence from this row of chunk j on
  for (int64_t j = 0; j < nc; ++j) {
    const float* st = smem + (j & 1) * P::kStage;
    // The other stage was last read before the previous chunk's final barrier.
    if (j + 1 < nc) {
      next_block += block_step;
      load_stage<K, VT>(smem + ((j + 1) & 1) * P::kStage, next_block, l, p.V, e0, tid);
    }

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
        if (rows_left > 0) orow[16 * c] = from_float<T>(o + bad);
      }
      orow += orow_step;
      rows_left -= kChunk;
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
        *reinterpret_cast<float2*>(srow + 8 * P::kRowS) = make_float2(mma_operand(s[jj][2]), mma_operand(s[jj][3]));
      }
    }
    cp_async_wait_all();
    __syncthreads();  // next stage landed; S, D and the partials may be reused
  }
  if (const StateRows rows_end = state_rows(p, n); rows_end.out >= 0) {
    // The mirror holds the stored mma operands: the fp32 state comes from the register tiles (the
    // loop's last barrier ended every read of the mirror).
#pragma unroll
    for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
      const int i = warp * P::kTilesPerWarp + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
      S[d * P::kRowS + c] = s[jj][0];
      S[d * P::kRowS + c + 1] = s[jj][1];
      S[(d + 8) * P::kRowS + c] = s[jj][2];
      S[(d + 8) * P::kRowS + c + 1] = s[jj][3];
    }
    __syncthreads();
    for (int i = tid; i < K * VT; i += kThreads) {
      const int d = p.v_first ? i % K : i / VT, ee = p.v_first ? i / K : i % VT;
      const int64_t at = state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows_end.out, hv, d, e0 + ee);
      p.s_out[at] = S[d * P::kRowS + ee];
    }
  }
}

template <class T, int K, int VT>
Status launch_state(const DeviceParams& p, const int64_t* offsets, const float* blocks, const ChunkLayout& l,
                    cudaStream_t stream) {
  using P = StatePlan<K, VT>;
  constexpr auto state_kernel = kda_chunk_state_kernel<T, K, VT>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<state_kernel>(P::kBytes));
  // x = sequence * (V / VT) + V-tile (the engine declines N * V / 16 >= 2^31).
  const dim3 grid(static_cast<unsigned>(p.N * (p.V / VT)), static_cast<unsigned>(p.HV));
  host_timing::mark("kda state launch plan (device properties, smem attribute)");
  state_kernel<<<grid, kThreads, P::kBytes, stream>>>(p, offsets, blocks, l);
  const Status launched = cuda::last_launch_status("kda_chunk_state_kernel");
  host_timing::mark("launch kda_chunk_state_kernel");
  return launched;
}

template <class T, int K>
Status launch_prep_t(const DeviceParams& p, void* workspace, const ChunkLayout& l, cudaStream_t stream) {
  auto* offsets = static_cast<int64_t*>(workspace);
  auto* blocks = reinterpret_cast<float*>(static_cast<char*>(workspace) + l.offsets_bytes);
  if (p.cu_seqlens != nullptr) {  // dense: the kernels compute the offsets (chunk_offset())
    kda_chunk_map_kernel<<<1, kWarp, 0, stream>>>(p, offsets);
    GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk_map_kernel"));
    host_timing::mark("launch kda_chunk_map_kernel");
  }
  if (l.max_chunks > 0) {
    const dim3 grid(static_cast<unsigned>(l.max_chunks), static_cast<unsigned>(p.HV));
    kda_chunk_prep_kernel<T, K><<<grid, kThreads, 0, stream>>>(p, offsets, blocks, l);
    GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk_prep_kernel"));
    host_timing::mark("launch kda_chunk_prep_kernel");
  }
  return Status::Ok();
}

template <class T, int K>
Status launch_chunked_t(const DeviceParams& p, void* workspace, const ChunkLayout& l, cudaStream_t stream) {
  GA_RETURN_IF_ERROR((launch_prep_t<T, K>(p, workspace, l, stream)));
  auto* offsets = static_cast<int64_t*>(workspace);
  auto* blocks = reinterpret_cast<float*>(static_cast<char*>(workspace) + l.offsets_bytes);
  // V-tiles of 32 columns when the 16-column grid would not fit on the GPU at once (2 CTAs per SM):
  // then halving the CTAs costs no parallelism and halves the waves and the W / Qt / Kh traffic.
  int sms = 0, cc = 0;
  GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
  if (p.N * p.HV * (p.V / 16) > 2 * static_cast<int64_t>(sms)) return launch_state<T, K, 32>(p, offsets, blocks, l, stream);
  return launch_state<T, K, 16>(p, offsets, blocks, l, stream);
}

}  // namespace

Status launch_chunk_prep(const DeviceParams& p, bool bf16, void* workspace, const ChunkLayout& layout,
                         cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  if (bf16) {
    return p.K == 64 ? launch_prep_t<__nv_bfloat16, 64>(p, workspace, layout, stream)
                     : launch_prep_t<__nv_bfloat16, 128>(p, workspace, layout, stream);
  }
  return p.K == 64 ? launch_prep_t<__half, 64>(p, workspace, layout, stream)
                   : launch_prep_t<__half, 128>(p, workspace, layout, stream);
}

Status launch_chunked(const DeviceParams& p, bool bf16, void* workspace, const ChunkLayout& layout,
                      cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  if (bf16) {
    return p.K == 64 ? launch_chunked_t<__nv_bfloat16, 64>(p, workspace, layout, stream)
                     : launch_chunked_t<__nv_bfloat16, 128>(p, workspace, layout, stream);
  }
  return p.K == 64 ? launch_chunked_t<__half, 64>(p, workspace, layout, stream)
                   : launch_chunked_t<__half, 128>(p, workspace, layout, stream);
}

}  // namespace groupattn::kda_cuda
