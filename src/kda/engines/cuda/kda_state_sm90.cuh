// The chunked state pass on Hopper tensor cores (sm_90a, K = V = 128): wgmma with tf32 operands
// and the operand order swapped, so that the 64 value columns of a V half fill wgmma's M = 64 side
// and the chunk's 16 tokens sit on N.
//
// One CTA (one warpgroup, 128 threads) per (sequence, value head, V half), sequential over the
// sequence's 16-token chunks. S^T (64 values x 128 channels, fp32) lives in registers as the
// accumulator of an m64n128 product (as two m64n64 halves), its columns the channels in the order
// of kda_wgmma_image.cuh (sigma), which makes the accumulator, rounded to tf32, the A operand of
// the next products without a move. Per chunk, from the prep's block image (two bulk copies into a
// ring of NS stages, one mbarrier each):
//   [X^T | Y^T] = S^T [W^T | Qt^T]       16 k8 steps of m64n32, A = S^T (registers)
//   D^T = U^T - X^T                      fp32, rounded to tf32 once as the A operand below
//   S^T <- S^T Diag(exp(Gamma_C)) + D^T Kh      2 x 2 k8 steps of m64n64
//   O^T = Y^T + D^T Aqk^T                2 k8 steps of m64n16
// the same products as the column kernels (kda_state_cols.cuh) with the same tf32 operands (S
// rounded where it is read, W / Qt / Kh as the prep rounded them, D rounded once), summed in
// another order: results agree to rounding, not bitwise.
//
// Why: the 16-token step is a serial chain per (sequence, head); the mma.sync kernels spend ~0.86 us
// a step at T 4096 H 16 (docs/ENGINES.md, session 16) on fragment loads and per-warp latency. Here a
// step is 22 wgmma issued from registers and the stage: 0.69 us (session 23, the state kernel 176 us
// against the column kernel's 217). What bounds it now is the warp's own scalar stream (~415 SASS
// instructions a step: S's tf32 conversions and decay, D, the stores, the barrier), one warp a
// scheduler; not the wgmma count nor the depth of their accumulation chain (ENGINES.md "Session 23").
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/pdl.cuh"
#include "cuda/sm90/hopper.cuh"
#include "cuda/sm90/wgmma_tf32.cuh"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"
#include "kda/engines/cuda/kda_wgmma_image.cuh"

