// KDA chunked prefill in 64-token state steps (docs/ENGINES.md "64-token state steps"; research/kda.md
// 3.2-3.3; the fp64 blueprint is kda_chunked_two_level_fp64 in src/kda/reference_chunked.cpp).
//
//   shapes as kda_chunked.cu: q, k [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K], beta [B,T,HV], out [B,T,HV,V]
//
// Four launches:
//  1. the 16-token chunk map and prep of kda_chunked.cu, unchanged: per 16-token sub-chunk a,
//     W_a = Tm_a Diag(beta) (k e^gamma), U_a = Tm_a Diag(beta) V, Qt_a = scale q e^gamma,
//     Kh_a = k e^(gamma_C - gamma), Aqk_aa, ec_a = e^(gamma_C) (every exponent <= 0).
//  2. chunk64 map (one thread): chunk64_offsets[n] = sum_{m<n} ceil(len_m / 64).
//  3. merge, grid (64-token chunk, value head): level 2 from the 4 sub-chunks' blocks. With
//     e^(B_i) = prod_{m<i} ec_m the decay entering sub-chunk i and X_ij = e^(B_i - B_{j+1}) =
//     prod_{j<m<i} ec_m (j < i; products of factors <= 1, no new exponential, no division):
//       M_ij = W_i Diag(X_ij) Kh_j^T,  Aqk_ij = Qt_i Diag(X_ij) Kh_j^T          (16 x 16, j < i)
//     The four 16-token steps D_i = U_i - W_i S_i, S_{i+1} = Diag(ec_i) S_i + Kh_i^T D_i unrolled
//     give (I + M) D = U - (W_i Diag(e^(B_i)))_i S_0 with M strictly block-lower, so
//       W64 = (I + M)^-1 (W_i Diag(e^(B_i)))_i,  U64 = (I + M)^-1 U    (block forward substitution)
//       Qt64_i = Qt_i Diag(e^(B_i)),  Kh64_i = Kh_i Diag(e^(B_4 - B_{i+1})),  ec64 = e^(B_4)
//     and Aqk64 = [Aqk_ij] block-lower with the diagonal blocks Aqk_aa. (I + M) = Diag(Tm)^-1 (I + L)
//     for the two-level L of the blueprint, so this is its T = (I + L)^-1 factored through the
//     level-1 results. Missing sub-chunks of a sequence's last 64-token chunk are zero blocks with
//     ec = 1; padded rows inside a sub-chunk are zero rows (the prep's padding).
//  4. state pass, grid (sequence x V-tile, value head), sequential over the 64-token chunks, the
//     chunk step of kda_chunked.cu on 64 rows: D = U64 - W64 S; O = Qt64 S + Aqk64 D;
//     S <- Diag(ec64) S + Kh64^T D, every product on tensor cores (tf32 operands rounded once where
//     they are produced, fp32 accumulation), S in fp32 registers.
// UNVERIFIED on GPU (written without one; the GPU tier's KdaCuda* tests run this path as "chunked64").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_runtime_shim.h"
#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kPairs = kSubChunks * (kSubChunks - 1) / 2;  // off-diagonal sub-chunk blocks (i > j)
static_assert(kSubChunks == 4, "the merge's pair table and weights assume 4 sub-chunks");

// Index of the off-diagonal block (i, j), j < i: (1,0)=0, (2,0)=1, (2,1)=2, (3,0)=3, (3,1)=4, (3,2)=5.
__host__ __device__ constexpr int pair_index(int i, int j) { return i * (i - 1) / 2 + j; }

// An mma operand as stored: rounded to tf32 once (cvt.rna, NaN-safe), where it is produced.
__device__ __forceinline__ float mma_operand(float x) { return __uint_as_float(to_tf32(x)); }
// A fragment of stored (already tf32) operands as mma.sync registers.
template <int N>
__device__ __forceinline__ Tf32Split<N> stored_fragment(const float (&x)[N]) {
  Tf32Split<N> f;
#pragma unroll
  for (int i = 0; i < N; ++i) f.hi[i] = __float_as_uint(x[i]), f.lo[i] = 0u;
  return f;
}
using Acc = Tf32Acc<1>;

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 x) { *reinterpret_cast<float4*>(p) = x; }
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ float4 mul4(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}

// The sequence owning chunk c under `offsets` (the last n with offsets[n] <= c; empty ones skipped).
__device__ __forceinline__ int64_t owner(const int64_t* offsets, int64_t N, int64_t c) {
  int64_t lo = 0, hi = N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= c) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void kda_chunk64_map_kernel(const DeviceParams p, int64_t* chunk64_offsets) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t acc = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    chunk64_offsets[n] = acc;
    acc += (seq_span(p, n).len + kChunk64 - 1) / kChunk64;
  }
  chunk64_offsets[p.N] = acc;
}

