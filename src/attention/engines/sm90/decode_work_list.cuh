// The planning kernel of the decode work-list mode (decode_work_list.h; docs/DECODE_SM90.md
// section 20). One warp; lane l holds sequences l, l + 32, ... (at most kListMaxBatch / 32 each):
//
//   n_b = ceil(k_len_b / 64)           the sequence's KV tiles (seq_info: seqlens_k / the cache length)
//   c   = list_chunk(total, max n, B, P)  warp reductions of integers (the same c on every run)
//   s_b = max(1, ceil(n_b / c)),  first_b = s_0 + .. + s_{b-1} (warp scans, 32 sequences a step)
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

inline constexpr int kPerLane = kListMaxBatch / 32;

template <class T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ int warp_max(int x) {
  for (int o = 16; o > 0; o /= 2) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

}  // namespace work_list_detail

// p.work_list / p.seq_splits point into the workspace (written here, hence the const_casts: the
// decode and combine kernels only read them). `slots` = p.num_splits = list_slot_bound(P, B).
// One warp, no __syncthreads: the plan sits on the decode's critical path (its CTAs wait for this
// grid), so it is a few shuffles per step of the chunk search rather than block reductions.
// (A template only so that every translation unit that includes this header may instantiate it.)
template <int kLanes>
__global__ void __launch_bounds__(kLanes)
    decode_work_list_kernel(const cuda_engine::KernelParams p, int plane_wave) {
  static_assert(kLanes == 32, "one warp");
  using namespace work_list_detail;
  // The decode grid (a programmatic dependent) may launch now: its CTAs become resident on the
  // other SMs and wait in griddepcontrol.wait for this grid to complete, so its launch latency
  // overlaps the plan. (The previous call is already complete: this kernel is an ordinary launch.)
  cuda::allow_dependent_launch();
  const int lane = static_cast<int>(threadIdx.x);
  const int steps = (p.batch + 31) / 32;  // sequences per lane, rounded up (<= kPerLane)
  int n[kPerLane];                        // tiles of sequence lane + 32 i (0 past the batch)
  int max_n = 0;
  long long total = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    n[i] = 0;
    const int b = lane + 32 * i;
    if (i < steps && b < p.batch) {
      const int k_len = cuda_engine::seq_info(p, b).k_len;
      n[i] = k_len > 0 ? k_len / kBlockKV + (k_len % kBlockKV != 0) : 0;
    }
    max_n = max(max_n, n[i]);
    total += n[i];
  }
  max_n = warp_max(max_n);
  total = warp_sum(total);
  auto count = [&](int64_t c) -> int64_t {
    int f = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (i < steps && lane + 32 * i < p.batch) f += list_splits_of(n[i], c);
    }
    return warp_sum(f);
  };
  const int64_t c = list_chunk(total, max_n, p.batch, plane_wave, count);

  // Entries in sequence order: step i covers sequences 32 i .. 32 i + 31, a warp scan of their
  // split counts on top of the steps before.
  int32_t* list = const_cast<int32_t*>(p.work_list);
  int used = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (i < steps) {
      const int b = lane + 32 * i;
      const bool live = b < p.batch;
      const int splits = live ? list_splits_of(n[i], c) : 0;
      int incl = splits;
      for (int o = 1; o < 32; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const int first = used + incl - splits;
      used += __shfl_sync(0xffffffffu, incl, 31);
      // list_slot_bound holds every plan list_chunk makes (decode_work_list.h); a plan past it is
      // a bug, reported as a launch failure rather than a write past the workspace.
      if (first + splits > p.num_splits) __trap();
      if (live) {
        int32_t* seq = const_cast<int32_t*>(p.seq_splits) + 2 * b;
        seq[0] = splits;
        seq[1] = first;
        for (int s = 0; s < splits; ++s) {
          int begin = 0, end = 0;
          cuda_engine::split_range(n[i], s, splits, &begin, &end);
          int32_t* e = list + static_cast<int64_t>(first + s) * kListEntryInts;
          e[0] = b;
          e[1] = s;
          e[2] = begin;
          e[3] = end;
        }
      }
    }
  }
  for (int j = used + lane; j < p.num_splits; j += 32) {
    int32_t* e = list + static_cast<int64_t>(j) * kListEntryInts;
    e[0] = -1;
    e[1] = e[2] = e[3] = 0;
  }
}

inline Status launch_decode_work_list(const cuda_engine::KernelParams& p, int plane_wave,
                                      cudaStream_t stream) {
  if (p.batch > kListMaxBatch)
    return Status(StatusCode::kInternal, "sm90 engine: work list over more than 1024 sequences");
  decode_work_list_kernel<32><<<1, 32, 0, stream>>>(p, plane_wave);
  return cuda::last_launch_status("decode_work_list_kernel");
}

}  // namespace groupattn::sm90_engine