namespace groupattn::kda_cuda {

// Shared memory of the sm_90 state kernel with NS stages: per stage the block's shared part
// (W .. exp(Gamma_C), 27136 bytes) and the CTA's U^T half (4096 bytes), in a 32 KiB slot whose
// start is 1024-aligned (the swizzle's atom); 1024 bytes of slack to align the dynamic base.
template <int NS>
struct Sm90StatePlan {
  static constexpr int kThreads = 128;
  static constexpr int kStageBytes = 32768;
  static constexpr int kSharedBytes = wgmma_image::kSharedFloats * 4;
  static constexpr int kUOffset = kSharedBytes;
  static constexpr int kUBytes = wgmma_image::kUHalfFloats * 4;
  static constexpr int kBytes = NS * kStageBytes + 1024;
  static_assert(kUOffset + kUBytes <= kStageBytes, "a block fits its stage");
};

// The streamed form (kda_chunked.cu, launch_streamed_sm90): the state CTAs run beside the prep, on SMs
// the prep left free, and a chunk's block may not exist yet when its stage frees. A fifth warp
// (the producer) waits for each block's ready flag, then for the stage, and issues the copies; the
// warpgroup frees a stage with one arrive a warp instead of the CTA barrier.
inline constexpr int kStreamProducerThreads = 32;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Spins until the prep has published the block behind `flag` (st.release.gpu after its CTA
// barrier), then orders the async proxy's reads of it (the bulk copies) after that acquire.
__device__ __forceinline__ void wait_block_ready(const int* flag) {
  int v = 0;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v != 0) break;
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace sm90_state {

template <int n>
__device__ __forceinline__ void pin(uint32_t (&r)[n][4]) {
#pragma unroll
  for (int i = 0; i < n; ++i) cuda::sm90::fence_regs(r[i]);
}

}  // namespace sm90_state
#endif

// kStream: the streamed form (above); `ready` holds one flag per (chunk, value head) block, else null.
template <class T, int NS, bool kStream = false>
__global__ void __launch_bounds__(128 + (kStream ? kStreamProducerThreads : 0), 1)
    kda_state_sm90_kernel(const DeviceParams p, const int64_t* chunk_offsets, const float* blocks,
                          const ChunkLayout l, const int* ready) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cuda::sm90;
  namespace img = wgmma_image;
  using P = Sm90StatePlan<NS>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[NS];
  __shared__ uint64_t empty[kStream ? NS : 1];  // streamed: the warpgroup's 4 warps freed the stage
  unsigned char* smem = align_1024(smem_raw);
  const int64_t n = blockIdx.x / 2;
  const int half = static_cast<int>(blockIdx.x % 2);
  const int hv = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, q = lane % 4;
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;
  const int64_t c0 = chunk_offset(p, chunk_offsets, n), nc = chunk_offset(p, chunk_offsets, n + 1) - c0;
  const float* blk0 = blocks + (c0 * p.HV + hv) * l.block_floats;
  const int64_t blk_step = static_cast<int64_t>(p.HV) * l.block_floats;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      mbar_init(&full[s], 1);
      if constexpr (kStream) mbar_init(&empty[s], 4);
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Chunk j's block into stage j % NS (thread 0).
  const auto issue = [&](int64_t j) {
    const int s = static_cast<int>(j % NS);
    unsigned char* st = smem + s * P::kStageBytes;
    const float* b = blk0 + j * blk_step;
    mbar_arrive_expect_tx(&full[s], P::kSharedBytes + P::kUBytes);
    bulk_load(st, b, P::kSharedBytes, &full[s]);
    bulk_load(st + P::kUOffset, b + img::kU + half * img::kUHalfFloats, P::kUBytes, &full[s]);
  };
  if constexpr (kStream) {
    if (tid >= 128) {  // the producer warp: every chunk, once its block is ready and its stage free
      if (tid == 128) {
        for (int64_t j = 0; j < nc; ++j) {
          if (j >= NS) mbar_wait(&empty[j % NS], static_cast<uint32_t>((j / NS - 1) & 1));
          wait_block_ready(ready + (c0 + j) * p.HV + hv);
          issue(j);
        }
      }
      // No griddepcontrol.wait here (the warpgroup's, at the end, covers the CTA): lanes 1-31 took
      // it first, and the diverged warp ran lane 0's loop only once the prep grid had completed
      // (session 24 call 4: every chain's first block at the prep's end).
      return;  // no CTA barrier follows: the warpgroup meets on the mbarriers only
    }
  } else if (tid == 0) {
    for (int64_t j = 0; j < NS && j < nc; ++j) issue(j);
  }

  // S^T: register (h, i) is value row v0 + 8 ((i / 2) % 2), position 64 h + 8 (i / 4) + 2 q + i % 2.
  const int v0 = 64 * half + 16 * warp + g;
  float s[2][32];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int v = v0 + 8 * ((i >> 1) & 1), d = img::channel_at(64 * h + 8 * (i >> 2) + 2 * q + (i & 1));
      s[h][i] =
          rows.in >= 0 ? p.s_in[state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, v)] : 0.f;
    }
  }
  T* ob = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + sq.bos * p.o_st;

  for (int64_t j = 0; j < nc; ++j) {
    const int si = static_cast<int>(j % NS);
    const unsigned char* st = smem + si * P::kStageBytes;
    const float* stf = reinterpret_cast<const float*>(st);
    mbar_wait(&full[si], static_cast<uint32_t>((j / NS) & 1));
    // The step's scalar operands into registers first: the wgmma asm's memory clobbers keep the
    // compiler from moving shared loads across the products, and loaded after them their latency
    // sat on the step's chain. exp(Gamma_C) at this thread's positions 64 h + 8 cc + 2q (+1); U^T at
    // value rows 16 warp + g (+8), tokens 8c + 2q (+1).
    float2 ecv[16], uv[4];
#pragma unroll
    for (int k = 0; k < 16; ++k) ecv[k] = *reinterpret_cast<const float2*>(stf + img::kEc + 8 * k + 2 * q);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uv[k] = *reinterpret_cast<const float2*>(stf + img::kU + (16 * warp + g + 8 * (k & 1)) * 16 +
                                               8 * (k >> 1) + 2 * q);
    }

    // A = S^T in tf32: k8 block c takes positions 8c + 2q (+1), i.e. channels 8c + q (+4).
    uint32_t a[16][4];
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const float* r = &s[c >> 3][4 * (c & 7)];
      a[c][0] = to_tf32(r[0]);
      a[c][1] = to_tf32(r[2]);
      a[c][2] = to_tf32(r[1]);
      a[c][3] = to_tf32(r[3]);
    }
    // xy: registers 0-7 X^T, 8-15 Y^T (columns 0-15 and 16-31 of the m64n32 accumulator). Not
    // zeroed: the first product ignores it (scale_d 0); zeroing it made ptxas serialize the 16
    // products (C7511, "insufficient register resources").
    // One chain of 16 dependent k8 steps: splitting it into 2 or 4 independent accumulators
    // measured the same (session 23 call 3, within 0.5 %): the step is not bound by this chain.
    float xy[16];
    sm90_state::pin(a);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      WgmmaTf32Rs<32>::mma(xy, a[c], desc_kmajor_sw128(st + 4 * img::w_at(0, 32 * (c >> 2))) + 2 * (c & 3),
                           c > 0);
    }
    wgmma_commit();

    wgmma_wait<0>();
    fence_regs(xy);
    sm90_state::pin(a);  // the products have read a (they are done)
    // D^T = U^T - X^T: register i is value row 16 warp + g + 8 ((i / 2) % 2), token 8 (i / 4) + 2q + i % 2.
    uint32_t da[2][4];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float2 u0 = uv[2 * c], u1 = uv[2 * c + 1];
      da[c][0] = to_tf32(u0.x - xy[4 * c]);
      da[c][1] = to_tf32(u1.x - xy[4 * c + 2]);
      da[c][2] = to_tf32(u0.y - xy[4 * c + 1]);
      da[c][3] = to_tf32(u1.y - xy[4 * c + 3]);
    }
    // S^T Diag(exp(Gamma_C)) for the update below. Not earlier, while the products run: s is a wgmma
    // accumulator, and ptxas waits for every product in flight before a plain instruction touches one
    // (C7517, an injected wait).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        const float2 e = ecv[8 * h + cc];
        s[h][4 * cc] *= e.x;
        s[h][4 * cc + 1] *= e.y;
        s[h][4 * cc + 2] *= e.x;
        s[h][4 * cc + 3] *= e.y;
      }
    }
    float o[8];  // O^T = Y^T + D^T Aqk^T, in its own m64n16 accumulator (a copy of Y^T)
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = xy[8 + i];
    sm90_state::pin(da);
    fence_regs(s[0]);
    fence_regs(s[1]);
    fence_regs(o);
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        WgmmaTf32Rs<64>::mma(s[h], da[c], desc_kmajor_sw128(st + 4 * img::kKh) + 4 * h + 2 * c, 1);
      }
    }
