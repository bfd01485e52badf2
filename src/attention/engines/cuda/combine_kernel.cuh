// LSE combine: merges partials over disjoint key sets into O and LSE. Two users: the split-KV
// partials of the tile kernel, and attention_merge (context parallelism: one partial per rank).
//
//   lse_partial fp32, S partials, natural-log LSE, -inf = the partial saw no key
//   o_partial_in    TPart (fp32 or the output type), S partials of normalised O (read only where
//                   the partial's LSE is finite)
//   both addressed by (split, global query token, query head) through the part_* strides
//   out [.., Sq, Hq, Dv] (T), lse fp32 [Hq, total_q]
//
// One warp per (query token, query head) row; grid (row blocks over max_seqlen_q * Hq, B).
//   lse = max_s lse_s + log(sum_s exp(lse_s - max)), O = sum_s exp(lse_s - lse) * O_s,
// over the splits with a finite LSE only: no global max buffer, no atomics, fixed order.
// Launched as a programmatic dependent of the tile kernel: it waits for it before reading.
#pragma once

#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "cuda/mma_sm80.cuh"
#include "cuda/pdl.cuh"
#include "groupattn/status.h"

namespace groupattn::cuda_engine {

template <class T, int kHeadDimV_, class TPart = float>
struct CombineTraits {
  using Element = T;
  using Partial = TPart;  // element type of the partial O (fp32, bf16 or f16)
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kWarps = 4;  // rows per CTA
  static constexpr int kThreads = kWarps * cuda::kWarpSize;
  static constexpr int kElemsPerLane = kHeadDimV / cuda::kWarpSize;
  static_assert(kHeadDimV % cuda::kWarpSize == 0, "each lane takes an equal share of the O row");
};

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(cuda::kFullWarpMask, x, offset));
  return x;
}

__device__ __forceinline__ float load_float(const float* x) { return *x; }
__device__ __forceinline__ float load_float(const __nv_bfloat16* x) { return __bfloat162float(*x); }
__device__ __forceinline__ float load_float(const __half* x) { return __half2float(*x); }

// Butterfly sum: every lane ends with the same value, in the same order on every run.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(cuda::kFullWarpMask, x, offset);
  return x;
}

// The O slices are accumulated kSplitBatch splits at a time: their LSEs and O slices are loaded
// first, then summed in split order (the same arithmetic and order as one split at a time, so the
// same bits) -- a warp waits out one load round trip per 8 splits instead of two per split. On the
// H200 this halved a 1 x 8K decode's time (~128 splits: 42.8 -> 20.1 us, bitwise-equal O and LSE;
// docs/DECODE_SM90.md section 5).
inline constexpr int kSplitBatch = 8;

// acc += exp(lse_s - lse) * O_s over splits [first, last) of one row, kSplitBatch at a time: the
// batch's LSEs and O slices (this lane's kElemsPerLane elements) are loaded first, then summed in
// split order. Splits with an -inf LSE (past `last`, or empty: their O was never written) are
// skipped.
template <class Traits, class Part>
__device__ __forceinline__ void accumulate_splits(const KernelParams& p, const float* lse_row, const Part* o_row,
                                                  int first, int last, float lse, int lane,
                                                  float (&acc)[Traits::kElemsPerLane]) {
  for (int sp0 = first; sp0 < last; sp0 += kSplitBatch) {
    float x[kSplitBatch];
    float val[kSplitBatch][Traits::kElemsPerLane];
#pragma unroll
    for (int u = 0; u < kSplitBatch; ++u) x[u] = sp0 + u < last ? lse_row[(sp0 + u) * p.part_lse_split_stride] : -INFINITY;
#pragma unroll
    for (int u = 0; u < kSplitBatch; ++u) {
      if (x[u] == -INFINITY) continue;
      const Part* o = o_row + (sp0 + u) * p.part_o_split_stride + lane * Traits::kElemsPerLane;
#pragma unroll
      for (int e = 0; e < Traits::kElemsPerLane; ++e) val[u][e] = load_float(o + e);
    }
#pragma unroll
    for (int u = 0; u < kSplitBatch; ++u) {
      if (x[u] == -INFINITY) continue;
      const float w = expf(x[u] - lse);
#pragma unroll
      for (int e = 0; e < Traits::kElemsPerLane; ++e) acc[e] += w * val[u][e];
    }
  }
}

