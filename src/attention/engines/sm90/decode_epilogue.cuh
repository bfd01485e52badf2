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

// The column sums of the CTA's split: the thread's partials, the warp's 8 row groups (shuffles),
// then the 4 warps through shared memory in warp order. Leaves every thread's l_run[c] = its
// column's total. Contains a named barrier over the warpgroup, which every warp reaches only after
// its last O^T wgmma completed (the ring is no longer read after it).
template <class Traits>
__device__ void finish_column_sums(ColumnSoftmax<Traits>& sm_state, float* red_sum, int warp, int lane) {
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
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int col = Softmax::col_of(c, lane);
    float l = red_sum[col];
#pragma unroll
    for (int wi = 1; wi < Traits::kConsumerWarps; ++wi) l += red_sum[wi * Traits::kN + col];
    sm_state.l_run[c] = l;
  }
}

// Head dim of O^T register i of m64 block h (the accumulator map; fp8: the permuted rows).
template <class Traits>
__device__ __forceinline__ int o_row_dim(int h, int i, int warp, int lane) {
  if constexpr (Traits::kFp8) return 32 * warp + 4 * (lane / 4) + 2 * h + ((i >> 1) & 1);
  return 64 * h + ColumnSoftmax<Traits>::row_of(i, warp, lane);
}

template <class T>
__device__ __forceinline__ void store_element(T* dst, float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *dst = __float2bfloat16_rn(v);
  } else {
    *dst = __float2half_rn(v);
  }
}

