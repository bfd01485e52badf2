// The split combine of the sm90 decode engine: the portable engine's combine kernels (they read the
// partials through p's part_* strides; combine_wide_kernel above 16 splits), launched as a
// programmatic dependent launch after the decode kernel that wrote them. Shared by both decode forms: the swapped kernel
// (decode_kernel.cuh) and the packed-rows multi-token kernel (prefill_kernel.cuh, kPackedDecode).
#pragma once

#include <cuda_runtime.h>

#include "attention/engines/cuda/combine_kernel.cuh"
#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/kernel_params.h"
#include "attention/engines/sm90/decode_split_plan.h"
#include "cuda/pdl.cuh"
#include "groupattn/status.h"

namespace groupattn::sm90_engine {

static_assert(!cuda_engine::use_wide_combine(cuda_engine::kListMaxSplits),
              "work-list rows take the one-warp combine");
static_assert(kCombineSplitBatch == cuda_engine::kSplitBatch && kCombineWideWarps == cuda_engine::kWideWarps &&
                  kCombineWideMinSplits == cuda_engine::kWideMinSplits,
              "the split planner's combine cost counts the combine kernels' batches (decode_split_plan.h)");

// p.num_splits > 1: merges the partials of every (query token, query head) row into out / lse.
// In the work-list mode (p.seq_splits) a row has at most kListMaxSplits splits, so the combine
// kernel is chosen by that bound (the one-warp kernel), never by the data.
template <class T, int kHeadDim>
Status launch_split_combine(const cuda_engine::KernelParams& p, cudaStream_t stream) {
  if (p.seq_splits != nullptr) {
    cuda_engine::KernelParams q = p;
    q.num_splits = cuda_engine::kListMaxSplits;
    return cuda_engine::launch_combine<T, kHeadDim>(q, stream, /*use_pdl=*/true);
  }
  return cuda_engine::launch_combine<T, kHeadDim>(p, stream, /*use_pdl=*/true);  // D == Dv
}

}  // namespace groupattn::sm90_engine
