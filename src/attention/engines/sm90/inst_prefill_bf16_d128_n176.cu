// Explicit instantiation: sm90 prefill kernel, bf16, head dim 128 in the 176-key form (full attention).
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_prefill_d128_n176<__nv_bfloat16>(const cuda_engine::KernelParams&,
                                                        const PrefillLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
