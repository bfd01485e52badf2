#include "common/host_tensor.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace groupattn::test {

namespace {
constexpr int64_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xA5;

int64_t offset_bytes(const TensorView& v, const std::vector<int64_t>& index) {
  int64_t off = 0;
  for (size_t d = 0; d < index.size(); ++d) off += index[d] * v.stride[d];
  return off * static_cast<int64_t>(dtype_size(v.dtype));
}

// Calls fn(byte offset) for every element of a view in row-major index order -- the order
// for_each_index visits, so a fill draws the same values into the same elements -- without an index
// vector or a std::function call per element (fills of the GPU tier's 100M-element caches were
// ~60 ns an element through for_each_index + set, half of it outside the random draw).
template <class Fn>
void for_each_offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t esize,
                     Fn&& fn) {
  for (int64_t s : shape) {
    if (s == 0) return;
  }
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) {
    fn(int64_t{0});
    return;
  }
  std::vector<int64_t> idx(shape.size(), 0);
  const int last = rank - 1;
  const int64_t inner = shape[static_cast<size_t>(last)], step = strides[static_cast<size_t>(last)] * esize;
  int64_t off = 0;  // bytes of the row's first element
  while (true) {
    for (int64_t j = 0, o = off; j < inner; ++j, o += step) fn(o);
    int d = last - 1;
    for (; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      off += strides[u] * esize;
      if (++idx[u] < shape[u]) break;
      off -= shape[u] * strides[u] * esize;
      idx[u] = 0;
    }
    if (d < 0) return;
  }
}
// Stores next() into every element of a view's sub-block (shape and strides of its trailing
// dims, `base` the block's first byte), in row-major index order.
template <class Next>
void store_each(const TensorView& v, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                int64_t base, Next&& next) {
  const auto esize = static_cast<int64_t>(dtype_size(v.dtype));
  for_each_offset(shape, strides, esize, [&](int64_t o) { store_from_double(v.data, v.dtype, base + o, next()); });
}
}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) : shape_(std::move(shape)) {
  strides_.assign(shape_.size(), 1);
  for (int d = static_cast<int>(shape_.size()) - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * shape_[d + 1];
  view_.dtype = dtype;
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  allocate(n);
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides)
    : shape_(std::move(shape)), strides_(std::move(strides)) {
  view_.dtype = dtype;
  int64_t last = 0;
  bool empty = false;
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] == 0) empty = true;
    last += (shape_[d] - 1) * strides_[d];
  }
  allocate(empty ? 0 : last + 1);
}

HostTensor::HostTensor(const HostTensor& other)
    : shape_(other.shape_), strides_(other.strides_), buf_(other.buf_), view_(other.view_) {
  if (view_.data != nullptr) view_.data = buf_.data() + kGuardBytes;
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  if (this != &other) {
    shape_ = other.shape_;
    strides_ = other.strides_;
    buf_ = other.buf_;
    view_ = other.view_;
    if (view_.data != nullptr) view_.data = buf_.data() + kGuardBytes;
  }
  return *this;
}

void HostTensor::allocate(int64_t span_elements) {
  const int64_t esize = static_cast<int64_t>(dtype_size(view_.dtype));
  // Keep at least one element so that an empty tensor still has a non-null pointer.
  const int64_t bytes = std::max<int64_t>(span_elements, 1) * esize;
  buf_.assign(static_cast<size_t>(bytes + 2 * kGuardBytes), kGuardByte);
  view_.data = buf_.data() + kGuardBytes;
  view_.device = Device::kCPU;
  view_.rank = static_cast<int>(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    view_.shape[d] = shape_[d];
    view_.stride[d] = strides_[d];
  }
  std::memset(view_.data, 0, static_cast<size_t>(bytes));
}

double HostTensor::at(const std::vector<int64_t>& index) const {
  return load_as_double(view_.data, view_.dtype, offset_bytes(view_, index));
}

void HostTensor::set(const std::vector<int64_t>& index, double value) {
  store_from_double(view_.data, view_.dtype, offset_bytes(view_, index), value);
}

void HostTensor::fill_normal(std::mt19937_64& rng, double mean, double stddev) {
  std::normal_distribution<double> dist(mean, stddev);
  store_each(view_, shape_, strides_, 0, [&] { return dist(rng); });
}

void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  store_each(view_, shape_, strides_, 0, [&] { return dist(rng); });
}

void HostTensor::fill(double value) {
  store_each(view_, shape_, strides_, 0, [&] { return value; });
}

void HostTensor::fill_sub(const std::vector<int64_t>& prefix, double value) {
  const auto k = static_cast<std::ptrdiff_t>(prefix.size());
  store_each(view_, std::vector<int64_t>(shape_.begin() + k, shape_.end()),
             std::vector<int64_t>(strides_.begin() + k, strides_.end()), offset_bytes(view_, prefix),
             [&] { return value; });
}

void HostTensor::poison() {
  const size_t bytes = buf_.size() - 2 * kGuardBytes;
  const size_t esize = dtype_size(view_.dtype);
  if (view_.dtype == DType::kI32 || view_.dtype == DType::kI64) {
    std::memset(view_.data, 0x7f, bytes);
    return;
  }
  for (size_t off = 0; off + esize <= bytes; off += esize) {
    store_from_double(view_.data, view_.dtype, static_cast<int64_t>(off), std::nan(""));
  }
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  const auto esize = static_cast<int64_t>(dtype_size(view_.dtype));
  for_each_offset(shape_, strides_, esize,
                  [&](int64_t o) { out.push_back(load_as_double(view_.data, view_.dtype, o)); });
  return out;
}

bool HostTensor::guards_intact() const {
  const size_t n = buf_.size();
  for (size_t i = 0; i < static_cast<size_t>(kGuardBytes); ++i) {
    if (buf_[i] != kGuardByte || buf_[n - 1 - i] != kGuardByte) return false;
  }
  return true;
}

void for_each_index(const std::vector<int64_t>& shape,
                    const std::function<void(const std::vector<int64_t>&)>& fn) {
  for (int64_t s : shape) {
    if (s == 0) return;
  }
  std::vector<int64_t> idx(shape.size(), 0);
  while (true) {
    fn(idx);
    int d = static_cast<int>(shape.size()) - 1;
    while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (out.size() != ref.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

double max_abs_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::fabs(out[i] - ref[i]);
    if (std::isnan(e)) return INFINITY;
    m = std::max(m, e);
  }
  return m;
}

bool all_finite(const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

bool bitwise_equal(const HostTensor& a, const HostTensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t esize = dtype_size(a.dtype());
  bool equal = true;
  for_each_index(a.shape(), [&](const std::vector<int64_t>& i) {
    const auto* pa = static_cast<const char*>(a.view().data) + offset_bytes(a.view(), i);
    const auto* pb = static_cast<const char*>(b.view().data) + offset_bytes(b.view(), i);
    if (std::memcmp(pa, pb, esize) != 0) equal = false;
  });
  return equal;
}

}  // namespace groupattn::test
