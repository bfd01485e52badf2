// KDA chunked prefill (research/kda.md 3.1; the fp64 blueprint is src/kda/reference_chunked.cpp).
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Three kernels, fp32 arithmetic on bf16/f16 inputs:
//  1. chunk map (one thread): chunk_offsets[n] = sum_{m<n} ceil(len_m / 16). Varlen only: dense
//     sequences all have T tokens, so the kernels compute n * ceil(T / 16) (chunk_offset()) and
//     the call saves a launch (host time, issue 11).
//  2. prep (kda_chunk_prep.cuh), grid (chunk, value head): per 16-token chunk with Gamma the
//     chunk-local cumsum of the effective gate, L[r][s] = beta_r sum_d k_rd k_sd exp(Gamma_rd -
//     Gamma_sd) (s < r) and Aqk[r][s] = scale sum_d q_rd k_sd exp(Gamma_rd - Gamma_sd) (s <= r)
//     elementwise per channel (the token-parallel form: no reference point, every exponent <= 0,
//     so no gate strength can overflow it); Tm = (I + L)^-1 by forward substitution; W = Tm Diag(beta) (k
//     exp(Gamma)), U = Tm Diag(beta) V (tensor cores, no exponential inside), Kh = k exp(Gamma_C - Gamma), Qt
//     = scale q exp(Gamma), exp(Gamma_C). One 16-byte load per tensor per thread for the tiles. A partial
//     last chunk is padded with k = q = v = beta = g = 0, which leaves every real row exact.
//  3. state pass, grid (sequence x V-tile of 16, value head), sequential over the sequence's chunks
//     (the step: kda_state_step.cuh, shared with the fused kernel kda_chunked_fused.cu):
//     D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D, the products on tensor
//     cores with tf32 operands rounded once where they are produced (kTf32Passes: 1 = plain tf32,
//     the default; 3 = 3xTF32, about fp32; kda_tf32_mma.cuh), S in fp32 registers, and the next
//     chunks' blocks prefetched into a ring of shared-memory stages (cp.async) during each step.
// The state pass is one serial chain per (sequence, value head, V-tile): few heads and long
// sequences leave SMs idle (splitting it is a later step, issue 4). By default every grid runs the
// column-owning state kernel instead (kda_state_cols.cuh, the same step with one barrier a step: 2
// warps a CTA beyond one 16-column CTA an SM, K in halves with 4 warps otherwise; state_cols_kind);
// the step above is the measured alternative (GROUPATTN_KDA_STATE_COLS=0) and the fused kernel's.
// On sm_90 at K = V = 128 the state pass runs on wgmma (kda_state_sm90.cuh) after a prep that writes
// its blocks as that kernel's shared-memory image; where the state grid is small it runs streamed
// beside a persistent prep, each chain copying a block in once the prep has published it
// (launch_streamed_sm90; docs/ENGINES.md "Session 24").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "core/mode_switch.h"
#include "cuda/cuda_check.h"
#include "cuda/driver_launch.h"
#include "cuda/pdl.cuh"
#include "kda/engines/cuda/kda_chunk_prep.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_cuda_path.h"
#include "kda/engines/cuda/kda_state_cols.cuh"
#include "kda/engines/cuda/kda_state_sm90.cuh"
#include "kda/engines/cuda/kda_state_step.cuh"
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

