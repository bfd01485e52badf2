// Small sm80+ primitives of the KDA chunked state pass: 16-byte cp.async copies into shared memory,
// and the m16n8k8 tf32 tensor-core product with fp32 accumulation, plain (1xTF32) or as "3xTF32"
// (each fp32 operand split into a tf32 high part and a tf32 low part, a*b ~ ahi*bhi + ahi*blo +
// alo*bhi), which keeps the products at about fp32 accuracy (the dropped alo*blo term is ~2^-22
// relative).
//
// Fragment layouts of mma.sync.m16n8k8 tf32 (PTX ISA), with g = lane / 4 and t = lane % 4:
//   A (16 x 8, row-major): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8, k x n):      b0 (t, g), b1 (t + 4, g)
//   C (16 x 8):            c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace groupattn::kda_cuda {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// The same copy to a shared-window address (bytes), for callers that convert their base once.
__device__ __forceinline__ void cp_async16_shared(uint32_t saddr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// x rounded to the nearest tf32 value (NaN stays NaN): on sm_90 the hardware conversion, ties to
// even, one instruction (F2FP.TF32); sm_80 has only ties away from zero, which ptxas expands to three
// (the rounding constant added unless |x| is inf or NaN, then the mask). The state steps round 20
// values a warp per chunk, the prep three per element: the chunked call -1.2 % at T 1024 H 4 and
// 4096 H 16, unchanged at 8192 H 24 (session 16 call 5).
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
  return r;
}

// x = hi + lo, both tf32 (lo carries the next 11 bits of x's significand).
struct Tf32Pair {
  uint32_t hi, lo;
};
__device__ __forceinline__ Tf32Pair split_tf32(float x) {
  const uint32_t hi = to_tf32(x);
  return {hi, to_tf32(x - __uint_as_float(hi))};
}

// c += a b for one m16n8k8 tile (a: 4 tf32 registers, b: 2).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// An A (4 values) or B (2 values) fragment rounded to tf32 once, for reuse by every tile that shares
// it: the high parts, and with kPasses == 3 the low parts too (zero otherwise, and never read).
template <int N>
struct Tf32Split {
  uint32_t hi[N], lo[N];
};
template <int kPasses, int N>
__device__ __forceinline__ Tf32Split<N> split_fragment(const float (&x)[N]) {
  static_assert(kPasses == 1 || kPasses == 3, "1xTF32 or 3xTF32");
  Tf32Split<N> f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (kPasses == 3) {
      const Tf32Pair s = split_tf32(x[i]);
      f.hi[i] = s.hi;
      f.lo[i] = s.lo;
    } else {
      f.hi[i] = to_tf32(x[i]);
      f.lo[i] = 0u;
    }
  }
  return f;
}

// An m16n8 fp32 accumulator fed by tf32 mma. kPasses == 3 (3xTF32): the big term into hh, each
// correction term into its own accumulator, so the dependent mma chain is one per k-step, not
// three; kPasses == 1: plain tf32 products (operands rounded to 10 mantissa bits), hh only.
template <int kPasses>
struct Tf32Acc {
  float hh[4] = {0.f, 0.f, 0.f, 0.f};
  float lh[4] = {0.f, 0.f, 0.f, 0.f};  // alo bhi
  float hl[4] = {0.f, 0.f, 0.f, 0.f};  // ahi blo
  __device__ __forceinline__ void mma(const Tf32Split<4>& a, const Tf32Split<2>& b) {
    if constexpr (kPasses == 3) {
      mma_tf32(lh, a.lo, b.hi);
      mma_tf32(hl, a.hi, b.lo);
    }
    mma_tf32(hh, a.hi, b.hi);
  }
  __device__ __forceinline__ float sum(int i) const {
    if constexpr (kPasses == 3) return hh[i] + (lh[i] + hl[i]);
    return hh[i];
  }
};

}  // namespace groupattn::kda_cuda
