// sm90 decode epilogue: finishes the column sums (warp shuffles, then the 4 warps through shared
// memory in a fixed order: deterministic), normalises O^T and writes O and LSE, or the split's
// fp32 partials in the portable engine's workspace layout so its combine kernel runs unchanged:
//   lse_partial[split * partial_rows + q_token * Hq + head], o_partial[(same row) * D + d].
// O^T register i of m64 block h holds d = 64h + 16 * warp + lane / 4 + 8 * ((i / 2) % 2) and column
// 8 * (i / 4) + 2 * (lane % 4) + i % 2 (the wgmma accumulator map); with an fp8 cache (D = 128, two
// blocks) the O^T rows are permuted, d = 32 * warp + 4 * (lane / 4) + 2h + (i / 2) % 2
// (decode_mainloop.cuh).
#pragma once

#include "attention/engines/sm90/decode_softmax.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace groupattn::sm90_engine {

template <class Traits>
__device__ void write_output(const KernelParams& p, const CtaWork& w, ColumnSoftmax<Traits>& sm_state,
                             const float (&o)[Traits::kDBlocks][Traits::kN / 2], float* red_sum, int warp,
                             int lane, float v_scale) {
  using T = typename Traits::Element;
  using Softmax = ColumnSoftmax<Traits>;
  constexpr int kCols = Softmax::kCols;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    float l = sm_state.l_run[c];
    l += __shfl_xor_sync(kFullMask, l, 4);
    l += __shfl_xor_sync(kFullMask, l, 8);
    l += __shfl_xor_sync(kFullMask, l, 16);
    sm_state.l_run[c] = l;
  }
  if (lane < 4) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) red_sum[warp * Traits::kN + Softmax::col_of(c, lane)] = sm_state.l_run[c];
  }
  hw::named_bar_sync(kBarSum, Traits::kConsumerThreads);

  float inv[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int col = Softmax::col_of(c, lane);
    float l = red_sum[col];
#pragma unroll
    for (int wi = 1; wi < Traits::kConsumerWarps; ++wi) l += red_sum[wi * Traits::kN + col];
    sm_state.l_run[c] = l;
    inv[c] = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
    if (warp == 0 && lane < 4 && col < w.cols) {
      const int n = w.col0 + col;
      const int token = n / p.group, head = w.kv_group * p.group + n % p.group;
      const float lse = l > 0.f ? (sm_state.m_run[c] + log2f(l)) * kLn2 : -INFINITY;
      const int64_t q_token = w.s.q_token0 + token;
      if (p.num_splits == 1) {
        if (p.lse != nullptr) p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
      } else {
        p.lse_partial[static_cast<int64_t>(w.split) * p.partial_rows + q_token * p.heads_q + head] = lse;
      }
    }
  }

#pragma unroll
  for (int i = 0; i < Traits::kN / 2; ++i) {
    const int col = Softmax::col_of_reg(i, lane);
    if (col >= w.cols) continue;
    const int c = (i >> 2) * 2 + (i & 1);  // slot of register i
    const int n = w.col0 + col;
    const int token = n / p.group, head = w.kv_group * p.group + n % p.group;
#pragma unroll
    for (int h = 0; h < Traits::kDBlocks; ++h) {
      int d = 64 * h + Softmax::row_of(i, warp, lane);
      if constexpr (Traits::kFp8) {  // O^T rows permuted (decode_mainloop.cuh)
        d = 32 * warp + 4 * (lane / 4) + 2 * h + ((i >> 1) & 1);
      }
      float val = o[h][i] * inv[c];
      if constexpr (Traits::kFp8) val *= v_scale;  // the values were the stored fp8 ones
      if (p.num_splits == 1) {
        T* out = static_cast<T*>(p.out) + w.s.o_offset + static_cast<int64_t>(token) * p.o_row_stride +
                 static_cast<int64_t>(head) * p.o_head_stride + d;
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          *out = __float2bfloat16_rn(val);
        } else {
          *out = __float2half_rn(val);
        }
      } else if (sm_state.l_run[c] > 0.f) {  // the combine reads O only of splits with a finite LSE
        const int64_t prow = static_cast<int64_t>(w.split) * p.partial_rows + (w.s.q_token0 + token) * p.heads_q + head;
        p.o_partial[prow * Traits::kHeadDim + d] = val;
      }
    }
  }
}

}  // namespace groupattn::sm90_engine

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
