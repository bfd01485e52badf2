// Host-side support checks shared by the sm90 engines (decode and prefill): device tensors, element
// types and head dim, the layouts a TMA tensor map can describe, grid limits. No CUDA types here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "attention/attention_views.h"
#include "attention/engines/sm90/decode_traits.h"
#include "core/cuda_runtime_shim.h"
#include "groupattn/attention.h"

namespace groupattn::sm90_engine {

inline constexpr int64_t kMaxGridYZ = 65535;

// available() of an sm90 engine: a compute capability 9.0 device is current.
inline Status sm90_device_available(const char* engine) {
  if (cuda_device_count() <= 0) return NotSupported("no CUDA device visible");
  int sms = 0, cc = 0;
  GA_RETURN_IF_ERROR(cuda_device_properties(&sms, &cc));
  if (cc != 90) {
    return NotSupported(std::string(engine) + " engine needs compute capability 9.0 (device has " +
                        std::to_string(cc) + ")");
  }
  return Status::Ok();
}

// Every tensor of an attention problem in device memory (the sm90 engines read nothing else).
inline Status all_on_device(const AttentionParams& p, const char* engine) {
  if (all_views_on_device(p)) return Status::Ok();
  return NotSupported(std::string(engine) + " engine takes device (CUDA) tensors only; got a host tensor");
}

// Base 16-byte aligned, innermost stride 1, every other stride a whole number of 16-byte chunks:
// what both the Q/out vector copies and the TMA maps (strides multiple of 16 bytes) need.
inline bool tma_compatible(const TensorView& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  if (t.stride[t.rank - 1] != 1) return false;
  const auto chunk = static_cast<int64_t>(16 / dtype_size(t.dtype));  // elements per 16 bytes
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (t.stride[d] % chunk != 0) return false;
  }
  return true;
}

// cuTensorMapEncodeTiled documents each stride as spanning the dimensions inside it (stride[i] =
// dim[i-1] * stride[i-1] + padding). A rank-4 (outer, row, head, d) tensor must nest that way: each
// stride (of a dimension longer than 1) at least the extent of the dimensions inside it; likewise a
// rank-3 varlen (token, head, d) tensor.
inline bool nested_strides(const TensorView& t) {
  int64_t extent = t.shape[t.rank - 1];  // elements spanned by one head's d
  for (int d = t.rank - 2; d >= 0; --d) {
    if (t.shape[d] > 1 && t.stride[d] < extent) return false;
    extent = (t.shape[d] - 1) * t.stride[d] + extent;
  }
  return true;
}

// What the sm90 kernels take: 16-bit q (k, v and out follow it, or k/v are fp8) and D == Dv, one
// of `head_dims` (decode: kDecodeHeadDims; prefill: 64, 128 or 256).
template <class HeadDims>
Status check_16bit_head_dims(const AttentionParams& p, const char* engine, const HeadDims& head_dims) {
  if (p.q.dtype != DType::kBF16 && p.q.dtype != DType::kF16) {
    return NotSupported(std::string(engine) + " engine: dtype " + dtype_name(p.q.dtype) +
                        " not supported (accepted: bf16, f16)");
  }
  const int64_t d = p.q.size(-1), dv = p.v.size(-1);
  bool accepted = false;
  for (int64_t h : head_dims) accepted = accepted || d == h;
  if (d != dv || !accepted) {
    std::string list;  // "128", "64 or 128", "64, 128 or 256": built on the decline only (every call checks)
    size_t i = 0;
    for (int64_t h : head_dims) {
      list += (i == 0 ? "" : i + 1 == head_dims.size() ? " or " : ", ") + std::to_string(h);
      ++i;
    }
    return NotSupported(std::string(engine) + " engine: head dim " + list + " only (D == Dv); got D " +
                        std::to_string(d) + ", Dv " + std::to_string(dv));
  }
  return Status::Ok();
}

inline Status check_16bit_head_dims(const AttentionParams& p, const char* engine,
                                    std::initializer_list<int64_t> head_dims) {
  return check_16bit_head_dims<std::initializer_list<int64_t>>(p, engine, head_dims);
}

// q, k, v and out addressable by 16-byte vector copies and TMA maps (tma_compatible), and each
// view in `mapped` -- those the engine reads through a tensor map -- nested as a map needs.
inline Status check_tma_layouts(const AttentionParams& p, const char* engine,
                                std::initializer_list<std::pair<const TensorView*, const char*>> mapped) {
  for (const auto& [t, what] :
       {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}}) {
    if (!tma_compatible(*t)) {
      return NotSupported(std::string(engine) + " engine: " + what +
                          " must be contiguous in the head dim, with a 16-byte aligned base and strides that "
                          "are multiples of 16 bytes");
    }
  }
  for (const auto& [t, what] : mapped) {
    if (!nested_strides(*t)) {
      return NotSupported(std::string(engine) + " engine: " + what +
                          " must be laid out [batch|page][row][head][d] (or [token][head][d]) with each stride "
                          "spanning the dims inside it (a TMA tensor map's nesting); other layouts are not "
                          "supported yet");
    }
  }
  return Status::Ok();
}

}  // namespace groupattn::sm90_engine
