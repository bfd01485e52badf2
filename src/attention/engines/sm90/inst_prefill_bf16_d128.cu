// Explicit instantiation: sm90 prefill kernel, bf16, head dims 64 and 128 (and at 128 the persistent
// form, prefill_persistent.cuh; the dispatch to 256 is in inst_prefill_bf16_d256.cu).
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/prefill_kernel.cuh"
#include "attention/engines/sm90/prefill_persistent.cuh"

namespace groupattn::sm90_engine {
template Status launch_prefill<__nv_bfloat16>(const cuda_engine::KernelParams&, const PrefillLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
