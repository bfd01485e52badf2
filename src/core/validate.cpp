#include "core/validate.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

#include "core/cuda_runtime_shim.h"
#include "core/dtype.h"

namespace groupattn {

std::string shape_string(const TensorView& t) {
  // A rank outside 1..kMaxRank is reported by check_rank / check_layout; print what exists.
  const int rank = t.rank < 0 ? 0 : (t.rank > TensorView::kMaxRank ? TensorView::kMaxRank : t.rank);
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + (rank < t.rank ? ", ...]" : "]");
}

Status check_defined(const TensorView& t, const char* name) {
  if (!t.defined()) return InvalidArgument(std::string(name) + ": required tensor is missing (data is null)");
  return Status::Ok();
}

Status check_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank) {
    return InvalidArgument(std::string(name) + ": rank " + std::to_string(t.rank) + " (shape " +
                           shape_string(t) + "), expected rank " + std::to_string(rank) + " " + layout);
  }
  return Status::Ok();
}

Status check_dtype(const TensorView& t, const char* name, std::initializer_list<DType> accepted) {
  std::string list;
  for (DType d : accepted) {
    if (d == t.dtype) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  return InvalidArgument(std::string(name) + ": dtype " + dtype_name(t.dtype) +
                         " not supported (accepted: " + list + ")");
}

Status check_dim(const TensorView& t, const char* name, int dim, const char* dim_name,
                 int64_t expected, const char* expected_from) {
  if (t.shape[dim] != expected) {
    return InvalidArgument(std::string(name) + ": shape " + shape_string(t) + " has " + dim_name +
                           " = " + std::to_string(t.shape[dim]) + " at dim " + std::to_string(dim) +
                           ", expected " + std::to_string(expected) + " (" + expected_from + ")");
  }
  return Status::Ok();
}

namespace {

std::string stride_string(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.stride[i]);  // rank checked
  return s + "]";
}

// Sizes and strides already non-negative. Every product of sizes (element counts, B * Sq, ...)
// and the byte span (sum of (size - 1) * stride, times the element size) must fit in int64, so
// that no later index computation on an accepted view can wrap.
Status check_extent_fits(const TensorView& t, const char* name) {
  int64_t elements = 1;  // product of max(size, 1): bounds the product of any subset of sizes
  int64_t last = 0;      // element offset of the last addressable element
  bool empty = false;
  for (int i = 0; i < t.rank; ++i) {
    if (__builtin_mul_overflow(elements, t.shape[i] > 1 ? t.shape[i] : 1, &elements)) {
      return InvalidArgument(std::string(name) + ": shape " + shape_string(t) +
                             " has more elements than int64 can count (accepted: products of sizes < 2^63)");
    }
    empty = empty || t.shape[i] == 0;
    int64_t step = 0;
    if (t.shape[i] > 0 && (__builtin_mul_overflow(t.shape[i] - 1, t.stride[i], &step) ||
                           __builtin_add_overflow(last, step, &last))) {
      last = INT64_MAX;
    }
  }
  int64_t bytes = 0;
  if (!empty && (last == INT64_MAX || __builtin_add_overflow(last, 1, &bytes) ||
                 __builtin_mul_overflow(bytes, static_cast<int64_t>(dtype_size(t.dtype)), &bytes))) {
    return InvalidArgument(std::string(name) + ": shape " + shape_string(t) + " with strides " + stride_string(t) +
                           " spans more than 2^63 bytes (accepted: views whose byte span fits in int64)");
  }
  return Status::Ok();
}

}  // namespace

Status check_layout(const TensorView& t, const char* name) {
  if (t.rank < 1 || t.rank > TensorView::kMaxRank) {
    return InvalidArgument(std::string(name) + ": rank " + std::to_string(t.rank) +
                           " out of range (accepted: 1.." + std::to_string(TensorView::kMaxRank) + ")");
  }
  if (dtype_size(t.dtype) == 0) {  // a value outside the DType enum (an uninitialised or bad cast)
    return InvalidArgument(std::string(name) + ": unknown dtype value " +
                           std::to_string(static_cast<int>(t.dtype)) + " (accepted: a groupattn::DType)");
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) {
      return InvalidArgument(std::string(name) + ": negative size in shape " + shape_string(t));
    }
    if (t.stride[i] < 0) {
      return InvalidArgument(std::string(name) + ": negative stride " + std::to_string(t.stride[i]) +
                             " at dim " + std::to_string(i) + " (accepted: strides >= 0)");
    }
  }
  GA_RETURN_IF_ERROR(check_extent_fits(t, name));
  if (t.shape[t.rank - 1] > 1 && t.stride[t.rank - 1] != 1) {
    return InvalidArgument(std::string(name) + ": last dimension has stride " +
                           std::to_string(t.stride[t.rank - 1]) +
                           " (accepted: 1; the last dimension must be contiguous)");
  }
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % dtype_size(t.dtype) != 0) {
    return InvalidArgument(std::string(name) + ": data pointer is not aligned to its element size (" +
                           std::to_string(dtype_size(t.dtype)) + " bytes for " + dtype_name(t.dtype) + ")");
  }
  return Status::Ok();
}

Status check_same_device(const TensorView& ref, const char* ref_name, const TensorView& t, const char* name) {
  if (!t.defined()) return Status::Ok();
  if (t.device != ref.device || (t.device == Device::kCUDA && t.device_id != ref.device_id)) {
    return InvalidArgument(std::string(name) + ": on " + device_name(t.device) + ":" +
                           std::to_string(t.device_id) + " but " + ref_name + " is on " +
                           device_name(ref.device) + ":" + std::to_string(ref.device_id) +
                           " (all tensors of one call must share a device)");
  }
  return Status::Ok();
}

