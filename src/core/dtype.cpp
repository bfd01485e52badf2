#include "core/dtype.h"

#include <array>
#include <cmath>
#include <limits>

namespace groupattn {

namespace {
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t abs = u & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);          // NaN
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);         // overflow -> inf
  if (abs < 0x38800000) {                                                     // subnormal or zero
    // Shift the 24-bit significand into the half subnormal position, rounding to nearest even.
    const int exp = static_cast<int>(abs >> 23);
    if (exp < 102) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - exp;  // 14..24
    const uint32_t half_ulp = 1u << (shift - 1);
    const uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t h = mant >> shift;
    if (rest > half_ulp || (rest == half_ulp && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias exponent 127 -> 15 and round the 23-bit mantissa to 10 bits.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    const float m = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -m : m;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000 | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

double round_to_dtype(double x, DType dtype) {
  switch (dtype) {
    case DType::kF16: return half_bits_to_float(float_to_half_bits(static_cast<float>(x)));
    case DType::kBF16: return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x)));
    case DType::kF32: return static_cast<float>(x);
    case DType::kI32: return static_cast<double>(static_cast<int32_t>(x));
    case DType::kI64: return static_cast<double>(static_cast<int64_t>(x));
    case DType::kF8E4M3: return e4m3_bits_to_float(float_to_e4m3_bits(static_cast<float>(x)));
    case DType::kF64: break;
  }
  return x;
}

namespace {
float decode_e4m3(uint8_t b) {
  const bool neg = (b & 0x80) != 0;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)  // subnormal: mant * 2^-9
                             : std::ldexp(1.f + static_cast<float>(mant) / 8.f, exp - 7);
  return neg ? -mag : mag;
}
}  // namespace

float e4m3_bits_to_float(uint8_t b) {
  // The 256 codes decoded once: the fp64 reference decodes one per multiply-add of an fp8 cache, and
  // two ldexpf calls a code were ~40% of its time (GPU tier, session 11).
  static const std::array<float, 256> decoded = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code)
      t[static_cast<size_t>(code)] = decode_e4m3(static_cast<uint8_t>(code));
    return t;
  }();
  return decoded[b];
}

uint8_t float_to_e4m3_bits(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7e);  // saturate (inf too)
  if (a < std::ldexp(1.0, -6)) {
    // Subnormal range (and zero): multiples of 2^-9; code 8 = 2^-6, the smallest normal.
    const double q = std::nearbyint(a * 512.0);  // round half to even (default rounding mode)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;                     // a = (2m) * 2^exp, 2m in [1, 2)
  double q = std::nearbyint((2.0 * m - 1.0) * 8.0);
  if (q == 8.0) {
    q = 0.0;
    ++exp;
  }
  const int code = ((exp + 7) << 3) | static_cast<int>(q);
  return static_cast<uint8_t>(sign | (code > 0x7e ? 0x7e : code));
}

double load_as_double(const void* base, DType dtype, int64_t byte_offset) {
  const char* p = static_cast<const char*>(base) + byte_offset;
  switch (dtype) {
    case DType::kF16: { uint16_t b; std::memcpy(&b, p, 2); return half_bits_to_float(b); }
    case DType::kBF16: { uint16_t b; std::memcpy(&b, p, 2); return bf16_bits_to_float(b); }
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kF64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::kI32: { int32_t i; std::memcpy(&i, p, 4); return i; }
    case DType::kI64: { int64_t i; std::memcpy(&i, p, 8); return static_cast<double>(i); }
    case DType::kF8E4M3: { uint8_t b; std::memcpy(&b, p, 1); return e4m3_bits_to_float(b); }
  }
  return 0;
}

void store_from_double(void* base, DType dtype, int64_t byte_offset, double value) {
  char* p = static_cast<char*>(base) + byte_offset;
  switch (dtype) {
    case DType::kF16: { uint16_t b = float_to_half_bits(static_cast<float>(value)); std::memcpy(p, &b, 2); return; }
    case DType::kBF16: { uint16_t b = float_to_bf16_bits(static_cast<float>(value)); std::memcpy(p, &b, 2); return; }
    case DType::kF32: { float f = static_cast<float>(value); std::memcpy(p, &f, 4); return; }
    case DType::kF64: std::memcpy(p, &value, 8); return;
    case DType::kI32: { int32_t i = static_cast<int32_t>(value); std::memcpy(p, &i, 4); return; }
    case DType::kI64: { int64_t i = static_cast<int64_t>(value); std::memcpy(p, &i, 8); return; }
    case DType::kF8E4M3: { uint8_t b = float_to_e4m3_bits(static_cast<float>(value)); std::memcpy(p, &b, 1); return; }
  }
}

}  // namespace groupattn
