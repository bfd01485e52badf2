// Explicit instantiation: cuda engine, bf16, head dim 64.
#include "attention/engines/cuda/launch_impl.cuh"

namespace groupattn::cuda_engine {
template Status launch_attention<__nv_bfloat16, 64>(const KernelParams&, int, cudaStream_t, bool);
template int tile_ctas_per_sm<__nv_bfloat16, 64>(int);
template Status launch_decode<__nv_bfloat16, 64>(const KernelParams&, cudaStream_t, bool);
template int decode_ctas_per_sm<__nv_bfloat16, 64>();
}  // namespace groupattn::cuda_engine