// The prep's destination (kda_chunk_prep.cuh): the block of (chunk c, value head hv), slot
// c * HV + hv of the workspace, all V columns of U. Slot: GridSlot (the prep kernel's: chunk
// blockIdx.x, head blockIdx.y, read again where the block is written, so nothing stays live across
// the prep) or FixedSlot (the cluster kernel's).
struct GridSlot {
  int HV;
  __device__ __forceinline__ int64_t operator()() const { return static_cast<int64_t>(blockIdx.x) * HV + blockIdx.y; }
};
struct FixedSlot {
  int64_t slot;
  __device__ __forceinline__ int64_t operator()() const { return slot; }
};
template <int K, class Slot, bool kImg = false>
struct BlockDst {
  static constexpr bool kImage = kImg;  // the sm_90 state pass's image (kda_wgmma_image.cuh)
  float* blocks;
  const ChunkLayout& l;  // the kernel's parameter
  Slot slot;
  int V;
  __device__ __forceinline__ float* base() const { return blocks + slot() * l.block_floats; }
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

template <class T, int K, bool kImage>
__global__ void __launch_bounds__(kThreads, kPrepMinBlocks)
    kda_chunk_prep_kernel(const DeviceParams p, const int64_t* chunk_offsets, float* blocks,
                          const ChunkLayout l) {
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
  chunk_prep<T, K>(p, seq_span(p, lo), first, hv,
                   BlockDst<K, GridSlot, kImage>{blocks, l, GridSlot{p.HV}, p.V});
}

// The streamed sm_90 path's prep (launch_streamed_sm90): a persistent grid of every CTA place, of
// which those on the first `reserved_sms` SMs (%smid) leave at once, so the state CTAs find those SMs
// empty; the others take (chunk, value head) items from a counter in chunk-major order (chunk j of
// every sequence and head before chunk j + 1: the order the state chains consume them) and publish
// each block with a release of its ready flag. sync: [0..1] the 64-bit item counter, [2..] the flags
// by block slot; zeroed before the launch. Dense sequences, or one: every sequence has per_seq chunks.
template <class T, int K>
__global__ void __launch_bounds__(kThreads, kPrepMinBlocks)
    kda_chunk_prep_stream_kernel(const DeviceParams p, const int64_t* chunk_offsets, float* blocks,
                                 const ChunkLayout l, int* sync, int reserved_sms) {
  // Thread 0's item, as (sequence, first token, value head, block slot; n < 0: no items left),
  // through shared memory so that little of the loop stays live across the prep at its 48-register
  // bound (tid-derived addresses hoisted out of the loop still spill 16-28 bytes; ENGINES.md
  // "Session 24").
  __shared__ int64_t job[4];
  cuda::allow_dependent_launch();  // the state grid may start once every CTA got here (or left)
  uint32_t smid;
  asm("mov.u32 %0, %%smid;" : "=r"(smid));
  if (static_cast<int>(smid) < reserved_sms) return;
  for (;;) {
    if (threadIdx.x == 0) {
      const int64_t item = static_cast<int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(sync), 1ull));
      const int64_t per_seq = chunk_offset(p, chunk_offsets, 1) - chunk_offset(p, chunk_offsets, 0);
      const int64_t heads = p.N * p.HV, j = item / heads, n = item % heads / p.HV, hv = item % p.HV;
      job[0] = item < per_seq * heads ? n : -1;
      job[1] = j * kChunk;
      job[2] = hv;
      job[3] = (chunk_offset(p, chunk_offsets, n) + j) * p.HV + hv;
    }
    __syncthreads();
    const int64_t n = job[0];
    if (n < 0) break;
    chunk_prep<T, K>(p, seq_span(p, n), job[1], static_cast<int>(job[2]),
                     BlockDst<K, FixedSlot, true>{blocks, l, FixedSlot{job[3]}, p.V});
    __syncthreads();  // every store of the block is done; the shared tiles are free again
    if (threadIdx.x == 0) {
      asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(sync + 2 + job[3]), "r"(1) : "memory");
    }
  }
}

// The state pass's shared-memory plan: NS stages (chunk j + NS - 1's block is copied in during
// chunk j). NS = 2 is the double buffer; deeper rings give each copy NS - 1 steps to land
// (kda_state_stages(): 3 by default at 16-column V-tiles, a measurement switch).
template <int K, int VT, int NS = 2>
using PassPlan = StatePlan<K, VT, NS>;

// The state kernels' copy ring: the chunk blocks of one (sequence, value head), in order, into NS
// stages, with the protocol both kernels follow. `load(stage, block)` issues the copies of one block
// and commits them; one commit group per chunk slot (empty past the last chunk), so that "chunk j
// has landed" is always "at most NS - 2 groups pending" after the step that issued chunk j + NS - 1.
//   start(load): the first NS - 1 blocks (before the kernel's own setup, which then calls
//                wait_first() and a CTA barrier)
//   each_chunk(load, step): per chunk j, the block of chunk j + NS - 1 into the stage chunk j - 1
//                used (its last read preceded the previous barrier), step(stage of chunk j), then the
//                wait for chunk j + 1's block and a CTA barrier (it landed for every thread, and the
//                step's shared scratch may be reused)
template <int NS>
struct CopyRing {
  const float* next_block;  // the next chunk to copy in, chunk `issued` of the sequence
  int64_t block_step, issued = 0, chunks;
  int next_stage = 0;
  __device__ __forceinline__ CopyRing(const float* blocks, int64_t first_chunk, int64_t nc, int HV, int hv,
                                      const ChunkLayout& l)
      : next_block(blocks + (first_chunk * HV + hv) * l.block_floats),
        block_step(static_cast<int64_t>(HV) * l.block_floats),
        chunks(nc) {}
  template <class Load>
  __device__ __forceinline__ void start(Load&& load) {
#pragma unroll
    for (int i = 0; i < NS - 1; ++i) issue(load);
  }
  __device__ __forceinline__ static void wait_first() { cp_async_wait_pending<NS - 2>(); }  // chunk 0's block
  template <class Load, class Step>
  __device__ __forceinline__ void each_chunk(Load&& load, Step&& step) {
    int stage = 0;
    for (int64_t j = 0; j < chunks; ++j) {
      issue(load);
      step(stage);
      cp_async_wait_pending<NS - 2>();  // chunk j + 1's block
      __syncthreads();
      stage = stage + 1 == NS ? 0 : stage + 1;
    }
  }

