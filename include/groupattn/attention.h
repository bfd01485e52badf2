// The attention op: softmax attention with grouped K/V heads (MHA, GQA and MQA in one code path),
// prefill and decode, returning O and the natural-log LSE. Semantics (fixed for every engine):
//
//   Q     batched [B, Sq, Hq, D]                  or varlen [total_q, Hq, D] + cu_seqlens_q [B+1]
//   K, V  batched [B, Sk, Hkv, D] / [.., Dv]      or varlen [total_k, Hkv, D] + cu_seqlens_k [B+1]
//         or paged [num_pages, page_size, Hkv, D] + block_table [B, max_pages] + seqlens_k [B]
//   out   like Q with Dv in place of D, dtype of Q
//   lse   fp32 [Hq, total_q] (batched: total_q = B * Sq, row b * Sq + i), natural log; optional
//
// Query head h reads KV head h / (Hq / Hkv). Scores s = scale * q.k (softcap: cap * tanh(s / cap)).
// Query i of a sequence with Sq_b queries and Sk_b keys sits at key position Sk_b - Sq_b + i
// (bottom-right alignment); it sees key j when
//     (!causal || j <= pos) && (window_left < 0 || j >= pos - window_left)
//                           && (window_right < 0 || j <= pos + window_right).
// A row that sees no key has O = 0 and LSE = -inf.
//
// Batched K/V with `seqlens_k` uses the first seqlens_k[b] keys of row b (a KV cache with its fill
// level). Index tensors are int32. All tensors are strided views with a contiguous last dimension.
//
// Partial-output mode (context parallelism; both or neither of kv_shard_offset / kv_total_len):
// the Sk_b keys a call sees are one shard of sequence b's keys, sitting at global key positions
// [kv_shard_offset[b], kv_shard_offset[b] + Sk_b) of a sequence with kv_total_len[b] keys. The
// masks use global positions: query i sits at kv_total_len[b] - Sq_b + i, and local key j at
// kv_shard_offset[b] + j. out/lse are then the attention restricted to the shard's keys (rows
// that see no key of the shard: O = 0, LSE = -inf); attention_merge (context_parallel.h) of the
// shards' (out, lse) is the whole attention. Requires 0 <= offset, offset + Sk_b <= total.
#pragma once

#include <cmath>
#include <cstdint>

#include "groupattn/run_options.h"
#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn {

// How K/V are laid out; derived from which index tensors are present (see kv_layout()).
enum class KvLayout { kBatched, kVarlen, kPaged };

struct AttentionParams {
  TensorView q, k, v;
  TensorView out;
  TensorView lse;  // optional

  TensorView cu_seqlens_q;  // int32 [B+1]; present <=> Q is varlen (rank 3)
  TensorView cu_seqlens_k;  // int32 [B+1]; present <=> K/V are varlen (rank 3)
  TensorView seqlens_k;     // int32 [B]; required for paged, optional for batched K/V
  TensorView block_table;   // int32 [B, max_pages]; present <=> K/V are paged

  // Partial-output mode (see above): int32 [B] each, both present or both absent.
  TensorView kv_shard_offset;  // global position of the shard's first key, per sequence
  TensorView kv_total_len;     // the sequence's global key count (all shards together)

  // Upper bounds of the per-sequence lengths for varlen problems, so engines can size grids
  // without reading device memory. 0 = "compute from cu_seqlens" (host-readable tensors only).
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;

  float softmax_scale = NAN;  // NaN = 1 / sqrt(D)
  bool causal = false;
  int64_t window_left = -1;   // -1 = unbounded
  int64_t window_right = -1;  // -1 = unbounded
  float softcap = 0.f;        // 0 = off

  int num_splits = 0;  // decode split-KV override; 0 = automatic, 1 = no split

  // FP8 KV cache (k and v both f8e4m3, q and out bf16 or f16): the key the math sees is
  // k * k_scale and the value v * v_scale, with fp32 scales per (sequence, KV head) -- [B, Hkv],
  // FlashAttention-3's k_descale / v_descale -- or, when kv_scale_per_page is set on a paged
  // cache, per (page, KV head) -- [num_pages, Hkv]. Any strides with a contiguous last dim: one
  // scale per KV head shared by every sequence is a [B, Hkv] view with stride 0 on B. Required
  // exactly when k/v are f8e4m3 (absent otherwise).
  TensorView k_scale, v_scale;
  bool kv_scale_per_page = false;
};

KvLayout kv_layout(const AttentionParams& p);
bool q_is_varlen(const AttentionParams& p);
// True when kv_shard_offset / kv_total_len are given (partial-output mode).
bool kv_is_sharded(const AttentionParams& p);
// True when k or v is f8e4m3 (an fp8 KV cache; validation requires both, with scales).
bool kv_is_fp8(const AttentionParams& p);

// Validates `p` (shapes, dtypes, strides, alignment, index contents where host-readable), selects
// an engine (options.engine, else GROUPATTN_ENGINE, else the first that supports the problem) and
// runs it. On any error nothing is written.
Status attention(const AttentionParams& p, const RunOptions& options = {});

// Workspace the selected engine needs for `p` (0 for most). Validates `p` first.
Status attention_workspace_bytes(const AttentionParams& p, const RunOptions& options, size_t* bytes);

// The name of the engine attention() would run for `p` (after validation), without running it.
Status attention_engine_for(const AttentionParams& p, const RunOptions& options, const char** name);

// Validation alone (the checks attention() starts with).
Status validate_attention(const AttentionParams& p);

}  // namespace groupattn
