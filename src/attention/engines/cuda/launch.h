// Host launchers of the cuda engine, one explicit instantiation per (element type, head dim) in
// the inst_*.cu files next to this header.
#pragma once

#include <cuda_runtime.h>

#include "attention/engines/cuda/kernel_params.h"
#include "groupattn/status.h"

namespace groupattn::cuda_engine {

// Rows of packed queries (token x query head of one KV group) per tile of the attention kernel:
// 4 warps x 32 rows when the longest sequence has `packed_rows` >= 128 and D <= 128 (each K / V
// fragment read from shared memory then feeds two MMAs: FlashAttention-2's forward tile), else
// 4 warps x 16 rows (decode: group x new tokens rows, mostly < 64; D 256: registers). The one
// place the tile shape is chosen; m_blocks, the split planner and the launch all follow it.
inline constexpr int kTileRowsSmall = 64;
inline constexpr int kTileRowsLarge = 128;
constexpr int tile_rows(int d, int64_t packed_rows) {
  return d <= 128 && packed_rows >= kTileRowsLarge ? kTileRowsLarge : kTileRowsSmall;
}
// Keys per KV tile of the attention kernel for head dim `d` (the split planner counts in these).
constexpr int tile_keys(int d) { return d <= 128 ? 64 : 32; }

// Runs the tile kernel with `tile_rows` (tile_rows() above) rows per CTA and, when
// p.num_splits > 1, the combine kernel (as a programmatic dependent launch when `use_pdl`).
// p.m_blocks must be set for those rows; partial buffers too when splitting.
template <class T, int kHeadDim>
Status launch_attention(const KernelParams& p, int tile_rows, cudaStream_t stream, bool use_pdl);

// CTAs of the tile kernel with `tile_rows` rows one SM of the current device holds at once,
// queried once per process and variant (the split planner's wave size; workspace_bytes and run
// must agree, so the value never changes); 1 if the occupancy query fails.
template <class T, int kHeadDim>
int tile_ctas_per_sm(int tile_rows);

}  // namespace groupattn::cuda_engine
