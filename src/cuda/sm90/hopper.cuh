// Hopper (sm_90a) device primitives for the sm90 engines: shared-memory addresses, mbarriers, TMA
// tile loads, wgmma shared-memory descriptors and fences, named barriers, proxy fences.
//
// Adapted from the device wrappers of /work/shared/probes/hopper_probe.cu (the project's probe,
// every primitive of which passed on an H200; HOPPER-PRIMITIVES.md records the facts). Everything
// here exists only in the sm_90a compile pass (__CUDA_ARCH_FEAT_SM90_ALL); callers guard their
// device code the same way, so the sm_80 and host passes never see these names.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include <cuda.h>  // CUtensorMap
#include <cuda/ptx>

namespace groupattn::cuda::sm90 {

namespace ptx = ::cuda::ptx;

// Generic -> 32-bit shared-window address (the form shared-state-space PTX operands take).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Round a dynamic shared-memory pointer up to 1024 bytes: the 128B swizzle pattern is anchored
// to 1024-byte boundaries, so TMA and a descriptor with base offset 0 agree only there. Callers
// allocate 1024 spare bytes.
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) {
  const uint32_t s = smem_u32(p);
  return p + (((s + 1023u) & ~1023u) - s);
}

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) { ptx::mbarrier_init(bar, count); }
// Publishes initialised barriers; a CTA barrier must follow before any other thread uses them.
__device__ __forceinline__ void mbar_init_fence() { ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster); }
// One arrival that also raises the transaction bytes this phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  (void)ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, bar, bytes);
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { (void)ptx::mbarrier_arrive(bar); }

// The hang guard's trap, out of line on purpose: a trap inlined into a setmaxnreg kernel makes
// ptxas allocate the whole kernel within the entry register count (168 at 384 threads) and ignore
// the consumers' setmaxnreg.inc budget -- the overlapped sm90 prefill loop spilled 260 bytes and
// had its wgmma serialized (C7512) with it inline, and nothing without it (same budget).
__device__ __noinline__ void hang_trap() { __trap(); }

// Waits until the phase with `parity` completed. An unverified kernel must not hang the GPU: after
// about 4 s of global time the CTA traps (the launch then fails with an error the caller sees).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  if (ptx::mbarrier_try_wait_parity(bar, parity)) return;
  const uint64_t t0 = ptx::get_sreg_globaltimer();
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (ptx::get_sreg_globaltimer() - t0 > 4000000000ull) hang_trap();
  }
}

// One arrival on `bar`, made by the hardware once every cp.async this thread issued before it
// has completed (PTX cp.async.mbarrier.arrive). .noinc: the barrier's init count includes these
// arrivals (without it the pending count is raised by one first, a net change of zero).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// ---- TMA ------------------------------------------------------------------------------------

// Rank-4 tile load global -> this CTA's shared memory, completing as transaction bytes on `bar`.
// Coordinates innermost first; out-of-bounds elements arrive as zeros (and still count as bytes).
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, smem_dst, map, coords, bar);
}

// Plain bulk copy global -> this CTA's shared memory (PTX cp.async.bulk, no tensor map): `bytes`
// contiguous bytes, a multiple of 16, both addresses 16-byte aligned, completing as transaction
// bytes on `bar`.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// The same box as tma_load_4d brought into L2 only (PTX cp.async.bulk.prefetch.tensor): no shared
// memory, no barrier, nothing to wait for. A hint: a later tma_load_4d of the box then reads L2.
__device__ __forceinline__ void tma_prefetch_l2_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// Rank-4 tile store of this CTA's shared memory to global (the inverse of tma_load_4d, the same
// map layout and swizzle): elements past the map's bounds are not written; the start coordinates
// must be >= 0. Completes by bulk group: bulk_commit_group, then bulk_wait_group_read before the
// source may be overwritten or the CTA exits (HOPPER-PRIMITIVES.md section 4). Shared memory written
// by threads needs fence_proxy_async_smem in each writer and a barrier before the issue.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                             const void* smem_src) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  ptx::cp_async_bulk_tensor(ptx::space_global, ptx::space_shared, map, coords, smem_src);
}
// Closes this thread's TMA stores issued since the last commit into one bulk group.
__device__ __forceinline__ void bulk_commit_group() { ptx::cp_async_bulk_commit_group(); }
// Waits until every bulk group of this thread has finished reading shared memory (not for the
// global writes, which complete on their own; a kernel's writes are visible after it ends).
__device__ __forceinline__ void bulk_wait_group_read_all() { ptx::cp_async_bulk_wait_group_read(ptx::n32_t<0>{}); }

