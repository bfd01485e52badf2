// Shared by the validation fuzzers: decode strided views from fuzzer bytes and back each one with a
// heap buffer of exactly the bytes the view can address, so that AddressSanitizer reports any
// access an accepted problem makes outside its tensors.
//
// A view whose span cannot be backed (it overflows, or is larger than kMaxBackedBytes) gets a fake,
// aligned, never-dereferenced pointer; a problem holding one is only validated, never run.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "groupattn/tensor.h"

namespace groupattn::fuzz {

inline constexpr int64_t kMaxBackedBytes = 1 << 16;
// Problems larger than this (elements summed over all tensors) are validated but not run, to keep
// each execution fast.
inline constexpr int64_t kMaxRunElements = 1 << 13;
inline constexpr uint8_t kPoison = 0xA5;

// Sizes and strides: mostly small, sometimes the edges (0, 2^31 and around it, int64 extremes).
// An exhausted input decodes to the typical value (FuzzedDataProvider then returns the minimum).
inline int64_t pick_extent(FuzzedDataProvider& in, int64_t typical) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 8: return 0;
    case 9: return -1;
    case 10: return int64_t{1} << 31;
    case 11: return (int64_t{1} << 31) + 1;
    case 12: return INT64_MAX;
    case 13: return INT64_MIN;
    case 14: return in.ConsumeIntegral<int64_t>();
    case 15: return in.ConsumeIntegralInRange<int64_t>(0, 9);
    default: return typical;
  }
}

// True with probability 1/n (never for an exhausted input).
inline bool rare(FuzzedDataProvider& in, int n) { return in.ConsumeIntegralInRange<int>(1, n) == n; }

// Byte span of `t` in exact arithmetic, or -1 when it is negative or does not fit in int64.
inline int64_t exact_span_bytes(const TensorView& t) {
  if (t.rank < 0 || t.rank > TensorView::kMaxRank) return -1;
  __int128 last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0 || t.stride[i] < 0) return -1;
    if (t.shape[i] == 0) return 0;
  }
  for (int i = 0; i < t.rank; ++i) {
    const __int128 term = static_cast<__int128>(t.shape[i] - 1) * t.stride[i];  // < 2^126
    if (term > INT64_MAX) return -1;
    last += term;  // at most kMaxRank terms below 2^63 each
  }
  const __int128 bytes = (last + 1) * static_cast<__int128>(dtype_size(t.dtype));
  return bytes > INT64_MAX ? -1 : static_cast<int64_t>(bytes);
}

// Elements of `t` in exact arithmetic, saturated at INT64_MAX (0 for an absent view).
inline int64_t exact_numel(const TensorView& t) {
  if (!t.defined()) return 0;
  __int128 n = 1;
  for (int i = 0; i < t.rank && i < TensorView::kMaxRank; ++i) {
    if (t.shape[i] <= 0) return 0;
    n *= t.shape[i];
    if (n > INT64_MAX) return INT64_MAX;
  }
  return static_cast<int64_t>(n);
}

// Backing store for one tensor: exactly span bytes (plus a misalignment offset when asked for).
struct Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  size_t size = 0;   // bytes the view addresses
  size_t shift = 0;  // data = bytes + shift
  bool fake = false;
};

// Fills a view's shape/stride/dtype/device from the fuzzer: `shape` is the consistent shape the
// caller would pass; with some probability each field is replaced by an edge value.
inline TensorView decode_view(FuzzedDataProvider& in, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  if (rare(in, 16)) {
    t.dtype = static_cast<DType>(in.ConsumeIntegralInRange<int>(0, 7));  // 7: not a DType
  }
  if (rare(in, 16)) t.rank = in.ConsumeIntegralInRange<int>(-1, 6);
  const int rank = t.rank < 0 ? 0 : (t.rank > TensorView::kMaxRank ? TensorView::kMaxRank : t.rank);
  int d = 0;
  for (int64_t s : shape) {
    if (d < TensorView::kMaxRank) t.shape[d++] = s;
  }
  const bool mutate_shape = rare(in, 8);
  for (int i = 0; i < rank; ++i) {
    if (mutate_shape) t.shape[i] = pick_extent(in, t.shape[i]);
  }
  // Strides: row-major contiguous, padded (gaps), or fuzzed per dimension.
  const int stride_mode = in.ConsumeIntegralInRange<int>(0, 3);
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.stride[i] = s;
    const int64_t extent = t.shape[i] > 0 && t.shape[i] < (1 << 12) ? t.shape[i] : 1;
    s *= extent + (stride_mode == 1 ? in.ConsumeIntegralInRange<int64_t>(0, 3) : 0);
    if (stride_mode == 2) t.stride[i] = pick_extent(in, t.stride[i]);
  }
  if (stride_mode == 3 && rank > 0) t.stride[in.ConsumeIntegralInRange<int>(0, rank - 1)] = 0;
  if (rare(in, 32)) t.device = Device::kCUDA;
  t.device_id = rare(in, 32) ? 1 : 0;
  return t;
}

