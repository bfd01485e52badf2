// KDA chunked path in one launch for small problems (issue 11: host cost of a small call; the path
// rule is kda_cuda_path.h's use_fused_path).
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Grid (sequence x V-tile of 16, value head), 256 threads, no workspace. Each CTA walks its
// sequence's 16-token chunks; per chunk it runs the two-kernel path's prep (kda_chunk_prep.cuh,
// the same device function: every exponent <= 0, exact at every gate) into a shared-memory stage
// -- only its own 16 columns of U -- and then the same state step as kda_chunked.cu's state pass:
//   D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D
// with tf32 tensor-core products on operands rounded once where they are produced, S in fp32
// registers. The prep of a chunk is recomputed by each of the V / 16 CTAs of a (sequence, head):
// free while the grid leaves SMs idle (the path rule bounds the grid by the SM count), and it saves
// the prep launch and the workspace (the two-kernel path's blocks) -- one launch in all.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_cuda_path.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {
namespace {

constexpr int kVt = kValueTile;  // value columns per CTA
static_assert(kVt == kFusedValueTile, "the path rule's CTA count uses the kernel's V-tile");

// Shared-memory plan (floats), one stage (the prep of chunk j + 1 follows the step of chunk j in the
// same CTA, so there is nothing to prefetch into a second one). Row strides padded as in
// kda_chunked.cu's StatePlan so the mma fragment loads hit 32 distinct banks: W / Qt read as A
// (row g, column t) -> stride = 4 mod 32; Kh read transposed (row t, column g) -> 8 mod 32; S and D
// read as B (row t, column g) -> stride 24.
template <int K>
struct FusedPlan {
  static constexpr int kQuarters = 4;    // phase 1 splits K over 4 warps per product
  static constexpr int kRowWQ = K + 4;   // W, Qt row stride
  static constexpr int kRowKh = K + 8;   // Kh row stride
  static constexpr int kRowS = kVt + 8;  // S [K][16], D and the partial products [16][16]
  static constexpr int kNt = kVt / 8;    // n8 column tiles
  static constexpr int kW = 0;
  static constexpr int kQt = kW + kChunk * kRowWQ;
  static constexpr int kKh = kQt + kChunk * kRowWQ;
  static constexpr int kU = kKh + kChunk * kRowKh;  // [16][16], this CTA's V columns
  static constexpr int kA = kU + kChunk * kVt;
  static constexpr int kEc = kA + kChunk * kChunk;
  static constexpr int kS = kEc + K;
  static constexpr int kP = kS + K * kRowS;  // partial W S and Qt S [2 products][4 K-quarters][16][kRowS]
  static constexpr int kD = kP + 2 * kQuarters * kChunk * kRowS;  // D (fp32, for the output rows)
  static constexpr int kDm = kD + kChunk * kRowS;                 // D as an mma operand
  static constexpr int kFloats = kDm + kChunk * kRowS;
  static constexpr int kBytes = kFloats * static_cast<int>(sizeof(float));
  // The S update: (K / 16) x kNt output tiles of m16n8, a warp taking kTilesPerWarp column tiles of
  // one 16-row tile (so they share its A fragments).
  static constexpr int kTilesPerWarp = K / 16 * kNt / kWarps;
  static_assert(kRowWQ % 4 == 0 && kRowKh % 4 == 0 && kQt % 4 == 0 && kKh % 4 == 0 && kU % 4 == 0 &&
                    kA % 4 == 0 && kEc % 4 == 0 && kS % 4 == 0,
                "16-byte aligned rows (the prep stores float4s)");
  static_assert(kRowWQ % 32 == 4 && kRowKh % 32 == 8 && kRowS % 32 == 24, "conflict-free fragment loads");
  static_assert(kTilesPerWarp >= 1 && kTilesPerWarp <= kNt && K / 16 * kNt % kWarps == 0,
                "S-update tiles split evenly over the warps, within one 16-row tile");
  static_assert(kWarps == 2 * kQuarters, "phase 1: 2 products x 4 K-quarters, one warp each");
  static_assert(kChunk * kVt == kThreads, "phase 2: one (row, column) per thread");
};

// The prep's destination (kda_chunk_prep.cuh): this CTA's stage, U columns e0 .. e0 + 15 only.
template <int K>
struct StageDst {
  float* stage;
  int e0;
  using P = FusedPlan<K>;
  __device__ __forceinline__ float* base() const { return stage; }
  __device__ __forceinline__ int w(int r) const { return P::kW + r * P::kRowWQ; }
  __device__ __forceinline__ int qt(int r) const { return P::kQt + r * P::kRowWQ; }
  __device__ __forceinline__ int kh(int r) const { return P::kKh + r * P::kRowKh; }
  __device__ __forceinline__ int u(int r) const { return P::kU + r * kVt; }
  __device__ __forceinline__ int aqk() const { return P::kA; }
  __device__ __forceinline__ int ec() const { return P::kEc; }
  __device__ __forceinline__ int w_row() const { return P::kRowWQ; }
  __device__ __forceinline__ int u_row() const { return kVt; }
  __device__ __forceinline__ int u0() const { return e0; }
  __device__ __forceinline__ int u_cols() const { return kVt; }
};

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

// Asks L2 for the rows the CTA's chunk preps will read (q, k, g of the qk / value head, this CTA's
// 16 columns of v, beta) over the first kFusedMaxTokens tokens of the sequence, so the preps of
// chunks 1, 2, .. find them in L2 instead of each waiting on HBM twice (v / beta, then q / k / g)
// behind the previous chunk's state step. A hint only: no effect on any value.
template <class T, int K>
__device__ __forceinline__ void prefetch_inputs(const DeviceParams& p, const SeqSpan& sq, int hv, int e0,
                                                int tid) {
  constexpr int kLine = 128;                                                       // bytes
  constexpr int kQkLines = (K * static_cast<int>(sizeof(T)) + kLine - 1) / kLine;  // per q / k row
  constexpr int kGLines = K * static_cast<int>(sizeof(float)) / kLine;             // per g row
  constexpr int kPerToken = 2 * kQkLines + kGLines + 2;                            // + v tile, beta
  const int64_t len = sq.len < kFusedMaxTokens ? sq.len : kFusedMaxTokens;
  const int h = hv / p.group;
  for (int64_t i = tid; i < len * kPerToken; i += kThreads) {
    const int64_t t = sq.bos + i / kPerToken;
    const int j = static_cast<int>(i % kPerToken);
    const char* at;
    if (j < kQkLines) {
      at = reinterpret_cast<const char*>(static_cast<const T*>(p.q) + sq.batch * p.q_sb + t * p.q_st +
                                         h * p.q_sh) +
           j * kLine;
    } else if (j < 2 * kQkLines) {
      at = reinterpret_cast<const char*>(static_cast<const T*>(p.k) + sq.batch * p.k_sb + t * p.k_st +
                                         h * p.k_sh) +
           (j - kQkLines) * kLine;
    } else if (j < 2 * kQkLines + kGLines) {
      at = reinterpret_cast<const char*>(p.g + sq.batch * p.g_sb + t * p.g_st + hv * p.g_sh) +
           (j - 2 * kQkLines) * kLine;
    } else if (j == 2 * kQkLines + kGLines) {
      at = reinterpret_cast<const char*>(static_cast<const T*>(p.v) + sq.batch * p.v_sb + t * p.v_st +
                                         hv * p.v_sh + e0);
    } else {
      at = reinterpret_cast<const char*>(p.beta + sq.batch * p.b_sb + t * p.b_st + hv * p.b_sh);
    }
    prefetch_l2(at);
  }
}

template <class T, int K>
__global__ void __launch_bounds__(kThreads, 1) kda_chunk_fused_kernel(const DeviceParams p) {
  using P = FusedPlan<K>;
  extern __shared__ __align__(16) float smem[];
  // blockIdx.x = sequence * (V / 16) + V-tile.
  const int tiles = p.V / kVt;
  const int64_t n = blockIdx.x / tiles;
  const int hv = static_cast<int>(blockIdx.y);
  const int e0 = static_cast<int>(blockIdx.x % tiles) * kVt;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, t = lane % 4;    // mma fragment coordinates
  const int r = tid / kVt, e = tid % kVt;  // phase 2: this thread's row and column
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;
  const float* st = smem;
  float* S = smem + P::kS;
  float* Pp = smem + P::kP;
  float* D = smem + P::kD;
  float* Dm = smem + P::kDm;
  prefetch_inputs<T, K>(p, sq, hv, e0, tid);

  for (int i = tid; i < K * kVt; i += kThreads) {
    // V-first rows are K-contiguous: d fastest; K-first rows are V-contiguous: column fastest.
    const int d = p.v_first ? i % K : i / kVt, ee = p.v_first ? i / K : i % kVt;
    const int64_t at = state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, e0 + ee);
    S[d * P::kRowS + ee] = rows.in >= 0 ? p.s_in[at] : 0.f;
  }
  __syncthreads();
  // This warp's S tiles: tile i = warp * kTilesPerWarp + jj covers rows 16 (i / kNt) .. + 15 and
  // columns 8 (i % kNt) .. + 7; s holds its fp32 accumulator fragment.
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
  // (The first chunk's prep synchronizes before anything reads the mirror.)

