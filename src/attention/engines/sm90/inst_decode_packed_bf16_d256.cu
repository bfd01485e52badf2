// Explicit instantiation: the sm90 decode engine's multi-token form (packed query rows on wgmma's
// M side, the prefill kernel's packed-decode mode; docs/DECODE_SM90.md section 16), bf16, head
// dim 256, 16-bit K/V.
#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_decode_packed_kv<__nv_bfloat16, 256, false>(const cuda_engine::KernelParams&, const DecodeLaunch&,
                                                                   cudaStream_t);
}  // namespace groupattn::sm90_engine
