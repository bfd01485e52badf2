// Split-KV planning for the cuda engine: how many slices of the KV sequence each query tile is
// cut into. A pure function of the machine size and the problem's tile counts, so it is tested on
// the CPU (tests/cpu/cuda_split_planner_test.cpp).
#pragma once

namespace groupattn::cuda_engine {

// Most splits one problem may use (bounds the combine kernel's loop and the workspace).
inline constexpr int kMaxSplits = 128;

// The tile kernel's slack (SplitProblem's default).
inline constexpr double kTileWaveSlack = 0.85;
// The decode kernel's: a decode CTA streams its split at a roughly fixed rate, so the kernel takes
// as long as the longest split, and a wave 85 % full leaves up to 15 % of the CTA slots idle for
// the whole kernel (32/2 d256 B1 x 128K: 56 splits, 112 CTAs on 132 SMs). A few more splits cost
// only partial-output traffic (splits x Hq x D x 4 bytes: ~2 MB there against 256 MiB of K/V) and
// each CTA's ramp-up (~2 us of ~60-120). docs/ENGINES.md, "Paged and D 256 decode: bytes in flight".
inline constexpr double kDecodeWaveSlack = 0.95;

struct SplitProblem {
  int sm_count = 0;     // multiprocessors of the device
  int batch = 0;        // sequences
  int kv_heads = 0;     // KV heads (one CTA row of the grid per KV head: query heads are packed)
  int m_blocks = 0;     // query tiles per (sequence, KV head) at the longest query length
  int n_blocks = 0;     // KV tiles of the longest KV sequence
  int ctas_per_sm = 1;  // tile-kernel CTAs one SM holds at once (occupancy); a wave is SMs x this
  // auto_num_splits takes the smallest split count whose wave efficiency is at least this fraction
  // of the best one's (kTileWaveSlack or kDecodeWaveSlack).
  double wave_slack = kTileWaveSlack;
};

// Automatic split count (FlashAttention's wave-efficiency idea): no split when the query tiles
// already fill most of the machine or the KV is only a few tiles long; otherwise the smallest
// split count whose last wave is nearly (p.wave_slack) as full as the best one's. A wave is
// sm_count x ctas_per_sm CTAs: a memory-bound decode tile wants several CTAs per SM in flight.
int auto_num_splits(const SplitProblem& p);

// Split count for a decode kernel whose small splits cost more than the wave arithmetic says (the
// sm90 engine): at most one wave of one CTA per SM (batch x kv_heads x m_blocks x s <= sm_count),
// at least `min_blocks` KV tiles per split, and of the split counts with the shortest longest
// split, the fewest. On the H200 (bench/results/decode-splits-a552d4d.txt) it picks the fastest
// measured count or one within 2 % of it on 5 of 6 shapes (8/1 B2 32K: 64 splits, 20.6 us against
// 18.6 at 32), where auto_num_splits over-split the small ones (8/1 B1 8K: 128 splits 19.9 us, 16
// splits 11.3 us). The sm90 swap-AB kernel starts from it and prices other counts against the
// combine's per-split cost (sm90/decode_split_plan.h); its packed-rows form uses it as is.
int balanced_num_splits(const SplitProblem& p, int min_blocks);

// The split count a call uses: `requested` > 0 is the caller's override (clamped to
// [1, kMaxSplits]); 0 asks for auto_num_splits().
int plan_num_splits(const SplitProblem& p, int requested);

}  // namespace groupattn::cuda_engine
