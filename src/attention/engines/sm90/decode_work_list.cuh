// The planning kernel of the decode work-list mode (decode_work_list.h; docs/DECODE_SM90.md
// section 20). One CTA of the batch's warps (ceil(B / 32) x 32 threads), thread b = sequence b:
//
//   n_b = ceil(k_len_b / 64)           the sequence's KV tiles (seq_info: seqlens_k / the cache length)
//   c   = list_chunk(total, max n, B, P)  block reductions of integers (the same c on every run)
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

inline constexpr int kMaxWarps = kListMaxBatch / 32;

// Block reductions of 32-bit integers: shuffles within the warp, then (more than one warp) the warp
// totals through shared memory. The slots alternate between two rows, so one __syncthreads a
// reduction suffices: a warp writing row r again has passed the next reduction's barrier, which
// every warp reaches only after reading row r. Integers: the order does not matter.
struct BlockReduce {
  int* red;  // [2][kMaxWarps]
  int warps;
  int row = 0;

  template <bool kMax>
  __device__ __forceinline__ int run(int x) {
    for (int o = 16; o > 0; o /= 2) {
      const int y = __shfl_xor_sync(0xffffffffu, x, o);
      x = kMax ? max(x, y) : x + y;
    }
    if (warps == 1) return x;
    int* r = red + row * kMaxWarps;
    row ^= 1;
    if (threadIdx.x % 32 == 0) r[threadIdx.x / 32] = x;
    __syncthreads();
    x = r[0];
    for (int w = 1; w < warps; ++w) x = kMax ? max(x, r[w]) : x + r[w];
    return x;
  }
};

// Splits of a sequence of n tiles at chunk c in 32-bit integers (list_splits_of: n < 2^25, c <= n
// or the chunk floor; one division per sequence and search step).
__device__ __forceinline__ int splits_of(int n, int c) { return n <= 0 ? 1 : (n + c - 1) / c; }

}  // namespace work_list_detail

// p.work_list / p.seq_splits point into the workspace (written here, hence the const_casts: the
// decode and combine kernels only read them). `slots` = p.num_splits = list_slot_bound(P, B).
// Fast because it sits on the decode's critical path (the decode CTAs wait for this grid): the
// batch's warps only, 32-bit divisions, one barrier a reduction, and list_chunk's narrowed search
// (session 9: a one-warp form that unrolled 64-bit divisions over 32 sequences a lane took 24 us).
// (A template only so that every translation unit that includes this header may instantiate it.)
template <int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads)
    decode_work_list_kernel(const cuda_engine::KernelParams p, int plane_wave) {
  static_assert(kMaxThreads == kListMaxBatch, "one thread per sequence");
  using namespace work_list_detail;
  // The decode grid (a programmatic dependent) may launch now: its CTAs become resident on the
  // other SMs and wait in griddepcontrol.wait for this grid to complete, so its launch latency
  // overlaps the plan. (The previous call is already complete: this kernel is an ordinary launch.)
  cuda::allow_dependent_launch();
  __shared__ int red[2 * kMaxWarps];
  const int b = static_cast<int>(threadIdx.x);
  const int lane = b % 32, warp = b / 32;
  const bool live = b < p.batch;
  int n = 0;
  if (live) {
    const int k_len = cuda_engine::seq_info(p, b).k_len;
    n = k_len > 0 ? k_len / kBlockKV + (k_len % kBlockKV != 0) : 0;
  }
  BlockReduce reduce{red, static_cast<int>(blockDim.x / 32)};
  const int max_n = reduce.run<true>(n);
  const int total =
      reduce.run<false>(n);  // < 2^31: B x the longest's tiles is checked on the host (list_plan)
  auto count = [&](int64_t c) -> int64_t {
    return reduce.run<false>(live ? splits_of(n, static_cast<int>(c)) : 0);
  };
  const int c = static_cast<int>(list_chunk(total, max_n, p.batch, plane_wave, count));
  const int splits = live ? splits_of(n, c) : 0;

  // Exclusive scan of the split counts: within the warp by shuffles, then over the warp totals.
  int incl = splits;
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  int before = 0, used = incl;
  if (reduce.warps > 1) {
    int* r = red + reduce.row * kMaxWarps;
    if (lane == 31) r[warp] = incl;
    __syncthreads();
    used = 0;
    for (int w = 0; w < reduce.warps; ++w) {
      if (w < warp) before += r[w];
      used += r[w];
    }
  } else {
    used = __shfl_sync(0xffffffffu, incl, 31);
  }
  const int first = before + incl - splits;

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
      cuda_engine::split_range(n, i, splits, &begin, &end);
      int32_t* e = list + static_cast<int64_t>(first + i) * kListEntryInts;
      e[0] = b;
      e[1] = i;
      e[2] = begin;
      e[3] = end;
    }
  }
  for (int j = used + b; j < p.num_splits; j += static_cast<int>(blockDim.x)) {
    int32_t* e = list + static_cast<int64_t>(j) * kListEntryInts;
    e[0] = -1;
    e[1] = e[2] = e[3] = 0;
  }
}

inline Status launch_decode_work_list(const cuda_engine::KernelParams& p, int plane_wave,
                                      cudaStream_t stream) {
  if (p.batch > kListMaxBatch)
    return Status(StatusCode::kInternal, "sm90 engine: work list over more than 1024 sequences");
  const int threads = (p.batch + 31) / 32 * 32;  // the batch's warps (p.batch >= 2)
  decode_work_list_kernel<kListMaxBatch><<<1, threads, 0, stream>>>(p, plane_wave);
  return cuda::last_launch_status("decode_work_list_kernel");
}

}  // namespace groupattn::sm90_engine
