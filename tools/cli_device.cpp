#include "cli_device.h"

#include "core/dtype.h"

#if GROUPATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace groupattn::cli {

#if GROUPATTN_WITH_CUDA
namespace {
Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)};
}
}  // namespace

DeviceMirror::~DeviceMirror() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

Status DeviceMirror::upload(const test::HostTensor& host) {
  view_ = host.view();
  if (!host.defined()) return Status::Ok();
  bytes_ = static_cast<size_t>(std::max<int64_t>(view_.span_bytes(), static_cast<int64_t>(dtype_size(view_.dtype))));
  GA_RETURN_IF_ERROR(check(cudaMalloc(&ptr_, bytes_), "cudaMalloc"));
  GA_RETURN_IF_ERROR(check(cudaMemcpy(ptr_, view_.data, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device"));
  view_.data = ptr_;
  view_.device = Device::kCUDA;
  return Status::Ok();
}

Status DeviceMirror::download(test::HostTensor* host) const {
  if (ptr_ == nullptr) return Status::Ok();
  return check(cudaMemcpy(host->view().data, ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

Status device_synchronize() { return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

DeviceTimer::DeviceTimer() {
  cudaEvent_t a, b;
  (void)cudaEventCreate(&a);
  (void)cudaEventCreate(&b);
  begin_ = a;
  end_ = b;
}
DeviceTimer::~DeviceTimer() {
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(begin_));
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(end_));
}
void DeviceTimer::start() { (void)cudaEventRecord(static_cast<cudaEvent_t>(begin_)); }
Status DeviceTimer::stop(double* ms) {
  GA_RETURN_IF_ERROR(check(cudaEventRecord(static_cast<cudaEvent_t>(end_)), "cudaEventRecord"));
  GA_RETURN_IF_ERROR(check(cudaEventSynchronize(static_cast<cudaEvent_t>(end_)), "cudaEventSynchronize"));
  float f = 0;
  GA_RETURN_IF_ERROR(check(cudaEventElapsedTime(&f, static_cast<cudaEvent_t>(begin_), static_cast<cudaEvent_t>(end_)),
                           "cudaEventElapsedTime"));
  *ms = f;
  return Status::Ok();
}

#else  // CPU-only build: the CLI never asks for device mirrors (no GPU engine exists).

DeviceMirror::~DeviceMirror() = default;
Status DeviceMirror::upload(const test::HostTensor& host) {
  view_ = host.view();
  return host.defined() ? NotSupported("CPU-only build: no device memory") : Status::Ok();
}
Status DeviceMirror::download(test::HostTensor*) const { return Status::Ok(); }
Status device_synchronize() { return Status::Ok(); }
Status device_fill_random(void*, DType, int64_t, uint64_t, bool, double, double, void*) {
  return NotSupported("CPU-only build: no device memory");
}
DeviceTimer::DeviceTimer() = default;
DeviceTimer::~DeviceTimer() = default;
void DeviceTimer::start() {}
Status DeviceTimer::stop(double* ms) {
  *ms = 0;
  return NotSupported("CPU-only build: no device timer");
}

#endif

}  // namespace groupattn::cli
