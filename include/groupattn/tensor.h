// TensorView: a non-owning strided view of memory the caller owns. Strides are in elements (not
// bytes), int64, and every view the library accepts has a contiguous last dimension (stride 1);
// any other stride is allowed. An absent optional tensor is a view with data == nullptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace groupattn {

enum class DType : int {
  kF16 = 0,
  kBF16,
  kF32,
  kF64,
  kI32,
  kI64,
  kF8E4M3,  // OCP FP8 E4M3FN (no infinities, max 448): K/V caches only (attention.h, k_scale)
};

enum class Device : int {
  kCPU = 0,   // host memory (the reference engine's home)
  kCUDA = 1,  // device memory of GPU `device_id`
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
const char* device_name(Device device);

struct TensorView {
  static constexpr int kMaxRank = 5;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int device_id = 0;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};

  bool defined() const { return data != nullptr; }
  int64_t size(int dim) const { return shape[dim < 0 ? dim + rank : dim]; }
  int64_t numel() const;
  // Bytes from the first to one past the last element the view can address.
  int64_t span_bytes() const;
  // Element pointer arithmetic in bytes for an index tuple of length `rank`.
  int64_t offset_of(std::initializer_list<int64_t> index) const;
};

// A view over `data` with the given shape and row-major contiguous strides.
TensorView make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                Device device = Device::kCPU, int device_id = 0);
// The same, with explicit strides (in elements).
TensorView make_strided_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                             std::initializer_list<int64_t> stride, Device device = Device::kCPU,
                             int device_id = 0);

}  // namespace groupattn