 private:
  template <class Load>
  __device__ __forceinline__ void issue(Load&& load) {
    if (issued < chunks) {
      load(next_stage, next_block);
      next_block += block_step;
    } else {
      cp_async_commit();
    }
    ++issued;
    next_stage = next_stage + 1 == NS ? 0 : next_stage + 1;
  }
};

// Issues the cp.async copies of chunk block `blk` (this CTA's V columns e0..e0+VT-1) into `stage`.
// Each thread's pieces are fixed by tid and compile-time counts (no division, no per-copy 64-bit
// block arithmetic): K / 32 pieces of each of W, Qt, Kh for K = 128 (2 x 3), 1 x 3 for K = 64.
template <int K, int VT>
__device__ __forceinline__ void load_stage(float* stage, const float* blk, const ChunkLayout& l, int V,
                                           int e0, int tid) {
  using P = PassPlan<K, VT>;  // the stage's layout does not depend on the stage count
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
// over the chunks, with the blocks of the next NS - 1 chunks copied into the other stages
// (cp.async, one commit group per chunk) while this one is computed: per chunk, kda_state_step.cuh's
// state_step (D = U - W S; O = Qt S + Aqk D; S <- Diag(exp(Gamma_C)) S + Kh^T D, S in fp32
// registers). The stage count changes when each block lands, never the arithmetic: the results are
// the same bits for every NS.
// VT = 32 reads each chunk block's W / Qt / Kh (24 KiB at K = 128) once per 32 columns instead of
// once per 16: half the L2 traffic and half the CTAs (launch_chunked_t picks it when there are
// enough CTAs to fill the GPU).
// VT = 32 runs 2 CTAs per SM (102 KiB of shared memory each at K = 128): at most 128 registers.
template <class T, int K, int VT, int NS>
__global__ void __launch_bounds__(kThreads, VT == 32 ? 2 : 1)
    kda_chunk_state_kernel(const DeviceParams p, const int64_t* chunk_offsets, const float* blocks, const ChunkLayout l) {
  using P = PassPlan<K, VT, NS>;
  extern __shared__ __align__(16) float smem[];
  // blockIdx.x = sequence * (V / VT) + V-tile: the V / VT CTAs of one (sequence, value head) are
  // adjacent in launch order, so they run together and read each chunk block from L2 once it has
  // come from HBM for the first of them (sequence-major order left them in different waves).
  const int tiles = p.V / VT;
  const int64_t n = blockIdx.x / tiles;
  const int hv = static_cast<int>(blockIdx.y);
  const int e0 = static_cast<int>(blockIdx.x % tiles) * VT;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int r = tid / 16, e = tid % 16;  // state_step's phase 2: this thread's row and first column
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);  // rows.out is read again after the loop (fewer live registers)
  const float bad = rows.bad ? NAN : 0.f;
  float* S = smem + P::kS;

  const int64_t c0 = chunk_offset(p, chunk_offsets, n), nc = chunk_offset(p, chunk_offsets, n + 1) - c0;
  CopyRing<NS> ring(blocks, c0, nc, p.HV, hv, l);
  const auto load = [&](int stage, const float* blk) {
    load_stage<K, VT>(smem + stage * P::kStage, blk, l, p.V, e0, tid);
  };
  ring.start(load);
  read_initial_state<K, VT, P>(p, rows.in, hv, e0, tid, S);
  ring.wait_first();
  __syncthreads();
  StateTiles<P> s;
  tiles_from_initial_state<P>(S, s, warp, lane / 4, lane % 4);
  __syncthreads();

  // This thread's output row r of chunk j (its first column), advanced by 16 tokens per chunk.
  T* orow = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + (sq.bos + r) * p.o_st + e0 + e;
  const int64_t orow_step = kChunk * p.o_st;
  int64_t rows_left = sq.len - r;  // tokens of the sequence from this row of chunk j on
  ring.each_chunk(load, [&](int stage) {  // (S, D and the partials are reused after its barrier)
    state_step<T, K, VT, P>(smem + stage * P::kStage, smem, s, orow, rows_left > 0, bad, tid);
    orow += orow_step;
    rows_left -= kChunk;
  });
  // The loop's last barrier ended every read of the mirror. (Groups still pending are empty.)
  if (const StateRows rows_end = state_rows(p, n); rows_end.out >= 0) {
    store_final_state<K, VT, P>(p, rows_end.out, hv, e0, tid, S, s);
  }
}

