// A kernel launch through the driver's cuLaunchKernelEx on a CUfunction fetched once per kernel and
// device (issue 11: the host cost of a small call). cudaLaunchKernelEx looks the kernel's CUfunction
// up in the runtime's tables and translates the launch config on every call before it reaches the
// same driver entry; this form does the lookup once. cuLaunchKernelEx is fetched through the runtime
// (cudaGetDriverEntryPointByVersion), as tma_desc.h fetches cuTensorMapEncodeTiled: no -lcuda.
//
// The cached CUfunction belongs to the context that was current at the first launch on that device:
// the device's primary context, which the runtime (and torch) use. A caller that launches under
// another driver context must use the runtime form (GROUPATTN_SM90_DECODE_DRIVER_LAUNCH=0). A switch
// chooses this form (sm90_engine::decode_driver_launch), on by default since session 12.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "cuda/cuda_check.h"
#include "groupattn/status.h"

namespace groupattn::cuda {

using LaunchKernelExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

// cuLaunchKernelEx (CUDA 12.0 ABI), or nullptr where the driver does not have it.
inline LaunchKernelExFn driver_launch_kernel_ex() {
  static const LaunchKernelExFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<LaunchKernelExFn>(nullptr);
    }
    return reinterpret_cast<LaunchKernelExFn>(f);
  }();
  return fn;
}

// kKernel's CUfunction per device (0..63; nullptr: not fetched yet). A variable template keyed by the
// kernel's address, one per instantiation (as smem_attribute_devices in cuda_check.h). Two threads
// fetching at once store the same handle.
template <auto kKernel>
inline std::atomic<CUfunction> driver_functions[64] = {};

// kKernel's CUfunction on device `dev`, the calling thread's current device.
template <auto kKernel>
Status driver_function(int dev, CUfunction* f) {
  if (dev < 0 || dev >= 64) return Status(StatusCode::kInternal, "driver launch: device ordinal out of range");
  std::atomic<CUfunction>& slot = driver_functions<kKernel>[dev];
  *f = slot.load(std::memory_order_acquire);
  if (*f != nullptr) return Status::Ok();
  cudaFunction_t fetched = nullptr;
  if (const cudaError_t e = cudaGetFuncBySymbol(&fetched, reinterpret_cast<const void*>(kKernel)); e != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("cudaGetFuncBySymbol: ") + cudaGetErrorName(e));
  }
  *f = reinterpret_cast<CUfunction>(fetched);
  slot.store(*f, std::memory_order_release);
  return Status::Ok();
}

// Launches kKernel on device `dev` (current) with `config`'s grid, block, dynamic shared memory and
// stream and at most one attribute, the cluster dimension (the only one the library's driver-form
// launches use); `args` as for cudaLaunchKernel (one pointer per kernel parameter).
template <auto kKernel>
Status launch_with_driver(int dev, const cudaLaunchConfig_t& config, void** args, const char* what) {
  const LaunchKernelExFn launch = driver_launch_kernel_ex();
  if (launch == nullptr) return Status(StatusCode::kCudaError, std::string(what) + ": cuLaunchKernelEx not found");
  if (config.numAttrs > 1 || (config.numAttrs == 1 && config.attrs[0].id != cudaLaunchAttributeClusterDimension)) {
    return Status(StatusCode::kInternal, std::string(what) + ": driver launch takes the cluster attribute only");
  }
  CUfunction f = nullptr;
  GA_RETURN_IF_ERROR(driver_function<kKernel>(dev, &f));
  CUlaunchAttribute attribute = {};
  CUlaunchConfig c = {};
  c.gridDimX = config.gridDim.x;
  c.gridDimY = config.gridDim.y;
  c.gridDimZ = config.gridDim.z;
  c.blockDimX = config.blockDim.x;
  c.blockDimY = config.blockDim.y;
  c.blockDimZ = config.blockDim.z;
  c.sharedMemBytes = static_cast<unsigned>(config.dynamicSmemBytes);
  c.hStream = reinterpret_cast<CUstream>(config.stream);
  if (config.numAttrs == 1) {
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = config.attrs[0].val.clusterDim.x;
    attribute.value.clusterDim.y = config.attrs[0].val.clusterDim.y;
    attribute.value.clusterDim.z = config.attrs[0].val.clusterDim.z;
    c.attrs = &attribute;
    c.numAttrs = 1;
  }
  const CUresult r = launch(&c, f, args, nullptr);
  if (r == CUDA_SUCCESS) return Status::Ok();
  const StatusCode code = r == CUDA_ERROR_OUT_OF_MEMORY ? StatusCode::kOutOfMemory : StatusCode::kCudaError;
  return Status(code, std::string(what) + ": cuLaunchKernelEx returned CUresult " + std::to_string(static_cast<int>(r)));
}