Status check_same_device(const TensorView& ref, const char* ref_name,
                         std::initializer_list<std::pair<const TensorView*, const char*>> others) {
  for (const auto& [t, name] : others) GA_RETURN_IF_ERROR(check_same_device(ref, ref_name, *t, name));
  return Status::Ok();
}

Status check_no_self_overlap(const TensorView& out, const char* name) {
  if (!out.defined()) return Status::Ok();
  int dims[TensorView::kMaxRank];
  int n = 0;
  for (int i = 0; i < out.rank; ++i) {
    if (out.shape[i] == 0) return Status::Ok();  // no elements, nothing to collide
    if (out.shape[i] > 1) dims[n++] = i;
  }
  // Insertion sort by stride (at most kMaxRank dims); ties keep the inner dim first.
  for (int a = 1; a < n; ++a) {
    for (int b = a; b > 0 && out.stride[dims[b]] < out.stride[dims[b - 1]]; --b) std::swap(dims[b], dims[b - 1]);
  }
  int64_t covered = 0;  // element offset of the last element the smaller-stride dims reach
  for (int a = 0; a < n; ++a) {
    const int d = dims[a];
    if (out.stride[d] <= covered) {
      return InvalidArgument(std::string(name) + ": output elements overlap each other (shape " + shape_string(out) +
                             ", stride " + std::to_string(out.stride[d]) + " at dim " + std::to_string(d) +
                             "); accepted: strides that give every element its own memory (no stride 0 "
                             "on a dim of size > 1)");
    }
    covered += (out.shape[d] - 1) * out.stride[d];  // fits: check_layout bounded the span
  }
  return Status::Ok();
}

Status check_no_overlap(const TensorView& out, const char* out_name, const TensorView& in,
                        const char* in_name) {
  if (!out.defined() || !in.defined()) return Status::Ok();
  const auto a0 = reinterpret_cast<uintptr_t>(out.data);
  const auto b0 = reinterpret_cast<uintptr_t>(in.data);
  const auto a1 = a0 + static_cast<uintptr_t>(out.span_bytes());
  const auto b1 = b0 + static_cast<uintptr_t>(in.span_bytes());
  if (a0 < b1 && b0 < a1) {
    return InvalidArgument(std::string(out_name) + ": output memory overlaps input " + in_name);
  }
  return Status::Ok();
}

namespace {
// An index value read exactly (a round trip through double loses int64 values past 2^53 and is
// undefined past 2^63: found by validate_kda_fuzz on an int64 cu_seqlens). dtype is I32 or I64.
int64_t load_index(const char* p, DType dtype) {
  if (dtype == DType::kI64) {
    int64_t v = 0;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  int32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

Status read_indices(const TensorView& t, const char* name, const RunOptions& options,
                    std::vector<int64_t>* values, bool* read) {
  values->clear();
  *read = false;
  if (t.rank < 1 || t.rank > 2) return InvalidArgument(std::string(name) + ": expected rank 1 or 2");
  const int64_t rows = t.rank == 2 ? t.shape[0] : 1;
  const int64_t cols = t.shape[t.rank - 1];
  const int64_t row_stride = t.rank == 2 ? t.stride[0] : 0;
  const size_t esize = dtype_size(t.dtype);
  std::vector<char> host;
  const char* base = static_cast<const char*>(t.data);
  int64_t base_off = 0;
  // Index tensors can be huge views of little memory (stride 0): a failed host allocation is a
  // Status, not an exception out of the API.
  try {
    if (t.device == Device::kCUDA) {
      if (!options.check_device_indices) return Status::Ok();
      // Copy the span the view covers, then index it on the host.
      const int64_t bytes = t.span_bytes();
      host.resize(static_cast<size_t>(bytes));
      GA_RETURN_IF_ERROR(copy_device_to_host(host.data(), t.data, static_cast<size_t>(bytes), name));
      base = host.data();
    }
    values->reserve(static_cast<size_t>(rows * cols));  // fits: check_layout bounds the product
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    return {StatusCode::kOutOfMemory, std::string(name) + ": cannot hold " + std::to_string(rows * cols) +
                                          " index values in host memory to check them"};
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t off = base_off + (r * row_stride + c * t.stride[t.rank - 1]) * static_cast<int64_t>(esize);
      values->push_back(load_index(base + off, t.dtype));
    }
  }
  *read = true;
  return Status::Ok();
}

Status check_cu_seqlens(const std::vector<int64_t>& cu, const char* name, int64_t total,
                        const char* total_name) {
  if (cu.empty() || cu[0] != 0) {
    return InvalidArgument(std::string(name) + ": must start at 0 (got " +
                           (cu.empty() ? std::string("nothing") : std::to_string(cu[0])) + ")");
  }
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return InvalidArgument(std::string(name) + ": not non-decreasing at index " + std::to_string(i) +
                             " (" + std::to_string(cu[i - 1]) + " then " + std::to_string(cu[i]) + ")");
    }
  }
  if (cu.back() > total) {
    return InvalidArgument(std::string(name) + ": last entry " + std::to_string(cu.back()) +
                           " exceeds " + total_name + " = " + std::to_string(total));
  }
  return Status::Ok();
}

}  // namespace groupattn
