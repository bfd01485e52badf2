// The planning kernel of the decode work-list mode (decode_work_list.h; docs/DECODE_SM90.md
// section 20). One CTA of kListMaxBatch threads, thread b = sequence b:
//
//   n_b = ceil(k_len_b / 64)           the sequence's KV tiles (seq_info: seqlens_k / the cache length)
//   c   = list_chunk(total, max n, P)  block reductions (fixed order: the same c on every run)
//   s_b = max(1, ceil(n_b / c)),  first_b = s_0 + .. + s_{b-1} (block scan)
//   seq_splits[b]                = {s_b, first_b}                                 -> the combine
//   work_list[first_b + i]       = {b, i, split_range(n_b, i, s_b)}  i < s_b        -> the decode CTAs
//   work_list[sum s .. slots)    = {-1, 0, 0, 0}                                  (CTAs with no work)
//
// Every entry and count is written on every call, so nothing needs a memset and a replayed graph
// follows new lengths. This kernel is an ordinary launch (it starts after the previous call's
// combine finished); the decode kernel is its programmatic dependent and waits for it before
// reading its entry.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"
#include "attention/engines/sm90/decode_traits.h"
#include "attention/engines/sm90/decode_work_list.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.cuh"
#include "groupattn/status.h"

namespace groupattn::sm90_engine {

namespace work_list_detail {

inline constexpr int kWarps = kListMaxBatch / 32;

// Sum over the block, the same order on every run; every thread gets the result.
__device__ __forceinline__ long long block_sum(long long x, long long* red) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x / 32;
  __syncthreads();  // red's previous use is over
  if (threadIdx.x % 32 == 0) red[warp] = x;
  __syncthreads();
  long long total = 0;
  for (int w = 0; w < kWarps; ++w) total += red[w];
  return total;
}

__device__ __forceinline__ long long block_max(long long x, long long* red) {
  for (int o = 16; o > 0; o /= 2) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[warp] = x;
  __syncthreads();
  long long m = 0;
  for (int w = 0; w < kWarps; ++w) m = max(m, red[w]);
  return m;
}

}  // namespace work_list_detail

// p.work_list / p.seq_splits point into the workspace (written here, hence the const_casts: the
// decode and combine kernels only read them). `slots` = p.num_splits (list_slot_bound).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) decode_work_list_kernel(const cuda_engine::KernelParams p, int plane_wave) {
  static_assert(kThreads == kListMaxBatch, "one thread per sequence");
  // The decode grid (a programmatic dependent) may launch now: its CTAs become resident on the
  // other SMs and wait in griddepcontrol.wait for this grid to complete, so its launch latency
  // overlaps the plan. (The previous call is already complete: this kernel is an ordinary launch.)
  cuda::allow_dependent_launch();
  __shared__ long long red[kThreads / 32];
  const int b = static_cast<int>(threadIdx.x);
  const bool live = b < p.batch;
  long long n = 0;
  if (live) {
    const int k_len = cuda_engine::seq_info(p, b).k_len;
    n = k_len > 0 ? (static_cast<long long>(k_len) + kBlockKV - 1) / kBlockKV : 0;
  }
  const long long total = work_list_detail::block_sum(n, red);
  const long long max_n = work_list_detail::block_max(n, red);
  auto count = [&](int64_t c) -> int64_t {
    return work_list_detail::block_sum(live ? list_splits_of(n, c) : 0, red);
  };
  const int64_t c = list_chunk(total, max_n, p.batch, plane_wave, count);
  const int splits = live ? list_splits_of(n, c) : 0;

  // Exclusive scan of the split counts: within the warp by shuffles, then over the warp totals.
  const int lane = b % 32, warp = b / 32;
  int incl = splits;
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) red[warp] = incl;
  __syncthreads();
  long long before = 0, used = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) before += red[w];
    used += red[w];
  }
  const int first = static_cast<int>(before) + incl - splits;

  int32_t* list = const_cast<int32_t*>(p.work_list);
  // list_slot_bound holds every plan list_chunk can make (decode_work_list.h); a plan past it is a
  // bug, reported as a launch failure rather than a write past the workspace.
  if (used > p.num_splits) __trap();
  if (live) {
    int32_t* seq = const_cast<int32_t*>(p.seq_splits) + 2 * b;
    seq[0] = splits;
    seq[1] = first;
    for (int i = 0; i < splits; ++i) {
      int begin = 0, end = 0;
      cuda_engine::split_range(static_cast<int>(n), i, splits, &begin, &end);
      int32_t* e = list + static_cast<int64_t>(first + i) * kListEntryInts;
      e[0] = b;
      e[1] = i;
      e[2] = begin;
      e[3] = end;
    }
  }
  for (long long j = used + threadIdx.x; j < p.num_splits; j += kThreads) {
    int32_t* e = list + j * kListEntryInts;
    e[0] = -1;
    e[1] = e[2] = e[3] = 0;
  }
}

inline Status launch_decode_work_list(const cuda_engine::KernelParams& p, int plane_wave, cudaStream_t stream) {
  if (p.batch > kListMaxBatch) return Status(StatusCode::kInternal, "sm90 engine: work list over more than 1024 sequences");
  decode_work_list_kernel<kListMaxBatch><<<1, kListMaxBatch, 0, stream>>>(p, plane_wave);
  return cuda::last_launch_status("decode_work_list_kernel");
}

}  // namespace groupattn::sm90_engine
