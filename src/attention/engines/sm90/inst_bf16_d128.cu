// Explicit instantiation: sm90 decode engine, bf16, head dim 128 (16-bit and fp8 K/V), and the
// dispatch over head dims (64 and 256: inst_bf16_d{64,256}.cu).
#include "attention/engines/sm90/decode_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode<__nv_bfloat16>(const cuda_engine::KernelParams&, const DecodeLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
