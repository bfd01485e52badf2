// Explicit instantiation: cuda engine, bf16, head dim 32.
#include "attention/engines/cuda/launch_impl.cuh"

namespace groupattn::cuda_engine {
template Status launch_attention<__nv_bfloat16, 32>(const KernelParams&, int, cudaStream_t, bool);
template int tile_ctas_per_sm<__nv_bfloat16, 32>(int);
}  // namespace groupattn::cuda_engine