// ---------------------------------------------------------------------------------------------
// Merge (level 2). Shared memory (floats): W_i and Qt_i of sub-chunks 1..3, Kh_j of sub-chunks
// 0..2 ([16][K + 4] each: the (r, s) dot products read 16 different Kh rows per warp as float4,
// conflict-free at stride 4 mod 32), ec_a [4][K], M_ij [6][16][16].
template <int K>
struct MergePlan {
  static constexpr int kRow = K + 4;
  static constexpr int kTile = kChunk * kRow;
  static constexpr int kW = 0;                       // [3] tiles, sub-chunks 1..3
  static constexpr int kQt = kW + 3 * kTile;         // [3] tiles, sub-chunks 1..3
  static constexpr int kKh = kQt + 3 * kTile;        // [3] tiles, sub-chunks 0..2
  static constexpr int kEc = kKh + 3 * kTile;        // [4][K]
  static constexpr int kM = kEc + kSubChunks * K;    // [6][16][16]
  static constexpr int kFloats = kM + kPairs * kChunk * kChunk;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  static_assert(kRow % 32 == 4 && kTile % 4 == 0 && kEc % 4 == 0 && kM % 4 == 0, "float4 tiles, no conflicts");
  static_assert(kChunk * kChunk == kThreads, "one (r, s) entry of every block per thread");
};

