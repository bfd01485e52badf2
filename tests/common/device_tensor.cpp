#include "common/device_tensor.h"

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace groupattn::test {

namespace {
constexpr int64_t kGuardBytes = 512;  // a multiple of 256 keeps the span as aligned as cudaMalloc's
constexpr unsigned char kGuardByte = 0x5A;
constexpr unsigned char kPoisonByte = 0xFF;
}  // namespace

void cuda_check(int error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(error)));
  }
}

bool have_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

DeviceTensor::DeviceTensor(const HostTensor& host) {
  view_ = host.view();
  span_bytes_ = std::max<int64_t>(view_.span_bytes(), static_cast<int64_t>(dtype_size(view_.dtype)));
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, static_cast<size_t>(span_bytes_ + 2 * kGuardBytes)), "cudaMalloc");
  base_ = static_cast<unsigned char*>(p);
  cuda_check(cudaMemset(base_, kGuardByte, static_cast<size_t>(span_bytes_ + 2 * kGuardBytes)), "cudaMemset");
  cuda_check(cudaMemcpy(base_ + kGuardBytes, host.view().data, static_cast<size_t>(span_bytes_),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy H2D");
  view_.data = base_ + kGuardBytes;
  view_.device = Device::kCUDA;
  view_.device_id = 0;
}

DeviceTensor::~DeviceTensor() { release(); }

void DeviceTensor::release() {
  if (base_ != nullptr) (void)cudaFree(base_);
  base_ = nullptr;
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept { *this = std::move(other); }

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    span_bytes_ = other.span_bytes_;
    view_ = other.view_;
  }
  return *this;
}

void DeviceTensor::poison() {
  cuda_check(cudaMemset(base_ + kGuardBytes, kPoisonByte, static_cast<size_t>(span_bytes_)),
             "cudaMemset poison");
}

void DeviceTensor::download(HostTensor* host) const {
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuda_check(cudaMemcpy(host->view().data, base_ + kGuardBytes, static_cast<size_t>(span_bytes_),
                        cudaMemcpyDeviceToHost),
             "cudaMemcpy D2H");
}

bool DeviceTensor::guards_intact() const {
  std::vector<unsigned char> guard(static_cast<size_t>(kGuardBytes));
  for (const unsigned char* g : {base_, base_ + kGuardBytes + span_bytes_}) {
    cuda_check(cudaMemcpy(guard.data(), g, guard.size(), cudaMemcpyDeviceToHost), "cudaMemcpy guard");
    for (unsigned char c : guard) {
      if (c != kGuardByte) return false;
    }
  }
  return true;
}

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