// The state pass with one CTA barrier a step (kda_state_cols.cuh) of sequence n, value head hv,
// value columns e0 .. e0 + 15, whose chunks are c0 .. c0 + nc - 1 of the workspace: 2 KS warps (the
// CTA's first P::kThreads threads; any others have exited), each owning 8 columns and K / KS rows of S
// (KS 2: the two warps of a column group add their partial sums under a named barrier); the next
// NS - 1 chunks' blocks in flight as in kda_chunk_state_kernel.
template <class T, int K, int NS, int KS>
__device__ __forceinline__ void state_cols_pass(const DeviceParams& p, const float* blocks, const ChunkLayout& l,
                                                int64_t n, int hv, int e0, int64_t c0_chunk, int64_t nc,
                                                float* smem) {
  using P = ColsPlan<K, NS, KS>;
  constexpr int KH = P::kKH;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, t = lane % 4;
  ColsWarp w;
  w.c0 = 8 * (warp % 2);
  w.half = KS == 1 ? 0 : warp / 2;  // (a constant 0 with KS 1: warp < 2)
  w.k_lo = w.half * KH;
  w.bar = 1 + warp % 2;  // named barriers 1, 2 (0 is __syncthreads)
  w.Sm = smem + P::kMirrors + warp * P::kWarpFloats;
  w.X = w.Sm + P::kX;
  w.Xpartner = KS == 2 ? smem + P::kMirrors + (warp ^ 2) * P::kWarpFloats + P::kX : nullptr;
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;

  CopyRing<NS> ring(blocks, c0_chunk, nc, p.HV, hv, l);
  const ColsCopyLane<P> copy_lane(tid, p.V, e0);
  const auto load = [&](int stage, const float* blk) {
    cols_load_stage<P>(smem + stage * P::kStage, blk, l, copy_lane, tid);
  };
  ring.start(load);

  // S from the initial state (0 without one): this lane's rows k_lo + 16 i + g (+ 8), columns 2 t (+ 1).
  ColsState<KH> S;
#pragma unroll
  for (int i = 0; i < KH / 16; ++i) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int d = w.k_lo + 16 * i + g + 8 * (q >> 1), e = e0 + w.c0 + 2 * t + (q & 1);
      S.s[i][q] = rows.in >= 0 ? p.s_in[state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, e)] : 0.f;
    }
  }
  const MirrorBases<KH> mb(g, t);
  cols_mirror<KH>(w.Sm, S, mb);
  ring.wait_first();
  __syncthreads();

  T* orow = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + (sq.bos + g) * p.o_st + e0 + w.c0 + 2 * t;
  const int64_t orow_step = kChunk * p.o_st;
  int64_t rows_left = sq.len;  // tokens of the sequence from chunk j's first row on
  ring.each_chunk(load, [&](int stage) {
    cols_step<T, P>(smem + stage * P::kStage, w, S, mb, orow, p.o_st, rows_left, bad, g, t);
    orow += orow_step;
    rows_left -= kChunk;
  });
  if (const StateRows rows_end = state_rows(p, n); rows_end.out >= 0) {
#pragma unroll
    for (int i = 0; i < KH / 16; ++i) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int d = w.k_lo + 16 * i + g + 8 * (q >> 1), e = e0 + w.c0 + 2 * t + (q & 1);
        p.s_out[state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows_end.out, hv, d, e)] = S.s[i][q];
      }
    }
  }
}

// The column-owning state pass as its own kernel, one CTA per (sequence, value head, 16 value
// columns), after the prep kernel.
template <class T, int K, int NS, int KS>
__global__ void __launch_bounds__(ColsPlan<K, NS, KS>::kThreads)
    kda_chunk_state_cols_kernel(const DeviceParams p, const int64_t* chunk_offsets, const float* blocks,
                                const ChunkLayout l) {
  extern __shared__ __align__(16) float smem[];
  const int tiles = p.V / kColsVT;
  const int64_t n = blockIdx.x / tiles;
  const int64_t c0 = chunk_offset(p, chunk_offsets, n), nc = chunk_offset(p, chunk_offsets, n + 1) - c0;
  state_cols_pass<T, K, NS, KS>(p, blocks, l, n, static_cast<int>(blockIdx.y),
                                static_cast<int>(blockIdx.x % tiles) * kColsVT, c0, nc, smem);
}