#pragma unroll
    for (int c = 0; c < 2; ++c)
      WgmmaTf32Rs<16>::mma(o, da[c], desc_kmajor_sw128(st + 4 * img::kAqk) + 2 * c, 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s[0]);
    fence_regs(s[1]);
    fence_regs(o);
    sm90_state::pin(da);

    // O (rows of the chunk past the sequence are padding: not stored).
    const int64_t tok0 = j * kChunk;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t tok = tok0 + 8 * (i >> 2) + 2 * q + (i & 1);
      if (tok < sq.len) ob[tok * p.o_st + v0 + 8 * ((i >> 1) & 1)] = from_float<T>(o[i] + bad);
    }
    if constexpr (kStream) {  // every read of this stage (the wgmma ones at the wait above) is done
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[si]);
    } else {
      __syncthreads();  // every read of this stage is done (the wgmma ones at the wait above)
      if (tid == 0 && j + NS < nc) issue(j + NS);
    }
  }

  if (const StateRows rows_end = state_rows(p, n); rows_end.out >= 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int v = v0 + 8 * ((i >> 1) & 1), d = img::channel_at(64 * h + 8 * (i >> 2) + 2 * q + (i & 1));
        p.s_out[state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows_end.out, hv, d, v)] = s[h][i];
      }
    }
  }
  // Streamed: this grid started while the prep ran (programmatic dependent launch); it completes
  // only after the prep grid has, so that what follows in the stream sees both done.
  if constexpr (kStream) cuda::wait_for_primary();
#else
  (void)p;
  (void)chunk_offsets;
  (void)blocks;
  (void)l;
  (void)ready;
#endif
}

}  // namespace groupattn::kda_cuda