// Points `t` at a fresh buffer of exactly its span. Index tensors get fuzzed contents (mostly small
// and cumulative, sometimes raw 32/64-bit values); outputs get the poison pattern.
enum class Fill { kZero, kIndex, kPoison };

inline void back_view(FuzzedDataProvider& in, TensorView* t, Buffer* buf, Fill fill) {
  const int64_t span = exact_span_bytes(*t);
  const bool misalign = rare(in, 64);
  if (span < 0 || span > kMaxBackedBytes) {
    buf->fake = true;
    t->data = reinterpret_cast<void*>(uintptr_t{1} << 20);  // aligned, never dereferenced
    return;
  }
  buf->size = static_cast<size_t>(span);
  buf->shift = misalign ? 1 : 0;
  buf->bytes.reset(new uint8_t[buf->size + buf->shift + 1]);  // +1: a zero span still has a pointer
  uint8_t* data = buf->bytes.get() + buf->shift;
  t->data = data;
  if (fill == Fill::kPoison) {
    std::memset(data, kPoison, buf->size);
  } else if (fill == Fill::kZero) {
    std::memset(data, 0, buf->size);
  } else {
    const size_t esize = dtype_size(t->dtype) == 8 ? 8 : 4;
    const int mode = in.ConsumeIntegralInRange<int>(0, 3);
    int64_t running = 0;
    for (size_t off = 0; off + esize <= buf->size; off += esize) {
      int64_t v = 0;
      switch (mode) {
        case 0: v = running += in.ConsumeIntegralInRange<int64_t>(0, 3); break;   // cu_seqlens-like
        case 1: v = in.ConsumeIntegralInRange<int64_t>(0, 6); break;              // lengths, pages
        case 2: v = in.ConsumeIntegralInRange<int64_t>(-2, 2); break;
        default: v = in.ConsumeIntegral<int64_t>(); break;
      }
      if (esize == 4) {
        const auto v32 = static_cast<int32_t>(v);
        std::memcpy(data + off, &v32, 4);
      } else {
        std::memcpy(data + off, &v, 8);
      }
    }
  }
}

inline bool bytes_equal(const Buffer& buf, const std::vector<uint8_t>& copy) {
  return buf.fake || buf.size == 0 || std::memcmp(buf.bytes.get() + buf.shift, copy.data(), buf.size) == 0;
}

inline std::vector<uint8_t> snapshot(const Buffer& buf) {
  if (buf.fake || buf.size == 0) return {};
  const uint8_t* p = buf.bytes.get() + buf.shift;
  return std::vector<uint8_t>(p, p + buf.size);
}

// Whether every element of a small view has its own offset (brute force: enumerate and sort).
// An accepted output must: overlapping output elements would race on a GPU.
inline bool elements_distinct(const TensorView& t) {
  if (!t.defined() || exact_numel(t) == 0) return true;
  std::vector<int64_t> offsets = {0};
  for (int d = 0; d < t.rank; ++d) {
    std::vector<int64_t> next;
    for (int64_t o : offsets) {
      for (int64_t i = 0; i < t.shape[d]; ++i) next.push_back(o + i * t.stride[d]);
    }
    offsets.swap(next);
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end();
}

// GA_FUZZ_VERBOSE=1 prints each decoded view (when reproducing a crash file).
inline void dump_view(const char* name, const TensorView& t) {
  static const bool verbose = std::getenv("GA_FUZZ_VERBOSE") != nullptr;
  if (!verbose) return;
  std::fprintf(stderr, "%-14s data=%p dtype=%d device=%d:%d rank=%d shape/stride:", name, t.data,
               static_cast<int>(t.dtype), static_cast<int>(t.device), t.device_id, t.rank);
  for (int i = 0; i < t.rank && i < TensorView::kMaxRank; ++i) {
    std::fprintf(stderr, " %lld/%lld", static_cast<long long>(t.shape[i]), static_cast<long long>(t.stride[i]));
  }
  std::fprintf(stderr, "\n");
}

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz oracle failed: %s\n", what);
  std::abort();
}

}  // namespace groupattn::fuzz
