// cp.async (sm80+): global -> shared copies that bypass registers (16 bytes with zero fill, or 4).
#pragma once

#include <cstdint>

namespace groupattn::cuda {

inline constexpr int kCpAsyncBytes = 16;

// Copies 16 bytes from `src` to `dst` when `valid`, else writes 16 zero bytes to `dst` (src is
// not read then, but must still be a mapped address: pass any valid pointer).
__device__ __forceinline__ void cp_async_16_or_zero(void* dst, const void* src, bool valid) {
  const uint32_t saddr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? kCpAsyncBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src), "r"(src_bytes)
               : "memory");
}

// Copies 16 bytes from `src` to `dst` (both 16-byte aligned; bypasses L1).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  const uint32_t saddr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src) : "memory");
}

// Copies 4 bytes from `src` to `dst` (any 4-byte aligned addresses; goes through L1).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  const uint32_t saddr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace groupattn::cuda
