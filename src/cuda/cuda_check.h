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

// The launch error of the kernel launched just before (configuration errors show up here). The
// message is built only on failure: this runs after every launch.
inline Status last_launch_status(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return to_status(e, (std::string("launching ") + kernel).c_str());
}

// Devices (bit d = device d, 0..63) on which kKernel's max-dynamic-shared-memory attribute is set.
// A variable template keyed by the kernel's address, so every kernel instantiation has its own
// (a flag keyed by the kernel's *type* is shared by all instantiations of one __global__ template:
// docs/DECODE_SM90.md section 4 has the failure that caused).
template <auto kKernel>
inline std::atomic<uint64_t> smem_attribute_devices{0};

// cudaFuncSetAttribute(kKernel, MaxDynamicSharedMemorySize, bytes) once per device and kernel
// instead of before every launch (it takes a driver lock and costs host time on every decode step):
// the attribute stays with the kernel in the device's primary context. `bytes` must be the same on
// every call for one kernel (callers pass their traits' constant). Two threads racing on the first
// launch both set it, which is harmless; a device past 63 sets it on every launch (correct, slower).
// Not kept across cudaDeviceReset (which the library never calls): a caller that resets a device
// must not launch groupattn kernels again in that process.
//
// set_max_dynamic_smem_once_on takes the current device's ordinal from a caller that already asked
// for it on this call (cuda_current_device): no runtime query at all once the attribute is set.
// `dev` must be the calling thread's current device (the attribute is set in its context).
template <auto kKernel>
Status set_max_dynamic_smem_once_on(int dev, int bytes) {
  const uint64_t bit = dev >= 0 && dev < 64 ? (uint64_t{1} << dev) : 0;
  std::atomic<uint64_t>& done = smem_attribute_devices<kKernel>;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return Status::Ok();
  if (const cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    return to_status(e, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  done.fetch_or(bit, std::memory_order_release);
  return Status::Ok();
}

template <auto kKernel>
Status set_max_dynamic_smem_once(int bytes) {
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return to_status(e, "cudaGetDevice");
  return set_max_dynamic_smem_once_on<kKernel>(dev, bytes);
}

// cudaDevAttrMaxSharedMemoryPerBlockOptin of the current device: one cudaGetDevice per ask, the
// attribute itself asked once per device (0..63; a device's attribute cannot change while the
// process runs) instead of on every call of the planners that need it (the cuda engine's decode
// kernel fit, the D 256 paired-P-V prefill tile). 0, the error cleared, if either query fails (nothing cached).
inline int current_device_smem_optin() {
  // Per device: the attribute + 1; 0 = not asked yet.
  static std::atomic<int> optin_plus1[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const bool cached = dev >= 0 && dev < 64;
  if (cached) {
    if (const int v = optin_plus1[dev].load(std::memory_order_relaxed); v > 0) return v - 1;
  }
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (cached && optin >= 0) optin_plus1[dev].store(optin + 1, std::memory_order_relaxed);
  return optin;
}

}  // namespace groupattn::cuda

// Propagate a failing CUDA call as a Status naming the call.
#define GA_CUDA_RETURN_IF_ERROR(call) GA_RETURN_IF_ERROR(::groupattn::cuda::to_status((call), #call))
