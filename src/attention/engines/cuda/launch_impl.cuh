// Definition of launch_attention<T, D>: included only by the inst_*.cu files.
#pragma once

#include <string>

#include "attention/engines/cuda/attention_tile_kernel.cuh"
#include "attention/engines/cuda/combine_kernel.cuh"
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
};

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

template <class T, int kHeadDim>
Status launch_attention(const KernelParams& p, int tile_rows, cudaStream_t stream, bool use_pdl) {
  using V = TileVariants<T, kHeadDim>;
  using Combine = CombineTraits<T, kHeadDim>;
  if (V::kHasLarge && tile_rows == kTileRowsLarge) {
    GA_RETURN_IF_ERROR(launch_tile<typename V::Large>(p, stream));
  } else if (tile_rows == kTileRowsSmall) {
    GA_RETURN_IF_ERROR(launch_tile<typename V::Small>(p, stream));
  } else {
    return Status(StatusCode::kInternal, "cuda engine: no tile kernel with " + std::to_string(tile_rows) +
                                             " rows for head dim " + std::to_string(kHeadDim));
  }
  if (p.num_splits == 1) return Status::Ok();

  const int rows = p.seqlen_q * p.heads_q;  // rows of the longest sequence
  const dim3 combine_grid(static_cast<unsigned>((rows + Combine::kWarps - 1) / Combine::kWarps),
                          static_cast<unsigned>(p.batch));
  return cuda::launch_maybe_pdl(combine_kernel<Combine>, combine_grid, dim3(Combine::kThreads), 0, stream,
                                use_pdl, "launching combine_kernel", p);
}

template <class Tile>
int ctas_per_sm_of() {
  static const int ctas = [] {
    auto* tile = attention_tile_kernel<Tile>;
    int n = 0;
    if (cudaFuncSetAttribute(tile, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(Tile::kSmemBytes)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, tile, Tile::kThreads, Tile::kSmemBytes) !=
            cudaSuccess) {
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
  if (V::kHasLarge && tile_rows == kTileRowsLarge) return ctas_per_sm_of<typename V::Large>();
  return ctas_per_sm_of<typename V::Small>();
}

}  // namespace groupattn::cuda_engine
