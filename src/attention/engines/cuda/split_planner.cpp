#include "attention/engines/cuda/split_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace groupattn::cuda_engine {

namespace {
// Query tiles filling this fraction of the SMs already make a good wave: do not split.
constexpr double kFullMachineFraction = 0.8;
// KV this short (in tiles) is not worth the partial-output traffic of splitting.
constexpr int kMinBlocksToSplit = 4;
}  // namespace

int auto_num_splits(const SplitProblem& p) {
  if (p.sm_count <= 0 || p.batch <= 0 || p.kv_heads <= 0 || p.m_blocks <= 0) return 1;
  const int slots = p.sm_count * std::max(1, p.ctas_per_sm);  // CTAs in one wave
  const double tiles = static_cast<double>(p.batch) * p.kv_heads * p.m_blocks;
  if (tiles >= kFullMachineFraction * slots) return 1;
  if (p.n_blocks <= kMinBlocksToSplit) return 1;
  const int most = std::min({kMaxSplits, slots, p.n_blocks});
  // A split count is worth trying only if it changes the tiles per split (ceil(n / s)).
  auto eligible = [&](int s) { return s == 1 || (p.n_blocks + s - 1) / s != (p.n_blocks + s - 2) / (s - 1); };
  auto efficiency = [&](int s) {
    const double waves = tiles * s / slots;
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int s = 1; s <= most; ++s) {
    if (eligible(s)) best = std::max(best, efficiency(s));
  }
  for (int s = 1; s <= most; ++s) {
    if (eligible(s) && efficiency(s) >= p.wave_slack * best) return s;
  }
  return 1;
}

int balanced_num_splits(const SplitProblem& p, int min_blocks) {
  if (p.sm_count <= 0 || p.batch <= 0 || p.kv_heads <= 0 || p.m_blocks <= 0 || p.n_blocks <= 0) return 1;
  const int64_t tiles = static_cast<int64_t>(p.batch) * p.kv_heads * p.m_blocks;
  // One wave of one CTA per SM, and at least min_blocks KV tiles per split.
  const int64_t fit = std::max<int64_t>(1, p.sm_count / tiles);
  const int most = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({kMaxSplits, p.n_blocks / std::max(1, min_blocks), fit})));
  // The fewest splits with the same longest split (ceil(n / s) tiles) as `most`.
  const int per_split = (p.n_blocks + most - 1) / most;
  return (p.n_blocks + per_split - 1) / per_split;
}

int plan_num_splits(const SplitProblem& p, int requested) {
  if (requested > 0) return std::min(requested, kMaxSplits);
  return auto_num_splits(p);
}

}  // namespace groupattn::cuda_engine
