// Phase stamps of the sm90 prefill kernel (docs/PREFILL_SM90.md, "Where a short CTA's time goes"):
// where the time of one CTA goes, without counters. Compiled in only with
// -DGROUPATTN_PREFILL_PHASE_STAMPS (the driver scripts/prefill-phase-stamps.cu); without it every
// GA_PREFILL_STAMP is an empty statement and the kernel's PTX is byte-identical to the unstamped
// source (checked when the stamps went in).
//
// Record of CTA c (c = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)): kSlots
// uint64 at g_stamps + c * kSlots. Clock slots hold the SM's clock64 (one counter per SM, so the
// gap between consecutive CTAs on one SM is exact); kStartNs / kEndNs hold %globaltimer (ns, one
// clock for the whole GPU, coarse) to align SMs and convert cycles to time. One thread per role
// writes: thread 0 (consumer warpgroup 0), thread 128 (warpgroup 1), the producer's issuing thread.
#pragma once

#include <cstdint>

namespace groupattn::sm90_engine::prefill_stamps {

enum Slot : int {
  kSmId = 0,       // %smid + 1 (0: the CTA wrote nothing)
  kStartNs,        // %globaltimer at kernel entry (thread 0)
  kStart,          // clock64 at kernel entry (thread 0)
  kReady,          // consumer warpgroup 0 after __syncthreads and setmaxnreg.inc
  kQLanded,        // warpgroup 0: q_full completed
  kFirstK,         // warpgroup 0: the first KV stage completed (K and V of tile blk_begin; with
                   // early first loads, or split K/V at D 256: K of tile blk_begin)
  kFirstS0,        // warpgroup 0: the first S product done (wgmma_wait<0>)
  kFirstS1,        // warpgroup 1: the same
  kLoopEnd0,       // warpgroup 0: last O product done and its stage released (before the epilogue)
  kLoopEnd1,       // warpgroup 1
  kEpiEnd0,        // warpgroup 0: last O store issued
  kEpiEnd1,        // warpgroup 1
  kProducerStart,  // before the CTA's first TMA: the producer thread after setmaxnreg.dec, or
                   // (early first loads) thread 0 after the barrier init, before the CTA barrier
  kProducerDone,   // producer thread: last TMA issued
  kEndNs,          // %globaltimer after warpgroup 0's epilogue
  kTiles,          // blk_end - blk_begin (value, not a time)
  kSlots
};

}  // namespace groupattn::sm90_engine::prefill_stamps

#if defined(GROUPATTN_PREFILL_PHASE_STAMPS) && defined(__CUDACC__)
namespace groupattn::sm90_engine::prefill_stamps {

// Set by the driver (cudaMemcpyToSymbol); null: the kernel stamps nothing. Each stamp reads it with
// a global load (SASS: LDG, also when declared __constant__, nvcc 13) that the store then waits
// for: thread 0 makes four before the barrier init, so the prologue phases include up to four load
// latencies (L1 hits when the line survived the previous CTA) in both early-loads modes alike.
__device__ unsigned long long* g_stamps = nullptr;

__device__ __forceinline__ unsigned long long clock_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ unsigned long long ns_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ unsigned long long sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ void stamp(int slot, unsigned long long value) {
  unsigned long long* const buf = g_stamps;
  if (buf == nullptr) return;
  const unsigned long long cta =
      blockIdx.x + static_cast<unsigned long long>(gridDim.x) *
                       (blockIdx.y + static_cast<unsigned long long>(gridDim.y) * blockIdx.z);
  buf[cta * kSlots + slot] = value;
}

}  // namespace groupattn::sm90_engine::prefill_stamps

#define GA_PREFILL_STAMP(cond, slot)                              \
  do {                                                            \
    if (cond)                                                     \
      ::groupattn::sm90_engine::prefill_stamps::stamp(            \
          ::groupattn::sm90_engine::prefill_stamps::slot,         \
          ::groupattn::sm90_engine::prefill_stamps::clock_now()); \
  } while (0)
#define GA_PREFILL_STAMP_VALUE(cond, slot, value)                                                     \
  do {                                                                                                \
    if (cond)                                                                                         \
      ::groupattn::sm90_engine::prefill_stamps::stamp(::groupattn::sm90_engine::prefill_stamps::slot, \
                                                      (value));                                       \
  } while (0)
#define GA_PREFILL_STAMP_NS(cond, slot) \
  GA_PREFILL_STAMP_VALUE(cond, slot, ::groupattn::sm90_engine::prefill_stamps::ns_now())
#define GA_PREFILL_STAMP_SMID(cond) \
  GA_PREFILL_STAMP_VALUE(cond, kSmId, ::groupattn::sm90_engine::prefill_stamps::sm_id() + 1)
#else
#define GA_PREFILL_STAMP(cond, slot) \
  do {                               \
  } while (0)
#define GA_PREFILL_STAMP_VALUE(cond, slot, value) \
  do {                                            \
  } while (0)
#define GA_PREFILL_STAMP_NS(cond, slot) \
  do {                                  \
  } while (0)
#define GA_PREFILL_STAMP_SMID(cond) \
  do {                              \
  } while (0)
#endif
