// Per-sequence geometry (where a sequence's Q/K/V rows start, how long it is) and the mask as a
// visible key interval per query row. Used by the attention and combine kernels.
#pragma once

#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"

namespace groupattn::cuda_engine {

struct SeqInfo {
  int q_len = 0;
  int k_len = 0;
  int k_pos_end = 0;  // key count the queries align to, in local positions (see visible_keys)
  int64_t q_token0 = 0;  // global query token index of the sequence's first query (LSE column)
  int64_t q_offset = 0;  // element offset of the sequence's first query row in q (and out: o_*)
  int64_t o_offset = 0;
  int64_t k_offset = 0;  // element offset of the first key row (0 for paged: rows come per page)
  int64_t v_offset = 0;
};

// Sequence b's K length alone: seq_info's k_len without its other fields' loads and branches
// (paged K/V always come with seqlens_k).
__device__ __forceinline__ int seq_k_len(const KernelParams& p, int b) {
  if (p.cu_seqlens_k != nullptr) return p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  return p.seqlens_k != nullptr ? p.seqlens_k[b] : p.seqlen_k;
}

// known_k_len >= 0: the sequence's K length, already loaded by the caller (the decode work list's
// plan, decode_work_list.cuh; the sm90 decode kernel, seq_k_len), taken instead of a second load
// of it; the default -1 folds away.
__device__ __forceinline__ SeqInfo seq_info(const KernelParams& p, int b, int known_k_len = -1) {
  const bool known = known_k_len >= 0;
  SeqInfo s;
  if (p.cu_seqlens_q != nullptr) {
    const int start = p.cu_seqlens_q[b];
    s.q_len = p.cu_seqlens_q[b + 1] - start;
    s.q_token0 = start;
    s.q_offset = start * p.q_row_stride;  // varlen: row `start` of [total_q, Hq, D]
    s.o_offset = start * p.o_row_stride;
  } else {
    s.q_len = p.seqlen_q;
    s.q_token0 = static_cast<int64_t>(b) * p.seqlen_q;  // batched LSE column b * Sq + i
    s.q_offset = b * p.q_batch_stride;
    s.o_offset = b * p.o_batch_stride;
  }
  if (p.cu_seqlens_k != nullptr) {
    const int start = p.cu_seqlens_k[b];
    s.k_len = known ? known_k_len : p.cu_seqlens_k[b + 1] - start;
    s.k_offset = start * p.k_row_stride;
    s.v_offset = start * p.v_row_stride;
  } else if (p.block_table != nullptr) {
    s.k_len = known ? known_k_len : p.seqlens_k[b];
  } else {
    s.k_len = known ? known_k_len : p.seqlens_k != nullptr ? p.seqlens_k[b] : p.seqlen_k;
    s.k_offset = b * p.k_batch_stride;
    s.v_offset = b * p.v_batch_stride;
  }
  // Partial-output mode: local key j is global kv_shard_offset + j and the queries align to the
  // sequence's global end kv_total_len, i.e. to local position kv_total_len - kv_shard_offset.
  s.k_pos_end = p.kv_total_len != nullptr ? p.kv_total_len[b] - p.kv_shard_offset[b] : s.k_len;
  return s;
}

// Keys [lo, hi] visible to query i of a sequence (empty when lo > hi). Bottom-right alignment:
// query i sits at key position k_pos_end - q_len + i (k_pos_end = k_len unless sharded; masks only
// compare positions, so shifting both by the shard offset keeps them local). Both ends are
// non-decreasing in i, so the keys a tile of queries needs lie in [lo(first query), hi(last query)].
struct KeyInterval {
  int lo;
  int hi;
};

__device__ __forceinline__ KeyInterval visible_keys(const KernelParams& p, const SeqInfo& s, int i) {
#if GROUPATTN_MUTANT == 4
  const int64_t pos = i;  // planted bug: causal aligned top-left
#else
  const int64_t pos = static_cast<int64_t>(s.k_pos_end) - s.q_len + i;
#endif
  int64_t lo = 0;
  int64_t hi = s.k_len - 1;
  if (p.causal) hi = hi < pos ? hi : pos;
  if (p.window_right >= 0) hi = hi < pos + p.window_right ? hi : pos + p.window_right;
  if (p.window_left >= 0) lo = pos - p.window_left > 0 ? pos - p.window_left : 0;
  if (hi < lo) hi = lo - 1;  // empty; keeps hi in int range when pos is far below zero
  return {static_cast<int>(lo), static_cast<int>(hi)};
}

// The KV head that query head `h` reads: h / group (MHA: group 1, MQA: group Hq).
__device__ __forceinline__ int kv_head_of(int h, int group, int heads_kv) {
#if GROUPATTN_MUTANT == 1
  (void)group;
  return (h / heads_kv) % heads_kv;  // planted bug: divides by Hkv where it means the group size
#elif GROUPATTN_MUTANT == 2
  (void)group;
  return h % heads_kv;  // planted bug
#else
  (void)heads_kv;
  return h / group;
#endif
}

// KV tiles [first, end) of split `split` when a sequence of `n_blocks` tiles is cut into
// `num_splits` equal slices (the last one takes the remainder).
__device__ __forceinline__ void split_range(int n_blocks, int split, int num_splits, int* first, int* end) {
#if GROUPATTN_MUTANT == 3
  const int per_split = n_blocks / num_splits;  // planted bug: every split sized n / S, remainder lost
  *first = split * per_split;
  *end = (split + 1) * per_split;
#else
  const int per_split = (n_blocks + num_splits - 1) / num_splits;
  *first = split * per_split;
  *end = min(n_blocks, (split + 1) * per_split);
#endif
}

}  // namespace groupattn::cuda_engine
