// Host launchers of the cuda engine, one explicit instantiation per (element type, head dim) in
// the inst_*.cu files next to this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

// Decode kernel (decode_kernel.cuh): serves problems whose longest sequence has at most
// kDecodeMaxPackedRows packed rows (tokens x group, the rows of one m16 MMA tile: m_blocks == 1),
// at the head dims below. A CTA holds kDecodeRows packed rows and steps through its split 64 keys
// at a time (the split planner counts in these); the kernel itself takes any row count (m_blocks =
// ceil(rows / kDecodeRows), tested by direct launches and the pinned "cuda-decode" engine).
// Why the cut is on packed rows, at one m-block (docs/ENGINES.md, "Decode kernel choice by packed
// rows"): every m-block of a (split, KV head) streams the whole split's K/V through L2 -> shared
// memory -> MMAs again, so the decode kernel's SM-side cost is m_blocks x the one-token cost
// (measured: 2 m-blocks 1.5-1.8x at D 128 on a full machine, 2.0x at D 256), while the tile kernel
// reads the K/V once per 64 rows with one warp per 16 rows working in parallel (32 rows, 32/8 x 8
// tokens 1 x 128K: 156.0 us, one token's time). Group 8 x 2 tokens (16 rows) stays here; group
// 8 x 4 tokens (32) goes to the tile kernel; so does one token at groups above 16.
// Native GQA (rows = tokens x group) and the same problem on K/V copied up (group 1: rows =
// tokens) can land on different kernels (e.g. 64/8 x 4 tokens: 32 rows vs 4), whose summation
// orders differ: bitwise GQA == copied-up holds per kernel, and the tests pin the kernel
// ("cuda-tile", "cuda-decode") for the shapes that straddle the cut.
inline constexpr int kDecodeRows = 16;
inline constexpr int kDecodeBlockKeys = 64;
inline constexpr int64_t kDecodeMaxPackedRows = kDecodeRows;
// Most new tokens per sequence the pinned "cuda-decode" engine takes (the direct-launch tests' range).
inline constexpr int64_t kDecodePinnedMaxTokens = 16;
constexpr bool has_decode_kernel(int d) { return d == 64 || d == 128 || d == 256; }
// packed_rows: max query tokens per sequence x group (query heads per KV head).
constexpr bool use_decode_kernel(int d, int64_t packed_rows) {
  return has_decode_kernel(d) && packed_rows >= 1 && packed_rows <= kDecodeMaxPackedRows;
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
// ceil(max query tokens x group / kDecodeRows) (1 under use_decode_kernel; more when pinned).
// With p.seq_splits set, the work-list mode (decode_work_list.h): p.num_splits is the slot bound
// (list_slot_bound), p.list_plane_wave the plan's P, and the partials hold slots of max_q x Hq rows
// (list_partials_bytes); the combine always runs. Instantiated for has_decode_kernel head dims only.
template <class T, int kHeadDim>
Status launch_decode(const KernelParams& p, cudaStream_t stream, bool use_pdl);

// CTAs of the decode kernel one SM of the current device holds (as tile_ctas_per_sm); 0 when the
// device's shared memory per CTA is too small for it (the engine then uses the tile kernel).
template <class T, int kHeadDim>
int decode_ctas_per_sm();
// The same for a head dim known at run time (64, 128 or 256; 0 for any other: no decode kernel).
// T: __nv_bfloat16 or __half (instantiated in cuda_engine.cu).
template <class T>
int decode_ctas_per_sm_for(int64_t head_dim);

// The decode work list for batches of mixed lengths (docs/ENGINES.md, "Mixed lengths: the work
// list"), a measurement switch: GROUPATTN_CUDA_DECODE_WORK_LIST (read once; default on, 0
// off). set_cuda_decode_work_list_mode overrides it for tests: -1 the
// environment, 0 off, 1 on. cuda_decode_work_list() is the value in force.
void set_cuda_decode_work_list_mode(int mode);
bool cuda_decode_work_list();

// The decode kernel's split-V form at D 256 (decode_kernel.cuh DecodeTraits::kSplitV: 8 warps, a
// pair per 16-key sub-tile, each warp P V on half the head dim; bitwise the same results as the
// 4-warp form; docs/ENGINES.md "Session 12: D 256 decode rate"), a measurement switch:
// GROUPATTN_CUDA_DECODE_D256_SPLIT_V (read once; unset: on for paged K/V only, the measured default;
// any non-zero integer: on everywhere; 0: off). set_cuda_decode_split_v_mode overrides it for tests:
// -1 the environment, 0 off, 1 on. cuda_decode_split_v(paged) is the value in force for a launch.
inline constexpr int kDecodeSplitVHeadDim = 256;
void set_cuda_decode_split_v_mode(int mode);
bool cuda_decode_split_v(bool paged);

// The D 256 prefill tile's paired P V (attention_tile_kernel.cuh PairPvTraits: a softmax in phases,
// then warps in pairs, each computing O for the pair's 32 rows over half the head dim, so every V
// fragment feeds two MMAs; bitwise the same results as the one-warp form; docs/ENGINES.md "Session
// 12: cuda prefill against FA2"), a measurement switch: GROUPATTN_CUDA_PREFILL_D256_PAIR_PV (read
// once; default on, as measured in session 13; 0 off). It applies to the 64-row D 256 tile on a
// device whose opt-in shared memory per block holds its 111,104 bytes (sm90, sm80; not sm86/89,
// which keep the one-warp form). set_cuda_prefill_d256_pair_pv_mode overrides it for tests: -1 the
// environment, 0 off, 1 on.
void set_cuda_prefill_d256_pair_pv_mode(int mode);
bool cuda_prefill_d256_pair_pv();

}  // namespace groupattn::cuda_engine