template <int K>
__global__ void __launch_bounds__(kThreads, 2)
    kda_chunk_merge64_kernel(const DeviceParams p, const int64_t* offsets, const float* blocks, const ChunkLayout ls,
                             const int64_t* offsets64, float* blocks64, const Chunk64Layout l) {
  using P = MergePlan<K>;
  extern __shared__ __align__(16) float smem[];
  const int64_t c = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y);
  if (c >= offsets64[p.N]) return;  // the grid is sized by an upper bound
  const int64_t n = owner(offsets64, p.N, c);
  const int64_t first = chunk_offset(p, offsets, n) + (c - offsets64[n]) * kSubChunks;  // its first 16-token chunk
  const int64_t left = chunk_offset(p, offsets, n + 1) - first;
  const int nsub = static_cast<int>(left < kSubChunks ? left : kSubChunks);  // real sub-chunks, >= 1
  const int V = p.V;
  const int tid = static_cast<int>(threadIdx.x);
  // Sub-chunk a's block (valid for a < nsub).
  auto sub = [&](int a) { return blocks + ((first + a) * p.HV + hv) * ls.block_floats; };
  float* out = blocks64 + (c * p.HV + hv) * l.block_floats;

  // 1. Tiles to shared memory (zero for missing sub-chunks), ec (1 for missing ones).
  constexpr int kQuads = kChunk * K / 4;
  for (int i = tid; i < kQuads; i += kThreads) {
    const int r = i / (K / 4), c4 = i % (K / 4) * 4;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int a = 0; a < kSubChunks; ++a) {
      const bool real = a < nsub;
      if (a >= 1) {
        st4(smem + P::kW + (a - 1) * P::kTile + r * P::kRow + c4, real ? ld4(sub(a) + ls.w + r * K + c4) : zero);
        st4(smem + P::kQt + (a - 1) * P::kTile + r * P::kRow + c4, real ? ld4(sub(a) + ls.qt + r * K + c4) : zero);
      }
      if (a <= 2) {
        st4(smem + P::kKh + a * P::kTile + r * P::kRow + c4, real ? ld4(sub(a) + ls.kh + r * K + c4) : zero);
      }
    }
  }
  for (int i = tid; i < kSubChunks * K; i += kThreads) {
    const int a = i / K, d = i % K;
    smem[P::kEc + i] = a < nsub ? sub(a)[ls.ec + d] : 1.f;
  }
  __syncthreads();

  // 2. Off-diagonal blocks, thread = (r, s): M_ij[r][s] and Aqk_ij[r][s] for the 6 pairs, K-long dot
  // products with the weights X_ij (1 for i = j + 1, ec_{j+1} for i = j + 2, ec_1 ec_2 for (3, 0)).
  {
    const int r = tid / kChunk, s = tid % kChunk;
    float m[kPairs] = {}, aq[kPairs] = {};
    const float* w = smem + P::kW + r * P::kRow;
    const float* q = smem + P::kQt + r * P::kRow;
    const float* kh = smem + P::kKh + s * P::kRow;
#pragma unroll 4
    for (int d = 0; d < K; d += 4) {
      const float4 e1 = ld4(smem + P::kEc + K + d), e2 = ld4(smem + P::kEc + 2 * K + d);
      const float4 k0 = ld4(kh + d), k1 = ld4(kh + P::kTile + d), k2 = ld4(kh + 2 * P::kTile + d);
      const float4 k0e1 = mul4(k0, e1), k1e2 = mul4(k1, e2), k0e12 = mul4(k0e1, e2);
      const float4 w1 = ld4(w + d), w2 = ld4(w + P::kTile + d), w3 = ld4(w + 2 * P::kTile + d);
      m[pair_index(1, 0)] += dot4(w1, k0);
      m[pair_index(2, 0)] += dot4(w2, k0e1);
      m[pair_index(2, 1)] += dot4(w2, k1);
      m[pair_index(3, 0)] += dot4(w3, k0e12);
      m[pair_index(3, 1)] += dot4(w3, k1e2);
      m[pair_index(3, 2)] += dot4(w3, k2);
      const float4 q1 = ld4(q + d), q2 = ld4(q + P::kTile + d), q3 = ld4(q + 2 * P::kTile + d);
      aq[pair_index(1, 0)] += dot4(q1, k0);
      aq[pair_index(2, 0)] += dot4(q2, k0e1);
      aq[pair_index(2, 1)] += dot4(q2, k1);
      aq[pair_index(3, 0)] += dot4(q3, k0e12);
      aq[pair_index(3, 1)] += dot4(q3, k1e2);
      aq[pair_index(3, 2)] += dot4(q3, k2);
    }
#pragma unroll
    for (int x = 0; x < kPairs; ++x) smem[P::kM + x * kChunk * kChunk + tid] = m[x];
    // Aqk64 [64][64] (an mma operand of the state pass): block (i, j) at rows 16 i + r, columns 16 j + s.
#pragma unroll
    for (int i = 0; i < kSubChunks; ++i) {
#pragma unroll
      for (int j = 0; j < kSubChunks; ++j) {
        float x = 0.f;
        if (j < i) x = aq[pair_index(i, j)];
        if (j == i && i < nsub) x = sub(i)[ls.aqk + r * kChunk + s];
        out[l.aqk + (kChunk * i + r) * kChunk64 + kChunk * j + s] = mma_operand(x);
      }
    }
  }
  __syncthreads();

  // 3. Block forward substitution, thread = one column of [W | U] (K + V <= 256 columns), the 64 rows
  // in registers: Y_i = R_i - sum_{j<i} M_ij Y_j, R_i = W_i Diag(e^(B_i)) or U_i.
  if (tid < K + V) {
    const bool is_w = tid < K;
    const int col = is_w ? tid : tid - K;
    float y[kChunk64];
    float eb = 1.f;  // e^(B_a) of this column (W only)
#pragma unroll
    for (int a = 0; a < kSubChunks; ++a) {
      const bool real = a < nsub;
#pragma unroll
      for (int r = 0; r < kChunk; ++r) {
        y[kChunk * a + r] = !real ? 0.f : is_w ? sub(a)[ls.w + r * K + col] * eb : sub(a)[ls.u + r * V + col];
      }
      if (is_w) eb *= smem[P::kEc + a * K + col];
    }
#pragma unroll
    for (int i = 1; i < kSubChunks; ++i) {
#pragma unroll
      for (int r = 0; r < kChunk; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < i; ++j) {
          const float* mrow = smem + P::kM + pair_index(i, j) * kChunk * kChunk + r * kChunk;
#pragma unroll
          for (int s4 = 0; s4 < kChunk; s4 += 4) {
            const float4 mv = ld4(mrow + s4);  // broadcast
            acc += mv.x * y[kChunk * j + s4] + mv.y * y[kChunk * j + s4 + 1] + mv.z * y[kChunk * j + s4 + 2] +
                   mv.w * y[kChunk * j + s4 + 3];
          }
        }
        y[kChunk * i + r] -= acc;
      }
    }
#pragma unroll
    for (int row = 0; row < kChunk64; ++row) {
      if (is_w) {
        out[l.w + row * K + col] = mma_operand(y[row]);
      } else {
        out[l.u + row * V + col] = y[row];
      }
    }
  }

  // 4. Qt64_i = Qt_i e^(B_i), Kh64_i = Kh_i e^(B_4 - B_{i+1}) (stored mma operands), ec64 = e^(B_4).
  for (int i = tid; i < kChunk64 * K; i += kThreads) {
    const int row = i / K, d = i % K, a = row / kChunk, r = row % kChunk;
    float qt = 0.f, khv = 0.f;
    if (a < nsub) {
      float head = 1.f, tail = 1.f;
#pragma unroll
      for (int m = 0; m < kSubChunks; ++m) {
        const float e = smem[P::kEc + m * K + d];
        if (m < a) head *= e;
        if (m > a) tail *= e;
      }
      qt = sub(a)[ls.qt + r * K + d] * head;
      khv = sub(a)[ls.kh + r * K + d] * tail;
    }
    out[l.qt + i] = mma_operand(qt);
    out[l.kh + i] = mma_operand(khv);
  }
  if (tid < K) {
    float e = 1.f;
#pragma unroll
    for (int m = 0; m < kSubChunks; ++m) e *= smem[P::kEc + m * K + tid];
    out[l.ec + tid] = e;
  }
}

