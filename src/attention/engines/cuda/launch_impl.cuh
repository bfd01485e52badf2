// Definition of launch_attention<T, D>: included only by the inst_*.cu files.
#pragma once

#include <string>

#include "attention/engines/cuda/attention_tile_kernel.cuh"
#include "attention/engines/cuda/combine_kernel.cuh"
#include "attention/engines/cuda/decode_kernel.cuh"
#include "attention/engines/cuda/launch.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.cuh"

namespace groupattn::cuda_engine {

// The tile-kernel variants of one (dtype, head dim): 16 rows per warp always, 32 where tile_rows
// can pick it (D <= 128).
template <class T, int kHeadDim>
struct TileVariants {
  using Small = TileTraits<T, kHeadDim, 16>;
  static constexpr bool kHasLarge = kHeadDim <= 128;
  using Large = TileTraits<T, kHeadDim, kHasLarge ? 32 : 16>;
  static_assert(Small::kBlockM == kTileRowsSmall && (!kHasLarge || Large::kBlockM == kTileRowsLarge) &&
                    Small::kBlockN == tile_keys(kHeadDim) && Large::kBlockN == tile_keys(kHeadDim),
                "host tile sizes (launch.h) must match the kernel traits");
  static_assert(tile_rows(kHeadDim, 1 << 30) == (kHasLarge ? kTileRowsLarge : kTileRowsSmall),
                "tile_rows picks a variant that is compiled");
  // The paired-P-V form (launch.h, cuda_prefill_d256_pair_pv) of the D 256 64-row tile: the same
  // rows and keys; 9,728 more bytes of shared memory (111,104: still 2 CTAs per sm90 SM, 1 per
  // sm80 SM as the one-warp form; the launch checks the device's per-block limit).
  static constexpr bool kHasPairPv = kHeadDim == 256;
  using PairPv = PairPvTraits<Small>;
};

// Whether the paired-P-V form serves this launch: D 256, its 64-row tile, the switch on, and the
// current device's opt-in shared memory per block holds it.
template <class V>
bool use_pair_pv(int tile_rows) {
  if constexpr (V::kHasPairPv) {
    using Pair = typename V::PairPv;
    static_assert(Pair::kBlockM == kTileRowsSmall && Pair::kBlockN == V::Small::kBlockN, "the same tile");
    if (tile_rows != Pair::kBlockM || !cuda_prefill_d256_pair_pv()) return false;
    const int optin = cuda::current_device_smem_optin();
    return optin > 0 && static_cast<size_t>(optin) >= Pair::kSmemBytes;
  }
  return false;
}

template <class Tile>
Status launch_tile(const KernelParams& p, cudaStream_t stream) {
  auto* tile = attention_tile_kernel<Tile>;
  GA_RETURN_IF_ERROR(
      cuda::set_max_dynamic_smem_once<attention_tile_kernel<Tile>>(static_cast<int>(Tile::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(p.m_blocks * p.num_splits), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  tile<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  return cuda::last_launch_status("attention_tile_kernel");
}

// The combine kernel over the split partials (nothing when p.num_splits == 1).
template <class T, int kHeadDim>
Status launch_split_combine(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  if (p.num_splits == 1) return Status::Ok();
  return launch_combine<T, kHeadDim>(p, stream, use_pdl);
}

template <class T, int kHeadDim>
Status launch_attention(const KernelParams& p, int tile_rows, cudaStream_t stream, bool use_pdl) {
  using V = TileVariants<T, kHeadDim>;
  if constexpr (V::kHasPairPv) {
    if (use_pair_pv<V>(tile_rows)) {
      GA_RETURN_IF_ERROR(launch_tile<typename V::PairPv>(p, stream));
      return launch_split_combine<T, kHeadDim>(p, stream, use_pdl);
    }
  }
  if (V::kHasLarge && tile_rows == kTileRowsLarge) {
    GA_RETURN_IF_ERROR(launch_tile<typename V::Large>(p, stream));
  } else if (tile_rows == kTileRowsSmall) {
    GA_RETURN_IF_ERROR(launch_tile<typename V::Small>(p, stream));
  } else {
    return Status(StatusCode::kInternal, "cuda engine: no tile kernel with " + std::to_string(tile_rows) +
                                             " rows for head dim " + std::to_string(kHeadDim));
  }
  return launch_split_combine<T, kHeadDim>(p, stream, use_pdl);
}

static_assert(!use_wide_combine(kListMaxSplits), "work-list rows take the one-warp combine");

// The decode kernel's work-list mode (p.seq_splits; decode_work_list.h): grid (m_blocks x slots,
// Hkv, 1) with p.num_splits = slots, then the combine over every row, each reading its sequence's
// {count, first slot}. At most kListMaxSplits splits a sequence, so the combine kernel is chosen by
// that bound (the one-warp kernel), never by the data.
template <class Decode>
Status launch_decode_list(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  using T = typename Decode::Element;
  constexpr auto kKernel = decode_list_kernel_of<Decode>();
  auto* kernel = kKernel;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kKernel>(static_cast<int>(Decode::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(p.m_blocks * p.num_splits), static_cast<unsigned>(p.heads_kv), 1);
  kernel<<<grid, Decode::kThreads, Decode::kSmemBytes, stream>>>(p);
  GA_RETURN_IF_ERROR(cuda::last_launch_status("decode_list_kernel"));
  KernelParams q = p;
  q.num_splits = kListMaxSplits;
  return launch_combine<T, Decode::kHeadDim>(q, stream, use_pdl);
}

// One form of the decode kernel (DecodeTraits), ordinary or work-list mode, then the combine.
template <class Decode>
Status launch_decode_form(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  using T = typename Decode::Element;
  static_assert(Decode::kRows == kDecodeRows && Decode::kBlockKeys == kDecodeBlockKeys,
                "host decode tile sizes (launch.h) must match the kernel traits");
  if (p.seq_splits != nullptr) return launch_decode_list<Decode>(p, stream, use_pdl);
  constexpr auto kKernel = decode_kernel_of<Decode>();
  auto* kernel = kKernel;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kKernel>(static_cast<int>(Decode::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(p.m_blocks * p.num_splits), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, Decode::kThreads, Decode::kSmemBytes, stream>>>(p);
  GA_RETURN_IF_ERROR(cuda::last_launch_status(Decode::kSplitV ? "decode_split_v_kernel" : "decode_kernel"));
  return launch_split_combine<T, Decode::kHeadDim>(p, stream, use_pdl);
}

template <class T, int kHeadDim>
Status launch_decode(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  static_assert(has_decode_kernel(kHeadDim), "launch_decode is instantiated for the decode head dims only");
  if constexpr (kHeadDim == kDecodeSplitVHeadDim) {
    // The split-V form: the same splits, blocks, shared memory (one CTA an SM) and bits.
    using SplitV = DecodeTraits<T, kHeadDim, true>;
    static_assert(SplitV::kSmemBytes == DecodeTraits<T, kHeadDim>::kSmemBytes,
                  "decode_ctas_per_sm (the planner's wave) holds for both forms");
    if (cuda_decode_split_v(p.block_table != nullptr)) return launch_decode_form<SplitV>(p, stream, use_pdl);
  }
  return launch_decode_form<DecodeTraits<T, kHeadDim>>(p, stream, use_pdl);
}

// CTAs of `kernel` (kThreads threads, kSmemBytes dynamic shared memory) one SM holds; 1 if the
// occupancy query fails.
template <auto* kKernel, int kThreads, size_t kSmemBytes>
int ctas_per_sm_of() {
  static const int ctas = [] {
    int n = 0;
    if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSmemBytes)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kThreads, kSmemBytes) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error: the planner falls back to one CTA per SM
      return 1;
    }
    return n > 0 ? n : 1;
  }();
  return ctas;
}

template <class T, int kHeadDim>
int tile_ctas_per_sm(int tile_rows) {
  using V = TileVariants<T, kHeadDim>;
  using Large = typename V::Large;
  using Small = typename V::Small;
  if (V::kHasLarge && tile_rows == kTileRowsLarge)
    return ctas_per_sm_of<attention_tile_kernel<Large>, Large::kThreads, Large::kSmemBytes>();
  return ctas_per_sm_of<attention_tile_kernel<Small>, Small::kThreads, Small::kSmemBytes>();
}

template <class T, int kHeadDim>
int decode_ctas_per_sm() {
  using Decode = DecodeTraits<T, kHeadDim>;
  // Its ring is sized for sm90's 227 KB per CTA: D 256 (212 KB) does not fit an A100 (163 KB),
  // D 128 (109 KB) not an sm86/89 GPU (99 KB). The current device is asked on every call (it may
  // change), its opt-in limit once per device (cuda::current_device_smem_optin; 0 if a query fails).
  const int optin = cuda::current_device_smem_optin();
  if (optin <= 0 || static_cast<size_t>(optin) < Decode::kSmemBytes) return 0;
  return ctas_per_sm_of<decode_kernel<Decode>, Decode::kThreads, Decode::kSmemBytes>();
}

}  // namespace groupattn::cuda_engine
