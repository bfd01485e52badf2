// Explicit instantiation: the sm90 decode engine's multi-token form (packed query rows on wgmma's
// M side, the prefill kernel's packed-decode mode), f16, head dims 128 and 64 (16-bit K/V) and the
// head-dim dispatch (256: inst_decode_packed_f16_d256.cu).
#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode_packed<__half>(const cuda_engine::KernelParams&, const DecodeLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
