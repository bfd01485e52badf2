// KDA chunked path in one launch for small problems (issue 11: host cost of a small call; the path
// rule is kda_cuda_path.h's use_fused_path).
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Grid (sequence x V-tile of 16, value head), 256 threads, no workspace. Each CTA walks its
// sequence's 16-token chunks; per chunk it runs the two-kernel path's prep (kda_chunk_prep.cuh,
// the same device function: every exponent <= 0, exact at every gate) into a shared-memory stage
// -- only its own 16 columns of U -- and then the same state step as kda_chunked.cu's state pass
// (kda_state_step.cuh's state_step, the one code for both):
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
#include "kda/engines/cuda/kda_state_step.cuh"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

namespace groupattn::kda_cuda {
namespace {

constexpr int kVt = kValueTile;  // value columns per CTA
static_assert(kVt == kFusedValueTile, "the path rule's CTA count uses the kernel's V-tile");

// Shared-memory plan (kda_state_step.cuh): one stage (the prep of chunk j + 1 follows the step of
// chunk j in the same CTA, so there is nothing to prefetch into a second one).
template <int K>
using FusedPlan = StatePlan<K, kVt, 1>;
static_assert(kChunk * kVt == kThreads, "one (row, column) of the output per thread");

// The prep's destination (kda_chunk_prep.cuh): this CTA's stage, U columns e0 .. e0 + 15 only.
template <int K>
struct StageDst {
  static constexpr bool kImage = false;
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
  const int r = tid / kVt, e = tid % kVt;  // state_step's phase 2: this thread's row and column
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;
  float* S = smem + P::kS;
  prefetch_inputs<T, K>(p, sq, hv, e0, tid);

  read_initial_state<K, kVt, P>(p, rows.in, hv, e0, tid, S);
  __syncthreads();
  StateTiles<P> s;
  tiles_from_initial_state<P>(S, s, warp, lane / 4, lane % 4);
  // (The first chunk's prep synchronizes before anything reads the mirror.)

  T* orow = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + (sq.bos + r) * p.o_st + e0 + e;
  const int64_t orow_step = kChunk * p.o_st;
  for (int64_t first = 0; first < sq.len; first += kChunk) {
    chunk_prep<T, K>(p, sq, first, hv, StageDst<K>{smem, e0});
    __syncthreads();
    state_step<T, K, kVt, P>(smem, smem, s, orow, first + r < sq.len, bad, tid);
    orow += orow_step;
    __syncthreads();  // the stage, S, D and the partials may be rewritten
  }
  // The loop's last barrier ended every read of the mirror; with no chunk, the mirror writes above
  // are this thread's own elements.
  if (rows.out >= 0) store_final_state<K, kVt, P>(p, rows.out, hv, e0, tid, S, s);
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
