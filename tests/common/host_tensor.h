// HostTensor: an owning host buffer with a TensorView over it, for tests and the CLI-side checks.
// The buffer carries guard bands before and after the tensor's span so a test can prove that an
// engine wrote nothing outside its tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "groupattn/tensor.h"

namespace groupattn::test {

class HostTensor {
 public:
  HostTensor() = default;
  // Row-major contiguous.
  HostTensor(DType dtype, std::vector<int64_t> shape);
  // Explicit element strides (last must be 1); the buffer covers the whole strided span.
  HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides);

  // Copies own their buffer (the view is re-pointed); moves keep the heap buffer and its view.
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;

  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return view_.numel(); }
  bool defined() const { return view_.defined(); }

  double at(const std::vector<int64_t>& index) const;
  void set(const std::vector<int64_t>& index, double value);

  // Fill every logical element (not the gaps of a strided view).
  void fill_normal(std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0);
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);
  void fill(double value);
  // Fill every element whose leading indices are `prefix` (one row of a [B, S, H, D] cache: {b, s}).
  void fill_sub(const std::vector<int64_t>& prefix, double value);
  // Fill the whole buffer, gaps included, with NaN (floats) or 0x7f bytes (ints): "poison".
  void poison();

  // Logical elements in row-major order, as double.
  std::vector<double> values() const;
  // The guard bands around the span are still the pattern written at construction.
  bool guards_intact() const;

 private:
  void allocate(int64_t span_elements);
  std::vector<int64_t> shape_, strides_;
  std::vector<unsigned char> buf_;
  TensorView view_;
};

// Calls fn(index) for every index of `shape` in row-major order.
void for_each_index(const std::vector<int64_t>& shape, const std::function<void(const std::vector<int64_t>&)>& fn);

// ||out - ref||_2 / ||ref||_2 (ref all zero: ||out||_2).
double rel_error(const std::vector<double>& out, const std::vector<double>& ref);
double max_abs_error(const std::vector<double>& out, const std::vector<double>& ref);
bool all_finite(const std::vector<double>& v);
// Bitwise-equal element buffers (the logical elements of two tensors of one dtype and shape).
bool bitwise_equal(const HostTensor& a, const HostTensor& b);

}  // namespace groupattn::test
