// Host-side filling of KernelParams shared by the CUDA attention engines (cuda, sm90): the fields
// that follow from AttentionParams alone, and the split-KV workspace layout the combine kernel
// reads. One definition, so an engine that reuses the combine kernel cannot disagree with it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/cuda/split_workspace.h"
#include "groupattn/attention.h"

namespace groupattn::cuda_engine {

// Tensors, strides, index tensors, batch / sequence / head counts, scale (default 1/sqrt(D)),
// softcap, causal, and windows clamped to 2^31 (positions fit in int32, so such a window already
// sees every key, and pos +- window cannot overflow int64). Tiling (m_blocks, num_splits) and the
// split workspace are the engine's.
KernelParams kernel_params_from(const AttentionParams& p);

// The split-KV workspace layout (split_workspace_bytes, set_split_workspace): split_workspace.h;
// the work list's (list_partials_bytes, list_workspace_bytes, both decode engines): decode_work_list.h.

}  // namespace groupattn::cuda_engine
