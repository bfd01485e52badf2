// Device mirrors of host tensors for the CLI (CUDA builds): copy a HostTensor's whole span to
// device memory, hand out a TensorView with the same strides, copy results back.
#pragma once

#include <string>

#include "common/host_tensor.h"
#include "groupattn/status.h"

namespace groupattn::cli {

class DeviceMirror {
 public:
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror();

  // Allocates and uploads; an undefined host tensor gives an undefined view.
  Status upload(const test::HostTensor& host);
  Status download(test::HostTensor* host) const;
  const TensorView& view() const { return view_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  TensorView view_;
};


Status device_synchronize();

// Fills `n` contiguous elements (f32, f16 or bf16) of device memory with random values, normal(a, b)
// (mean, stddev) or uniform [a, b), from a counter-based hash of (seed, index); stream is a
// cudaStream_t as void*. CPU-only builds: NotSupported. Defined in cli_random.cu.
Status device_fill_random(void* data, DType dtype, int64_t n, uint64_t seed, bool normal, double a, double b,
                          void* stream);
// `groupattn bench --launch-cost`: prints the median host time of `launches` launches of empty
// kernels in each launch form the library uses (plain, the sm90 decode's parameter block,
// cudaLaunchKernelEx with and without the cluster attribute, the driver's cuLaunchKernelEx) on
// `stream` (a cudaStream_t as void*). CUDA builds only: defined in cli_launch_cost.cu.
Status print_launch_cost(int64_t launches, void* stream);
// Milliseconds between two points of a device timeline (wraps cudaEvent).
class DeviceTimer {
 public:
  DeviceTimer();
  ~DeviceTimer();
  void start();
  Status stop(double* ms);

 private:
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace groupattn::cli
