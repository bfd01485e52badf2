// sm90 decode: the CTA's work, its shared-memory map, the TMA producer and the two GEMMs of the
// consumer warpgroup (swap-AB: KV positions on wgmma's M side). See decode_kernel.cuh for the
// algorithm as a whole.
//
//   S^T [64 keys x kN] = K [64 x 128] . Q^T [128 x kN]
//       SS wgmma m64nNk16, 8 k-steps. A = K tile, K-major over d (TMA boxes [64 keys][64 d],
//       128B swizzle); B = packed Q rows [kN][128], K-major over d (two [kN][64] blocks written by
//       the consumer threads in the same swizzled layout).                 -- verified forms
//   O^T [128 x kN] += V^T [128 x 64 keys] . P^T [64 keys x kN]
//       SS wgmma, two m64 halves of d, 4 k-steps over keys each. A = V^T read straight from the V
//       tile ([64 keys][64 d] boxes: M = d contiguous, i.e. A MN-major, imm-trans-a = 1); B = P^T
//       stored by the consumer threads as [kN][64 keys], K-major over keys.
//   Why this form: O^T = V^T P^T puts d on M, so A must be V^T. V arrives by TMA as [keys][d] with d
//   contiguous, i.e. A is M-major. The RS form (A from registers) has no transpose and would need
//   V^T gathered into registers (ldmatrix.trans from a swizzled tile, per k-step, per d half);
//   the SS form takes imm-trans-a = 1, which PTX (wgmma.mma_async, "imm-trans-a, imm-trans-b")
//   allows for .f16/.bf16 operands read through descriptors, with the same canonical MN-major
//   128B layout for A as for B. P^T, produced in the accumulator layout (keys on rows), is stored
//   by the threads as B [kN][64 keys], K-major: the verified B form. HOPPER-PRIMITIVES.md verifies
//   the MN-major descriptor only as B (tB = 1, probe test g); as A (tA = 1) it is documented but
//   not probed: the first thing to check on hardware. Fallback using verified forms only: O =
//   P V with A = P [64 query rows, zero-padded][64 keys] (the same P smem buffer, K-major) and
//   B = V MN-major (tB = 1, N = 128), at the cost of padding the query side to 64 rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "attention/engines/sm90/decode_traits.h"
#include "cuda/sm90/hopper.cuh"
#include "cuda/sm90/wgmma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace groupattn::sm90_engine {

using cuda_engine::KernelParams;
using cuda_engine::KeyInterval;
using cuda_engine::SeqInfo;
namespace hw = ::groupattn::cuda::sm90;

// What one CTA computes: query columns [col0, col0 + cols) of (sequence b, KV group kv_group)
// against KV tiles [blk_begin, blk_end) of its split.
struct CtaWork {
  SeqInfo s;
  int b = 0, kv_group = 0, kvh = 0, split = 0;
  int col0 = 0, cols = 0;
  int blk_begin = 0, blk_end = 0;
  // Keys every column of the CTA sees ([lo of the last token, hi of the first]): tiles inside need
  // no per-element mask.
  int common_lo = 0, common_hi = -1;
};

template <class Traits>
struct SmemMap {
  unsigned char* base;  // 1024-byte aligned
  // The K and V tiles the GEMMs read: the ring's stage, or (fp8) the one converted set.
  __device__ unsigned char* k(int stage) const {
    if constexpr (Traits::kFp8) return base + Traits::kConvertedOffset;
    return base + stage * Traits::kStageBytes;
  }
  __device__ unsigned char* v(int stage) const { return k(stage) + Traits::kTileBytes; }
  // fp8: where the TMA ring's K and V tiles land.
  __device__ unsigned char* ring_k(int stage) const { return base + stage * Traits::kRingStageBytes; }
  __device__ unsigned char* ring_v(int stage) const { return ring_k(stage) + Traits::kFp8TileBytes; }
  __device__ unsigned char* q() const { return base + Traits::kQOffset; }
  __device__ unsigned char* p() const { return base + Traits::kPOffset; }
  // [3][warps][kN] floats: two buffers of per-warp column maxima (alternating tiles), then sums
  __device__ float* red_max(int it) const {
    return reinterpret_cast<float*>(base + Traits::kRedOffset) + (it & 1) * Traits::kConsumerWarps * Traits::kN;
  }
  __device__ float* red_sum() const {
    return reinterpret_cast<float*>(base + Traits::kRedOffset) + 2 * Traits::kConsumerWarps * Traits::kN;
  }
  __device__ uint64_t* full(int stage) const { return reinterpret_cast<uint64_t*>(base + Traits::kBarOffset) + stage; }
  __device__ uint64_t* empty(int stage) const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarOffset) + Traits::kStages + stage;
  }
};