// The whole chunked path in one launch for problems whose sequences have at most V / 16 chunks
// (kda_cuda_path.h, use_cluster_chunked; sm_90+): the V / 16 CTAs of one (sequence, value head) form
// a thread-block cluster; CTA r preps chunk r of the sequence (if it has one) into the workspace as
// the prep kernel would, the cluster barrier (release / acquire at cluster scope) makes every block
// visible to the whole cluster, and then each CTA runs the state pass of its 16 columns. The same
// prep and the same state pass, so the same bits as the two kernels (KdaCuda.ClusterChunkedBitwise);
// one launch instead of two (issue 11: ~3 us of host time a call), and no kernel boundary between
// the prep and the state pass. The prep takes all kThreads threads; the state pass the first
// P::kThreads, the rest exit (exited threads do not hold up a CTA-wide barrier: PTX ISA, `exit`).
template <class T, int K, int NS, int KS>
__global__ void __launch_bounds__(kThreads, 1)
    kda_chunk_cluster_kernel(const DeviceParams p, float* blocks, const ChunkLayout l) {
  using P = ColsPlan<K, NS, KS>;
  static_assert(P::kThreads <= kThreads, "the state pass's warps are a subset of the prep's");
  extern __shared__ __align__(16) float smem[];
  const int tiles = p.V / kColsVT;
  const int64_t n = blockIdx.x / tiles;
  const int hv = static_cast<int>(blockIdx.y);
  const int rank = static_cast<int>(blockIdx.x % tiles);  // the CTA's rank in its (tiles, 1, 1) cluster
  const SeqSpan sq = seq_span(p, n);
  // Sequence n's first chunk: n * ceil(T / 16) dense; varlen, the sum over the earlier sequences
  // (at most a few: the grid fits the GPU), so no chunk map launch.
  int64_t c0 = 0;
  if (p.cu_seqlens == nullptr) {
    c0 = chunk_offset(p, nullptr, n);
  } else {
    for (int64_t m = 0; m < n; ++m) c0 += (seq_span(p, m).len + kChunk - 1) / kChunk;
  }
  const int64_t nc = (sq.len + kChunk - 1) / kChunk;  // <= tiles (the path's token bound)
  if (rank < nc) {
    const BlockDst<K, FixedSlot> dst{blocks, l, FixedSlot{(c0 + rank) * p.HV + hv}, p.V};
    chunk_prep<T, K>(p, sq, static_cast<int64_t>(rank) * kChunk, hv, dst);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();  // no clusters before sm_90: launch_chunked_t launches this kernel on sm_90+ only
#endif
  if (threadIdx.x >= P::kThreads) return;
  state_cols_pass<T, K, NS, KS>(p, blocks, l, n, hv, rank * kColsVT, c0, nc, smem);
}

// KS: 1 (2 warps a CTA) or 2 (4 warps, K in halves).
template <class T, int K, int KS>
Status launch_state_cols(const DeviceParams& p, const int64_t* offsets, const float* blocks, const ChunkLayout& l,
                         int dev, cudaStream_t stream) {
  constexpr int kNS = 3;
  using P = ColsPlan<K, kNS, KS>;
  constexpr auto kernel = kda_chunk_state_cols_kernel<T, K, kNS, KS>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once_on<kernel>(dev, P::kBytes));
  const dim3 grid(static_cast<unsigned>(p.N * (p.V / kColsVT)), static_cast<unsigned>(p.HV));
  host_timing::mark("kda state launch plan (device properties, smem attribute)");
  const Status launched = cuda::launch_plain<kernel>(kda_driver_launch(), dev, grid, dim3(P::kThreads), P::kBytes,
                                                     stream, "kda_chunk_state_cols_kernel", p, offsets, blocks, l);
  host_timing::mark("launch kda_chunk_state_cols_kernel");
  return launched;
}

// Runs p in one launch of the cluster kernel when use_cluster_chunked admits it (*launched = true),
// else leaves it to the two kernels.
template <class T, int K>
Status maybe_launch_cluster_chunked(const DeviceParams& p, float* blocks, const ChunkLayout& l, int dev, int sms,
                                    int cc, cudaStream_t stream, bool* launched) {
  *launched = false;
  constexpr int kNS = 3, kKS = 2;  // the state kernel state_cols_kind picks for these grids (kind 2)
  using P = ColsPlan<K, kNS, kKS>;
  constexpr auto kernel = kda_chunk_cluster_kernel<T, K, kNS, kKS>;
  const int64_t ctas16 = p.N * p.HV * (p.V / kColsVT);
  // The tests without the capacity first (as if every cluster fit): past them no query is made.
  if (!kda_cluster_chunked() || state_cols_kind(ctas16, sms) != 2 ||
      !use_cluster_chunked(p.T, p.V, ctas16, sms, cc, /*cluster_capacity=*/p.N * p.HV)) {
    return Status::Ok();
  }
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once_on<kernel>(dev, P::kBytes));
  const int tiles = static_cast<int>(p.V / kColsVT);
  // Clusters the device holds at once (asked once per device and size): past them the clusters run in
  // waves, each paying a whole prep + state pass (session 18 call 2: 16 clusters of 8 at T 64 took
  // 28.9 us against the two kernels' 16.7). A device that cannot say: capacity 0, so the two kernels
  // serve (they need no clusters); the query's error is not sticky, and is cleared.
  int capacity = 0;
  if (!cuda::max_active_clusters<kernel>(dev, tiles, kThreads, P::kBytes, /*request=*/0, &capacity).ok()) {
    (void)cudaGetLastError();
    capacity = 0;
  }
  // p.T: dense, each sequence's length; varlen, the total.
  if (!use_cluster_chunked(p.T, p.V, ctas16, sms, cc, capacity)) return Status::Ok();
  const dim3 grid(static_cast<unsigned>(p.N * tiles), static_cast<unsigned>(p.HV));
  host_timing::mark("kda cluster launch plan (smem attribute, cluster capacity)");
  *launched = true;
  const Status s = cuda::launch_clustered<kernel>(kda_driver_launch(), dev, grid, dim3(kThreads), P::kBytes, stream,
                                                  tiles, "kda_chunk_cluster_kernel", p, blocks, l);
  host_timing::mark("launch kda_chunk_cluster_kernel");
  return s;
}

