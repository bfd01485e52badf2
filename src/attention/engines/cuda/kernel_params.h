// The plain struct the cuda engine's kernels take: pointers, element strides and counts, filled
// on the host from AttentionParams (cuda_engine.cu) and read on the device. No CUDA types here.
#pragma once

#include <cstdint>

namespace groupattn::cuda_engine {

struct KernelParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // nullptr: not requested

  // Element strides. Batched tensors use the batch stride; varlen ones have batch stride 0 and
  // start at their cu_seqlens row; paged K/V use the page stride in place of the batch stride.
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_head_stride = 0, lse_row_stride = 0;

  const int32_t* cu_seqlens_q = nullptr;  // varlen Q
  const int32_t* cu_seqlens_k = nullptr;  // varlen K/V
  const int32_t* seqlens_k = nullptr;     // per-sequence KV length (paged; optional batched)
  const int32_t* block_table = nullptr;   // paged K/V
  // Partial-output mode (both or neither): the local keys are global positions
  // [kv_shard_offset[b], +k_len) of a sequence of kv_total_len[b] keys; the masks use those.
  const int32_t* kv_shard_offset = nullptr;
  const int32_t* kv_total_len = nullptr;
  int64_t block_table_stride = 0;
  int page_size = 0;

  int batch = 0;
  int seqlen_q = 0;  // batched Sq, or max_seqlen_q for varlen Q
  int seqlen_k = 0;  // batched Sk (the cache length), unused for varlen/paged
  int heads_q = 0;
  int heads_kv = 0;
  int group = 0;  // heads_q / heads_kv: query heads packed into the rows of one tile

  float scale = 0.f;    // softmax scale
  float softcap = 0.f;  // 0 = off
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;

  int m_blocks = 0;    // query tiles per (sequence, KV head): ceil(seqlen_q * group / kBlockM)
  int num_splits = 1;  // >1: write fp32 partials for the combine kernel instead of out/lse
  // sm90 decode only (decode_traits.h cluster_reduction): the num_splits CTAs of a column block form
  // a thread-block cluster and reduce through distributed shared memory, writing out/lse themselves.
  bool cluster_reduce = false;
  // Split partials, indexed by (split, packed row = global query token * heads_q + query head).
  float* o_partial = nullptr;    // [num_splits, total_q * heads_q, Dv]
  float* lse_partial = nullptr;  // [num_splits, total_q * heads_q], natural log; -inf = empty
  int64_t partial_rows = 0;      // total_q * heads_q
  // Element strides the combine kernel reads the partials with: split, global query token, query
  // head. The tile kernel's own split partials set them to (partial_rows * Dv, Hq * Dv, Dv) and
  // (partial_rows, Hq, 1); attention_merge sets them from the caller's [R, total_q, Hq, Dv] O and
  // [R, Hq, total_q] LSE tensors.
  int64_t part_o_split_stride = 0, part_o_row_stride = 0, part_o_head_stride = 0;
  int64_t part_lse_split_stride = 0, part_lse_row_stride = 0, part_lse_head_stride = 0;
  const void* o_partial_in = nullptr;  // the combine kernel's O source (o_partial, or the merge's)
  // sm90 decode, work-list mode (cuda/decode_work_list.h; docs/DECODE_SM90.md section 20): the
  // decode grid is (m_blocks x num_splits slots, Hkv, 1) and each CTA computes its slot's sequence
  // and tiles from the lengths (decode_work_list.cuh fold_list_slot; list_plane_wave: the plan's P).
  // seq_splits [batch][2]: {split count, first slot}, written on the device by split 0 of each
  // sequence; the combine then reads sequence b's splits at slots first.. (partial row slot x
  // partial_rows + token x Hq + head, partial_rows = seqlen_q x Hq) instead of splits
  // 0..num_splits - 1.
  // list_heads_fastest (only with seq_splits): the grid is (Hkv, m_blocks x num_splits, 1), so
  // the Hkv CTAs of a slot are adjacent in launch order and the empty slots come last
  // (docs/DECODE_SM90.md section 20, "The uniform 64/8 row").
  const int32_t* seq_splits = nullptr;
  int list_plane_wave = 0;
  bool list_heads_fastest = false;
  // list_uniform_fast: where every length is equal the CTAs search the chunk without the count's
  // loads and reductions (the same plan; decode_work_list.cuh fold_list_slot).
  bool list_uniform_fast = false;
  // list_near_wave: the near-wave plan's guard (decode_work_list.h list_near_wave, case 1; the sm90
  // engine's GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE): lengths within 1.25x of their mean keep one split a
  // sequence (list_near_uniform_chunk) before the chunk rule runs.
  bool list_near_wave = false;
  // sm90 swap-AB decode, batched K/V (no block table): thread 0, which initialised the stage
  // barriers, issues the CTA's first KV tile (decode_traits.h kEarlyTiles) before the CTA barrier,
  // and the producer warp starts at the next (decode_kernel.cuh; docs/DECODE_SM90.md section 33).
  // Results are the same either way.
  bool early_first_tiles = false;
  // FP8 KV cache (the sm90 decode engine's experimental fp8 path): dequantization scales per
  // (sequence, KV head), fp32 element strides; nullptr when the cache is not fp8.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t k_scale_b_stride = 0, k_scale_h_stride = 0, v_scale_b_stride = 0, v_scale_h_stride = 0;
};

}  // namespace groupattn::cuda_engine
