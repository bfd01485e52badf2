// The device-side work list of the decode kernels for batches of mixed sequence lengths
// (docs/DECODE_SM90.md section 20; docs/ENGINES.md, "Mixed lengths: the work list"). Shared by the
// sm90 swap-AB decode kernel and the portable cuda engine's one-token decode kernel: both count
// 64-key tiles and cut a sequence's tiles with split_range. No CUDA types: the host part (how many
// slots the list may fill) and the chunk rule, which every decode CTA runs on the device over the
// sequences' tile counts (decode_work_list.cuh fold_list_slot) and the CPU tier runs over arrays
// (tests/cpu/decode_work_list_test.cpp). When an engine takes the list is its own host rule
// (sm90_engine.cu list_plan, cuda_engine.cu list_plan), from the limits below.
//
// Why: the host never reads the per-sequence lengths (a device sync, and the call must be
// graph-capturable), so the split planner gives every sequence the split count of the longest, and
// the longest sequence's CTAs finish last and run alone (section 18, group 2). The list is built on
// the device from the lengths: sequence b of n_b 64-key tiles gets s_b = max(1, ceil(n_b / c))
// splits of equal size (split_range), for one chunk size c of the whole batch, so every CTA holds
// at most c tiles whatever the lengths.
//
// The chunk c (all integers, the same on host and device):
//   P    = max(1, SMs x split_wave / (KV heads x column blocks))  CTAs per (KV head, column block)
//          plane that fill one wave (split_wave: the CTAs of a wave per SM; the cuda engine's
//          decode_ctas_per_sm, the sm90 engine's split_wave_of)
//   lo   = max(kListMinTiles, ceil(max_n / kListMaxSplits))       (>= 8 tiles a CTA; <= 16 splits)
//   B <= P, one wave: the smallest c in [lo, max(lo, max_n)] with f(c) = sum_b s_b(c) <= P. f is
//          non-increasing and f(max(lo, max_n)) = B <= P, so it exists: at most P CTAs a plane,
//          the longest of c tiles; uniform lengths give the planner's own wave-filling plan back.
//   B > P, several waves of short CTAs, dispatched by the hardware as SMs free up:
//          c = max(lo, kListMinWaveTiles, ceil(total / (kListWaves x P))), raised to max(lo, max_n) where
//          that is at most 1.25 c (no sequence is cut into a long and a short piece for nothing) or the
//          lengths are near uniform (max_n <= 1.25 x the mean: one split a sequence, the ordinary
//          plan of a batch larger than a wave).
// Slots per plane used: f(c) <= P (one wave) or <= total / c + B <= kListWaves x P + B (else), so
// the host sizes the grid and the workspace for list_slot_bound: P or kListWaves x P + B. The
// bound is what the grid launches, so the one-wave case must not reserve the several-wave room:
// session 9's first form did (8 P + B slots whatever B), and its ~1000 CTAs with no work cost the
// uniform 8/1 B32 x 32K row 13 % (section 20).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "attention/engines/cuda/split_workspace.h"

#if defined(__CUDACC__)
#define GA_WL_HD __host__ __device__
#else
#define GA_WL_HD
#endif

