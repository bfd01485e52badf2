// Explicit instantiation: the sm90 decode engine's multi-token form with an f8e4m3 K/V cache (the
// prefill kernel's packed-decode mode, fp8 tiles widened to 16 bits in shared memory by the
// producer warpgroup; docs/DECODE_SM90.md sections 13 and 17), f16 queries, head dim 128.
#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode_packed_kv<__half, kPackedDecodeHeadDim, true>(const cuda_engine::KernelParams&,
                                                                           const DecodeLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
