// Explicit instantiation: sm90 decode engine, f16, head dim 128.
#include "attention/engines/sm90/decode_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode<__half>(const cuda_engine::KernelParams&, const DecodeLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
