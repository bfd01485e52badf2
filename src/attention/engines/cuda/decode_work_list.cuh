// The plan of the decode work-list mode (decode_work_list.h; docs/DECODE_SM90.md section 20),
// shared by the sm90 swap-AB decode kernel and the cuda engine's one-token decode kernel (warp
// shuffles and integer arithmetic only), folded into the decode CTAs: every CTA computes the
// batch's chunk and its own slot's entry from the sequences' lengths (fold_list_slot), so no
// planning launch sits on the critical path (session 9's separate planning kernel was removed in
// session 10: the same plan, the same speed).
//
//   n_b = ceil(k_len_b / kTileKeys)    the sequence's KV tiles (seq_info: seqlens_k / the cache
//                                      length; 64-key tiles in both kernels)
//   c   = list_chunk(total, max n, B, P)  warp reductions of integers (the same c in every CTA)
//   s_b = max(1, ceil(n_b / c)),  first_b = s_0 + .. + s_{b-1} (warp scans)
//   slot first_b + i, i < s_b      ->  sequence b, split i, tiles split_range(n_b, i, s_b)
//   slots sum s .. the bound       ->  no work (the CTA exits before any barrier; list_slot_bound)
//   seq_splits[b] = {s_b, first_b} ->  the combine (written by split 0 of b, decode_kernel.cuh)
//
// Every count is written on every call, so nothing needs a memset and a replayed graph follows
// new lengths.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/seq_and_mask.cuh"

namespace groupattn::cuda_engine {

namespace work_list_detail {

// Splits of a sequence of n tiles at chunk c in 32-bit integers (list_splits_of: n < 2^25, c <= n
// or the chunk floor; one division per sequence and search step).
__device__ __forceinline__ int splits_of(int n, int c) { return n <= 0 ? 1 : (n + c - 1) / c; }

// Sequence b's kTileKeys-key tiles (seq_info's K length; its other loads are dead and dropped).
template <int kTileKeys>
__device__ __forceinline__ int tiles_of(const KernelParams& p, int b) {
  const int k_len = seq_info(p, b).k_len;
  return k_len > 0 ? k_len / kTileKeys + (k_len % kTileKeys != 0) : 0;
}

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

}  // namespace work_list_detail

// One slot of the plan (work-list mode).
struct ListSlot {
  int b = -1;                            // the sequence, or -1: a slot past the plan's last (no work)
  int split = 0, splits = 0, first = 0;  // split i of the sequence's s_b, which start at slot first
  int begin = 0, end = 0;                // its KV tiles [begin, end)
};

// The folded plan (docs/DECODE_SM90.md section 20, session 10): one warp (every lane gets the
// answer) computes the chunk c -- list_chunk over the 32-bit tile counts, summed in any order
// (integers), so the same c in every CTA and on the CPU tier -- and then only the entry of `slot`:
//   1. max n, total n, and list_chunk's counts: lane l takes sequences l, l + 32, ... (L1 hits
//      after the first pass), one shuffle reduction each
//   2. lane l sums s_b over its contiguous run of k = ceil(B / 32) sequences; a warp scan gives
//      each run's first slot and the plan's total; the run holding `slot` is the first whose end
//      passes it (ballot)
//   3. that run's sequences, one a lane: a second scan gives their first slots; the sequence
//      holding `slot` the same way, and split_range its tiles.
// Cost per CTA: ~2 + (search steps) x ceil(B / 32) L1 loads and 32-bit divisions a lane, 5
// shuffles a reduction; no shared memory, no barrier, no workspace read.
// Equal lengths (total = B x max n, p.list_uniform_fast): f(c) = B x s(max n, c) needs no loads or
// shuffles, so the search steps are a division each -- the same c (docs/DECODE_SM90.md section 20,
// "The uniform 8/1 row"). (Slot i = sequence i / s without the two scans, tried too, raised the
// kernel's registers: 154 -> 164 at D 128 kN 32, 193 -> 211 at D 256.)
// kTileKeys: keys per tile of the calling kernel (its split_range unit).
template <int kTileKeys>
__device__ __forceinline__ ListSlot fold_list_slot(const KernelParams& p, int plane_wave, int slot,
                                                   int lane) {
  using namespace work_list_detail;
  const int batch = p.batch;
  int max_n = 0, total = 0;
  for (int j = lane; j < batch; j += 32) {
    const int n = tiles_of<kTileKeys>(p, j);
    max_n = max(max_n, n);
    total += n;
  }
  max_n = warp_reduce<true>(max_n);
  total = warp_reduce<false>(total);  // < 2^31: checked on the host (list_plan)
  // Equal lengths (p.list_uniform_fast): f(c) = B x s(max n, c), no loads, no reductions.
  const bool equal = p.list_uniform_fast && total == max_n * batch;  // (B x max n < 2^31: list_plan)
  auto count = [&](int64_t c) -> int64_t {
    if (equal) return int64_t{batch} * splits_of(max_n, static_cast<int>(c));
    int f = 0;
    for (int j = lane; j < batch; j += 32) f += splits_of(tiles_of<kTileKeys>(p, j), static_cast<int>(c));
    return warp_reduce<false>(f);
  };
  const int c = static_cast<int>(list_chunk(total, max_n, batch, plane_wave, count));

  // Lane l's run of sequences [j0, j1) and the slots they take.
  const int k = (batch + 31) / 32;
  const int j0 = min(batch, lane * k), j1 = min(batch, j0 + k);
  int run = 0;
  for (int j = j0; j < j1; ++j) run += splits_of(tiles_of<kTileKeys>(p, j), c);
  const int run_end = warp_inclusive_scan(run, lane);
  const int used = __shfl_sync(0xffffffffu, run_end, 31);
  // list_slot_bound holds every plan list_chunk can make (decode_work_list.h); a plan past the slots
  // the grid and the workspace hold is a bug, reported as a launch failure.
  if (used > p.num_splits) __trap();
  ListSlot r;
  if (slot >= used) return r;
  const int owner = __ffs(__ballot_sync(0xffffffffu, slot < run_end)) - 1;  // its run is not empty
  const int base = __shfl_sync(0xffffffffu, run_end - run, owner);
  const int jb = owner * k;  // < batch

  // The owner's run, one sequence a lane (k <= 32).
  const int j = jb + lane;
  const bool in = lane < k && j < batch;
  const int n = in ? tiles_of<kTileKeys>(p, j) : 0;
  const int s = in ? splits_of(n, c) : 0;
  const int s_end = base + warp_inclusive_scan(s, lane);
  const int at = __ffs(__ballot_sync(0xffffffffu, in && slot < s_end)) - 1;
  r.b = jb + at;
  r.splits = __shfl_sync(0xffffffffu, s, at);
  r.first = __shfl_sync(0xffffffffu, s_end - s, at);
  r.split = slot - r.first;
  split_range(__shfl_sync(0xffffffffu, n, at), r.split, r.splits, &r.begin, &r.end);
  return r;
}

}  // namespace groupattn::cuda_engine