// A row's splits: p.num_splits of them at its own global query token, or in the sm90 decode's
// work-list mode (p.seq_splits) the sequence's own count, at rows token of slots first.. (the
// partials hold slot x seqlen_q + token rows of Hq heads).
struct RowSplits {
  int count;
  int64_t part_token;  // the row's token index in the partials' row stride
};
__device__ __forceinline__ RowSplits row_splits(const KernelParams& p, int b, int token, int64_t q_token) {
  if (p.seq_splits == nullptr) return RowSplits{p.num_splits, q_token};
  return RowSplits{p.seq_splits[2 * b], static_cast<int64_t>(p.seq_splits[2 * b + 1]) * p.seqlen_q + token};
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) combine_kernel(const KernelParams p) {
  using T = typename Traits::Element;
  using Store = cuda::MmaType<T>;
  cuda::wait_for_primary();

  const int b = blockIdx.y;
  const SeqInfo s = seq_info(p, b);
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const int row = blockIdx.x * Traits::kWarps + warp;  // row = token * Hq + head
  if (row >= s.q_len * p.heads_q) return;
  const int token = row / p.heads_q, head = row % p.heads_q;
  const int64_t q_token = s.q_token0 + token;  // global query token
  const RowSplits rs = row_splits(p, b, token, q_token);
  const int num_splits = rs.count;
  const float* lse_row = p.lse_partial + rs.part_token * p.part_lse_row_stride + head * p.part_lse_head_stride;
  const auto* o_row = static_cast<const typename Traits::Partial*>(p.o_partial_in) +
                      rs.part_token * p.part_o_row_stride + head * p.part_o_head_stride;

  float mx = -INFINITY;
  for (int sp = lane; sp < num_splits; sp += cuda::kWarpSize)
    mx = fmaxf(mx, lse_row[sp * p.part_lse_split_stride]);
  mx = warp_max(mx);
  float lse = -INFINITY;
  if (mx != -INFINITY) {
    float sum = 0.f;
    for (int sp = lane; sp < num_splits; sp += cuda::kWarpSize) {
      const float x = lse_row[sp * p.part_lse_split_stride];
      if (x != -INFINITY) sum += expf(x - mx);
    }
    lse = mx + logf(warp_sum(sum));
  }

  float acc[Traits::kElemsPerLane];
  for (int e = 0; e < Traits::kElemsPerLane; ++e) acc[e] = 0.f;
  if (lse != -INFINITY) {
    accumulate_splits<Traits>(p, lse_row, o_row, 0, num_splits, lse, lane, acc);
  }
  T* out = static_cast<T*>(p.out) + s.o_offset + token * p.o_row_stride + head * p.o_head_stride +
           lane * Traits::kElemsPerLane;
  for (int e = 0; e < Traits::kElemsPerLane; ++e) Store::store1(out + e, acc[e]);
  if (p.lse != nullptr && lane == 0)
    p.lse[head * p.lse_head_stride + (s.q_token0 + token) * p.lse_row_stride] = lse;
}

// The same merge for rows with many splits and few rows beside them (a 1 x 128K decode with one KV
// head: 8 rows, 64-128 splits), where combine_kernel's one warp per row waits out ceil(S / 8) load
// round trips one after another (~0.8 us each on the H200, docs/DECODE_SM90.md section 15). One CTA
// of kWideWarps warps per row: the LSE max and sum are block reductions (one split per thread), and
// warp w sums the O slices of its own contiguous run of splits in combine_kernel's batches; the
// warps' sums are then added in warp order through shared memory. Fixed order everywhere, so
// deterministic; not bit-identical to combine_kernel (a different association), so a launch picks
// one kernel by the split count alone (use_wide_combine), never by the row count.
inline constexpr int kWideWarps = 8;
inline constexpr int kWideMinSplits = 2 * kSplitBatch + 1;  // up to 16 splits: two batches at most
constexpr bool use_wide_combine(int num_splits) { return num_splits >= kWideMinSplits; }