// A launch without attributes of kKernel(args...) on device `dev` (current): through the driver when
// `driver` (one lookup per kernel and device, as above), else the runtime's <<<>>> form. Either way
// the launch's status, named by `what`.
template <auto kKernel, class... Args>
Status launch_plain(bool driver, int dev, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char* what,
                    Args... args) {
  if (driver) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    void* packed[] = {static_cast<void*>(&args)...};
    return launch_with_driver<kKernel>(dev, config, packed, what);
  }
  kKernel<<<grid, block, smem, stream>>>(args...);
  return last_launch_status(what);
}

// A launch configuration of `grid` in clusters of (cluster_x, 1, 1); `attribute` must outlive it.
inline cudaLaunchConfig_t clustered_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int cluster_x,
                                           cudaLaunchAttribute* attribute) {
  *attribute = {};
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = static_cast<unsigned>(cluster_x);
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// Largest cluster size max_active_clusters caches (16: non-portable, allowed per kernel there).
inline constexpr int kMaxCachedClusterSize = 16;

// Per device (0..63), kernel, cluster size (0..16) and shared-memory request (the caller's first or
// second, e.g. the sm90 decode's own and its one-CTA-an-SM request): how many such clusters the
// device holds at once, plus one (0: not asked yet). A variable template keyed by the kernel's
// address, as smem_attribute_devices (one per instantiation).
template <auto kKernel>
inline std::atomic<int> active_clusters_plus1[64][kMaxCachedClusterSize + 1][2] = {};

// cudaOccupancyMaxActiveClusters for kKernel in clusters of (size, 1, 1) CTAs of `threads` threads
// requesting `smem_bytes` of dynamic shared memory (sizes above 8 first get
// cudaFuncAttributeNonPortableClusterSizeAllowed), asked once per device `dev` (the calling thread's
// current device, asked by the caller), size and `request` (0 or 1: which of the caller's two
// shared-memory requests smem_bytes is). The dynamic shared memory attribute must already allow
// smem_bytes. Sizes outside 2..16: 0 clusters. A failed query is returned, not cached.
template <auto kKernel>
Status max_active_clusters(int dev, int size, int threads, size_t smem_bytes, int request, int* clusters) {
  *clusters = 0;
  if (dev < 0 || dev >= 64 || size < 2 || size > kMaxCachedClusterSize || request < 0 || request > 1) {
    return Status::Ok();
  }
  std::atomic<int>& known = active_clusters_plus1<kKernel>[dev][size][request];
  if (const int k = known.load(std::memory_order_acquire); k > 0) {
    *clusters = k - 1;
    return Status::Ok();
  }
  if (size > 8) {
    GA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      clustered_config(dim3(static_cast<unsigned>(size)), dim3(static_cast<unsigned>(threads)), smem_bytes, nullptr,
                       size, &attribute);
  GA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveClusters(clusters, kKernel, &config));
  known.store(*clusters + 1, std::memory_order_release);
  return Status::Ok();
}

// kKernel(args...) in thread-block clusters of (cluster_x, 1, 1) on device `dev` (current): through
// the driver when `driver`, else cudaLaunchKernelEx.
template <auto kKernel, class... Args>
Status launch_clustered(bool driver, int dev, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int cluster_x,
                        const char* what, Args... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = clustered_config(grid, block, smem, stream, cluster_x, &attribute);
  if (driver) {
    void* packed[] = {static_cast<void*>(&args)...};
    return launch_with_driver<kKernel>(dev, config, packed, what);
  }
  return to_status(cudaLaunchKernelEx(&config, kKernel, args...), what);
}

}  // namespace groupattn::cuda
