// Context parallelism: one sequence's keys sharded across calls (or ranks), each computing the
// attention over its shard in partial-output mode (AttentionParams::kv_shard_offset /
// kv_total_len, attention.h), and the merge of those partial (O, LSE) pairs into the whole result.
//
//   attention_merge           the merge alone, host (fp64 math) or device (the cuda engine's
//                             split-KV combine kernel, generalised to strided partials)
//   context_parallel_attention  partial attention on this rank + NCCL all-gather of the partials +
//                             attention_merge; in the separate library groupattn_cp (needs NCCL)
//
// Merge math (the split-KV combine): per (query row, head), m = max over the partials' LSEs;
// partials with LSE = -inf are skipped; LSE = m + log(sum_r exp(lse_r - m)),
// O = sum_r exp(lse_r - LSE) O_r; a row that is -inf in every partial gets O = 0, LSE = -inf.
// The partials are visited in index order, so the result is deterministic and the same on every
// rank that merges the same partials.
#pragma once

#include <cstddef>

#include "groupattn/attention.h"
#include "groupattn/run_options.h"
#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn {

struct MergeParams {
  // R partials stacked on a leading dim (what an all-gather produces):
  TensorView o_partials;    // [R, total_q, Hq, Dv], fp32 or out's dtype
  TensorView lse_partials;  // fp32 [R, Hq, total_q], natural log, -inf = no key in that partial
  // The merged result: out varlen-style [total_q, Hq, Dv] or batched [B, Sq, Hq, Dv] (row b * Sq + i),
  // bf16/f16/fp32 (device: bf16/f16, Dv in 32/64/128/256); lse fp32 [Hq, total_q], optional.
  TensorView out;
  TensorView lse;
};

// Validates (named InvalidArgument errors, nothing written) and merges. All tensors on the host
// (fp64 math) or all on one CUDA device (a kernel on options.stream, no workspace, no sync).
Status attention_merge(const MergeParams& p, const RunOptions& options = {});
Status validate_attention_merge(const MergeParams& p);

// Context-parallel attention over an NCCL communicator (library groupattn_cp; link it and NCCL).
//
// `local_shard` is this rank's problem in partial-output mode: the whole Q (identical on every
// rank), this rank's K/V shard, kv_shard_offset / kv_total_len for it, and the final out / lse
// (optional) to write. `nccl_comm` is an ncclComm_t passed as void* (so this header needs no NCCL
// include) whose ranks each hold one shard; every rank calls this with the same Q shapes. Device
// tensors only; everything is stream-ordered on options.stream (no host sync, no process-wide
// buffers). Scratch comes from options.workspace when it holds context_parallel_workspace_bytes(),
// else it is allocated stream-ordered for the call.
//
// Exchange: one all-gather of each rank's partial O (in Q's dtype) and LSE (fp32), then every rank
// merges the R partials itself in rank order (docs/CONTEXT_PARALLEL.md says why not reduce-scatter).
Status context_parallel_attention(const AttentionParams& local_shard, void* nccl_comm,
                                  const RunOptions& options = {});
Status context_parallel_workspace_bytes(const AttentionParams& local_shard, void* nccl_comm,
                                        const RunOptions& options, size_t* bytes);

}  // namespace groupattn