// `dev`: the current device, asked once by the caller on this call (no runtime query here once the
// attribute is set).
template <class T, int K, int VT, int NS = 2>
Status launch_state(const DeviceParams& p, const int64_t* offsets, const float* blocks, const ChunkLayout& l,
                    int dev, cudaStream_t stream) {
  using P = PassPlan<K, VT, NS>;
  constexpr auto state_kernel = kda_chunk_state_kernel<T, K, VT, NS>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once_on<state_kernel>(dev, P::kBytes));
  // x = sequence * (V / VT) + V-tile (the engine declines N * V / 16 >= 2^31).
  const dim3 grid(static_cast<unsigned>(p.N * (p.V / VT)), static_cast<unsigned>(p.HV));
  host_timing::mark("kda state launch plan (device properties, smem attribute)");
  const Status launched = cuda::launch_plain<state_kernel>(kda_driver_launch(), dev, grid, dim3(kThreads), P::kBytes,
                                                           stream, "kda_chunk_state_kernel", p, offsets, blocks, l);
  host_timing::mark("launch kda_chunk_state_kernel");
  return launched;
}

// The chunk map of a varlen problem (dense: the kernels compute the offsets, chunk_offset()).
Status launch_chunk_map(const DeviceParams& p, int64_t* offsets, int dev, cudaStream_t stream) {
  if (p.cu_seqlens == nullptr) return Status::Ok();
  GA_RETURN_IF_ERROR(cuda::launch_plain<kda_chunk_map_kernel>(kda_driver_launch(), dev, dim3(1), dim3(kWarp),
                                                              0, stream, "kda_chunk_map_kernel", p, offsets));
  host_timing::mark("launch kda_chunk_map_kernel");
  return Status::Ok();
}

template <class T, int K, bool kImage = false>
Status launch_prep_t(const DeviceParams& p, int64_t* offsets, float* blocks, const ChunkLayout& l, int dev,
                     cudaStream_t stream) {
  const bool driver = kda_driver_launch();
  GA_RETURN_IF_ERROR(launch_chunk_map(p, offsets, dev, stream));
  if (l.max_chunks > 0) {
    const dim3 grid(static_cast<unsigned>(l.max_chunks), static_cast<unsigned>(p.HV));
    constexpr auto prep = kda_chunk_prep_kernel<T, K, kImage>;
    GA_RETURN_IF_ERROR(cuda::launch_plain<prep>(driver, dev, grid, dim3(kThreads), 0, stream, "kda_chunk_prep_kernel", p,
                                                static_cast<const int64_t*>(offsets), blocks, l));
    host_timing::mark("launch kda_chunk_prep_kernel");
  }
  return Status::Ok();
}

// The sm_90 state pass (kda_state_sm90.cuh) after a prep that wrote the image: one CTA per
// (sequence, value head, V half).
template <class T>
Status launch_state_sm90(const DeviceParams& p, const int64_t* offsets, const float* blocks,
                         const ChunkLayout& l, int dev, cudaStream_t stream) {
  // 3 stages (97 KiB): two CTAs an SM where the grid has more CTAs than SMs. Session 23 call 2
  // against 4: -4 % at T 8192 H 32 B 4 (256 CTAs), +0.2-0.3 % where one CTA an SM.
  constexpr int kNS = 3;
  using P = Sm90StatePlan<kNS>;
  constexpr auto kernel = kda_state_sm90_kernel<T, kNS>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once_on<kernel>(dev, P::kBytes));
  const dim3 grid(static_cast<unsigned>(p.N * 2), static_cast<unsigned>(p.HV));
  host_timing::mark("kda sm90 state launch plan (smem attribute)");
  const Status launched = cuda::launch_plain<kernel>(kda_driver_launch(), dev, grid, dim3(P::kThreads),
                                                     P::kBytes, stream, "kda_state_sm90_kernel", p, offsets,
                                                     blocks, l, static_cast<const int*>(nullptr));
  host_timing::mark("launch kda_state_sm90_kernel");
  return launched;
}

// Whether the streamed sm_90 path takes p (kda_state_streamed()): every sequence has the same chunk
// count (dense, or one sequence); the state grid (2 CTAs a sequence and value head) is small enough
// that the SMs it leaves to the prep keep up with the chains (at most 3/8 of the SMs: session 24's
// model, the prep's ~4.5 SM-us an item against the chain's ~0.69 us a step, breaks even near 0.42);
// and the prep's items exceed one wave of its CTA places (5 an SM) on those SMs: within one wave
// every block is ready at about the same time and there is nothing to overlap (T 1024 H 4, 256
// items: 62.0 us prep-then-state, 66.8 streamed; session 24 call 5).
bool use_streamed_sm90(const DeviceParams& p, int sms, int64_t chunks) {
  const int64_t state_ctas = 2 * p.N * p.HV, prep_places = kPrepMinBlocks * (sms - state_ctas);
  return kda_state_streamed() && (p.cu_seqlens == nullptr || p.N == 1) &&
         state_ctas * 8 <= 3 * int64_t{sms} && chunks * p.HV > prep_places;
}

