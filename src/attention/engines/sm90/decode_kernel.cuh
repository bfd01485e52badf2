// The sm90 decode kernel (Hopper, sm_90a): GQA decode for 1..16 new tokens, head dim D = 64, 128
// or 256 (D == Dv; fp8 K/V: 128), with the operands swapped so the KV positions fill wgmma's
// 64-row M side and the group's query rows (group x new tokens, packed as columns) sit on the N
// side -- no 64-row query tile padded with empty rows.
//
//   Q   [B, Sq, Hq, D]                 columns n = token * group + head_in_group, kN per CTA
//   K,V [B, Sk, Hkv, D] or paged [pages, page_size, Hkv, D] (any page_size: a tile's keys come
//       as 64 / gcd(page_size, 64) boxes, each from its own page; produce() in decode_mainloop.cuh)
//   out [B, Sq, Hq, D] (Q's dtype), lse fp32 [Hq, B * Sq]            -- num_splits == 1
//   o_partial / lse_partial fp32 (the portable engine's layout)     -- num_splits  > 1, workspace mode
//   out, lse, after a DSMEM reduction over a cluster of the splits   -- num_splits  > 1, cluster mode
//
// Grid (m_blocks * num_splits, Hkv, B), in cluster mode clusters of (num_splits, 1, 1), in the
// work-list mode (m_blocks * slots, Hkv, 1) or, p.list_heads_fastest, (Hkv, m_blocks * slots, 1); 160
// threads: warps 0-3 = the consumer warpgroup, warp 4 = the producer. Per KV tile of the CTA's
// split (cut to the keys its columns can see):
//   producer   waits empty[stage], expect_tx(the loaded boxes' bytes: 2 x 64 keys x D x 2 bytes
//              unless the tile ends the sequence), TMA D / 64 K and V boxes per run of keys (one
//              run of 64, or for small pages one run per gcd(page_size, 64) keys) into the stage
//   consumer   waits full[stage]; S^T = K Q^T (wgmma, fp32); scale / softcap / mask; column max
//              across the warpgroup; P = exp2(S - max) (fp32), stored to smem as bf16/f16 P^T;
//              O^T = O^T * alpha + V^T P^T (wgmma); arrives on empty[stage]
//   fp8 K/V    16 KB stages, 6 of them; the consumer loads its fragment bytes of both tiles into
//              registers, converts them there, arrives on empty[stage] before the softmax, and
//              runs both GEMMs in the RS form (decode_mainloop.cuh)
// then the epilogue (decode_epilogue.cuh: write_output, or cluster_reduce_output in cluster mode).
// The mainloop's GEMM operand layouts and why they are what they are: decode_mainloop.cuh. No
// setmaxnreg: with one consumer warpgroup of kN <= 32 columns the register file is not the limit
// (160 threads).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "attention/engines/cuda/decode_work_list.cuh"
#include "attention/engines/sm90/decode_combine.cuh"
#include "attention/engines/sm90/decode_epilogue.cuh"
#include "attention/engines/sm90/decode_phase_stamps.cuh"
#include "attention/engines/sm90/decode_traits.h"
#include "attention/engines/sm90/launch.h"
#include "core/host_timing.h"
#include "cuda/cuda_check.h"
#include "cuda/driver_launch.h"
#include "cuda/pdl.cuh"

