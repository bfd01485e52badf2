// Explicit instantiation: sm90 decode engine, f16, head dim 64 (16-bit K/V).
#include "attention/engines/sm90/decode_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode_head_dim<__half, 64>(const cuda_engine::KernelParams&, const DecodeLaunch&,
                                                   cudaStream_t);
}  // namespace groupattn::sm90_engine
