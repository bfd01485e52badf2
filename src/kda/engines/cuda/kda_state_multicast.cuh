// The 16-token state pass's chunk-block fill on sm90a: the V / VT CTAs of one (sequence, value head)
// form a thread-block cluster (or 2 or 4 clusters of consecutive V-tiles, where only smaller
// clusters all fit on the GPU at once; the launch picks the size), and the parts of each chunk block that every one of them reads
// identically (W, Qt, Kh: 16 x K each; Aqk 16 x 16; exp(Gamma_C) [K]) are fetched from L2 once per
// cluster by bulk copies multicast into every CTA's shared memory (cp.async.bulk ...
// .multicast::cluster), completing as transaction bytes on each CTA's own "full" mbarrier of the
// stage. Each CTA still copies its own VT columns of U with cp.async. docs/ENGINES.md "Cluster
// multicast of the 16-token state pass" has the design and the cost model.
//
// The copies are spread over the cluster: copy i (48 rows of W / Qt / Kh into their padded shared
// rows, then Aqk, then exp(Gamma_C)) is issued by lane i / cluster of the last warp of CTA
// i % cluster, each multicast to all CTAs, so a CTA issues at most ceil(50 / cluster) copies a chunk.
//
// Why three stages and no "empty" barriers: the chunk-c copies are issued by each CTA at the start of
// its step c - 1 into stage c % 3, last read in step c - 3. A CTA X starts step c - 1 only after its
// stage (c - 1) % 3 is full, i.e. after every peer Y issued its part of chunk c - 1, which Y does at
// the start of its step c - 2, after the barrier that ends Y's step c - 3. So every peer has finished
// reading stage c % 3 before any CTA writes chunk c into it: the full barriers' chain already orders
// the reuse (with two stages it would not: the copy would target the stage peers read in step c - 2).
// The same chain makes each barrier's previous phase complete (and observed) before any byte of its
// next phase arrives. A peer's bytes may land before this CTA's arrive.expect_tx of the phase: the
// transaction count goes negative for a while, and the phase cannot complete before that arrival.
#pragma once

#include <cstdint>

#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"
#include "kda/engines/cuda/kda_tf32_mma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "cuda/sm90/hopper.cuh"
#endif

namespace groupattn::kda_cuda {

// Copies of one chunk block that every CTA of the cluster receives, and their bytes.
template <int K>
struct MulticastBlock {
  static constexpr int kRowCopies = 3 * kChunk;     // one per row of W, Qt, Kh (padded in shared memory)
  static constexpr int kCopies = kRowCopies + 2;    // + Aqk (16 x 16, contiguous) + exp(Gamma_C) [K]
  static constexpr uint32_t kTxBytes = (kRowCopies * K + kChunk * kChunk + K) * sizeof(float);
  static constexpr int kMaxCluster = 8;             // V / 16 at V = 128 (portable cluster size)
  static constexpr int kMinCluster = 2;
  static_assert((kCopies + kMinCluster - 1) / kMinCluster <= 32, "one warp issues a CTA's share");
  static_assert(K * sizeof(float) % 16 == 0, "bulk copies are whole 16-byte units");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace sm90 = ::groupattn::cuda::sm90;

// This CTA's rank in its cluster and the cluster's CTA count (1-D clusters along x).
__device__ __forceinline__ void multicast_rank(uint32_t* rank, uint32_t* cluster) {
  *rank = sm90::ptx::get_sreg_cluster_ctarank();
  *cluster = sm90::ptx::get_sreg_cluster_nctarank();
}

// Barrier setup of the cluster pass: one full barrier per stage (one arrival: this CTA's
// arrive.expect_tx), published to the cluster, then a cluster barrier so no peer multicasts into a
// CTA whose barriers are not yet initialised (and every CTA of the cluster has started).
template <int kStages>
__device__ __forceinline__ void multicast_begin(uint64_t* full, int tid) {
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) sm90::mbar_init(full + s, 1);
    sm90::mbar_init_fence();
  }
  sm90::cluster_sync();
}

