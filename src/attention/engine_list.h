// The attention op's engines, in selection order (fastest first, the reference last).
#pragma once

#include <vector>

#include "core/engine.h"
#include "groupattn/attention.h"

namespace groupattn {

using AttentionEngine = Engine<AttentionParams>;

const std::vector<const AttentionEngine*>& attention_engines();

const AttentionEngine& attention_reference_engine();  // reference.cpp
#if GROUPATTN_WITH_CUDA
const AttentionEngine& attention_cuda_engine();  // engines/cuda/ (portable sm80+)
// engines/cuda/: cuda with every problem on the tile kernel, or on the decode kernel (tests, benchmarks)
const AttentionEngine& attention_cuda_tile_engine();
const AttentionEngine& attention_cuda_decode_engine();
const AttentionEngine& attention_sm90_engine();  // engines/sm90/ (Hopper decode)
// engines/sm90/: sm90's packed-rows multi-token form for every group (pinned by tests and benchmarks)
const AttentionEngine& attention_sm90_rows_engine();
// engines/sm90/: sm90 with split-KV always through the workspace, never a cluster (tests, benchmarks)
const AttentionEngine& attention_sm90_split_engine();
const AttentionEngine& attention_sm90_prefill_engine();  // engines/sm90/ (Hopper prefill, experimental)
#endif

}  // namespace groupattn
