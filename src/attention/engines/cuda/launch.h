// Host launchers of the cuda engine, one explicit instantiation per (element type, head dim) in
// the inst_*.cu files next to this header.
#pragma once

#include <cuda_runtime.h>

#include "attention/engines/cuda/kernel_params.h"
#include "groupattn/status.h"

namespace groupattn::cuda_engine {

// Rows of packed queries (token x query head of one KV group) per tile of the attention kernel.
inline constexpr int kTileRows = 64;
// Keys per KV tile of the attention kernel for head dim `d` (the split planner counts in these).
constexpr int tile_keys(int d) { return d <= 128 ? 64 : 32; }

// Runs the tile kernel and, when p.num_splits > 1, the combine kernel (as a programmatic
// dependent launch when `use_pdl`). p.m_blocks must be set; partial buffers too when splitting.
template <class T, int kHeadDim>
Status launch_attention(const KernelParams& p, cudaStream_t stream, bool use_pdl);

// Tile-kernel CTAs one SM of the current device holds at once, queried once per process (the
// split planner's wave size; workspace_bytes and run must agree, so the value never changes);
// 1 if the occupancy query fails.
template <class T, int kHeadDim>
int tile_ctas_per_sm();

}  // namespace groupattn::cuda_engine