// Producer (one elected thread of the producer warp): for each KV tile, wait until its stage is
// free, announce the stage's bytes, then TMA two K boxes and two V boxes into it. Paged K/V: a
// tile lies inside one page (page_size is a multiple of 64), at slot (j0 % page_size).
template <class Traits>
__device__ void produce(const KernelParams& p, const CtaWork& w, const SmemMap<Traits>& sm, const CUtensorMap* tmap_k,
                        const CUtensorMap* tmap_v) {
  for (int blk = w.blk_begin, it = 0; blk < w.blk_end; ++blk, ++it) {
    const int stage = it % Traits::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Traits::kStages) & 1u;
    hw::mbar_wait(sm.empty(stage), phase ^ 1u);  // the first round passes at once
    const int j0 = blk * Traits::kBlockKV;
    int row = j0, outer = w.b;
    if (p.block_table != nullptr) {
      outer = p.block_table[w.b * p.block_table_stride + j0 / p.page_size];
      row = j0 % p.page_size;
    }
    if constexpr (Traits::kFp8) {
      // One unswizzled box of [64 keys][128 d] bytes per tile.
      hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kRingStageBytes));
      hw::tma_load_4d(sm.ring_k(stage), tmap_k, 0, w.kvh, row, outer, sm.full(stage));
      hw::tma_load_4d(sm.ring_v(stage), tmap_v, 0, w.kvh, row, outer, sm.full(stage));
      continue;
    }
    hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kStageBytes));
    for (int db = 0; db < Traits::kDBlocks; ++db)
      hw::tma_load_4d(sm.k(stage) + db * Traits::kBoxBytes, tmap_k, db * Traits::kSwizzleElems, w.kvh, row, outer,
                      sm.full(stage));
    for (int db = 0; db < Traits::kDBlocks; ++db)
      hw::tma_load_4d(sm.v(stage) + db * Traits::kBoxBytes, tmap_v, db * Traits::kSwizzleElems, w.kvh, row, outer,
                      sm.full(stage));
  }
}

// Consumer threads copy the CTA's packed Q rows into the swizzled K-major B layout: row n (column
// of S^T) = token (col0 + n) / group, head kv_group * group + (col0 + n) % group; rows past the
// CTA's columns are zero. 16-byte chunk c of row n lands at chunk c ^ (n % 8) (128B swizzle).
template <class Traits>
__device__ void load_q(const KernelParams& p, const CtaWork& w, const SmemMap<Traits>& sm, int tid) {
  using T = typename Traits::Element;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;  // 16-byte chunks
  constexpr int kChunksPerBlock = Traits::kSwizzleElems / 8;
  const T* q = static_cast<const T*>(p.q);
  for (int c = tid; c < Traits::kN * kChunksPerRow; c += Traits::kConsumerThreads) {
    const int n = c / kChunksPerRow, ch = c % kChunksPerRow;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (n < w.cols) {
      const int col = w.col0 + n;
      const int token = col / p.group, head = w.kv_group * p.group + col % p.group;
      val = *reinterpret_cast<const uint4*>(q + w.s.q_offset + static_cast<int64_t>(token) * p.q_row_stride +
                                            static_cast<int64_t>(head) * p.q_head_stride + ch * 8);
    }
    const int db = ch / kChunksPerBlock, cc = ch % kChunksPerBlock;
    *reinterpret_cast<uint4*>(sm.q() + db * Traits::kQBlockBytes + n * 128 + ((cc ^ (n % 8)) * 16)) = val;
  }
  hw::fence_proxy_async_smem();  // generic stores -> wgmma operand reads (a barrier follows)
}

