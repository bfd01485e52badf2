// DeviceTensor: a device-memory mirror of a HostTensor (same shape and strides) for GPU tests,
// with guard bands around the tensor's span and NaN poisoning, so a test can prove an engine
// wrote every output element and nothing outside its tensor.
#pragma once

#if GROUPATTN_WITH_CUDA

#include <cstdint>

#include "common/host_tensor.h"
#include "groupattn/tensor.h"

namespace groupattn::test {

class DeviceTensor {
 public:
  DeviceTensor() = default;
  // Allocates a device buffer shaped like `host` and copies its span (gaps of a strided view too).
  explicit DeviceTensor(const HostTensor& host);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;

  const TensorView& view() const { return view_; }
  bool defined() const { return view_.defined(); }

  // Every byte of the span set to 0xFF: NaN in bf16, f16 and f32.
  void poison();
  // Copies the span back into `host` (which must have this tensor's shape and strides).
  void download(HostTensor* host) const;
  // The guard bands before and after the span still hold the pattern written at construction.
  bool guards_intact() const;

 private:
  void release();
  unsigned char* base_ = nullptr;  // guard | span | guard
  int64_t span_bytes_ = 0;
  TensorView view_;
};

// Throws (test-side only) when a CUDA runtime call fails, naming the call.
void cuda_check(int error, const char* what);
// True when a CUDA device is visible (GPU tests GTEST_SKIP otherwise).
bool have_cuda_device();

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