// ---------------------------------------------------------------------------------------------
// State pass. Shared-memory plan for head dim K and VT value columns per CTA (floats; 16-byte aligned
// tiles for cp.async). One stage, refilled by role as soon as its readers are done: W / Qt (read in
// phase 1) during phases 2-3, U / Aqk / Kh / ec (read in phases 2-3) during the next phase 1.
// Strides: W / Qt / Aqk rows are read as A (row g, column t) -> 4 mod 32; Kh transposed (row t,
// column g) -> 8 mod 32; S and D as B (row t, column g) -> VT + 8.
template <int K, int VT>
struct State64Plan {
  static constexpr int kRows = kChunk64;
  static constexpr int kRowWQ = K + 4;
  static constexpr int kRowKh = K + 8;
  static constexpr int kRowA = kChunk64 + 4;
  static constexpr int kRowS = VT + 8;
  static constexpr int kNt = VT / 8;  // n8 column tiles per CTA
  static constexpr int kW = 0;
  static constexpr int kQt = kW + kRows * kRowWQ;
  static constexpr int kKh = kQt + kRows * kRowWQ;
  static constexpr int kU = kKh + kRows * kRowKh;  // [64][VT], this CTA's columns
  static constexpr int kA = kU + kRows * VT;
  static constexpr int kEc = kA + kRows * kRowA;
  static constexpr int kS = kEc + K;               // S mirror [K][kRowS] (stored mma operands)
  static constexpr int kP = kS + K * kRowS;        // W S and Qt S [2][64][kRowS] (fp32)
  static constexpr int kDm = kP + 2 * kRows * kRowS;  // D [64][kRowS] as an mma operand
  static constexpr int kFloats = kDm + kRows * kRowS;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  // Phase 1: warp = (product, 16-row tile), full K. Phase 2b: the output's 4 x kNt m16n8 tiles,
  // kOutTiles per warp (one row tile). Phase 3: the (K / 16) x kNt S tiles, kSTiles per warp (one
  // row tile).
  static constexpr int kOutTiles = kSubChunks * kNt / kWarps;
  static constexpr int kSTiles = K / 16 * kNt / kWarps;
  static constexpr int kCols2 = kRows * VT / kThreads;  // phase 2: adjacent columns per thread (4 or 8)
  static_assert(kWarps == 2 * kSubChunks, "phase 1: 2 products x 4 row tiles");
  static_assert(kOutTiles >= 1 && kNt % kOutTiles == 0, "phase 2b: whole tiles of one row tile per warp");
  static_assert(kSTiles >= 1 && kNt % kSTiles == 0, "phase 3: whole tiles of one row tile per warp");
  static_assert(kCols2 % 4 == 0 && VT % kCols2 == 0, "phase 2: float4 pieces of one row");
  static_assert(kRowWQ % 32 == 4 && kRowA % 32 == 4 && kRowKh % 32 == 8 &&
                    (kRowS % 32 == 24 || kRowS % 32 == 8),
                "conflict-free fragment loads");
  static_assert(kQt % 4 == 0 && kKh % 4 == 0 && kU % 4 == 0 && kA % 4 == 0 && kEc % 4 == 0 && kS % 4 == 0 &&
                    kP % 4 == 0 && kDm % 4 == 0,
                "16-byte aligned tiles");
  static_assert(kBytes <= 227 * 1024, "fits one SM's shared memory");
};

// cp.async of W and Qt of block `blk` into the stage (one commit group).
template <int K, int VT>
__device__ __forceinline__ void load_wq(float* smem, const float* blk, const Chunk64Layout& l, int tid) {
  using P = State64Plan<K, VT>;
  constexpr int kQuads = K / 4, kPieces = kChunk64 * kQuads;
  static_assert(kPieces % kThreads == 0, "whole pieces per thread");
#pragma unroll
  for (int it = 0; it < kPieces / kThreads; ++it) {
    const int i = tid + it * kThreads, r = i / kQuads, c4 = i % kQuads * 4;
    cp_async16(smem + P::kW + r * P::kRowWQ + c4, blk + l.w + r * K + c4);
    cp_async16(smem + P::kQt + r * P::kRowWQ + c4, blk + l.qt + r * K + c4);
  }
  cp_async_commit();
}

