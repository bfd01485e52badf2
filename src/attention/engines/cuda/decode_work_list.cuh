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

constexpr unsigned kFullMask = 0xffffffffu;

// Splits of a sequence of n tiles at chunk c in 32-bit integers (list_splits_of: n < 2^25, c <= n
// or the chunk floor; one unsigned division per sequence and search step).
__device__ __forceinline__ int splits_of(int n, int c) {
  return n <= 0 ? 1
                : static_cast<int>((static_cast<unsigned>(n) + static_cast<unsigned>(c) - 1u) /
                                   static_cast<unsigned>(c));
}

// kTileKeys-key tiles of a sequence of k_len keys.
template <int kTileKeys>
__device__ __forceinline__ int tiles_of_len(int k_len) {
  return k_len > 0 ? k_len / kTileKeys + (k_len % kTileKeys != 0) : 0;
}

// Warp reductions of non-negative integers: one redux.sync on sm80+.
__device__ __forceinline__ int warp_max(int x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(kFullMask, x);
#else
  for (int o = 16; o > 0; o /= 2) x = max(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
#endif
}
__device__ __forceinline__ int warp_sum(int x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(kFullMask, x);
#else
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
#endif
}

__device__ __forceinline__ int warp_inclusive_scan(int x, int lane) {
  for (int o = 1; o < 32; o *= 2) {
    const int y = __shfl_up_sync(kFullMask, x, o);
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
  int k_len = 0;                         // the sequence's K length (seq_info's k_len, already loaded)
};

// Round 1 of the plan, the only global load on its critical path: lane l's run of sequences is
// [l k, l k + k), k = ceil(B / 32), and this is the K length of the run's first sequence (B <= 32:
// lane l -> sequence l, one coalesced line; lanes past the batch 0). Issued before the caller's
// independent prologue work (the sm90 kernel's barrier init), consumed by fold_list_slot.
struct ListLane {
  int k_len = 0;
};
__device__ __forceinline__ ListLane load_list_lane(const KernelParams& p, int lane) {
  const int j0 = lane * ((p.batch + 31) / 32);
  return {j0 < p.batch ? seq_k_len(p, j0) : 0};
}

// The folded plan (docs/DECODE_SM90.md section 20; session 11's prologue): one warp (every lane gets
// the answer) computes the chunk c -- list_chunk over the 32-bit tile counts, summed in any order
// (integers), so the same c in every CTA and on the CPU tier -- and then only the entry of `slot`:
//   1. lane l holds its run's first length (load_list_lane; the rest of a run of k > 1 sequences
//      come from L1); max n and total n: one redux.sync each
//   2. c: with p.list_near_wave, lengths within 1.25x of their mean give one split a sequence
//      (list_near_uniform_chunk; then slot s is sequence s, and 3. is skipped); else equal lengths
//      (p.list_uniform_fast and total = B x max n) list_chunk_equal, the search's answer in closed
//      form (three divisions); else list_chunk's search, a count per step (a division a lane over
//      its run, one redux.sync)
//   3. lane l's slots s_b summed over its run; a warp scan gives each run's end, the ballot of
//      slot < end the run holding `slot`; B <= 32 (k = 1): that run is the sequence, read with
//      shuffles; k > 1: its sequences one a lane, a second scan and ballot the same way
//   4. split_range the sequence's tiles; its K length comes back too (no seq_info reload).
// The same chunk, the same slot -> (sequence, split, tiles) as session 10's form, so the same O and
// LSE bitwise. kTileKeys: keys per tile of the calling kernel (its split_range unit).
template <int kTileKeys>
__device__ __forceinline__ ListSlot fold_list_slot(const KernelParams& p, ListLane mine, int plane_wave,
                                                   int slot, int lane) {
  using namespace work_list_detail;
  const int batch = p.batch;
  const int k = (batch + 31) / 32;
  const int j0 = min(batch, lane * k), j1 = min(batch, j0 + k);
  const bool has = j0 < j1;
  const int n0 = tiles_of_len<kTileKeys>(mine.k_len);  // 0 past the batch
  auto run_tiles = [&](int j) { return tiles_of_len<kTileKeys>(seq_k_len(p, j)); };
  int max_n = n0, total = n0;
  for (int j = j0 + 1; j < j1; ++j) {
    const int n = run_tiles(j);
    max_n = max(max_n, n);
    total += n;
  }
  max_n = warp_max(max_n);
  total = warp_sum(total);  // < 2^31: checked on the host (list_plan)
  // Slots of lane l's run at chunk c (0 for a lane past the batch).
  auto run_splits = [&](int c) {
    int f = has ? splits_of(n0, c) : 0;
    for (int j = j0 + 1; j < j1; ++j) f += splits_of(run_tiles(j), c);
    return f;
  };
  // The near-wave guard first (p.list_near_wave: list_chunk_near_wave's order), then the rule.
  int c = p.list_near_wave ? list_near_uniform_chunk<int>(total, max_n, batch) : 0;
  if (c > 0) {
    // The guard's plan: c = max(lo, max n) >= every n, so one split a sequence (an empty one too):
    // slot s is sequence s, split 0 of 1, and the slots past the batch have no work -- what the
    // scans below give, without their divisions, shuffles and second loads, so the 136 empty slots
    // of a 264-slot grid leave before their working neighbours' producers start (docs/DECODE_SM90.md
    // section 27). (B <= num_splits: list_slot_bound(P, B) >= B on the host.)
    ListSlot r;
    if (slot >= batch) return r;
    r.b = slot;
    r.splits = 1;
    r.first = slot;
    r.k_len = seq_k_len(p, slot);
    split_range(tiles_of_len<kTileKeys>(r.k_len), 0, 1, &r.begin, &r.end);
    return r;
  }
  if (p.list_uniform_fast && total == max_n * batch) {  // (B x max n < 2^31: list_plan)
    c = list_chunk_equal<int>(max_n, batch, plane_wave);
  } else {
    c = list_chunk<int>(total, max_n, batch, plane_wave, [&](int cc) { return warp_sum(run_splits(cc)); });
  }

  const int run = run_splits(c);
  const int run_end = warp_inclusive_scan(run, lane);
  const int used = warp_sum(run);  // (beside the scan, not after it)
  // list_slot_bound holds every plan list_chunk can make (decode_work_list.h); a plan past the slots
  // the grid and the workspace hold is a bug, reported as a launch failure.
  if (used > p.num_splits) __trap();
  ListSlot r;
  if (slot >= used) return r;
  const int owner = __ffs(__ballot_sync(kFullMask, slot < run_end)) - 1;  // its run is not empty
  const int base = __shfl_sync(kFullMask, run_end - run, owner);
  int n;
  if (k == 1) {  // B <= 32: the owner's run is sequence `owner`, its values in the owner's registers
    r.b = owner;
    r.splits = __shfl_sync(kFullMask, run, owner);
    r.first = base;
    n = __shfl_sync(kFullMask, n0, owner);
    r.k_len = __shfl_sync(kFullMask, mine.k_len, owner);
  } else {
    // The owner's run, one sequence a lane (k <= 32).
    const int jb = owner * k;  // < batch
    const int j = jb + lane;
    const bool in = lane < k && j < batch;
    const int len = in ? seq_k_len(p, j) : 0;
    const int nj = tiles_of_len<kTileKeys>(len);
    const int s = in ? splits_of(nj, c) : 0;
    const int s_end = base + warp_inclusive_scan(s, lane);
    const int at = __ffs(__ballot_sync(kFullMask, in && slot < s_end)) - 1;
    r.b = jb + at;
    r.splits = __shfl_sync(kFullMask, s, at);
    r.first = __shfl_sync(kFullMask, s_end - s, at);
    n = __shfl_sync(kFullMask, nj, at);
    r.k_len = __shfl_sync(kFullMask, len, at);
  }
  r.split = slot - r.first;
  split_range(n, r.split, r.splits, &r.begin, &r.end);
  return r;
}

}  // namespace groupattn::cuda_engine
