// Host-side scalar conversions for the storage dtypes, and element access through a TensorView.
// Used by the references, the CLI and the tests; device code has its own (cuda_fp16/bf16).
#pragma once

#include <cstdint>
#include <cstring>

#include "groupattn/tensor.h"

namespace groupattn {

// IEEE binary16 and bfloat16 <-> float, round to nearest even, NaN kept NaN.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

// OCP FP8 E4M3FN <-> float: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111
// is NaN, the largest finite value 448, the smallest subnormal 2^-9. Encoding rounds to nearest
// even and saturates finite values beyond 448 to +-448 (what KV-cache quantizers do); NaN stays NaN.
uint8_t float_to_e4m3_bits(float f);
float e4m3_bits_to_float(uint8_t b);

// Rounds `x` to what storing it in `dtype` and reading it back gives (identity for f64).
double round_to_dtype(double x, DType dtype);

// Element at byte offset `byte_offset` from `base`, as double; integer dtypes are converted too.
double load_as_double(const void* base, DType dtype, int64_t byte_offset);
void store_from_double(void* base, DType dtype, int64_t byte_offset, double value);

// Element of a host TensorView at an index tuple (length must equal t.rank).
inline double load(const TensorView& t, std::initializer_list<int64_t> index) {
  return load_as_double(t.data, t.dtype, t.offset_of(index));
}
inline void store(const TensorView& t, std::initializer_list<int64_t> index, double value) {
  store_from_double(t.data, t.dtype, t.offset_of(index), value);
}

}  // namespace groupattn