// Issues chunk block `blk`'s copies into `stage` (offsets from the state plan P): this CTA's U
// columns by cp.async (committed as one group), its share of the multicast copies, and its full
// barrier's expected bytes.
template <class P, int K, int VT, int kThreads>
__device__ __forceinline__ void multicast_stage(float* stage, uint64_t* full, const float* blk, const ChunkLayout& l,
                                                int V, int e0, int tid, uint32_t rank, uint32_t cluster) {
  using M = MulticastBlock<K>;
  constexpr int kUPieces = kChunk * VT / 4;
  static_assert(kUPieces <= kThreads - kWarp, "U pieces stay off the issuing warp");
  if (tid < kUPieces) {  // U [r][e0 + c4 .. + 3]
    const int r = tid / (VT / 4), c4 = tid % (VT / 4) * 4;
    cp_async16(stage + P::kU + r * VT + c4, blk + l.u + r * V + e0 + c4);
  }
  cp_async_commit();
  if (tid >= kThreads - kWarp) {  // the last warp issues this CTA's share of the multicast copies
    const int lane = tid - (kThreads - kWarp);
    if (lane == 0) sm90::mbar_arrive_expect_tx(full, M::kTxBytes);
    const int i = static_cast<int>(rank) + static_cast<int>(cluster) * lane;
    if (i < M::kCopies) {
      float* dst;
      const float* src;
      uint32_t bytes = K * sizeof(float);
      if (i < M::kRowCopies) {  // row r of matrix m (0 W, 1 Qt, 2 Kh)
        const int m = i / kChunk, r = i % kChunk;
        const int at = m == 0 ? P::kW + r * P::kRowWQ : m == 1 ? P::kQt + r * P::kRowWQ : P::kKh + r * P::kRowKh;
        const int64_t from = (m == 0 ? l.w : m == 1 ? l.qt : l.kh) + r * K;
        dst = stage + at;
        src = blk + from;
      } else if (i == M::kRowCopies) {  // Aqk
        dst = stage + P::kA;
        src = blk + l.aqk;
        bytes = kChunk * kChunk * sizeof(float);
      } else {  // exp(Gamma_C)
        dst = stage + P::kEc;
        src = blk + l.ec;
      }
      const auto mask = static_cast<uint16_t>((1u << cluster) - 1u);
      sm90::ptx::cp_async_bulk(sm90::ptx::space_cluster, sm90::ptx::space_global, dst, src, bytes, full, mask);
    }
  }
}

// Waits for this thread's U copies and for the stage's full barrier (its phase of parity `parity`),
// at cluster scope: the bytes come from copies the peers issued. Traps after ~4 s instead of hanging.
__device__ __forceinline__ void multicast_wait(uint64_t* full, uint32_t parity) {
  cp_async_wait_all();
  namespace ptx = sm90::ptx;
  if (ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, full, parity)) return;
  const uint64_t t0 = ptx::get_sreg_globaltimer();
  while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, full, parity)) {
    if (ptx::get_sreg_globaltimer() - t0 > 4000000000ull) sm90::hang_trap();
  }
}

// Before exit: no CTA leaves while copies it issued may still be writing into its peers.
__device__ __forceinline__ void multicast_end() { sm90::cluster_sync(); }

#else  // every other compile pass: the cluster kernel is never launched there (the host checks)

__device__ __forceinline__ void multicast_rank(uint32_t*, uint32_t*) { __trap(); }
template <int kStages>
__device__ __forceinline__ void multicast_begin(uint64_t*, int) {
  __trap();
}
template <class P, int K, int VT, int kThreads>
__device__ __forceinline__ void multicast_stage(float*, uint64_t*, const float*, const ChunkLayout&, int, int, int,
                                                uint32_t, uint32_t) {
  __trap();
}
__device__ __forceinline__ void multicast_wait(uint64_t*, uint32_t) { __trap(); }
__device__ __forceinline__ void multicast_end() { __trap(); }

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace groupattn::kda_cuda