// cp.async of Kh, this CTA's U columns, Aqk and ec64 of block `blk` into the stage (one commit group).
template <int K, int VT>
__device__ __forceinline__ void load_rest(float* smem, const float* blk, const Chunk64Layout& l, int V, int e0,
                                          int tid) {
  using P = State64Plan<K, VT>;
  constexpr int kQuads = K / 4, kPieces = kChunk64 * kQuads;
#pragma unroll
  for (int it = 0; it < kPieces / kThreads; ++it) {
    const int i = tid + it * kThreads, r = i / kQuads, c4 = i % kQuads * 4;
    cp_async16(smem + P::kKh + r * P::kRowKh + c4, blk + l.kh + r * K + c4);
  }
  constexpr int kUPieces = kChunk64 * VT / 4, kAPieces = kChunk64 * kChunk64 / 4;
  static_assert(kUPieces % kThreads == 0 && kAPieces % kThreads == 0 && K / 4 <= kThreads, "whole pieces");
#pragma unroll
  for (int it = 0; it < kUPieces / kThreads; ++it) {
    const int i = tid + it * kThreads, r = i / (VT / 4), c4 = i % (VT / 4) * 4;
    cp_async16(smem + P::kU + r * VT + c4, blk + l.u + r * V + e0 + c4);
  }
  // Aqk64 is block-lower and phase 2b reads row tile rt only up to column 16 (rt + 1): the 6 blocks
  // above the diagonal (6 KiB of the step's ~116 KiB) are not copied; that part of the tile is
  // never read.
#pragma unroll
  for (int it = 0; it < kAPieces / kThreads; ++it) {
    const int i = tid + it * kThreads, r = i / (kChunk64 / 4), c4 = i % (kChunk64 / 4) * 4;
    if (c4 < (r / kChunk + 1) * kChunk) cp_async16(smem + P::kA + r * P::kRowA + c4, blk + l.aqk + r * kChunk64 + c4);
  }
  if (tid < K / 4) cp_async16(smem + P::kEc + 4 * tid, blk + l.ec + 4 * tid);
  cp_async_commit();
}

// One CTA per (sequence, value head, V-tile of VT columns), sequential over the 64-token chunks. Per
// chunk, three barriers:
//   1.  warp (product, row tile): W S or Qt S for 16 rows, full K, all VT / 8 column tiles
//       [barrier; W / Qt of the next chunk start loading]
//   2.  thread (row, kCols2 columns): D = U - W S, stored as an mma operand
//       [barrier]
//   2b. warp: O = Qt S + Aqk D on its output tiles (block-lower: k-steps up to its row tile's end)
//   3.  warp: its S tiles <- ec64 S + Kh^T D (8 k-steps), mirrored to shared
//       [barrier; Kh / U / Aqk / ec of the next chunk start loading]
template <class T, int K, int VT>
__global__ void __launch_bounds__(kThreads, 1)
    kda_chunk64_state_kernel(const DeviceParams p, const int64_t* offsets64, const float* blocks64,
                             const Chunk64Layout l) {
  using P = State64Plan<K, VT>;
  extern __shared__ __align__(16) float smem[];
  const int tiles = p.V / VT;
  const int64_t n = blockIdx.x / tiles;
  const int hv = static_cast<int>(blockIdx.y);
  const int e0 = static_cast<int>(blockIdx.x % tiles) * VT;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;
  float* S = smem + P::kS;
  float* Pp = smem + P::kP;
  float* Dm = smem + P::kDm;

  const int64_t c0 = offsets64[n], nc = offsets64[n + 1] - c0;
  const int64_t block_step = static_cast<int64_t>(p.HV) * l.block_floats;  // chunk c -> c + 1
  const float* blk = blocks64 + (c0 * p.HV + hv) * l.block_floats;        // chunk j's block
  if (nc > 0) {
    load_wq<K, VT>(smem, blk, l, tid);
    load_rest<K, VT>(smem, blk, l, p.V, e0, tid);
  }
  for (int i = tid; i < K * VT; i += kThreads) {
    const int d = p.v_first ? i % K : i / VT, ee = p.v_first ? i / K : i % VT;
    const int64_t at = state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, e0 + ee);
    S[d * P::kRowS + ee] = rows.in >= 0 ? p.s_in[at] : 0.f;
  }
  cp_async_wait_all();
  __syncthreads();

  // Phase 3's tiles of this warp: tile i = warp * kSTiles + jj covers S rows 16 (i / kNt) .. + 15 and
  // columns 8 (i % kNt) .. + 7; s holds its fp32 accumulator fragment.
  float s[P::kSTiles][4];
