// Phase stamps of the sm90 swap-AB decode kernel (docs/DECODE_SM90.md section 20, "Decode phase
// stamps"): where the time of one decode CTA goes -- the work list's plan, the first loads, the
// mainloop, the epilogue, the empty slots' short lives -- without counters. Compiled in only with
// -DGROUPATTN_DECODE_PHASE_STAMPS (the driver scripts/decode-phase-stamps.cu); without it every
// GA_DECODE_STAMP* is an empty statement (its arguments are not evaluated) and the kernel's SASS is
// the unstamped source's (checked when the stamps went in). The same design as the prefill
// kernel's stamps (prefill_phase_stamps.cuh).
//
// Record of CTA c (c = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), whatever
// the grid order): kSlots uint64 at g_stamps + c * kSlots. Clock slots hold the SM's clock64 (one
// counter per SM, so the gap between consecutive CTAs on one SM is exact); kStartNs / kEndNs hold
// %globaltimer (ns, one clock for the whole GPU, coarse) to align SMs and convert cycles to time.
// Writers: thread 0 (consumer warp 0: entry, barrier init, plan, barrier, Q, first tiles, first
// S^T, loop, epilogue, exit) and the producer warp's lane 0 (tensor-map prefetch, barrier, first
// TMA's issue, the first refill's issue, last TMA). Slots past kSeq were added in session 12 (the
// prologue of small one-token shapes, docs/DECODE_SM90.md section 24, "Next measurement").
//
// Stamp cost: each stamp reads g_stamps (a global load the store waits for; the clock is read
// before it), so a thread's first stamp costs it one L2 round trip after its clock read, later ones
// an L1 hit. The producer lane's first stamp follows its tensor-map prefetch (kTmapPrefetch), long
// before the CTA barrier.
//
// Prologue variants (compile time, -DGROUPATTN_DECODE_STAMPS_VARIANT=N with the stamps define only;
// the library's kernels are variant 0, the unstamped source):
//   0  as the library: producer lane 0 prefetches both tensor maps (prefetch.tensormap) at entry
//   1  no tensor-map prefetch (the first TMA fetches its descriptor itself)
//   2  as 0, plus producer lane 0 asks L2 for the first tile's K and V boxes
//      (cp.async.bulk.prefetch.tensor, batched K/V only) once the tile range is known, before the
//      CTA barrier: the TMA unit and the descriptors meet their first use before the barrier
#pragma once

#include <cstdint>

namespace groupattn::sm90_engine::decode_stamps {

enum Slot : int {
  kSmId = 0,         // %smid + 1 (0: the CTA wrote nothing)
  kKind,             // kKindWork, kKindEmptySlot or kKindEmptyColumns (value, not a time)
  kStartNs,          // %globaltimer at kernel entry (thread 0)
  kStart,            // clock64 at kernel entry (thread 0)
  kPlanDone,         // work-list mode: after fold_list_slot returned (0 in the ordinary mode)
  kRangeKnown,       // the CTA's sequence and tile range known (both modes), before the barrier init
  kBarrier,          // after the CTA's __syncthreads (barriers initialised, tensor maps prefetched)
  kProducerFirst,    // producer lane 0: the first tile's TMAs issued (after its empty[] wait)
  kProducerLast,     // producer lane 0: the last tile's TMAs issued
  kQReady,           // consumer warpgroup: Q in shared memory (after load_q's named barrier)
  kFirstTile,        // consumer: the first full[] wait returned (tile blk_begin landed)
  kLoopEnd,          // consumer: the last tile's O^T product done and its stage released
  kEnd,              // consumer: partials / O / LSE written (write_output or cluster_reduce_output);
                     // an empty CTA: its return
  kEndNs,            // %globaltimer at kEnd
  kTiles,            // blk_end - blk_begin (value)
  kSeq,              // the sequence b (value; -1 + 2^64 for an empty list slot)
  kBarrierInit,      // thread 0: mbarriers initialised (after mbar_init_fence)
  kTmapPrefetch,     // producer lane 0: right after its prefetch.tensormap of K and V (variant 1: none)
  kProducerBarrier,  // producer lane 0: past the CTA's __syncthreads
  kProducerIssue,    // producer lane 0: first tile, after its empty[] wait and expect_tx, before the TMAs
  kScoresFirst,      // consumer thread 0: the first tile's S^T = K Q^T complete (wgmma waited)
  kSecondTile,       // consumer thread 0: the second full[] wait returned (tile blk_begin + 1 landed)
  kRefillIssued,     // producer lane 0: tile kStages's TMAs issued (the first stage used twice)
  kRefillWait,       // consumer thread 0: about to wait for tile kStages
  kRefillLanded,     // consumer thread 0: tile kStages's full[] wait returned
  kSlots
};

enum Kind : unsigned long long {
  kKindWork = 1,          // the CTA ran the barrier, the loads and the epilogue
  kKindEmptySlot = 2,     // work-list slot past the plan's last: returned after the plan
  kKindEmptyColumns = 3,  // column block past the sequence's query columns: returned before any barrier
};

#if defined(GROUPATTN_DECODE_STAMPS_VARIANT) && !defined(GROUPATTN_DECODE_PHASE_STAMPS)
#error "GROUPATTN_DECODE_STAMPS_VARIANT is for the stamps tool only (with -DGROUPATTN_DECODE_PHASE_STAMPS)"
#endif
#ifdef GROUPATTN_DECODE_STAMPS_VARIANT
inline constexpr int kVariant = GROUPATTN_DECODE_STAMPS_VARIANT;
#else
inline constexpr int kVariant = 0;  // the library's kernels
#endif
inline constexpr int kVariantNoTmapPrefetch = 1, kVariantTmaL2First = 2;
static_assert(kVariant >= 0 && kVariant <= 2, "GROUPATTN_DECODE_STAMPS_VARIANT: 0, 1 or 2");
// Whether producer lane 0 prefetches the tensor maps at entry (true in the library).
inline constexpr bool kPrefetchTensormaps = kVariant != kVariantNoTmapPrefetch;

}  // namespace groupattn::sm90_engine::decode_stamps