template <class Traits>
__device__ void write_output(const KernelParams& p, const CtaWork& w, ColumnSoftmax<Traits>& sm_state,
                             const float (&o)[Traits::kDBlocks][Traits::kN / 2], float* red_sum, int warp,
                             int lane, float v_scale) {
  using T = typename Traits::Element;
  using Softmax = ColumnSoftmax<Traits>;
  constexpr int kCols = Softmax::kCols;
  finish_column_sums<Traits>(sm_state, red_sum, warp, lane);

  float inv[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int col = Softmax::col_of(c, lane);
    const float l = sm_state.l_run[c];
    inv[c] = l > 0.f ? 1.f / l : 0.f;  // no visible key: O = 0
    if (warp == 0 && lane < 4 && col < w.cols) {
      const int n = w.col0 + col;
      const int token = n / p.group, head = w.kv_group * p.group + n % p.group;
      const float lse = l > 0.f ? (sm_state.m_run[c] + log2f(l)) * kLn2 : -INFINITY;
      const int64_t q_token = w.s.q_token0 + token;
      if (p.num_splits == 1) {
        if (p.lse != nullptr) p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
      } else {
        p.lse_partial[static_cast<int64_t>(w.split) * p.partial_rows + (w.part_token0 + token) * p.heads_q + head] =
            lse;
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
      const int d = o_row_dim<Traits>(h, i, warp, lane);
      float val = o[h][i] * inv[c];
      if constexpr (Traits::kFp8) val *= v_scale;  // the values were the stored fp8 ones
      if (p.num_splits == 1) {
        T* out = static_cast<T*>(p.out) + w.s.o_offset + static_cast<int64_t>(token) * p.o_row_stride +
                 static_cast<int64_t>(head) * p.o_head_stride + d;
        store_element(out, val);
      } else if (sm_state.l_run[c] > 0.f) {  // the combine reads O only of splits with a finite LSE
        const int64_t prow = static_cast<int64_t>(w.split) * p.partial_rows + (w.part_token0 + token) * p.heads_q + head;
        p.o_partial[prow * Traits::kHeadDim + d] = val;
      }
    }
  }
}

// Cluster reduction (p.cluster_reduce; the CTA is split w.split = cluster rank of p.num_splits,
// docs/DECODE_SM90.md section 14). Column c of split s ends with max m_s (log2 units), sum l_s and
// unnormalised O_s. With M = max_s m_s and e_s = 2^(m_s - M):
//   L = sum_s l_s e_s,  O = sum_s (e_s / L) O_s,  LSE = (M + log2 L) ln 2   (s = 0, 1, ... in order)
// 1. each CTA puts (m_s, l_s) and O_s^T ([kN][D + 4] floats) into its ring; cluster barrier
// 2. threads t < kN read every split's (m, l) of column t through DSMEM, compute M, L and the
//    factors f_s = e_s / L (the same arithmetic in every CTA: the same bits) into shared memory;
//    rank 0 writes LSE
// 3. each CTA owns units u = [rank x per, +per) of the cols x D / 4 float4 units of O (column
//    u / (D / 4), d 4 (u % (D / 4))) and sums f_s O_s over the splits in order, reading the peers'
//    partials through DSMEM (8 splits' loads in flight, then their sum), and stores O
// 4. a last cluster barrier: no CTA exits while a peer may still read its shared memory.
// An empty split (no tile, or no visible key for a column) has m_s = -inf, l_s = 0, O_s = 0: e_s = 0,
// its loads are skipped. A column no split sees: L = 0, O = 0, LSE = -inf (as with one split).
// Not bitwise equal to the workspace mode (that one normalises each split first and merges LSEs in
// natural log), but bitwise the same run to run.
template <class Traits>
__device__ void cluster_reduce_output(const KernelParams& p, const CtaWork& w, ColumnSoftmax<Traits>& sm_state,
                                      const float (&o)[Traits::kDBlocks][Traits::kN / 2], const SmemMap<Traits>& sm,
                                      int warp, int lane, float v_scale) {
  using T = typename Traits::Element;
  using Softmax = ColumnSoftmax<Traits>;
  constexpr int kN = Traits::kN, kStride = Traits::kClusterPartStride;
  constexpr int kVecPerCol = Traits::kHeadDim / 4;
  constexpr int kBatch = 8;  // splits whose loads are in flight together
  const int tid = warp * 32 + lane;
  const int splits = p.num_splits;
  finish_column_sums<Traits>(sm_state, sm.red_sum(), warp, lane);  // every warp is past its last wgmma

  // 1. Publish. The ring was last written by TMA / cp.async and read by wgmma (async proxy).
  hw::fence_proxy_async_smem();
  float* stats = sm.cluster_stats();
  float* part = sm.cluster_part();
  if (warp == 0 && lane < 4) {
#pragma unroll
    for (int c = 0; c < Softmax::kCols; ++c) {
      stats[Softmax::col_of(c, lane)] = sm_state.m_run[c];
      stats[kN + Softmax::col_of(c, lane)] = sm_state.l_run[c];
    }
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int col = Softmax::col_of_reg(i, lane);
#pragma unroll
    for (int h = 0; h < Traits::kDBlocks; ++h) part[col * kStride + o_row_dim<Traits>(h, i, warp, lane)] = o[h][i];
  }
  hw::cluster_sync();

  // 2. Per-column factors.
  float* factors = sm.cluster_factors();  // [split][kN]
  if (tid < kN) {
    const uint32_t m_addr = hw::smem_u32(stats + tid), l_addr = hw::smem_u32(stats + kN + tid);
    float m[kMaxClusterSplits], l[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      if (s < splits) {
        m[s] = hw::ld_shared_cluster_f32(hw::mapa_shared(m_addr, static_cast<uint32_t>(s)));
        l[s] = hw::ld_shared_cluster_f32(hw::mapa_shared(l_addr, static_cast<uint32_t>(s)));
      }
    }
    float m_max = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits) m_max = fmaxf(m_max, m[s]);
    const float m_use = m_max == -INFINITY ? 0.f : m_max;  // no split saw a key: every e_s = 0
    float l_sum = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      if (s < splits) {
        m[s] = ::groupattn::cuda::fast_exp2(m[s] - m_use);  // -inf -> 0
        l_sum += l[s] * m[s];
      }
    }
    const float inv = l_sum > 0.f ? 1.f / l_sum : 0.f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < splits) factors[s * kN + tid] = m[s] * inv;
    if (w.split == 0 && tid < w.cols && p.lse != nullptr) {
      const int n = w.col0 + tid;
      const int token = n / p.group, head = w.kv_group * p.group + n % p.group;
      const int64_t q_token = w.s.q_token0 + token;
      p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] =
          l_sum > 0.f ? (m_max + log2f(l_sum)) * kLn2 : -INFINITY;
    }
  }
  hw::named_bar_sync(kBarSum, Traits::kConsumerThreads);

  // 3. This CTA's share of O.
  const int units = w.cols * kVecPerCol;
  const int per = (units + splits - 1) / splits;
  const int u_end = min(units, (w.split + 1) * per);
  for (int u = w.split * per + tid; u < u_end; u += Traits::kConsumerThreads) {
    const int col = u / kVecPerCol, d = (u % kVecPerCol) * 4;
    const uint32_t addr = hw::smem_u32(part + col * kStride + d);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += kBatch) {
      float f[kBatch];
      float4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        v[b] = make_float4(0.f, 0.f, 0.f, 0.f);
        f[b] = s0 + b < splits ? factors[(s0 + b) * kN + col] : 0.f;
        if (f[b] != 0.f) v[b] = hw::ld_shared_cluster_v4f32(hw::mapa_shared(addr, static_cast<uint32_t>(s0 + b)));
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (f[b] == 0.f) continue;  // past the last split, or the split saw none of the column's keys
        acc.x = fmaf(f[b], v[b].x, acc.x);
        acc.y = fmaf(f[b], v[b].y, acc.y);
        acc.z = fmaf(f[b], v[b].z, acc.z);
        acc.w = fmaf(f[b], v[b].w, acc.w);
      }
    }
    if constexpr (Traits::kFp8) {  // the values were the stored fp8 ones
      acc.x *= v_scale, acc.y *= v_scale, acc.z *= v_scale, acc.w *= v_scale;
    }
    const int n = w.col0 + col;
    const int token = n / p.group, head = w.kv_group * p.group + n % p.group;
    T* out = static_cast<T*>(p.out) + w.s.o_offset + static_cast<int64_t>(token) * p.o_row_stride +
             static_cast<int64_t>(head) * p.o_head_stride + d;
    store_element(out, acc.x);
    store_element(out + 1, acc.y);
    store_element(out + 2, acc.z);
    store_element(out + 3, acc.w);
  }

  // 4. Peers may still be reading this CTA's partial.
  hw::cluster_sync();
}

}  // namespace groupattn::sm90_engine

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
