// sm90 decode: scale / softcap / mask and the online softmax over the KV axis, which in the
// swapped product S^T is the M (row) side: each query column's 64 scores of a tile are spread over
// the whole warpgroup. Per the wgmma accumulator map, thread t holds rows (keys) r and r + 8 with
// r = 16 * warp + lane / 4, for columns 8j + 2 * (lane % 4) + {0, 1}, j < kN / 8. A column max is:
// the thread's two rows, then the warp's 8 row groups (shuffles over lane bits 2-4), then the 4
// warps through shared memory (one named barrier). The column sums stay per-thread partials until
// the epilogue. Maxima and sums in log2 units (scores * scale * log2 e), as the portable engine.
#pragma once

#include "attention/engines/sm90/decode_mainloop.cuh"
#include "cuda/fast_math.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace groupattn::sm90_engine {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr uint32_t kFullMask = 0xffffffffu;

template <class Traits>
struct ColumnSoftmax {
  static constexpr int kRegs = Traits::kN / 2;  // accumulator registers per thread
  static constexpr int kCols = Traits::kN / 4;  // columns per thread ("slots")
  // Slot c <-> column 8 * (c / 2) + 2 * (lane % 4) + c % 2, registers reg(c) (row r) and reg(c) + 2 (row r + 8).
  static __device__ __forceinline__ int reg_of(int c) { return (c / 2) * 4 + c % 2; }
  static __device__ __forceinline__ int col_of(int c, int lane) { return 8 * (c / 2) + 2 * (lane % 4) + c % 2; }
  static __device__ __forceinline__ int row_of(int i, int warp, int lane) {
    return 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
  }
  static __device__ __forceinline__ int col_of_reg(int i, int lane) { return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1); }

  float m_run[kCols];  // running column max of score * mult (the same in every thread holding the column)
  float l_run[kCols];  // this thread's share of the column sum (its two rows)
  float mult = 1.f;    // score -> log2 units (set by scale_and_mask)

  __device__ void init() {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      m_run[c] = -INFINITY;
      l_run[c] = 0.f;
    }
  }

  // Softcap and mask on the raw scores; keys a column must not see -> -inf. `full_tile`: every key
  // of the tile is visible to every column (no per-element test). The scale (times an fp8
  // cache's key scale: the dot products are of the stored fp8 keys) and log2(e) become `mult`,
  // applied by one FFMA inside the exponent in update(). The uniform tests sit outside the
  // element loops (the per-element form cost sm90-prefill 2.7x, docs/PREFILL_SM90.md).
  __device__ void scale_and_mask(float (&s)[kRegs], const KernelParams& p, const CtaWork& w, int blk, bool full_tile,
                                 int warp, int lane, float k_scale) {
    float scale = p.scale;
    if constexpr (Traits::kFp8) scale *= k_scale;
    mult = scale * kLog2e;
    if (p.softcap > 0.f) {
      const float inv_cap = scale / p.softcap;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) s[i] = p.softcap * tanhf(s[i] * inv_cap);
      mult = kLog2e;
    }
    if (!full_tile) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int j = blk * Traits::kBlockKV + row_of(i, warp, lane);
        const int n = col_of_reg(i, lane);
        if (n < w.cols) {
          const KeyInterval vis = cuda_engine::visible_keys(p, w.s, (w.col0 + n) / p.group);
          if (j < vis.lo || j > vis.hi) s[i] = -INFINITY;
        } else {
          s[i] = -INFINITY;  // padding column: never written
        }
      }
    }
  }

  // Online-softmax step for one tile: column maxima across the warpgroup, rescale of the running
  // sums and of O^T's columns, scores -> probabilities (in place).
  __device__ void update(float (&s)[kRegs], float (&o)[Traits::kDBlocks][kRegs], float* red_max, int warp,
                         int lane) {
    float mx[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float m = fmaxf(s[reg_of(c)], s[reg_of(c) + 2]);
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 4));
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 8));
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 16));
      mx[c] = m;
    }
    if (lane < 4) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) red_max[warp * Traits::kN + col_of(c, lane)] = mx[c];
    }
    hw::named_bar_sync(kBarMax, Traits::kConsumerThreads);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = col_of(c, lane);
      float tile_max = red_max[col];
#pragma unroll
      for (int wi = 1; wi < Traits::kConsumerWarps; ++wi) tile_max = fmaxf(tile_max, red_max[wi * Traits::kN + col]);
      const float m_new = fmaxf(m_run[c], tile_max * mult);  // mult > 0: the max commutes with it
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // column with no visible key yet
      const float alpha = ::groupattn::cuda::fast_exp2(m_run[c] - m_use);
      m_run[c] = m_new;
      const int i = reg_of(c);
      s[i] = ::groupattn::cuda::fast_exp2(fmaf(s[i], mult, -m_use));  // masked: -inf -> 0
      s[i + 2] = ::groupattn::cuda::fast_exp2(fmaf(s[i + 2], mult, -m_use));
      l_run[c] = l_run[c] * alpha + (s[i] + s[i + 2]);
#pragma unroll
      for (int h = 0; h < Traits::kDBlocks; ++h) {
        o[h][i] *= alpha;
        o[h][i + 2] *= alpha;
      }
    }
  }

  // P^T -> shared memory as the B operand of O^T += V^T P^T: row n (column), 64 keys K-major,
  // 128B swizzle: key k of row n at n * 128 + ((k / 8) ^ (n % 8)) * 16 + (k % 8) * 2.
  __device__ void store_probabilities(const float (&s)[kRegs], unsigned char* p_smem, int warp, int lane) const {
    using T = MmaElement<Traits>;  // the O^T GEMM's B operand type
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int k = row_of(i, warp, lane), n = col_of_reg(i, lane);
      T* dst = reinterpret_cast<T*>(p_smem + n * 128 + (((k >> 3) ^ (n & 7)) << 4) + (k & 7) * 2);
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        *dst = __float2bfloat16_rn(s[i]);
      } else {
        *dst = __float2half_rn(s[i]);
      }
    }
  }
};

}  // namespace groupattn::sm90_engine

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
