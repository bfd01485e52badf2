// Explicit instantiation: cuda engine, f16, head dim 128.
#include "attention/engines/cuda/launch_impl.cuh"

namespace groupattn::cuda_engine {
template Status launch_attention<__half, 128>(const KernelParams&, int, cudaStream_t, bool);
template int tile_ctas_per_sm<__half, 128>(int);
template Status launch_decode<__half, 128>(const KernelParams&, cudaStream_t, bool);
template int decode_ctas_per_sm<__half, 128>();
}  // namespace groupattn::cuda_engine