#if defined(GROUPATTN_DECODE_PHASE_STAMPS) && defined(__CUDACC__)
namespace groupattn::sm90_engine::decode_stamps {

// Set by the driver (cudaMemcpyToSymbol); null: the kernel stamps nothing. Each stamp reads it with
// a global load that the store then waits for (as in the prefill stamps): the entry -> plan phases
// include one load latency (an L1 / L2 hit after the first CTA) that the unstamped kernel has not.
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

}  // namespace groupattn::sm90_engine::decode_stamps

#define GA_DECODE_STAMP(cond, slot)                                                                         \
  do {                                                                                                      \
    if (cond)                                                                                               \
      ::groupattn::sm90_engine::decode_stamps::stamp(::groupattn::sm90_engine::decode_stamps::slot,         \
                                                     ::groupattn::sm90_engine::decode_stamps::clock_now()); \
  } while (0)
#define GA_DECODE_STAMP_VALUE(cond, slot, value)                                                    \
  do {                                                                                              \
    if (cond)                                                                                       \
      ::groupattn::sm90_engine::decode_stamps::stamp(::groupattn::sm90_engine::decode_stamps::slot, \
                                                     static_cast<unsigned long long>(value));       \
  } while (0)
#define GA_DECODE_STAMP_NS(cond, slot) \
  GA_DECODE_STAMP_VALUE(cond, slot, ::groupattn::sm90_engine::decode_stamps::ns_now())
// Entry: %smid, globaltimer, clock64 (in that order, so kStart is the later of the two times).
#define GA_DECODE_STAMP_ENTRY(cond)                                                           \
  do {                                                                                        \
    GA_DECODE_STAMP_VALUE(cond, kSmId, ::groupattn::sm90_engine::decode_stamps::sm_id() + 1); \
    GA_DECODE_STAMP_NS(cond, kStartNs);                                                       \
    GA_DECODE_STAMP(cond, kStart);                                                            \
  } while (0)
// Exit of any CTA: its kind, clock64, then globaltimer.
#define GA_DECODE_STAMP_EXIT(cond, kind)                                               \
  do {                                                                                 \
    GA_DECODE_STAMP_VALUE(cond, kKind, ::groupattn::sm90_engine::decode_stamps::kind); \
    GA_DECODE_STAMP(cond, kEnd);                                                       \
    GA_DECODE_STAMP_NS(cond, kEndNs);                                                  \
  } while (0)
#else
#define GA_DECODE_STAMP(cond, slot) \
  do {                              \
  } while (0)
#define GA_DECODE_STAMP_VALUE(cond, slot, value) \
  do {                                           \
  } while (0)
#define GA_DECODE_STAMP_NS(cond, slot) \
  do {                                 \
  } while (0)
#define GA_DECODE_STAMP_ENTRY(cond) \
  do {                              \
  } while (0)
#define GA_DECODE_STAMP_EXIT(cond, kind) \
  do {                                   \
  } while (0)
#endif
