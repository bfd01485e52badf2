// Building blocks of the ops' validation. Each returns InvalidArgument with a message that names
// the argument ("k"), the property at fault and, where there is one, the accepted set.
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <vector>

#include "groupattn/run_options.h"
#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn {

std::string shape_string(const TensorView& t);  // "[2, 128, 8, 64]"

// A supported set as messages list it: "bf16, f16, f32".
template <size_t N>
std::string dtype_list(const std::array<DType, N>& set) {
  std::string s;
  for (DType d : set) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

Status check_defined(const TensorView& t, const char* name);
Status check_rank(const TensorView& t, const char* name, int rank, const char* layout);
Status check_dtype(const TensorView& t, const char* name, std::initializer_list<DType> accepted);
Status check_dim(const TensorView& t, const char* name, int dim, const char* dim_name,
                 int64_t expected, const char* expected_from);
// Shapes non-negative, strides non-negative, last dimension contiguous (stride 1, or any stride
// when it has size <= 1), data pointer aligned to the element size.
Status check_layout(const TensorView& t, const char* name);
// `t` (when defined) on the same device and device id as `ref`.
Status check_same_device(const TensorView& ref, const char* ref_name, const TensorView& t, const char* name);
// All given (defined) tensors on the same device and device id as `ref`.
Status check_same_device(const TensorView& ref, const char* ref_name,
                         std::initializer_list<std::pair<const TensorView*, const char*>> others);
// An output's elements must not share memory with each other (no stride-0 broadcast, no dims that
// interleave): sorted by stride, each dim of size > 1 must step past everything the smaller ones
// cover. Call after check_layout.
Status check_no_self_overlap(const TensorView& out, const char* name);
// `out` must not share any byte with `in` (writing it would corrupt an input).
Status check_no_overlap(const TensorView& out, const char* out_name, const TensorView& in,
                        const char* in_name);

// Reads an int32/int64 index tensor of rank 1 or 2 into host memory, row-major. Host tensors are
// read directly; device tensors only when options.check_device_indices (otherwise `*read` is set
// to false and `values` left empty).
Status read_indices(const TensorView& t, const char* name, const RunOptions& options,
                    std::vector<int64_t>* values, bool* read);

// cu_seqlens checks on host values: starts at 0, non-decreasing, last entry <= `total`
// (`total_name` names the dimension it is bounded by).
Status check_cu_seqlens(const std::vector<int64_t>& cu, const char* name, int64_t total,
                        const char* total_name);

}  // namespace groupattn