// The streamed sm_90 path: zero the sync words, the persistent prep, then the state kernel as its
// programmatic dependent, one CTA an SM (a shared-memory request above half an SM: on the SMs the
// prep left), each chain copying a block in as soon as the prep publishes it.
template <class T>
Status launch_streamed_sm90(const DeviceParams& p, int64_t* offsets, float* blocks, const ChunkLayout& l,
                            int* sync, int dev, int sms, cudaStream_t stream) {
  constexpr int kNS = 3;
  using P = Sm90StatePlan<kNS>;
  constexpr auto prep = kda_chunk_prep_stream_kernel<T, 128>;
  constexpr auto state = kda_state_sm90_kernel<T, kNS, true>;
  static_assert(P::kBytes < 116 * 1024, "the request below raises the state CTA's shared memory");
  constexpr int kStateSmem = 116 * 1024;  // > half of an SM's 228 KiB: one state CTA an SM, nothing of
                                          // the prep beside it
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once_on<state>(dev, kStateSmem));
  const int state_ctas = static_cast<int>(2 * p.N * p.HV);
  GA_RETURN_IF_ERROR(
      cuda::to_status(cudaMemsetAsync(sync, 0, l.sync_bytes, stream), "kda stream sync reset"));
  GA_RETURN_IF_ERROR(launch_chunk_map(p, offsets, dev, stream));
  // Every CTA place of the prep (5 an SM; queried once): those on the reserved SMs leave at once.
  static const int per_sm = [] {
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, prep, kThreads, 0) == cudaSuccess && n > 0
               ? n
               : kPrepMinBlocks;
  }();
  GA_RETURN_IF_ERROR(cuda::launch_plain<prep>(
      false, dev, dim3(static_cast<unsigned>(per_sm * sms)), dim3(kThreads), 0, stream,
      "kda_chunk_prep_stream_kernel", p, static_cast<const int64_t*>(offsets), blocks, l, sync, state_ctas));
  host_timing::mark("launch kda_chunk_prep_stream_kernel");
  const dim3 grid(static_cast<unsigned>(p.N * 2), static_cast<unsigned>(p.HV));
  const Status launched = cuda::launch_maybe_pdl(
      state, grid, dim3(P::kThreads + kStreamProducerThreads), kStateSmem, stream, /*use_pdl=*/true,
      "kda_state_sm90_kernel (streamed)", p, static_cast<const int64_t*>(offsets),
      static_cast<const float*>(blocks), l, static_cast<const int*>(sync + 2));
  host_timing::mark("launch kda_state_sm90_kernel (streamed)");
  return launched;
}

// Whether this thread's last chunked call ran the cluster kernel (kda_cuda_last_call_used_cluster_kernel).
thread_local bool g_last_cluster_chunked = false;
// Whether this thread's last chunked call ran the sm_90 state kernel (kda_cuda_last_call_used_sm90_state).
thread_local bool g_last_sm90_state = false;
// Whether this thread's last chunked call ran the streamed sm_90 path (kda_cuda_last_call_streamed).
thread_local bool g_last_streamed = false;

