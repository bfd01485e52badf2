#include "core/cuda_runtime_shim.h"

#include <atomic>
#include <cstdint>
#include <string>

#if GROUPATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "groupattn/engines.h"

namespace groupattn {

#if GROUPATTN_WITH_CUDA

namespace {
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  const StatusCode code = e == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kCudaError;
  return {code, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}
}  // namespace

bool cuda_compiled() { return true; }

// Both queries run on every engine selection (available(), workspace_bytes(), run()), i.e. several
// times per decode step: answer them from a cache. The device count cannot change while a process
// runs; a device's SM count and compute capability cannot either.
int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return n;
  }();
  return count;
}

Status cuda_current_device(int* device, int* sm_count, int* compute_capability) {
  constexpr int kCached = 64;
  // Per device: (sm_count << 16) | compute capability; 0 = not queried yet.
  static std::atomic<uint32_t> cache[kCached] = {};
  int dev = 0;
  GA_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  *device = dev;
  if (dev >= 0 && dev < kCached) {
    if (const uint32_t v = cache[dev].load(std::memory_order_relaxed); v != 0) {
      *sm_count = static_cast<int>(v >> 16);
      *compute_capability = static_cast<int>(v & 0xffffu);
      return Status::Ok();
    }
  }
  int sms = 0, major = 0, minor = 0;
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute"));
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute"));
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute"));
  *sm_count = sms;
  *compute_capability = major * 10 + minor;
  if (dev >= 0 && dev < kCached && sms > 0 && sms < 0x10000) {
    cache[dev].store((static_cast<uint32_t>(sms) << 16) | static_cast<uint32_t>(*compute_capability),
                     std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status cuda_device_properties(int* sm_count, int* compute_capability) {
  int dev = 0;
  return cuda_current_device(&dev, sm_count, compute_capability);
}

Status copy_device_to_host(void* dst, const void* src, size_t bytes, const char* what) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
                     (std::string("reading ") + what + " from the device").c_str());
}

Status allocate_workspace(size_t bytes, void* stream, void** out) {
  const cudaError_t e = cudaMallocAsync(out, bytes, static_cast<cudaStream_t>(stream));
  // A failed allocation is not sticky, but the runtime keeps it as the thread's last error: clear
  // it, or the next launch check (ours or the caller's) would report it as its own failure.
  if (e != cudaSuccess) (void)cudaGetLastError();
  return cuda_status(e, ("allocating " + std::to_string(bytes) + " bytes of workspace").c_str());
}

Status free_workspace(void* ptr, void* stream) {
  return cuda_status(cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)), "freeing workspace");
}

#else  // CPU-only build

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
Status cuda_device_properties(int*, int*) {
  return NotSupported("this build of groupattn has no CUDA support");
}
Status cuda_current_device(int*, int*, int*) {
  return NotSupported("this build of groupattn has no CUDA support");
}
Status copy_device_to_host(void*, const void*, size_t, const char* what) {
  return NotSupported(std::string(what) + ": device memory given to a CPU-only build of groupattn");
}
Status allocate_workspace(size_t, void*, void**) {
  return NotSupported("workspace allocation needs CUDA; this build of groupattn has none");
}
Status free_workspace(void*, void*) { return Status::Ok(); }

#endif

bool cuda_device_available() { return cuda_device_count() > 0; }

}  // namespace groupattn
