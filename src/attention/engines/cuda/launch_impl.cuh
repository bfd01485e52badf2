// Definition of launch_attention<T, D>: included only by the inst_*.cu files.
#pragma once

#include "attention/engines/cuda/attention_tile_kernel.cuh"
#include "attention/engines/cuda/combine_kernel.cuh"
#include "attention/engines/cuda/launch.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.cuh"

namespace groupattn::cuda_engine {

template <class T, int kHeadDim>
Status launch_attention(const KernelParams& p, cudaStream_t stream, bool use_pdl) {
  using Tile = TileTraits<T, kHeadDim>;
  using Combine = CombineTraits<T, kHeadDim>;
  static_assert(Tile::kBlockM == kTileRows && Tile::kBlockN == tile_keys(kHeadDim),
                "host tile sizes (launch.h) must match the kernel traits");
  auto* tile = attention_tile_kernel<Tile>;
  GA_RETURN_IF_ERROR(
      cuda::set_max_dynamic_smem_once<attention_tile_kernel<Tile>>(static_cast<int>(Tile::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(p.m_blocks * p.num_splits), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  tile<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  GA_RETURN_IF_ERROR(cuda::last_launch_status("attention_tile_kernel"));
  if (p.num_splits == 1) return Status::Ok();

  const int rows = p.seqlen_q * p.heads_q;  // rows of the longest sequence
  const dim3 combine_grid(static_cast<unsigned>((rows + Combine::kWarps - 1) / Combine::kWarps),
                          static_cast<unsigned>(p.batch));
  return cuda::launch_maybe_pdl(combine_kernel<Combine>, combine_grid, dim3(Combine::kThreads), 0, stream,
                                use_pdl, "launching combine_kernel", p);
}

template <class T, int kHeadDim>
int tile_ctas_per_sm() {
  static const int ctas = [] {
    using Tile = TileTraits<T, kHeadDim>;
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

}  // namespace groupattn::cuda_engine
