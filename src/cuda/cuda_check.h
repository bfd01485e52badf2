// CUDA error -> Status, for library code that calls the runtime (never exits, never prints).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "groupattn/status.h"

namespace groupattn::cuda {

inline Status to_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  const StatusCode code = e == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kCudaError;
  return {code, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

// The launch error of the kernel launched just before (configuration errors show up here).
inline Status last_launch_status(const char* kernel) {
  return to_status(cudaGetLastError(), (std::string("launching ") + kernel).c_str());
}

}  // namespace groupattn::cuda

// Propagate a failing CUDA call as a Status naming the call.
#define GA_CUDA_RETURN_IF_ERROR(call) GA_RETURN_IF_ERROR(::groupattn::cuda::to_status((call), #call))
