// Host launchers of the sm90 decode engine, one explicit instantiation per element type
// (inst_bf16_d128.cu, inst_f16_d128.cu).
#pragma once

#include <cuda_runtime.h>

#include "attention/engines/cuda/kernel_params.h"
#include "groupattn/status.h"

namespace groupattn::sm90_engine {

// What the launcher needs besides the portable engine's KernelParams (which it reuses as is: the
// combine kernel reads them). k_tmap/v_tmap point at CUtensorMap objects built by tma_desc.h.
struct DecodeLaunch {
  const void* k_tmap = nullptr;
  const void* v_tmap = nullptr;
  int col_tile = 8;  // column_tile(max_q * group)
};

// Runs the decode kernel (grid: m_blocks * num_splits, Hkv, B) and, when p.num_splits > 1, the
// portable engine's combine kernel as a programmatic dependent launch.
template <class T>
Status launch_decode(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream);

}  // namespace groupattn::sm90_engine
