// The split-KV workspace layout the combine kernel reads (host side, header only so that
// standalone drivers such as scripts/decode-phase-stamps.cu lay a workspace out exactly as the
// engines do without linking the library). host_params.h includes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"

namespace groupattn::cuda_engine {

inline constexpr size_t kSplitWorkspaceAlign = 256;

inline size_t split_workspace_align_up(size_t x) {
  return (x + kSplitWorkspaceAlign - 1) / kSplitWorkspaceAlign * kSplitWorkspaceAlign;
}

// Bytes of the O partials, fp32 [S, total_q, Hq, Dv], rounded up to the alignment.
inline size_t split_partial_o_bytes(int splits, int64_t total_q, int64_t heads_q, int64_t head_dim_v) {
  return split_workspace_align_up(static_cast<size_t>(splits) * total_q * heads_q * head_dim_v *
                                  sizeof(float));
}

// Split-KV workspace: o_partial fp32 [S, total_q, Hq, Dv], then lse_partial fp32 [S, total_q, Hq],
// each starting on a 256-byte boundary.
inline size_t split_workspace_bytes(int splits, int64_t total_q, int64_t heads_q, int64_t head_dim_v) {
  return split_partial_o_bytes(splits, total_q, heads_q, head_dim_v) +
         split_workspace_align_up(static_cast<size_t>(splits) * total_q * heads_q * sizeof(float));
}

// Points kp's partial buffers into `workspace` (laid out as above, for kp->num_splits splits) and
// sets the strides the combine kernel reads them with.
inline void set_split_workspace(KernelParams* kp, void* workspace, int64_t total_q, int64_t head_dim_v) {
  kp->partial_rows = total_q * kp->heads_q;
  kp->o_partial = static_cast<float*>(workspace);
  kp->lse_partial =
      reinterpret_cast<float*>(static_cast<char*>(workspace) +
                               split_partial_o_bytes(kp->num_splits, total_q, kp->heads_q, head_dim_v));
  // The combine kernel reads the tile kernel's layout: O [S, total_q, Hq, Dv], LSE [S, total_q, Hq].
  kp->o_partial_in = kp->o_partial;
  kp->part_o_split_stride = kp->partial_rows * head_dim_v;
  kp->part_o_row_stride = kp->heads_q * head_dim_v;
  kp->part_o_head_stride = head_dim_v;
  kp->part_lse_split_stride = kp->partial_rows;
  kp->part_lse_row_stride = kp->heads_q;
  kp->part_lse_head_stride = 1;
}

}  // namespace groupattn::cuda_engine
