// Programmatic dependent launch (PDL, sm90+): a secondary kernel may start while the primary
// drains; it must call wait_for_primary() before reading anything the primary writes. On older
// GPUs both device calls compile to nothing and the launch is an ordinary stream-ordered one.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"

namespace groupattn::cuda {

// Primary side: from here on the dependent grid may be scheduled (its wait still sees all of
// this grid's writes, since griddepcontrol.wait waits for the primary grid to complete).
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Secondary side: block until the primary grid has completed and its writes are visible.
__device__ __forceinline__ void wait_for_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches `kernel` on `stream`, as a programmatic dependent of the previous kernel in the
// stream when `use_pdl` (the caller passes compute capability >= 90).
template <class... KernelArgs, class... Args>
Status launch_maybe_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, bool use_pdl, const char* name, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = use_pdl ? 1 : 0;
  return to_status(cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...), name);
}

}  // namespace groupattn::cuda