namespace groupattn::sm90_engine {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Stamps-tool variant 2 only (decode_phase_stamps.cuh; never instantiated in the library): the
// first tile's K and V boxes, as produce() would load them (batched K/V), asked of L2 through the
// TMA unit before the CTA barrier.
template <class Traits>
__device__ void stamps_prefetch_first_tile_l2(const KernelParams& p, const CtaWork& w,
                                              const CUtensorMap* tmap_k, const CUtensorMap* tmap_v) {
  constexpr int kDBoxes = Traits::kFp8 ? 1 : Traits::kDBlocks;
  constexpr int kDElems = Traits::kFp8 ? 0 : Traits::kSwizzleElems;
  if (p.block_table != nullptr || w.blk_begin >= w.blk_end) return;
  const int row = w.blk_begin * Traits::kBlockKV;
#pragma unroll
  for (int db = 0; db < kDBoxes; ++db) hw::tma_prefetch_l2_4d(tmap_k, db * kDElems, w.kvh, row, w.b);
#pragma unroll
  for (int db = 0; db < kDBoxes; ++db) hw::tma_prefetch_l2_4d(tmap_v, db * kDElems, w.kvh, row, w.b);
}

template <class Traits>
__device__ void decode_cta(const KernelParams& p, const CUtensorMap* tmap_k, const CUtensorMap* tmap_v) {
  constexpr int kN = Traits::kN, kBlockKV = Traits::kBlockKV;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const SmemMap<Traits> sm{hw::align_1024(smem_raw)};
  GA_DECODE_STAMP_ENTRY(threadIdx.x == 0);

  CtaWork w;
  // Work-list mode (p.seq_splits set): slot w.split of the plane names the sequence and tiles,
  // which every warp computes from the lengths (the same integers; decode_work_list.cuh). With
  // list_heads_fastest the KV head is x, so a slot's Hkv CTAs launch together (they read the same
  // K/V rows) and a column block's slots with no work launch after its slots with work.
  const bool list = p.seq_splits != nullptr;
  int column = static_cast<int>(blockIdx.x);  // m_block x splits + split
  w.kv_group = static_cast<int>(blockIdx.y);
  w.b = static_cast<int>(blockIdx.z);
  if (p.list_heads_fastest) {  // (set only with p.seq_splits)
    column = static_cast<int>(blockIdx.y);
    w.kv_group = static_cast<int>(blockIdx.x);
  }
  const int m_block = column / p.num_splits;
  w.split = column % p.num_splits;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  // Small pages: the producer warp gathers the tiles with cp.async (produce(), gather_tile()),
  // every lane arriving on full[]; otherwise lane 0's expect_tx arrival and the TMA bytes.
  const bool gather = p.block_table != nullptr && paged_gather(p.page_size);
  // The work list's one global load of its plan (this lane's sequence length) first, then the
  // barrier init and the tensor-map prefetches, which need nothing from the plan or the sequence,
  // so they issue while that load is in flight (docs/DECODE_SM90.md section 20, session 11). A
  // CTA that returns below (no work) returns before the CTA barrier; its barriers go unused.
  int list_begin = 0, list_end = 0, list_k_len = -1;
  const cuda_engine::ListLane mine = list ? cuda_engine::load_list_lane(p, lane) : cuda_engine::ListLane{};
  if (tid == 0) {
    for (int st = 0; st < Traits::kStages; ++st) {
      hw::mbar_init(sm.full(st), gather ? kProducerLanes : 1);
      hw::mbar_init(sm.empty(st), Traits::kConsumerWarps);
    }
    hw::mbar_init_fence();
  }
  GA_DECODE_STAMP(tid == 0, kBarrierInit);
  if (warp == Traits::kProducerWarp && lane == 0) {
    if constexpr (decode_stamps::kPrefetchTensormaps) {  // (a stamps-tool variant turns it off)
      hw::prefetch_tensormap(tmap_k);
      hw::prefetch_tensormap(tmap_v);
    }
    GA_DECODE_STAMP(true, kTmapPrefetch);
  }
  if (list) {
    const cuda_engine::ListSlot e =
        cuda_engine::fold_list_slot<kBlockKV>(p, mine, p.list_plane_wave, w.split, lane);
    GA_DECODE_STAMP(threadIdx.x == 0, kPlanDone);
    // The combine's {count, first slot} of the sequence: written by its split 0 in plane (0, 0),
    // before any return below; the combine reads it after griddepcontrol.wait (grid complete).
    if (e.b >= 0 && e.split == 0 && column < p.num_splits && w.kv_group == 0 && threadIdx.x == 0) {
      int32_t* seq = const_cast<int32_t*>(p.seq_splits) + 2 * e.b;
      seq[0] = e.splits;
      seq[1] = e.first;
    }
    w.b = e.b;
    if (w.b < 0) {  // a slot past the plan's last (the grid is sized for the bound)
      GA_DECODE_STAMP_VALUE(threadIdx.x == 0, kSeq, w.b);
      GA_DECODE_STAMP_EXIT(threadIdx.x == 0, kKindEmptySlot);
      return;
    }
    list_begin = e.begin;
    list_end = e.end;
    list_k_len = e.k_len;
  }
  w.s = cuda_engine::seq_info(p, w.b, list_k_len);  // (the list's plan loaded the K length)
  w.part_token0 = list ? 0 : w.s.q_token0;
  const int total_cols = w.s.q_len * p.group;
  w.col0 = m_block * kN;
  // The whole CTA, before any barrier (in cluster mode every split of the column block, i.e. the
  // whole cluster, returns here: col0 and total_cols do not depend on the split).
  if (w.col0 >= total_cols) {
    GA_DECODE_STAMP_EXIT(threadIdx.x == 0, kKindEmptyColumns);
    return;
  }
  w.cols = min(kN, total_cols - w.col0);
  w.kvh = cuda_engine::kv_head_of(w.kv_group * p.group, p.group, p.heads_kv);
  // Visible keys are non-decreasing in the token: the CTA needs [lo(first), hi(last)], and every
  // column sees [lo(last), hi(first)].
  const KeyInterval first_vis = cuda_engine::visible_keys(p, w.s, w.col0 / p.group);
  const KeyInterval last_vis = cuda_engine::visible_keys(p, w.s, (w.col0 + w.cols - 1) / p.group);
  const int n_blocks = (w.s.k_len + kBlockKV - 1) / kBlockKV;
  if (list) {
    w.blk_begin = list_begin;
    w.blk_end = min(list_end, n_blocks);
  } else {
    cuda_engine::split_range(n_blocks, w.split, p.num_splits, &w.blk_begin, &w.blk_end);
  }
  if (first_vis.lo <= last_vis.hi) {
    w.blk_begin = max(w.blk_begin, first_vis.lo / kBlockKV);
    w.blk_end = min(w.blk_end, last_vis.hi / kBlockKV + 1);
  } else {
    w.blk_end = w.blk_begin;
  }
  w.common_lo = last_vis.lo;
  w.common_hi = first_vis.hi;
  GA_DECODE_STAMP(threadIdx.x == 0, kRangeKnown);
  GA_DECODE_STAMP_VALUE(threadIdx.x == 0, kTiles, w.blk_end - w.blk_begin);
  GA_DECODE_STAMP_VALUE(threadIdx.x == 0, kSeq, w.b);
  if constexpr (decode_stamps::kVariant == decode_stamps::kVariantTmaL2First) {
    if (warp == Traits::kProducerWarp && lane == 0)
      stamps_prefetch_first_tile_l2<Traits>(p, w, tmap_k, tmap_v);
  }

  // Batched K/V (p.early_first_tiles): thread 0, which initialised the barriers, issues the first
  // kEarlyTiles tiles now, so that they are in flight while the CTA meets at the barrier and the
  // producer warp reaches its loop: measured, the producer's first TMA left 1.4 us after the
  // barrier in the ordinary plan and 4.4-4.9 us in the work-list mode, whichever warps fold the plan
  // (docs/DECODE_SM90.md section 33). The producer starts at the tile after them.
  const int early =
      early_tiles_serve(Traits::kHeadDim, Traits::kFp8) && p.early_first_tiles && p.block_table == nullptr
          ? max(0, min(kEarlyTiles, w.blk_end - w.blk_begin))
          : 0;
  if (tid == 0) {
    for (int t = 0; t < early; ++t) issue_tile_batched<Traits>(w, sm, tmap_k, tmap_v, w.blk_begin + t, t);
  }
  __syncthreads();
  GA_DECODE_STAMP(tid == 0, kBarrier);
  GA_DECODE_STAMP(warp == Traits::kProducerWarp && lane == 0, kProducerBarrier);

  if (warp == Traits::kProducerWarp) {
    produce<Traits>(p, w, sm, tmap_k, tmap_v, lane, early);
    if (p.cluster_reduce) {  // the producer warp takes part in the epilogue's two cluster barriers
      hw::cluster_sync();
      hw::cluster_sync();
    }
    return;
  }

  // ---- consumer warpgroup ----
  const float q_unscale = load_q<Traits>(p, w, sm, tid);  // (1 unless a bf16 Q entered f16 GEMMs scaled)
  hw::named_bar_sync(kBarOperands, Traits::kConsumerThreads);
  GA_DECODE_STAMP(tid == 0, kQReady);

  float o[Traits::kDBlocks][kN / 2];  // O^T: one m64 block per 64 d
#pragma unroll
  for (int h = 0; h < Traits::kDBlocks; ++h)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[h][i] = 0.f;
  ColumnSoftmax<Traits> softmax;
  softmax.init();
  float s[kN / 2];
  // fp8: the key scale (and Q's 2^-e) multiplies every score, the value scale the output (1 otherwise).
  const float k_scale = kv_scale<Traits>(p.k_scale, p.k_scale_b_stride, p.k_scale_h_stride, w) * q_unscale;
  const float v_scale = kv_scale<Traits>(p.v_scale, p.v_scale_b_stride, p.v_scale_h_stride, w);

  for (int blk = w.blk_begin, it = 0; blk < w.blk_end; ++blk, ++it) {
    const int stage = it % Traits::kStages;
    GA_DECODE_STAMP(tid == 0 && it == Traits::kStages, kRefillWait);
    hw::mbar_wait(sm.full(stage), static_cast<uint32_t>(it / Traits::kStages) & 1u);
    GA_DECODE_STAMP(tid == 0 && it == 0, kFirstTile);
    GA_DECODE_STAMP(tid == 0 && it == 1, kSecondTile);
    GA_DECODE_STAMP(tid == 0 && it == Traits::kStages, kRefillLanded);
    // Gathered tiles were written by cp.async (generic proxy); the GEMMs read them through the
    // async proxy. (fp8 reads its tiles with ordinary loads.)
    if (!Traits::kFp8 && gather) hw::fence_proxy_async_smem();
    const int j0 = blk * kBlockKV;
    [[maybe_unused]] uint32_t v_frag[2][4][4];
    if constexpr (Traits::kFp8) {
      // The thread's bytes of both tiles into registers, converted there (V while the S^T
      // wgmma runs); once every loaded word has been consumed the stage goes back to the
      // producer (the arrive releases the loads; __syncwarp orders the other lanes' before it).
      Fp8Words words;
      load_fp8_words<Traits>(words, sm, stage, warp, lane);
      if (j0 + kBlockKV > w.s.k_len) zero_fp8_v_tail(words, w.s.k_len - j0, lane);
      uint32_t k_frag[8][4];
      k_fragments<Traits>(k_frag, words);
      issue_scores_rs<Traits>(s, k_frag, sm);
      v_fragments<Traits>(v_frag, words);
      __syncwarp();
      if (lane == 0) hw::mbar_arrive(sm.empty(stage));
      wait_scores_rs<Traits>(s, k_frag);
    } else {
      gemm_scores<Traits>(s, sm, stage);
    }
    GA_DECODE_STAMP(tid == 0 && it == 0, kScoresFirst);
    const bool full_tile = j0 >= w.common_lo && j0 + kBlockKV - 1 <= w.common_hi;
    softmax.scale_and_mask(s, p, w, blk, full_tile, warp, lane, k_scale);
    softmax.update(s, o, sm.red_max(it), warp, lane);  // named barrier kBarMax inside
    // Every warp passed kBarMax, hence finished the previous tile's O^T wgmma: P^T is free.
    softmax.store_probabilities(s, sm.p(), warp, lane);
    if constexpr (!Traits::kFp8) {  // (fp8 zeroed its V tail in registers)
      if (j0 + kBlockKV > w.s.k_len) zero_v_tail<Traits>(sm, stage, w.s.k_len - j0, tid);
    }
    hw::fence_proxy_async_smem();
    hw::named_bar_sync(kBarOperands, Traits::kConsumerThreads);
    if constexpr (Traits::kFp8) {  // (fp8 freed its stage after loading it)
      gemm_output_rs<Traits>(o, v_frag, sm);
    } else {
      gemm_output<Traits>(o, sm, stage);
      __syncwarp();
      if (lane == 0) hw::mbar_arrive(sm.empty(stage));
    }
  }
  GA_DECODE_STAMP(tid == 0, kLoopEnd);
  cuda::allow_dependent_launch();
  if (p.cluster_reduce) {
    cluster_reduce_output<Traits>(p, w, softmax, o, sm, warp, lane, v_scale);
  } else {
    write_output<Traits>(p, w, softmax, o, sm.red_sum(), warp, lane, v_scale);
  }
  GA_DECODE_STAMP_EXIT(tid == 0, kKindWork);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    sm90_decode_kernel(const cuda_engine::KernelParams p, const __grid_constant__ CUtensorMap tmap_k,
                       const __grid_constant__ CUtensorMap tmap_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  decode_cta<Traits>(p, &tmap_k, &tmap_v);
#else
  (void)p;
  (void)tmap_k;
  (void)tmap_v;
#endif
}

// Dynamic shared memory that keeps a CTA alone on its SM (2 x (this + 1 KB reserved) > 228 KB).
inline constexpr size_t kSoloSmemBytes = 114 * 1024;

static_assert(kMaxClusterSplits <= cuda::kMaxCachedClusterSize, "cuda::max_active_clusters caches these sizes");

// The decode kernel, then the split combine (workspace mode), or in cluster mode (p.cluster_reduce,
// decode_traits.h cluster_reduction) the kernel alone with clusters of p.num_splits CTAs along x
// (blockIdx.x = column block x num_splits + split, so a cluster is one column block's splits and
// its rank is the split). Where the device cannot hold the clusters it needs at once (below), the
// workspace mode (the engine reserves the workspace whenever it splits).
template <class Traits>
Status launch_decode_traits(const cuda_engine::KernelParams& params, const DecodeLaunch& l,
                            cudaStream_t stream) {
  using T = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  auto* kernel = sm90_decode_kernel<Traits>;
  // The attribute allows the solo request too (an upper bound; a launch asks for what it needs).
  constexpr size_t kMaxRequest = Traits::kSmemBytes > kSoloSmemBytes ? Traits::kSmemBytes : kSoloSmemBytes;
  // The engine passes the device it asked on this call (l.device): the caches below are then read
  // without a runtime query.
  int dev = l.device;
  if (dev < 0) GA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  GA_RETURN_IF_ERROR(
      cuda::set_max_dynamic_smem_once_on<sm90_decode_kernel<Traits>>(dev, static_cast<int>(kMaxRequest)));
  cuda_engine::KernelParams p = params;
  size_t smem = Traits::kSmemBytes;
  // Everything up to the launch below is the plan: l.plan_cluster asks for it alone (the engine's
  // workspace_bytes), so that a call in cluster mode is given no workspace it would not use.
  if (p.cluster_reduce) {
    // Automatic counts: every cluster of the grid must be resident at once (cluster_reduction's
    // one wave); forced counts: one (the clusters are independent; later ones wait for an SM group).
    // Where two CTAs could share an SM, first ask for one CTA per SM (kSoloSmemBytes): the
    // cluster's splits then stream through as many SMs as the workspace mode's grid would use;
    // else the kernel's own request; else the workspace mode. The choice depends only on the
    // device and the cluster count, never on the data.
    const int needed = l.cluster_forced ? 1 : p.m_blocks * p.heads_kv * p.batch;
    int clusters = 0;
    if (Traits::kSmemBytes < kSoloSmemBytes) {
      GA_RETURN_IF_ERROR(cuda::max_active_clusters<sm90_decode_kernel<Traits>>(
          dev, p.num_splits, Traits::kThreads, kSoloSmemBytes, /*request=*/1, &clusters));
      if (clusters >= needed) smem = kSoloSmemBytes;
    }
    if (clusters < needed) {
      GA_RETURN_IF_ERROR(cuda::max_active_clusters<sm90_decode_kernel<Traits>>(
          dev, p.num_splits, Traits::kThreads, Traits::kSmemBytes, /*request=*/0, &clusters));
    }
    p.cluster_reduce = clusters >= needed && p.num_splits > 1;
  }
  if (l.plan_cluster != nullptr) {
    *l.plan_cluster = p.cluster_reduce;
    return Status::Ok();
  }
  host_timing::mark("decode launch plan (smem attribute, cluster occupancy)");
  // Work-list mode: num_splits slots per (column block, KV head) plane, the sequence from the list;
  // list_heads_fastest: the KV head on x (the engine sets it only where m_blocks x slots fits y).
  const auto columns = static_cast<unsigned>(p.m_blocks * p.num_splits);
  const auto heads = static_cast<unsigned>(p.heads_kv);
  const bool heads_x = p.list_heads_fastest;
  if (heads_x && p.seq_splits == nullptr) {
    return Status(StatusCode::kInternal, "sm90 engine: list_heads_fastest outside the work-list mode");
  }
  const dim3 grid(heads_x ? heads : columns, heads_x ? columns : heads,
                  static_cast<unsigned>(p.seq_splits != nullptr ? 1 : p.batch));
  const CUtensorMap& k_map = *static_cast<const CUtensorMap*>(l.k_tmap);
  const CUtensorMap& v_map = *static_cast<const CUtensorMap*>(l.v_tmap);
  if (p.cluster_reduce) {
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config =
        cuda::clustered_config(grid, dim3(Traits::kThreads), smem, stream, p.num_splits, &attribute);
    if (decode_driver_launch()) {  // the same launch without the runtime's per-call lookup (measurement switch)
      void* args[] = {&p, const_cast<CUtensorMap*>(&k_map), const_cast<CUtensorMap*>(&v_map)};
      const Status launched = cuda::launch_with_driver<sm90_decode_kernel<Traits>>(
          dev, config, args, "launching sm90_decode_kernel (cluster)");
      host_timing::mark("launch sm90_decode_kernel (cluster, cuLaunchKernelEx)");
      return launched;
    }
    const Status launched = cuda::to_status(cudaLaunchKernelEx(&config, kernel, p, k_map, v_map),
                                            "launching sm90_decode_kernel (cluster)");
    host_timing::mark("launch sm90_decode_kernel (cluster)");
    return launched;
  }
  if (p.num_splits > 1 && p.o_partial == nullptr) {
    // The engine reserves no workspace where its plan (the same code above) said cluster mode.
    return Status(StatusCode::kInternal, "sm90 engine: workspace-mode split without workspace");
  }
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p, k_map, v_map);
  GA_RETURN_IF_ERROR(cuda::last_launch_status("sm90_decode_kernel"));
  host_timing::mark("launch sm90_decode_kernel");
  // (Work-list mode: every sequence's splits go through the combine, num_splits is the slot bound.)
  if (p.num_splits == 1 && p.seq_splits == nullptr) return Status::Ok();
  const Status combined = launch_split_combine<T, kHeadDim>(p, stream);
  host_timing::mark("launch combine_kernel");
  return combined;
}

template <class T, int kHeadDim, int kN, bool kFp8>
Status launch_decode_n(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream) {
  if constexpr (kFp8 && std::is_same_v<T, __nv_bfloat16>) {  // the A/B switch's GEMMs in bf16
    if (l.fp8_bf16_mma) return launch_decode_traits<DecodeTraits<T, kHeadDim, kN, true, false>>(p, l, stream);
  }
  return launch_decode_traits<DecodeTraits<T, kHeadDim, kN, kFp8>>(p, l, stream);
}

template <class T, int kHeadDim, bool kFp8>
Status launch_decode_kv(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream) {
  switch (l.col_tile) {
    case 8:
      return launch_decode_n<T, kHeadDim, 8, kFp8>(p, l, stream);
    case 16:
      return launch_decode_n<T, kHeadDim, 16, kFp8>(p, l, stream);
    case 32:
      return launch_decode_n<T, kHeadDim, 32, kFp8>(p, l, stream);
    default:
      return Status(StatusCode::kInternal, "sm90 engine: column tile " + std::to_string(l.col_tile));
  }
}

template <class T, int kHeadDim>
Status launch_decode_head_dim(const cuda_engine::KernelParams& p, const DecodeLaunch& l,
                              cudaStream_t stream) {
  if constexpr (kHeadDim == kFp8HeadDim) {
    if (l.fp8) return launch_decode_kv<T, kHeadDim, true>(p, l, stream);
  } else {
    if (l.fp8) {
      return Status(StatusCode::kInternal, "sm90 engine: fp8 K/V at head dim " + std::to_string(kHeadDim));
    }
  }
  return launch_decode_kv<T, kHeadDim, false>(p, l, stream);
}

// Head dims 64 and 256 compile in their own translation units (inst_{bf16,f16}_d{64,256}.cu), so
// the d128 ones (which hold the dispatch below) do not build their kernels as well.
extern template Status launch_decode_head_dim<__nv_bfloat16, 64>(const cuda_engine::KernelParams&,
                                                                 const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_head_dim<__half, 64>(const cuda_engine::KernelParams&,
                                                          const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_head_dim<__nv_bfloat16, 256>(const cuda_engine::KernelParams&,
                                                                  const DecodeLaunch&, cudaStream_t);
extern template Status launch_decode_head_dim<__half, 256>(const cuda_engine::KernelParams&,
                                                           const DecodeLaunch&, cudaStream_t);

template <class T>
Status launch_decode(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream) {
  switch (l.head_dim) {
    case 64:
      return launch_decode_head_dim<T, 64>(p, l, stream);
    case 128:
      return launch_decode_head_dim<T, 128>(p, l, stream);
    case 256:
      return launch_decode_head_dim<T, 256>(p, l, stream);
    default:
      return Status(StatusCode::kInternal, "sm90 engine: head dim " + std::to_string(l.head_dim));
  }
}

}  // namespace groupattn::sm90_engine