// fp8: the stage's f8e4m3 K and V tiles -> the Element tiles the GEMMs read, in the layout the
// 16-bit path's TMA writes ([64 keys][64 d] boxes, 128-byte rows, 16-byte chunk c of row r at
// chunk c ^ (r % 8)). Every e4m3 value is exact in f16 and bf16, so the conversion is exact;
// the scales are applied elsewhere (score scale, output). Each thread converts 8 elements (one
// 8-byte load, one 16-byte store) per step.
template <class Traits>
__device__ void convert_fp8_tiles(const SmemMap<Traits>& sm, int stage, int tid) {
  using T = typename Traits::Element;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;  // 8-element chunks
  constexpr int kChunks = 2 * Traits::kBlockKV * kChunksPerRow;  // K then V
  for (int c = tid; c < kChunks; c += Traits::kConsumerThreads) {
    const int tile = c / (Traits::kBlockKV * kChunksPerRow);
    const int row = (c / kChunksPerRow) % Traits::kBlockKV, ch = c % kChunksPerRow;
    const unsigned char* src = (tile == 0 ? sm.ring_k(stage) : sm.ring_v(stage)) + row * Traits::kHeadDim + ch * 8;
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t word = i < 2 ? raw.x : raw.y;
      const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (i % 2))) & 0xffffu);
      const __half2 h2 = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));  // low byte -> .x
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 b2 = __float22bfloat162_rn(__half22float2(h2));
        out[i] = *reinterpret_cast<const uint32_t*>(&b2);
      } else {
        out[i] = *reinterpret_cast<const uint32_t*>(&h2);
      }
    }
    const int db = ch / 8, cc = ch % 8;  // 64-wide d block, 16-byte chunk inside its row
    unsigned char* dst = (tile == 0 ? sm.k(stage) : sm.v(stage)) + db * Traits::kBoxBytes + row * 128 +
                         ((cc ^ (row % 8)) * 16);
    *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

// Rows [valid, 64) of the stage's V tile hold keys past the sequence (the next sequence's rows, a
// page's unused slots, anything): zero them so 0 * V stays 0 in O^T. The K side needs nothing:
// those scores are masked by selection.
template <class Traits>
__device__ void zero_v_tail(const SmemMap<Traits>& sm, int stage, int valid, int tid) {
  const int rows = Traits::kBlockKV - valid;
  for (int c = tid; c < Traits::kDBlocks * rows * 8; c += Traits::kConsumerThreads) {
    const int db = c / (rows * 8), r = valid + (c / 8) % rows, ch = c % 8;
    *reinterpret_cast<uint4*>(sm.v(stage) + db * Traits::kBoxBytes + r * 128 + ch * 16) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// Per (sequence, KV head) dequantization scales of an fp8 cache (1 otherwise).
template <class Traits>
__device__ __forceinline__ float kv_scale(const float* s, int64_t b_stride, int64_t h_stride, const CtaWork& w) {
  if constexpr (Traits::kFp8) return s[w.b * b_stride + w.kvh * h_stride];
  return 1.f;
}

template <class Traits>
using WgmmaOf = hw::Wgmma<std::is_same_v<typename Traits::Element, __nv_bfloat16>, Traits::kN, 0, 0>;
template <class Traits>
using WgmmaTransAOf = hw::Wgmma<std::is_same_v<typename Traits::Element, __nv_bfloat16>, Traits::kN, 1, 0>;

// S^T = K Q^T for the stage's K tile (fresh accumulators). k-step kk: d block kk / 4, +32 bytes
// per step inside a block (descriptor + 2).
template <class Traits>
__device__ __forceinline__ void gemm_scores(float (&s)[Traits::kN / 2], const SmemMap<Traits>& sm, int stage) {
  hw::fence_regs(s);
  hw::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    const uint64_t da = hw::desc_kmajor_sw128(sm.k(stage) + (kk / 4) * Traits::kBoxBytes) + 2 * (kk % 4);
    const uint64_t db = hw::desc_kmajor_sw128(sm.q() + (kk / 4) * Traits::kQBlockBytes) + 2 * (kk % 4);
    WgmmaOf<Traits>::mma(s, da, db, kk > 0 ? 1 : 0);
  }
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_regs(s);
}

// O^T += V^T P^T. d half h: A = V box h as MN-major (k-step kk = key rows 16kk.. = +2048 bytes,
// descriptor + 128); B = P^T [kN][64 keys] K-major (k-step kk = +32 bytes, descriptor + 2).
template <class Traits>
__device__ __forceinline__ void gemm_output(float (&o)[2][Traits::kN / 2], const SmemMap<Traits>& sm, int stage) {
  hw::fence_regs(o[0]);
  hw::fence_regs(o[1]);
  hw::wgmma_fence();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockKV / 16; ++kk) {
      const uint64_t da =
          hw::desc_mnmajor_sw128(sm.v(stage) + h * Traits::kBoxBytes, static_cast<uint32_t>(Traits::kBoxBytes)) +
          128 * kk;
      const uint64_t db = hw::desc_kmajor_sw128(sm.p()) + 2 * kk;
      WgmmaTransAOf<Traits>::mma(o[h], da, db, 1);
    }
  }
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_regs(o[0]);
  hw::fence_regs(o[1]);
}

}  // namespace groupattn::sm90_engine

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
