// Host-side filling of KernelParams shared by the CUDA attention engines (cuda, sm90): the fields
// that follow from AttentionParams alone, and the split-KV workspace layout the combine kernel
// reads. One definition, so an engine that reuses the combine kernel cannot disagree with it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"
#include "groupattn/attention.h"

namespace groupattn::cuda_engine {

// Tensors, strides, index tensors, batch / sequence / head counts, scale (default 1/sqrt(D)),
// softcap, causal, and windows clamped to 2^31 (positions fit in int32, so such a window already
// sees every key, and pos +- window cannot overflow int64). Tiling (m_blocks, num_splits) and the
// split workspace are the engine's.
KernelParams kernel_params_from(const AttentionParams& p);

// Split-KV workspace: o_partial fp32 [S, total_q, Hq, Dv], then lse_partial fp32 [S, total_q, Hq],
// each starting on a 256-byte boundary.
size_t split_workspace_bytes(int splits, int64_t total_q, int64_t heads_q, int64_t head_dim_v);
// Points kp's partial buffers into `workspace` (laid out as above, for kp->num_splits splits) and
// sets the strides the combine kernel reads them with.
void set_split_workspace(KernelParams* kp, void* workspace, int64_t total_q, int64_t head_dim_v);

// Work-list workspace (decode_work_list.h; both decode engines): the split partials of `slots`
// slots of max_q x Hq rows (the layout above with total_q = max_q), then at a 256-byte boundary the
// per-sequence {split count, first slot} (int32 [batch][2]) the combine reads.
size_t list_partials_bytes(int64_t slots, int64_t max_q, int64_t heads_q, int64_t head_dim_v);
size_t list_workspace_bytes(int64_t slots, int64_t batch, int64_t max_q, int64_t heads_q, int64_t head_dim_v);

}  // namespace groupattn::cuda_engine
