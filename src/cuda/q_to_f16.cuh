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

// e for a row set whose largest |q| is qmax (see the file comment), from the float's bits (no
// frexpf call).
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

// The rows one Q scale serves, loaded by a warpgroup's four warps as bf16 pairs (vals: this
// thread's chunks), to f16 x 2^e in place; returns 2^-e. red: four words of shared memory for the
// warps' maxima; sync(): the warpgroup's barrier, called once between their writes and reads (a
// caller that overwrites red afterwards syncs again first).
template <int kChunks, class Sync>
__device__ __forceinline__ float scale_q_to_f16(uint4 (&vals)[kChunks], uint32_t* red, int tid_in_wg,
                                                Sync sync) {
  float qmax = 0.f;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    for (const uint32_t x : {vals[j].x, vals[j].y, vals[j].z, vals[j].w})
      qmax = fmaxf(qmax, bf16x2_abs_max(x));
  }
  const uint32_t warp_max = warp_max_bits(qmax);
  if (tid_in_wg % 32 == 0) red[tid_in_wg / 32] = warp_max;
  sync();
  const uint32_t all_max = warp_max_bits(__uint_as_float(max(max(red[0], red[1]), max(red[2], red[3]))));
  const int e = f16_q_exponent(__uint_as_float(all_max));
  const float up = pow2f(e);
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    vals[j] = make_uint4(bf16x2_to_f16x2_scaled(vals[j].x, up), bf16x2_to_f16x2_scaled(vals[j].y, up),
                         bf16x2_to_f16x2_scaled(vals[j].z, up), bf16x2_to_f16x2_scaled(vals[j].w, up));
  }
  return pow2f(-e);
}

}  // namespace groupattn::cuda
