// `groupattn bench --launch-cost`: the host time of one kernel launch in the forms the library uses,
// with empty kernels, so the launch stage of `--host-breakdown` (the sm90 decode's cluster launch,
// 4.2-4.7 us on the H200 host) can be taken apart: a plain launch, the decode's parameter block
// (KernelParams + two 128-byte tensor maps), cudaLaunchKernelEx without and with the cluster
// attribute and the decode's solo shared-memory request, and the same cluster launch through the
// driver's cuLaunchKernelEx on a CUfunction fetched once (no runtime lookup per launch). Each form
// is launched once per round, the forms in turn (so a host transient hits every form alike); the
// median of the per-launch host times is printed. docs/HOST_COST.md, "Session 12", says what each
// line should be and what a difference would justify.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attention/engines/cuda/kernel_params.h"
#include "cli_device.h"

namespace groupattn::cli {
namespace {

__global__ void launch_cost_small_kernel(int x) { (void)x; }

// The sm90 decode kernel's parameter list (sm90_decode_kernel in decode_kernel.cuh), empty body.
__global__ void launch_cost_decode_sized_kernel(const cuda_engine::KernelParams p, const __grid_constant__ CUtensorMap a,
                                                const __grid_constant__ CUtensorMap b) {
  (void)p;
  (void)a;
  (void)b;
}

// The decode's cluster launch of the issue's call (64/8 heads, B 1, 8 splits): 64 CTAs of 128 threads
// in clusters of 8, 114 KiB of dynamic shared memory (decode_kernel.cuh kSoloSmemBytes).
constexpr unsigned kGrid = 64, kThreads = 128, kCluster = 8;
constexpr size_t kSoloSmem = 114 * 1024;

Status cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorName(e)};
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

}  // namespace

Status print_launch_cost(int64_t launches, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  GA_RETURN_IF_ERROR(cuda_ok(cudaFuncSetAttribute(launch_cost_decode_sized_kernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(kSoloSmem)),
                             "cudaFuncSetAttribute"));
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  GA_RETURN_IF_ERROR(cuda_ok(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault,
                                                              &found),
                             "cudaGetDriverEntryPointByVersion(cuLaunchKernelEx)"));
  if (entry == nullptr || found != cudaDriverEntryPointSuccess) {
    return {StatusCode::kCudaError, "cuLaunchKernelEx not found"};
  }
  const auto launch_ex = reinterpret_cast<LaunchExFn>(entry);
  cudaFunction_t function = nullptr;
  GA_RETURN_IF_ERROR(cuda_ok(cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(
                                                                 &launch_cost_decode_sized_kernel)),
                             "cudaGetFuncBySymbol"));

  cuda_engine::KernelParams params{};
  CUtensorMap map_a{}, map_b{};
  void* args[] = {&params, &map_a, &map_b};

  cudaLaunchConfig_t plain_ex = {};
  plain_ex.gridDim = dim3(kGrid);
  plain_ex.blockDim = dim3(kThreads);
  plain_ex.stream = stream;
  cudaLaunchAttribute cluster_attr = {};
  cluster_attr.id = cudaLaunchAttributeClusterDimension;
  cluster_attr.val.clusterDim.x = kCluster;
  cluster_attr.val.clusterDim.y = 1;
  cluster_attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cluster_ex = plain_ex;
  cluster_ex.attrs = &cluster_attr;
  cluster_ex.numAttrs = 1;
  cudaLaunchConfig_t cluster_smem_ex = cluster_ex;
  cluster_smem_ex.dynamicSmemBytes = kSoloSmem;

  CUlaunchAttribute drv_attr = {};
  drv_attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  drv_attr.value.clusterDim.x = kCluster;
  drv_attr.value.clusterDim.y = 1;
  drv_attr.value.clusterDim.z = 1;
  CUlaunchConfig drv = {};
  drv.gridDimX = kGrid;
  drv.gridDimY = drv.gridDimZ = 1;
  drv.blockDimX = kThreads;
  drv.blockDimY = drv.blockDimZ = 1;
  drv.sharedMemBytes = static_cast<unsigned>(kSoloSmem);
  drv.hStream = reinterpret_cast<CUstream>(stream);
  drv.attrs = &drv_attr;
  drv.numAttrs = 1;

  struct Form {
    const char* name;
    std::vector<double> us;
  };
  Form forms[] = {
      {"<<<1, 128>>>, one int parameter", {}},
      {"<<<64, 128>>>, the decode's parameters (KernelParams + 2 tensor maps)", {}},
      {"cudaLaunchKernelEx, decode's parameters, no attribute", {}},
      {"cudaLaunchKernelEx, + cluster of 8", {}},
      {"cudaLaunchKernelEx, + cluster of 8, 114 KiB dynamic smem (the decode's launch)", {}},
      {"cuLaunchKernelEx (driver, CUfunction fetched once), the same launch", {}},
  };
  constexpr int kForms = sizeof(forms) / sizeof(forms[0]);
  auto launch = [&](int f) -> Status {
    switch (f) {
      case 0:
        launch_cost_small_kernel<<<1, kThreads, 0, stream>>>(0);
        return cuda_ok(cudaGetLastError(), "launch_cost_small_kernel");
      case 1:
        launch_cost_decode_sized_kernel<<<kGrid, kThreads, 0, stream>>>(params, map_a, map_b);
        return cuda_ok(cudaGetLastError(), "launch_cost_decode_sized_kernel");
      case 2:
        return cuda_ok(cudaLaunchKernelEx(&plain_ex, launch_cost_decode_sized_kernel, params, map_a, map_b),
                       "cudaLaunchKernelEx");
      case 3:
        return cuda_ok(cudaLaunchKernelEx(&cluster_ex, launch_cost_decode_sized_kernel, params, map_a, map_b),
                       "cudaLaunchKernelEx (cluster)");
      case 4:
        return cuda_ok(cudaLaunchKernelEx(&cluster_smem_ex, launch_cost_decode_sized_kernel, params, map_a, map_b),
                       "cudaLaunchKernelEx (cluster, smem)");
      default: {
        const CUresult r = launch_ex(&drv, reinterpret_cast<CUfunction>(function), args, nullptr);
        if (r == CUDA_SUCCESS) return Status::Ok();
        return {StatusCode::kCudaError, "cuLaunchKernelEx: CUresult " + std::to_string(static_cast<int>(r))};
      }
    }
  };
  // Warm-up (module load, first-launch work), then the timed rounds; a synchronize every 4 rounds
  // keeps the queue short (<= 24 launches), as the enqueue loops elsewhere do.
  for (int i = 0; i < 20; ++i) {
    for (int f = 0; f < kForms; ++f) GA_RETURN_IF_ERROR(launch(f));
  }
  GA_RETURN_IF_ERROR(cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  for (int64_t i = 0; i < launches; ++i) {
    for (int f = 0; f < kForms; ++f) {
      const int64_t t0 = now_ns();
      const Status s = launch(f);
      const int64_t t1 = now_ns();
      GA_RETURN_IF_ERROR(s);
      forms[f].us.push_back(static_cast<double>(t1 - t0) / 1e3);
    }
    if (i % 4 == 3) GA_RETURN_IF_ERROR(cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  }
  GA_RETURN_IF_ERROR(cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  std::printf("  launch cost (--launch-cost): median host us per launch of an empty kernel, %lld launches per form, "
              "the forms in turn\n",
              static_cast<long long>(launches));
  for (const Form& f : forms) std::printf("    %-82s %7.2f\n", f.name, median_us(f.us));
  return Status::Ok();
}

}  // namespace groupattn::cli
