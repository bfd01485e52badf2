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
// Keys per KV tile of the attention kernel for head dim `d` (the split planner counts in these):
// 128 at D 64 (FlashAttention-2's D 64 forward tile is 128 x 128), 64 otherwise (D 256: was 32,
// which paid the per-tile barriers, shuffles and O rescale for half the MMAs). Both tile heights
// use the same count, so GQA and copied-up MHA, which may pick different heights, agree bitwise.
constexpr int tile_keys(int d) { return d == 64 ? 128 : 64; }

// Decode kernel (decode_kernel.cuh): serves problems whose every sequence has at most
// kDecodeMaxTokens query tokens, at the head dims below. A CTA holds kDecodeRows packed rows
// (token x query head of one KV group, m_blocks = ceil(tokens x group / kDecodeRows)) and steps
// through its split 64 keys at a time (the split planner counts in these). The choice depends on
// the query length alone, never on the group, so native GQA and the same problem on K/V copied up
// to Hq heads take the same kernel (bitwise-equal rows, tested).
// Why 4 tokens (docs/ENGINES.md, "Multi-token decode"): every m-block re-reads its split's K/V
// from L2 into shared memory, so tokens x group rows cost tokens x group / 16 times the one-token
// L2 and shared-memory traffic. Group 8 x 4 tokens is 2x (predicted a win over the tile kernel;
// measured 1.53x the one-token time at 64/8 1 x 128K, the tile kernel not timed beside it);
// x 16 tokens 8x (predicted slower than the tile kernel's 128-row tile, which reads K/V once per
// 128 rows).
inline constexpr int kDecodeRows = 16;
inline constexpr int kDecodeBlockKeys = 64;
inline constexpr int kDecodeMaxTokens = 4;
constexpr bool has_decode_kernel(int d) { return d == 64 || d == 128 || d == 256; }
constexpr bool use_decode_kernel(int d, int64_t max_q) {
  return has_decode_kernel(d) && max_q >= 1 && max_q <= kDecodeMaxTokens;
}

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

// Runs the decode kernel and, when p.num_splits > 1, the combine kernel; p.m_blocks is
// ceil(max query tokens x group / kDecodeRows). Instantiated for has_decode_kernel head dims only.
template <class T, int kHeadDim>
Status launch_decode(const KernelParams& p, cudaStream_t stream, bool use_pdl);

// CTAs of the decode kernel one SM of the current device holds (as tile_ctas_per_sm); 0 when the
// device's shared memory per CTA is too small for it (the engine then uses the tile kernel).
template <class T, int kHeadDim>
int decode_ctas_per_sm();

}  // namespace groupattn::cuda_engine
