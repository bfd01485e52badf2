#include "core/cuda_runtime_shim.h"

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

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

Status cuda_device_properties(int* sm_count, int* compute_capability) {
  int dev = 0, major = 0, minor = 0;
  GA_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute"));
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute"));
  GA_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute"));
  *compute_capability = major * 10 + minor;
  return Status::Ok();
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
