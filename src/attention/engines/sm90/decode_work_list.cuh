// The plan of the decode work-list mode (decode_work_list.h; docs/DECODE_SM90.md section 20), in
// two forms that give the same entries: fold_list_slot, run by every decode CTA for its own slot
// (the default since late session 9: no launch on the critical path), and the planning kernel below
// (GROUPATTN_SM90_DECODE_WORK_LIST=2, session 9), one CTA of the batch's warps (ceil(B / 32) x 32
// threads), thread b = sequence b:
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

template <bool kMax>
__device__ __forceinline__ int warp_reduce(int x) {
  for (int o = 16; o > 0; o /= 2) {
    const int y = __shfl_xor_sync(0xffffffffu, x, o);
    x = kMax ? max(x, y) : x + y;
  }
  return x;
}

__device__ __forceinline__ int warp_inclusive_scan(int x, int lane) {
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

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
    x = warp_reduce<kMax>(x);
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

// Sequence b's 64-key tiles (seq_info's K length; its other loads are dead and dropped).
__device__ __forceinline__ int tiles_of(const cuda_engine::KernelParams& p, int b) {
  const int k_len = cuda_engine::seq_info(p, b).k_len;
  return k_len > 0 ? k_len / kBlockKV + (k_len % kBlockKV != 0) : 0;
}

}  // namespace work_list_detail

// One slot of the plan (work-list mode), as the planning kernel below would write it.
struct ListSlot {
  int b = -1;                            // the sequence, or -1: a slot past the plan's last (no work)
  int split = 0, splits = 0, first = 0;  // split i of the sequence's s_b, which start at slot first
  int begin = 0, end = 0;                // its KV tiles [begin, end)
};

// The folded plan (docs/DECODE_SM90.md section 20, late session 9): one warp (every lane gets the
// answer) computes the same chunk c as decode_work_list_kernel -- the same list_chunk over the
// same 32-bit tile counts, summed in any order (integers) -- and then only the entry of `slot`:
//   1. max n, total n, and list_chunk's counts: lane l takes sequences l, l + 32, ... (L1 hits
//      after the first pass), one shuffle reduction each
//   2. lane l sums s_b over its contiguous run of k = ceil(B / 32) sequences; a warp scan gives
//      each run's first slot and the plan's total; the run holding `slot` is the first whose end
//      passes it (ballot)
//   3. that run's sequences, one a lane: a second scan gives their first slots; the sequence
//      holding `slot` the same way, and split_range its tiles.
// Cost per CTA: ~2 + (search steps) x ceil(B / 32) L1 loads and 32-bit divisions a lane, 5
// shuffles a reduction; no shared memory, no barrier, no workspace read.
__device__ __forceinline__ ListSlot fold_list_slot(const cuda_engine::KernelParams& p, int plane_wave, int slot,
                                                   int lane) {
  using namespace work_list_detail;
  const int batch = p.batch;
  int max_n = 0, total = 0;
  for (int j = lane; j < batch; j += 32) {
    const int n = tiles_of(p, j);
    max_n = max(max_n, n);
    total += n;
  }
  max_n = warp_reduce<true>(max_n);
  total = warp_reduce<false>(total);  // < 2^31: checked on the host (list_plan)
  auto count = [&](int64_t c) -> int64_t {
    int f = 0;
    for (int j = lane; j < batch; j += 32) f += splits_of(tiles_of(p, j), static_cast<int>(c));
    return warp_reduce<false>(f);
  };
  const int c = static_cast<int>(list_chunk(total, max_n, batch, plane_wave, count));

  // Lane l's run of sequences [j0, j1) and the slots they take.
  const int k = (batch + 31) / 32;
  const int j0 = min(batch, lane * k), j1 = min(batch, j0 + k);
  int run = 0;
  for (int j = j0; j < j1; ++j) run += splits_of(tiles_of(p, j), c);
  const int run_end = warp_inclusive_scan(run, lane);
  const int used = __shfl_sync(0xffffffffu, run_end, 31);
  // As the planning kernel: a plan past the slots the grid and workspace hold is a bug.
  if (used > p.num_splits) __trap();
  ListSlot r;
  if (slot >= used) return r;
  const int owner = __ffs(__ballot_sync(0xffffffffu, slot < run_end)) - 1;  // its run is not empty
  const int base = __shfl_sync(0xffffffffu, run_end - run, owner);
  const int jb = owner * k;  // < batch

  // The owner's run, one sequence a lane (k <= 32).
  const int j = jb + lane;
  const bool in = lane < k && j < batch;
  const int n = in ? tiles_of(p, j) : 0;
  const int s = in ? splits_of(n, c) : 0;
  const int s_end = base + warp_inclusive_scan(s, lane);
  const int at = __ffs(__ballot_sync(0xffffffffu, in && slot < s_end)) - 1;
  r.b = jb + at;
  r.splits = __shfl_sync(0xffffffffu, s, at);
  r.first = __shfl_sync(0xffffffffu, s_end - s, at);
  r.split = slot - r.first;
  cuda_engine::split_range(__shfl_sync(0xffffffffu, n, at), r.split, r.splits, &r.begin, &r.end);
  return r;
}

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
  const int n = live ? tiles_of(p, b) : 0;
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
  const int incl = warp_inclusive_scan(splits, lane);
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