// stmatrix (sm_90): four 8x8 16-bit matrices to shared memory, the inverse of ldmatrix: lanes
// 8k..8k+7 give the row addresses (16 bytes each) of matrix k, and every lane's register k holds
// row lane / 4, columns 2 (lane % 4) .. + 1 of matrix k (the mma accumulator layout, packed).
__device__ __forceinline__ void stmatrix_x4(void* row_address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Pulls a __grid_constant__ tensor map into the cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- fences and barriers --------------------------------------------------------------------

// Shared-memory writes by this thread become visible to the async proxy (wgmma operand reads,
// TMA). Each writer fences, then a barrier, then the wgmma is issued.
__device__ __forceinline__ void fence_proxy_async_smem() { ptx::fence_proxy_async(ptx::space_shared); }

// Named barrier `id` (1..15; 0 is __syncthreads) over `n` threads (whole warps).
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
// Arrives on named barrier `id` (of `n` threads) without waiting: releases the threads that sync on it.
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// ---- clusters and distributed shared memory (HOPPER-PRIMITIVES.md section 10, probe test f) ----

// Cluster-wide barrier: every thread of every CTA of the cluster arrives once per phase (release:
// its earlier shared-memory writes become visible to the cluster), then waits (acquire) for all.
// Arriving implies the CTA has started, so after one phase its peers may read its shared memory.
__device__ __forceinline__ void cluster_sync() {
  ptx::barrier_cluster_arrive(ptx::sem_release);
  ptx::barrier_cluster_wait(ptx::sem_acquire);
}
// This CTA's shared-window address `addr` mapped to the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t mapa_shared(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
// Loads through a mapa'd address (volatile + memory clobber: never hoisted above a cluster_sync).
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_shared_cluster_v4f32(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// ---- wgmma plumbing -------------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX "Matrix Descriptor Format"): bits 0-13 start address >> 4,
// 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 49-51 base
// offset (0: tiles start on 1024-byte boundaries), 62-63 swizzle (1 = 128B).
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32;
  d |= static_cast<uint64_t>(1u) << 62;  // 128-byte swizzle
  return d;
}

// K-major, 128B swizzle, 64 16-bit elements of K per 128-byte row: SBO = 1024 (next 8 rows),
// LBO unused (16). Verified for A and B (probe tests b, c, g). k16 step kk of a 64-wide block:
// desc + 2 * kk.
__device__ __forceinline__ uint64_t desc_kmajor_sw128(const void* tile) { return make_smem_desc(smem_u32(tile), 16, 1024); }

// MN-major, 128B swizzle: each 128-byte row holds 64 M (or N) values of one k; SBO = 1024 (next 8
// k rows), LBO = bytes between 64-wide M/N blocks. k16 step kk: desc + 128 * kk (2048 bytes).
// Verified as B with imm-trans-b = 1 (probe test g); as A (imm-trans-a = 1) documented only.
__device__ __forceinline__ uint64_t desc_mnmajor_sw128(const void* tile, uint32_t mn_block_bytes) {
  return make_smem_desc(smem_u32(tile), mn_block_bytes, 1024);
}

// setmaxnreg (HOPPER-PRIMITIVES.md section 8): executed by all four warps of a warpgroup, in a
// kernel with a register count at entry (__launch_bounds__(threads, 1)). Sum over warpgroups of
// 128 x R <= 65536; 1 producer + 2 consumers: 40 / 232 (verified by the probe).
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Pins accumulator registers around the asynchronous wgmma region (the compiler does not know the
// asm is asynchronous): call before wgmma_fence and after wgmma_wait.
template <int n>
__device__ __forceinline__ void fence_regs(float (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for RS-form A fragments (registers wgmma reads asynchronously): call before
// wgmma_fence and after the wgmma_wait that covers their last use, so the compiler neither moves
// their definitions past the fence nor reuses them while the wgmma is in flight.
template <int n>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

}  // namespace groupattn::cuda::sm90

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