  T* orow = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + (sq.bos + r) * p.o_st + e0 + e;
  const int64_t orow_step = kChunk * p.o_st;
  for (int64_t first = 0; first < sq.len; first += kChunk) {
    chunk_prep<T, K>(p, sq, first, hv, StageDst<K>{smem, e0});
    __syncthreads();

    {  // Phase 1: warp = (product, K-quarter): partial W S or Qt S over a quarter of K.
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

    // Phase 2: D = U - W S, then this thread's output O[r][e] = Qt S + Aqk D.
    const int part = kChunk * P::kRowS, at = r * P::kRowS + e;
    float ws = 0.f, qs = 0.f;
#pragma unroll
    for (int kq = 0; kq < P::kQuarters; ++kq) {
      ws += Pp[kq * part + at];
      qs += Pp[(P::kQuarters + kq) * part + at];
    }
    const float dv = st[P::kU + r * kVt + e] - ws;
    D[at] = dv;
    Dm[at] = mma_operand(dv);
    __syncthreads();
    {  // rows k <= r of D (predicated, fully unrolled), as 4 chains of <= 4 FMAs
      const float* arow = st + P::kA + r * kChunk;
      float chain[4] = {qs, 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k <= r) chain[k % 4] += arow[k] * D[k * P::kRowS + e];
      }
      const float o = (chain[0] + chain[1]) + (chain[2] + chain[3]);
      if (first + r < sq.len) *orow = from_float<T>(o + bad);
      orow += orow_step;
    }

    {  // Phase 3: S <- Diag(exp(Gamma_C)) S + Kh^T D on this warp's tiles (A = Kh^T: A[d][r] = Kh[r][d]).
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
    __syncthreads();  // the stage, S, D and the partials may be rewritten
  }
  if (rows.out >= 0) {
    // The mirror holds the stored mma operands: the fp32 state comes from the register tiles (the
    // loop's last barrier ended every read of the mirror; with no chunk, the mirror writes above
    // are this thread's own elements).
#pragma unroll
    for (int jj = 0; jj < P::kTilesPerWarp; ++jj) {
      const int i = warp * P::kTilesPerWarp + jj, d = i / P::kNt * 16 + g, c = i % P::kNt * 8 + 2 * t;
      S[d * P::kRowS + c] = s[jj][0];
      S[d * P::kRowS + c + 1] = s[jj][1];
      S[(d + 8) * P::kRowS + c] = s[jj][2];
      S[(d + 8) * P::kRowS + c + 1] = s[jj][3];
    }
    __syncthreads();
    for (int i = tid; i < K * kVt; i += kThreads) {
      const int d = p.v_first ? i % K : i / kVt, ee = p.v_first ? i / K : i % kVt;
      const int64_t at = state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows.out, hv, d, e0 + ee);
      p.s_out[at] = S[d * P::kRowS + ee];
    }
  }
}

template <class T, int K>
Status launch_fused_t(const DeviceParams& p, cudaStream_t stream) {
  using P = FusedPlan<K>;
  constexpr auto kernel = kda_chunk_fused_kernel<T, K>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kernel>(P::kBytes));
  // x = sequence * (V / 16) + V-tile (the engine declines N * V / 16 >= 2^31).
  const dim3 grid(static_cast<unsigned>(p.N * (p.V / kVt)), static_cast<unsigned>(p.HV));
  host_timing::mark("kda fused launch plan (smem attribute)");
  kernel<<<grid, kThreads, P::kBytes, stream>>>(p);
  const Status launched = cuda::last_launch_status("kda_chunk_fused_kernel");
  host_timing::mark("launch kda_chunk_fused_kernel");
  return launched;
}

}  // namespace

Status launch_chunked_fused(const DeviceParams& p, bool bf16, cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  if (bf16) {
    return p.K == 64 ? launch_fused_t<__nv_bfloat16, 64>(p, stream)
                     : launch_fused_t<__nv_bfloat16, 128>(p, stream);
  }
  return p.K == 64 ? launch_fused_t<__half, 64>(p, stream) : launch_fused_t<__half, 128>(p, stream);
}

}  // namespace groupattn::kda_cuda
