// A bf16 Q entering f16 GEMMs (the sm90 decode's fp8 paths: decode_mainloop.cuh load_q, the packed
// form's load_packed_q in prefill_kernel.cuh). An fp8 (e4m3) cache widens to f16 in one instruction a
// pair where bf16 takes four, so both GEMMs run in f16; Q goes in as Q x 2^e rounded to f16, with e
// chosen from the largest |q| of the rows that share it, and 2^-e joins the score scale.
//
// Exactness: e puts qmax in [2^14, 2^15), so nothing overflows (a bf16 has at most 8 significant
// bits, the largest below 2^16 is 65280 < 65504) and every component of magnitude >= qmax x 2^-29
// is an f16 normal that keeps all 8 of its bits. Smaller ones round as f16 subnormals: an absolute
// error <= qmax x 2^-40 a component, i.e. a score error below 2^-30 of the largest score's scale.
// A Q with no finite non-zero maximum (zeros, an inf) takes e = 0, so infs and NaNs reach the
// scores as they would in bf16. e is clamped to [-120, 120], which keeps 2^e and 2^-e fp32 normals
// (a qmax below 2^-105 then lands below 2^15 anyway).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace groupattn::cuda {

// The larger |x| of the two bf16 of a 32-bit pair (a bf16 is a float's top half; fmaxf skips NaNs).
__device__ __forceinline__ float bf16x2_abs_max(uint32_t pair) {
  return fmaxf(fabsf(__uint_as_float(pair << 16)), fabsf(__uint_as_float(pair & 0xffff0000u)));
}

// The largest of a warp's values x >= 0 (fmaxf results of |q|; NaN only where every input was NaN),
// as float bits: non-negative floats order as their bits. redux.sync gives every lane the same
// value in a uniform register, so the score scale derived from it stays there (a per-thread copy
// of it spilled 8 bytes in the packed fp8 kernel's 224-register consumers).
__device__ __forceinline__ uint32_t warp_max_bits(float x) {
  return __reduce_max_sync(0xffffffffu, __float_as_uint(x));
}

// e for a row set whose largest |q| is qmax (see the file comment). Integer bits only: frexpf's
// slow path spilled in the packed kernel's 224-register consumers.
__device__ __forceinline__ int f16_q_exponent(float qmax) {
  const int biased = (__float_as_int(qmax) >> 23) & 0xff;  // qmax in [2^(biased - 127), 2^(biased - 126))
  if (!(qmax > 0.f) || biased == 0xff) return 0;           // zero, NaN-only, inf
  return min(max(141 - biased, -120), 120);                // 15 - (biased - 126); subnormal qmax: 120
}

// 2^e as a float, |e| <= 126.
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }

// A bf16 pair times 2^e (the exact power `up`) rounded to an f16 pair (low half = low half).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2_scaled(uint32_t pair, float up) {
  const __half2 h =
      __floats2half2_rn(__uint_as_float(pair << 16) * up, __uint_as_float(pair & 0xffff0000u) * up);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace groupattn::cuda
