#include "groupattn/tensor.h"

namespace groupattn {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF8E4M3: return "f8e4m3";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

const char* device_name(Device device) { return device == Device::kCUDA ? "cuda" : "cpu"; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::span_bytes() const {
  // An empty view addresses nothing, whatever its other strides (which may be huge: they are
  // never multiplied out). Non-empty views passed validation, so the sum fits in int64.
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 0) return 0;
  }
  int64_t last = 0;  // element offset of the last addressable element
  for (int i = 0; i < rank; ++i) last += (shape[i] - 1) * stride[i];
  return (last + 1) * static_cast<int64_t>(dtype_size(dtype));
}

int64_t TensorView::offset_of(std::initializer_list<int64_t> index) const {
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) off += i * stride[d++];
  return off * static_cast<int64_t>(dtype_size(dtype));
}

TensorView make_strided_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                             std::initializer_list<int64_t> stride, Device device, int device_id) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_id = device_id;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  d = 0;
  for (int64_t s : stride) t.stride[d++] = s;
  return t;
}

TensorView make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                Device device, int device_id) {
  TensorView t = make_strided_view(data, dtype, shape, {}, device, device_id);
  int64_t s = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = s;
    s *= t.shape[d];
  }
  return t;
}

}  // namespace groupattn