template <class Traits>
__global__ void __launch_bounds__(kWideWarps * cuda::kWarpSize) combine_wide_kernel(const KernelParams p) {
  using T = typename Traits::Element;
  using Store = cuda::MmaType<T>;
  constexpr int kThreads = kWideWarps * cuda::kWarpSize;
  __shared__ float red[kWideWarps];
  __shared__ float part[kWideWarps][Traits::kHeadDimV];
  cuda::wait_for_primary();

  const int b = blockIdx.y;
  const SeqInfo s = seq_info(p, b);
  const int row = blockIdx.x;  // row = token * Hq + head; the whole CTA leaves together
  if (row >= s.q_len * p.heads_q) return;
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const int token = row / p.heads_q, head = row % p.heads_q;
  const int64_t q_token = s.q_token0 + token;
  const RowSplits rs = row_splits(p, b, token, q_token);
  const int num_splits = rs.count;
  const float* lse_row = p.lse_partial + rs.part_token * p.part_lse_row_stride + head * p.part_lse_head_stride;
  const auto* o_row = static_cast<const typename Traits::Partial*>(p.o_partial_in) +
                      rs.part_token * p.part_o_row_stride + head * p.part_o_head_stride;

  // Max, then sum of exp, over the splits (thread t takes splits t, t + kThreads, ...); each block
  // reduction ends with every thread reading the kWideWarps partials in warp order.
  float mx = -INFINITY;
  for (int sp = threadIdx.x; sp < num_splits; sp += kThreads) mx = fmaxf(mx, lse_row[sp * p.part_lse_split_stride]);
  mx = warp_max(mx);
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < kWideWarps; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();  // red is reused below
  float lse = -INFINITY;
  if (mx != -INFINITY) {
    float sum = 0.f;
    for (int sp = threadIdx.x; sp < num_splits; sp += kThreads) {
      const float x = lse_row[sp * p.part_lse_split_stride];
      if (x != -INFINITY) sum += expf(x - mx);
    }
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    float total = red[0];
    for (int w = 1; w < kWideWarps; ++w) total += red[w];
    lse = mx + logf(total);
  }

  // Warp w: splits [w * per, min((w + 1) * per, S)), kSplitBatch at a time (accumulate_splits).
  float acc[Traits::kElemsPerLane];
  for (int e = 0; e < Traits::kElemsPerLane; ++e) acc[e] = 0.f;
  if (lse != -INFINITY) {
    const int per = (num_splits + kWideWarps - 1) / kWideWarps;
    const int first = warp * per, last = min(first + per, num_splits);
    accumulate_splits<Traits>(p, lse_row, o_row, first, last, lse, lane, acc);
  }
  for (int e = 0; e < Traits::kElemsPerLane; ++e) part[warp][lane * Traits::kElemsPerLane + e] = acc[e];
  __syncthreads();
  // Thread t stores O elements t, t + kThreads, ... as the warp-ordered sum of the warps' parts.
  T* out = static_cast<T*>(p.out) + s.o_offset + token * p.o_row_stride + head * p.o_head_stride;
  for (int i = threadIdx.x; i < Traits::kHeadDimV; i += kThreads) {
    float o = part[0][i];
    for (int w = 1; w < kWideWarps; ++w) o += part[w][i];
    Store::store1(out + i, o);
  }
  if (p.lse != nullptr && threadIdx.x == 0) p.lse[head * p.lse_head_stride + q_token * p.lse_row_stride] = lse;
}

// Launches the merge of p.num_splits > 1 partials for every row of the longest sequence: the
// one-CTA-per-row kernel above 16 splits (use_wide_combine), else one warp per row. Shared by the
// cuda engine's split-KV and the sm90 decode engine.
template <class T, int kHeadDimV>
Status launch_combine(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  using Combine = CombineTraits<T, kHeadDimV>;
  const int rows = p.seqlen_q * p.heads_q;
  if (use_wide_combine(p.num_splits)) {
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(p.batch));
    return cuda::launch_maybe_pdl(combine_wide_kernel<Combine>, grid, dim3(kWideWarps * cuda::kWarpSize), 0, stream,
                                  use_pdl, "launching combine_wide_kernel", p);
  }
  const dim3 grid(static_cast<unsigned>((rows + Combine::kWarps - 1) / Combine::kWarps),
                  static_cast<unsigned>(p.batch));
  return cuda::launch_maybe_pdl(combine_kernel<Combine>, grid, dim3(Combine::kThreads), 0, stream, use_pdl,
                                "launching combine_kernel", p);
}

}  // namespace groupattn::cuda_engine
