// CUDA error -> Status, for library code that calls the runtime (never exits, never prints).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
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

// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) once per device and kernel,
// not before every launch: the attribute sticks to the kernel on a device, and the call costs
// host time on every decode step otherwise. `done` is the calling kernel's own bitmask over
// devices 0..63: a static defined inside the launch function template that launches `kernel`, so
// each instantiation has its own. (Not a static in here: this template is keyed by the kernel's
// type, which every instantiation of one kernel template shares -- the H200 run at 67d3ef3 showed
// that mistake as "invalid argument" launches of every column tile but the first.) A device past 63
// sets the attribute every time (correct, just slower); two threads racing on the first call both
// set it, which is harmless.
template <class Kernel>
Status set_max_dynamic_smem_once(Kernel* kernel, int bytes, std::atomic<uint64_t>& done) {
  int dev = 0;
  GA_RETURN_IF_ERROR(to_status(cudaGetDevice(&dev), "cudaGetDevice"));
  const uint64_t bit = dev < 64 ? (uint64_t{1} << dev) : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return Status::Ok();
  GA_RETURN_IF_ERROR(to_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                               "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)"));
  done.fetch_or(bit, std::memory_order_release);
  return Status::Ok();
}

}  // namespace groupattn::cuda

// Propagate a failing CUDA call as a Status naming the call.
#define GA_CUDA_RETURN_IF_ERROR(call) GA_RETURN_IF_ERROR(::groupattn::cuda::to_status((call), #call))
