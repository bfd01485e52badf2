// attention_merge on the device: the split-KV combine kernel over caller-provided partials.
// Plain C++ signature (no CUDA types) so merge.cpp compiles with the host compiler.
#pragma once

#include "groupattn/context_parallel.h"

namespace groupattn::cuda_engine {

// `p` is validated and every tensor is device-resident. Launches one kernel on `stream`.
Status merge_on_device(const MergeParams& p, void* stream);

}  // namespace groupattn::cuda_engine
