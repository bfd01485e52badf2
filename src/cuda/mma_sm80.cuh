// Warp-level tensor-core MMA for sm80+ (mma.sync m16n8k16, fp32 accumulate) and the element
// types it takes. Fragment layouts (PTX ISA, "mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A 16x16 row-major, 4 regs: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 "col",      2 regs: b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8 fp32,       4 regs: c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// A register holds two consecutive-column elements, the lower column in the low 16 bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace groupattn::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarpMask = 0xffffffffu;

template <class T>
struct MmaType;

template <>
struct MmaType<__nv_bfloat16> {
  // Two floats as one register of two bf16 (x in the low half).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void store2(void* dst, float lo, float hi) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
  }
  static __device__ __forceinline__ void store1(void* dst, float x) {
    *reinterpret_cast<__nv_bfloat16*>(dst) = __float2bfloat16_rn(x);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // c = A B with a zero accumulator (ptxas reads RZ for it): the first k-step of a product needs no
  // zeroing of c beforehand, and the result is bitwise that of mma on zeroed c.
  static __device__ __forceinline__ void mma_zero_c(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                    uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  }
};

template <>
struct MmaType<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void store2(void* dst, float lo, float hi) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
  }
  static __device__ __forceinline__ void store1(void* dst, float x) {
    *reinterpret_cast<__half*>(dst) = __float2half_rn(x);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // c = A B with a zero accumulator (ptxas reads RZ for it): the first k-step of a product needs no
  // zeroing of c beforehand, and the result is bitwise that of mma on zeroed c.
  static __device__ __forceinline__ void mma_zero_c(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                    uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  }
};

}  // namespace groupattn::cuda

namespace groupattn::cuda {

// ldmatrix (sm75+): four 8x8 16-bit matrices from shared memory, one row address per lane
// (lanes 8i..8i+7 give the rows of matrix i); lane l receives row l / 4, columns 2(l % 4)..+1 of
// each matrix (with .trans: column l / 4, rows 2(l % 4)..+1), i.e. MMA fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace groupattn::cuda