namespace groupattn::cuda_engine {

inline constexpr int kListMinTiles = 8;  // tiles a CTA at least streams (the planner's 8, section 8)
inline constexpr int kListMaxSplits =
    16;                               // splits of one sequence at most: the one-warp combine, <= 2 batches
inline constexpr int kListWaves = 8;  // waves (of P) of the several-wave plan
// Tiles a CTA of the several-wave plan at least streams (1 MB of K/V at D 128): its ramp and
// epilogue (~2 us) stay a small share where the next CTA on the SM does not hide them.
inline constexpr int kListMinWaveTiles = 32;
inline constexpr int kListMaxBatch = 1024;  // sequences the folded plan's one warp takes (32 a lane)
// Largest automatic split count of the ordinary plan for which the list is used: above it the
// planner already cuts every sequence finely (few sequences) and the list's cap could only lose.
inline constexpr int kListMaxPlanSplits = kListMaxSplits / 2;
// Smallest K/V upper bound (bytes, from the host-visible longest length) for which the plan's cost
// (a few us of every CTA's prologue, the combine's extra load) is worth it.
inline constexpr int64_t kListMinKvBytes = int64_t{128} << 20;

GA_WL_HD inline int64_t list_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits of a sequence of n tiles at chunk c (an empty sequence still gets one CTA: it writes the
// rows' empty partial, O = 0 and LSE = -inf after the combine).
GA_WL_HD inline int list_splits_of(int64_t n, int64_t c) {
  return n <= 0 ? 1 : static_cast<int>(list_ceil_div(n, c));
}

// CTAs per plane that fill one wave.
inline int list_plane_wave(int sm_count, int split_wave, int64_t kv_heads, int64_t m_blocks) {
  const int64_t planes = std::max<int64_t>(1, kv_heads * m_blocks);
  return static_cast<int>(std::max<int64_t>(1, int64_t{sm_count} * split_wave / planes));
}

// Slots (CTAs per plane) the list may fill; the grid's x extent is m_blocks x this.
inline int64_t list_slot_bound(int plane_wave, int64_t batch) {
  return batch <= plane_wave ? plane_wave : int64_t{kListWaves} * plane_wave + batch;
}

// Work-list workspace: the split partials of `slots` slots of max_q x Hq rows (the portable layout,
// cuda_engine::set_split_workspace with total_q = max_q), then at a 256-byte boundary the
// per-sequence {count, first slot} (KernelParams::seq_splits, 2 x batch int32).
inline size_t list_partials_bytes(int64_t slots, int64_t max_q, int64_t heads_q, int64_t head_dim) {
  return cuda_engine::split_workspace_align_up(
      cuda_engine::split_workspace_bytes(static_cast<int>(slots), max_q, heads_q, head_dim));
}
inline size_t list_workspace_bytes(int64_t slots, int64_t max_q, int64_t heads_q, int64_t head_dim,
                                   int64_t batch) {
  return list_partials_bytes(slots, max_q, heads_q, head_dim) +
         sizeof(int32_t) * static_cast<size_t>(2 * batch);
}

// The batch sizes the list serves at P CTAs a plane (both engines' host rule, after their own
// conditions): 2..kListMaxBatch sequences, and not P / 2 < B <= P -- one wave leaves room to split
// fewer than B sequences in two, so the plan is nearly the ordinary one and the list's fixed cost
// is all that changes (measured with the sm90 planning kernel of session 9, 8/1 B128 x 8K mixed,
// P 132: 3000 against 3293 GB/s without the list; docs/DECODE_SM90.md section 20). The sm90
// engine's near-wave switch takes that band at another wave (list_near_wave below, section 25).
inline bool list_serves_batch(int64_t batch, int plane_wave) {
  if (batch < 2 || batch > kListMaxBatch) return false;
  return !(batch <= plane_wave && 2 * batch > plane_wave);
}

// P for a kernel that holds `ctas_per_sm` CTAs an SM (the cuda engine's decode kernel, 2 at D 64 /
// 128 on the H200; its ordinary planner fills SMs x that many): that wave, or where it puts the
// batch in the band list_serves_batch turns away (P / 2 < B <= P: 64/8 B32, P 33) the wave of one
// CTA an SM when the batch exceeds it -- the several-wave plan (CTAs of c tiles that the hardware
// dispatches two an SM as they free up), the sm90 engine's plan of those rows. 0: no list.
inline int list_plane_wave_for(int sm_count, int ctas_per_sm, int64_t kv_heads, int64_t m_blocks,
                               int64_t batch) {
  const int wave = list_plane_wave(sm_count, ctas_per_sm, kv_heads, m_blocks);
  if (list_serves_batch(batch, wave)) return wave;
  const int one_per_sm = list_plane_wave(sm_count, 1, kv_heads, m_blocks);
  return batch > one_per_sm && list_serves_batch(batch, one_per_sm) ? one_per_sm : 0;
}

// The near-wave plan (session 12, the sm90 engine's GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE, default
// off; docs/DECODE_SM90.md section 25): the batches list_serves_batch turns away at the ordinary
// plan's wave P (P / 2 < B <= P: one CTA a sequence, the longest sequence's CTA sets the call; the
// one-wave list has room to split only P - B sequences in two) taken at another wave:
//   1. every CTA place the kernel's SMs hold (ctas_per_sm > split_wave: the sm90 D 128 16-bit
//      kernel, two an SM against a planner's wave of one), where that wave P' >= 2 B: the one-wave
//      plan at P' (up to two CTAs an SM, all resident at once, the longest of c tiles), except that
//      near-uniform lengths keep one split a sequence (list_near_uniform_chunk: the ordinary plan
//      there is one split a sequence, and the one-wave rule at P' would give two);
//   2. else, where one CTA an SM is a wave P'' < B (split_wave 2 and several planes: 64/8 B32 on
//      pages of 16, P 33 -> 16): the several-wave plan at P'', as list_plane_wave_for's fallback (its
//      own near-uniform clause already keeps one split a sequence).
// near_uniform_guard: case 1 (KernelParams::list_near_wave). plane_wave 0: no list.
struct NearWave {
  int plane_wave = 0;
  bool near_uniform_guard = false;
};
inline NearWave list_near_wave(int sm_count, int split_wave, int ctas_per_sm, int64_t kv_heads, int64_t m_blocks,
                               int64_t batch) {
  const int wave = list_plane_wave(sm_count, split_wave, kv_heads, m_blocks);
  if (list_serves_batch(batch, wave) || batch < 2 || batch > kListMaxBatch) return {};
  const int every_place = list_plane_wave(sm_count, ctas_per_sm, kv_heads, m_blocks);
  if (every_place > wave && list_serves_batch(batch, every_place)) return {every_place, true};
  const int one_per_sm = list_plane_wave(sm_count, 1, kv_heads, m_blocks);
  if (batch > one_per_sm && list_serves_batch(batch, one_per_sm)) return {one_per_sm, false};
  return {};
}

// ceil(a / b) for a >= 0, b >= 1 in Int (int64_t on the host, int in the decode CTAs: a + b - 1 is
// formed unsigned, so it cannot overflow where a and b fit; an unsigned division is also the
// cheaper one on the device).
template <class Int>
GA_WL_HD Int list_div_up(Int a, Int b) {
  using U = std::make_unsigned_t<Int>;
  return static_cast<Int>((static_cast<U>(a) + static_cast<U>(b) - 1) / static_cast<U>(b));
}

// The rule's floor on c: lo = max(kListMinTiles, ceil(max_n / kListMaxSplits)).
template <class Int>
GA_WL_HD Int list_chunk_floor(Int max_n) {
  return std::max(Int{kListMinTiles}, list_div_up(max_n, Int{kListMaxSplits}));
}

// One wave (B <= P): list_chunk searches [a, b] for the smallest c with f(c) <= P. f is
// non-increasing in c; f(c) >= total / c, so every c below total / P fails; f(c) <= total / c + B
// (ceil adds < 1 a sequence, an empty one counts 1), so every c from total / (P - B) passes, and so
// does top = max(lo, max n) (f(top) = B <= P). So every c below a fails, b passes, and the search
// returns max(a, the smallest c that passes). A narrow range is few steps (8/1 B32 x 32K: 5).
template <class Int>
struct ListSearchRange {
  Int a, b;
};
template <class Int>
GA_WL_HD ListSearchRange<Int> list_search_range(Int total, Int max_n, Int batch, int plane_wave) {
  const Int lo = list_chunk_floor(max_n);
  const Int top = std::max(lo, max_n);
  const Int wave = plane_wave;
  const Int a = std::max(lo, list_div_up(total, wave));
  const Int b = batch < wave ? std::min(top, std::max(a, list_div_up(total, wave - batch))) : top;
  return {std::min(a, b), b};
}

// Several waves (B > P): no search.
template <class Int>
GA_WL_HD Int list_wave_chunk(Int total, Int max_n, Int batch, int plane_wave) {
  const Int lo = list_chunk_floor(max_n);
  const Int top = std::max(lo, max_n);
  Int c = std::max(std::max(lo, Int{kListMinWaveTiles}), list_div_up(total, Int{kListWaves} * plane_wave));
  const Int mean = list_div_up(total, std::max<Int>(1, batch));
  if (top <= c + c / 4 || top <= mean + mean / 4) c = top;
  return c;
}

// The chunk rule above. count(c) must return f(c) = sum_b list_splits_of(n_b, c) over the batch.
// Int: int64_t on the host; int in the decode CTAs (total < 2^31: both engines' list_plan), the
// same values.
template <class Int, class Count>
GA_WL_HD Int list_chunk(Int total, Int max_n, Int batch, int plane_wave, Count count) {
  if (batch > plane_wave) return list_wave_chunk(total, max_n, batch, plane_wave);
  // Every decode CTA runs a count per step of this search, in its prologue (on the critical path).
  ListSearchRange<Int> r = list_search_range(total, max_n, batch, plane_wave);
  while (r.a < r.b) {
    const Int mid = r.a + (r.b - r.a) / 2;
    if (count(mid) <= plane_wave) {
      r.b = mid;
    } else {
      r.a = mid + 1;
    }
  }
  return r.a;
}

// list_chunk of B equal lengths of max_n tiles, in closed form: f(c) = B x s(max_n, c), and for
// max_n > 0, B x ceil(max_n / c) <= P <=> ceil(max_n / c) <= q = floor(P / B) (q >= 1: B <= P)
// <=> c >= ceil(max_n / q); for max_n = 0 every c passes. So the search's max(a, smallest c that
// passes) is max(a, ceil(max_n / q)): the same c with four divisions (three independent) instead
// of a search
// (CPU test Sm90DecodeWorkList.EqualLengthsClosedFormIsTheSearch).
template <class Int>
GA_WL_HD Int list_chunk_equal(Int max_n, Int batch, int plane_wave) {
  const Int total = batch * max_n;
  if (batch > plane_wave) return list_wave_chunk(total, max_n, batch, plane_wave);
  const ListSearchRange<Int> r = list_search_range(total, max_n, batch, plane_wave);
  return std::max(r.a, list_div_up(max_n, Int{plane_wave} / batch));
}

// The near-wave plan's guard (list_near_wave case 1): lengths within 1.25x of their mean keep one
// split a sequence, c = top = max(lo, max n) (f(top) = B <= P), the ordinary plan of a batch in
// (P / 2, P]; 0 where the chunk rule decides. Equal lengths always pass where max n >= lo (mean =
// max n), and where max n < lo every c of the rule is >= lo > max n: one split a sequence either way.
template <class Int>
GA_WL_HD Int list_near_uniform_chunk(Int total, Int max_n, Int batch) {
  const Int top = std::max(list_chunk_floor(max_n), max_n);
  const Int mean = list_div_up(total, std::max<Int>(1, batch));
  return top <= mean + mean / 4 ? top : Int{0};
}

// The chunk of a plan with the near-wave guard on: the guard's c where it applies, else list_chunk.
template <class Int, class Count>
GA_WL_HD Int list_chunk_near_wave(Int total, Int max_n, Int batch, int plane_wave, Count count) {
  const Int near = list_near_uniform_chunk(total, max_n, batch);
  return near > 0 ? near : list_chunk(total, max_n, batch, plane_wave, count);
}

}  // namespace groupattn::cuda_engine

#undef GA_WL_HD
