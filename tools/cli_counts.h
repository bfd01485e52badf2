// Exact FLOP and byte counts for `groupattn bench`: the C++ counterpart of bench/counts.py, with the
// same rules (tests/cpu/cli_counts_test.cpp checks them against hand-computed values).
//
// Masking (include/groupattn/attention.h): query i of a sequence with Sq queries and Sk keys sits at
// key position pos = Sk - Sq + i (bottom-right alignment) and sees key j when (!causal || j <= pos)
// && (wl < 0 || j >= pos - wl) && (wr < 0 || j <= pos + wr).
// FLOPs: 2 * (D + Dv) per visible (query, key) pair and query head; masked pairs and softmax are
// not counted. Bytes: Q, O, LSE once, and each K/V row some query of the sequence sees once per KV
// head; paged K/V: every page holding a visible key is read whole. Index tensors are not counted.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace groupattn::cli {

// (query, key) pairs one sequence evaluates under the mask.
int64_t visible_pairs(int64_t sq, int64_t sk, bool causal = false, int64_t wl = -1, int64_t wr = -1);
// [lo, hi) of the keys at least one query sees; (0, 0) when none.
std::pair<int64_t, int64_t> visible_key_span(int64_t sq, int64_t sk, bool causal = false, int64_t wl = -1,
                                             int64_t wr = -1);

struct AttnCountProblem {
  std::vector<int64_t> seqlens_q, seqlens_k;  // one entry per sequence
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;  // head_dim_v 0 = head_dim
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int64_t elem_bytes = 2;     // Q/K/V/O element size
  int64_t kv_elem_bytes = 0;  // K/V element size when it differs (1: an fp8 cache); 0 = elem_bytes
  int64_t page_size = 0;   // 0 = contiguous K/V
  bool lse = true;
};

// B copies of (sq, sk).
AttnCountProblem batched_problem(int64_t batch, int64_t sq, int64_t sk, int64_t heads_q, int64_t heads_kv,
                                 int64_t head_dim);

int64_t attention_flops(const AttnCountProblem& p);
// K rows read per KV head, summed over sequences (pages read whole when paged).
int64_t keys_read(const AttnCountProblem& p);

struct AttnBytes {
  int64_t q = 0, k = 0, v = 0, o = 0, lse = 0, total = 0;
};
AttnBytes attention_bytes(const AttnCountProblem& p);

// Minimum traffic of one KDA call (bench/counts.py kda_bytes): q, k [T, H, K] and v, o [T, HV, V]
// in the element size; g fp32 [T, HV, K]; beta fp32 [T, HV]; fp32 states [N, HV, K, V] read and/or
// written once; A_log [HV] and dt_bias [HV, K] fp32 when the gate is computed in the kernel.
int64_t kda_bytes(int64_t total_t, int64_t heads, int64_t heads_v, int64_t k, int64_t v, int64_t num_seqs,
                  int64_t elem_bytes, bool initial_state, bool final_state, bool in_kernel_gate_params);

}  // namespace groupattn::cli