template <class T, int K>
Status launch_chunked_t(const DeviceParams& p, void* workspace, const ChunkLayout& l, cudaStream_t stream) {
  // One cudaGetDevice for the launches, the SM count and the state kernel's smem attribute (host
  // cost, issue 11).
  int dev = 0, sms = 0, cc = 0;
  GA_RETURN_IF_ERROR(cuda_current_device(&dev, &sms, &cc));
  auto* offsets = static_cast<int64_t*>(workspace);
  auto* blocks = reinterpret_cast<float*>(static_cast<char*>(workspace) + l.offsets_bytes);
  // Sequences of at most V / 16 chunks whose clusters all fit the GPU at once: the prep and the state
  // pass in one launch.
  bool launched = false;
  const Status cluster = maybe_launch_cluster_chunked<T, K>(p, blocks, l, dev, sms, cc, stream, &launched);
  g_last_cluster_chunked = launched;
  g_last_sm90_state = false;
  g_last_streamed = false;
  GA_RETURN_IF_ERROR(cluster);
  if (launched) return Status::Ok();
  if constexpr (K == 128) {
    // Hopper: the state pass on wgmma (compute capability 9.0 runs the library's sm_90a code).
    if (cc == 90 && p.V == 128 && kda_state_sm90()) {
      g_last_sm90_state = true;
      g_last_streamed = use_streamed_sm90(p, sms, l.max_chunks);
      if (g_last_streamed) {
        auto* sync = reinterpret_cast<int*>(static_cast<char*>(workspace) + l.sync_offset);
        return launch_streamed_sm90<T>(p, offsets, blocks, l, sync, dev, sms, stream);
      }
      GA_RETURN_IF_ERROR((launch_prep_t<T, K, true>(p, offsets, blocks, l, dev, stream)));
      return launch_state_sm90<T>(p, offsets, blocks, l, dev, stream);
    }
  }
  GA_RETURN_IF_ERROR((launch_prep_t<T, K>(p, offsets, blocks, l, dev, stream)));
  const int64_t ctas16 = p.N * p.HV * (p.V / 16);
  // The column-owning kernel: 2 warps a CTA where the 16-column grid exceeds one CTA an SM, K in
  // halves (4 warps) where it fits (state_cols_kind). The K-quarter kernel is the measured
  // alternative (GROUPATTN_KDA_STATE_COLS=0), at V-tiles of 32 columns when the 16-column grid would
  // not fit two CTAs an SM: halving the CTAs then costs no parallelism and halves the waves and the
  // W / Qt / Kh traffic.
  switch (state_cols_kind(ctas16, sms)) {
    case 1: return launch_state_cols<T, K, 1>(p, offsets, blocks, l, dev, stream);
    case 2: return launch_state_cols<T, K, 2>(p, offsets, blocks, l, dev, stream);
    default: break;
  }
  if (ctas16 > 2 * static_cast<int64_t>(sms)) {
    return launch_state<T, K, 32>(p, offsets, blocks, l, dev, stream);
  }
  // One CTA per SM at VT = 16 leaves room for a deeper ring (kda_state_stages()).
  // Three stages (110 KiB at K = 128) still let two CTAs share an SM when the grid needs it.
  switch (kda_state_stages()) {
    case 2: return launch_state<T, K, 16, 2>(p, offsets, blocks, l, dev, stream);
    case 4: return launch_state<T, K, 16, 4>(p, offsets, blocks, l, dev, stream);
    default: return launch_state<T, K, 16, 3>(p, offsets, blocks, l, dev, stream);
  }
}

// The measurement switches' test overrides (-1: the environment's; core/mode_switch.h).
std::atomic<int> g_state_stages{-1};
std::atomic<int> g_state_cols{-1};
switches::BoolSwitch g_prep_pairs_switch{"GROUPATTN_KDA_PREP_PAIRS", true};
switches::BoolSwitch g_driver_launch_switch{"GROUPATTN_KDA_DRIVER_LAUNCH", true};
switches::BoolSwitch g_cluster_chunked_switch{"GROUPATTN_KDA_CLUSTER_CHUNKED", true};
switches::BoolSwitch g_state_sm90_switch{"GROUPATTN_KDA_STATE_SM90", true};
switches::BoolSwitch g_streamed_switch{"GROUPATTN_KDA_STREAMED", true};

}  // namespace

bool kda_driver_launch() { return g_driver_launch_switch.on(); }

void set_kda_driver_launch(int mode) { g_driver_launch_switch.set_mode(mode); }

bool kda_cluster_chunked() { return g_cluster_chunked_switch.on(); }

void set_kda_cluster_chunked(int mode) { g_cluster_chunked_switch.set_mode(mode); }

bool last_chunked_used_cluster_kernel() { return g_last_cluster_chunked; }

bool kda_state_sm90() { return g_state_sm90_switch.on(); }

void set_kda_state_sm90(int mode) { g_state_sm90_switch.set_mode(mode); }

bool last_chunked_used_sm90_state() { return g_last_sm90_state; }

bool kda_state_streamed() { return g_streamed_switch.on(); }

void set_kda_state_streamed(int mode) { g_streamed_switch.set_mode(mode); }

bool last_chunked_streamed() { return g_last_streamed; }

int kda_state_stages() {
  static const int from_env = switches::env_int("GROUPATTN_KDA_STATE_STAGES", 3);
  return switches::switch_int(g_state_stages, from_env);
}

void set_kda_state_stages(int stages) { g_state_stages.store(stages > 0 ? stages : -1); }

int state_cols_kind(int64_t ctas16, int64_t sms) {
  static const int from_env = [] {
    const int e = switches::env_int("GROUPATTN_KDA_STATE_COLS", -1);
    return e < 0 ? -1 : std::min(e, 2);
  }();
  const int mode = switches::switch_int(g_state_cols, from_env);
  if (mode >= 0) return mode;
  return ctas16 > sms ? 1 : 2;
}

void set_kda_state_cols(int mode) { g_state_cols.store(mode < 0 ? -1 : std::min(mode, 2)); }

bool kda_prep_anchored() { return g_prep_pairs_switch.on(); }

void set_kda_prep_pairs(int mode) { g_prep_pairs_switch.set_mode(mode); }

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