#pragma unroll
  for (int jj = 0; jj < P::kSTiles; ++jj) {
    const int i = warp * P::kSTiles + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
    s[jj][0] = S[d * P::kRowS + c];
    s[jj][1] = S[d * P::kRowS + c + 1];
    s[jj][2] = S[(d + 8) * P::kRowS + c];
    s[jj][3] = S[(d + 8) * P::kRowS + c + 1];
  }
  __syncthreads();  // every warp has its fp32 tiles; the mirror becomes the stored mma operand
#pragma unroll
  for (int jj = 0; jj < P::kSTiles; ++jj) {
    const int i = warp * P::kSTiles + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
    S[d * P::kRowS + c] = mma_operand(s[jj][0]);
    S[d * P::kRowS + c + 1] = mma_operand(s[jj][1]);
    S[(d + 8) * P::kRowS + c] = mma_operand(s[jj][2]);
    S[(d + 8) * P::kRowS + c + 1] = mma_operand(s[jj][3]);
  }
  __syncthreads();

  T* obase = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + sq.bos * p.o_st + e0;
  for (int64_t j = 0; j < nc; ++j) {
    {  // Phase 1: warp = (product, row tile), two accumulator chains (even / odd k-steps).
      const int prod = warp / kSubChunks, rt = warp % kSubChunks;
      const float* A = smem + (prod == 0 ? P::kW : P::kQt) + rt * 16 * P::kRowWQ;
      Acc acc[2][P::kNt];
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += 8) {
        const float a[4] = {A[g * P::kRowWQ + k0 + t], A[(g + 8) * P::kRowWQ + k0 + t],
                            A[g * P::kRowWQ + k0 + t + 4], A[(g + 8) * P::kRowWQ + k0 + t + 4]};
        const Tf32Split<4> as = stored_fragment(a);
#pragma unroll
        for (int nt = 0; nt < P::kNt; ++nt) {
          const float b[2] = {S[(k0 + t) * P::kRowS + nt * 8 + g], S[(k0 + t + 4) * P::kRowS + nt * 8 + g]};
          acc[(k0 / 8) % 2][nt].mma(as, stored_fragment(b));
        }
      }
      float* out = Pp + (prod * kChunk64 + rt * 16) * P::kRowS + 2 * t;
#pragma unroll
      for (int nt = 0; nt < P::kNt; ++nt) {
        *reinterpret_cast<float2*>(out + g * P::kRowS + nt * 8) =
            make_float2(acc[0][nt].sum(0) + acc[1][nt].sum(0), acc[0][nt].sum(1) + acc[1][nt].sum(1));
        *reinterpret_cast<float2*>(out + (g + 8) * P::kRowS + nt * 8) =
            make_float2(acc[0][nt].sum(2) + acc[1][nt].sum(2), acc[0][nt].sum(3) + acc[1][nt].sum(3));
      }
    }
    cp_async_wait_all();  // this chunk's Kh / U / Aqk / ec (the only group in flight)
    __syncthreads();
    if (j + 1 < nc) load_wq<K, VT>(smem, blk + block_step, l, tid);  // W / Qt are free

    {  // Phase 2: D = U - W S for row r, columns cc .. cc + kCols2 - 1.
      const int r = tid / (VT / P::kCols2), cc = tid % (VT / P::kCols2) * P::kCols2;
#pragma unroll
      for (int c4 = 0; c4 < P::kCols2; c4 += 4) {
        const float4 u = ld4(smem + P::kU + r * VT + cc + c4);
        const float4 ws = ld4(Pp + r * P::kRowS + cc + c4);
        st4(Dm + r * P::kRowS + cc + c4, make_float4(mma_operand(u.x - ws.x), mma_operand(u.y - ws.y),
                                                     mma_operand(u.z - ws.z), mma_operand(u.w - ws.w)));
      }
    }
    __syncthreads();

    {  // Phase 2b: O = Qt S + Aqk D on this warp's output tiles (rows 16 rt .., Aqk zero above the
       // diagonal: k-steps up to the row tile's end).
      const int i0 = warp * P::kOutTiles, rt = i0 / P::kNt;
      const float* arow = smem + P::kA + rt * 16 * P::kRowA;
      Acc acc[P::kOutTiles];
#pragma unroll
      for (int jj = 0; jj < P::kOutTiles; ++jj) {
        const int col = (i0 + jj) % P::kNt * 8 + 2 * t;
        const float* qs = Pp + (kChunk64 + rt * 16) * P::kRowS + col;
        acc[jj].hh[0] = qs[g * P::kRowS];
        acc[jj].hh[1] = qs[g * P::kRowS + 1];
        acc[jj].hh[2] = qs[(g + 8) * P::kRowS];
        acc[jj].hh[3] = qs[(g + 8) * P::kRowS + 1];
      }
      for (int k0 = 0; k0 < 16 * (rt + 1); k0 += 8) {
        const float a[4] = {arow[g * P::kRowA + k0 + t], arow[(g + 8) * P::kRowA + k0 + t],
                            arow[g * P::kRowA + k0 + t + 4], arow[(g + 8) * P::kRowA + k0 + t + 4]};
        const Tf32Split<4> as = stored_fragment(a);
#pragma unroll
        for (int jj = 0; jj < P::kOutTiles; ++jj) {
          const int nt = (i0 + jj) % P::kNt;
          const float b[2] = {Dm[(k0 + t) * P::kRowS + nt * 8 + g], Dm[(k0 + t + 4) * P::kRowS + nt * 8 + g]};
          acc[jj].mma(as, stored_fragment(b));
        }
      }
      // Tokens j * 64 + 16 rt + g (+ 8) of the sequence, columns e0 + col, + 1.
      const int64_t tok = j * kChunk64 + rt * 16 + g;
#pragma unroll
      for (int jj = 0; jj < P::kOutTiles; ++jj) {
        const int col = (i0 + jj) % P::kNt * 8 + 2 * t;
        if (tok < sq.len) {
          T* o = obase + tok * p.o_st + col;
          o[0] = from_float<T>(acc[jj].sum(0) + bad);
          o[1] = from_float<T>(acc[jj].sum(1) + bad);
        }
        if (tok + 8 < sq.len) {
          T* o = obase + (tok + 8) * p.o_st + col;
          o[0] = from_float<T>(acc[jj].sum(2) + bad);
          o[1] = from_float<T>(acc[jj].sum(3) + bad);
        }
      }
    }

    {  // Phase 3: S <- Diag(ec64) S + Kh^T D on this warp's tiles (A = Kh^T: A[d][r] = Kh[r][d]),
       // two accumulator chains over the 8 k-steps.
      const int i0 = warp * P::kSTiles, m0 = i0 / P::kNt * 16;
      const float* kh = smem + P::kKh;
      const float ea = smem[P::kEc + m0 + g], eb = smem[P::kEc + m0 + g + 8];
      Acc acc[2][P::kSTiles];
#pragma unroll
      for (int jj = 0; jj < P::kSTiles; ++jj) {
        acc[0][jj].hh[0] = ea * s[jj][0];
        acc[0][jj].hh[1] = ea * s[jj][1];
        acc[0][jj].hh[2] = eb * s[jj][2];
        acc[0][jj].hh[3] = eb * s[jj][3];
      }
#pragma unroll
      for (int k0 = 0; k0 < kChunk64; k0 += 8) {
        const float a[4] = {kh[(k0 + t) * P::kRowKh + m0 + g], kh[(k0 + t) * P::kRowKh + m0 + g + 8],
                            kh[(k0 + t + 4) * P::kRowKh + m0 + g], kh[(k0 + t + 4) * P::kRowKh + m0 + g + 8]};
        const Tf32Split<4> as = stored_fragment(a);
#pragma unroll
        for (int jj = 0; jj < P::kSTiles; ++jj) {
          const int nt = (i0 + jj) % P::kNt;
          const float b[2] = {Dm[(k0 + t) * P::kRowS + nt * 8 + g], Dm[(k0 + t + 4) * P::kRowS + nt * 8 + g]};
          acc[(k0 / 8) % 2][jj].mma(as, stored_fragment(b));
        }
      }
#pragma unroll
      for (int jj = 0; jj < P::kSTiles; ++jj) {
        const int nt = (i0 + jj) % P::kNt;
#pragma unroll
        for (int q = 0; q < 4; ++q) s[jj][q] = acc[0][jj].sum(q) + acc[1][jj].sum(q);
        float* srow = S + (m0 + g) * P::kRowS + nt * 8 + 2 * t;
        *reinterpret_cast<float2*>(srow) = make_float2(mma_operand(s[jj][0]), mma_operand(s[jj][1]));
        *reinterpret_cast<float2*>(srow + 8 * P::kRowS) = make_float2(mma_operand(s[jj][2]), mma_operand(s[jj][3]));
      }
    }
    cp_async_wait_all();  // the next chunk's W / Qt
    __syncthreads();      // S mirror written; Kh / U / Aqk / ec / D / products free
    if (j + 1 < nc) {
      blk += block_step;
      load_rest<K, VT>(smem, blk, l, p.V, e0, tid);
    }
  }
  if (const StateRows rows_end = state_rows(p, n); rows_end.out >= 0) {
    // The mirror holds tf32 operands: the fp32 state comes from the register tiles (the loop's last
    // barrier ended every read of the mirror).
#pragma unroll
    for (int jj = 0; jj < P::kSTiles; ++jj) {
      const int i = warp * P::kSTiles + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
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
Status launch_state64(const DeviceParams& p, const int64_t* offsets64, const float* blocks64,
                      const Chunk64Layout& l, cudaStream_t stream) {
  using P = State64Plan<K, VT>;
  constexpr auto kernel = kda_chunk64_state_kernel<T, K, VT>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kernel>(P::kBytes));
  const dim3 grid(static_cast<unsigned>(p.N * (p.V / VT)), static_cast<unsigned>(p.HV));
  kernel<<<grid, kThreads, P::kBytes, stream>>>(p, offsets64, blocks64, l);
  return cuda::last_launch_status("kda_chunk64_state_kernel");
}

template <class T, int K>
Status launch_chunked64_t(const DeviceParams& p, void* workspace, const Chunk64Layout& l, int value_tile,
                          cudaStream_t stream) {
  // The state pass needs 155 KiB of shared memory at K = 128 (VT = 16; 176 KiB at VT = 32): H100 / H200
  // and A100 have it, sm_86 / sm_89 (99 KiB) do not; there the 16-token path runs on the same
  // workspace (its layout is the first part of this one), with the same exact answer.
  int dev = 0, smem_optin = 0;
  GA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  GA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem_optin < State64Plan<K, 16>::kBytes) {
    return launch_chunked(p, std::is_same_v<T, __nv_bfloat16>, workspace, l.sub, stream);
  }
  GA_RETURN_IF_ERROR(launch_chunk_prep(p, std::is_same_v<T, __nv_bfloat16>, workspace, l.sub, stream));
  char* ws = static_cast<char*>(workspace);
  const auto* offsets = reinterpret_cast<const int64_t*>(ws);
  const auto* blocks = reinterpret_cast<const float*>(ws + l.sub.offsets_bytes);
  auto* offsets64 = reinterpret_cast<int64_t*>(ws + l.offsets_at);
  auto* blocks64 = reinterpret_cast<float*>(ws + l.blocks_at);
  kda_chunk64_map_kernel<<<1, kWarp, 0, stream>>>(p, offsets64);
  GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk64_map_kernel"));
  if (l.max_chunks > 0) {
    constexpr auto merge = kda_chunk_merge64_kernel<K>;
    GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<merge>(MergePlan<K>::kBytes));
    const dim3 grid(static_cast<unsigned>(l.max_chunks), static_cast<unsigned>(p.HV));
    merge<<<grid, kThreads, MergePlan<K>::kBytes, stream>>>(p, offsets, blocks, l.sub, offsets64, blocks64, l);
    GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk_merge64_kernel"));
  }
  // 32-column V-tiles once the 16-column grid is more than one CTA per SM (one CTA per SM either
  // way): half the CTAs and half the W / Qt / Kh traffic. value_tile 16 / 32 forces one (tests and
  // timing: docs/ENGINES.md "64-token state steps" asks whether 32 pays below one CTA per SM too).
  const bool wide_fits = smem_optin >= State64Plan<K, 32>::kBytes;
  if (value_tile == 32 && !wide_fits) {
    return NotSupported("kda cuda-c64: 32-column V-tiles need " + std::to_string(State64Plan<K, 32>::kBytes) +
                        " bytes of shared memory per block (device opt-in: " + std::to_string(smem_optin) + ")");
  }
  int sms = 0, cc = 0;
  GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
  const bool wide = value_tile == 32 ||
                    (value_tile == 0 && p.N * p.HV * (p.V / 16) > static_cast<int64_t>(sms) && wide_fits);
  if (wide) return launch_state64<T, K, 32>(p, offsets64, blocks64, l, stream);
  return launch_state64<T, K, 16>(p, offsets64, blocks64, l, stream);
}

}  // namespace

Status launch_chunked64(const DeviceParams& p, bool bf16, void* workspace, const Chunk64Layout& layout,
                        int value_tile, cudaStream_t stream) {
  if (value_tile != 0 && value_tile != 16 && value_tile != 32) {
    return InvalidArgument("kda cuda-c64: value_tile " + std::to_string(value_tile) + " (accepted: 0, 16, 32)");
  }
  if (p.N == 0) return Status::Ok();
  if (bf16) {
    return p.K == 64 ? launch_chunked64_t<__nv_bfloat16, 64>(p, workspace, layout, value_tile, stream)
                     : launch_chunked64_t<__nv_bfloat16, 128>(p, workspace, layout, value_tile, stream);
  }
  return p.K == 64 ? launch_chunked64_t<__half, 64>(p, workspace, layout, value_tile, stream)
                   : launch_chunked64_t<__half, 128>(p, workspace, layout, value_tile, stream);
}

}  // namespace groupattn::kda_cuda
