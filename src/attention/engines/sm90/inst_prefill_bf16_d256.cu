// Explicit instantiation: sm90 prefill kernel, bf16, head dim 256.
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {
template Status launch_prefill_head_dim<__nv_bfloat16, 256>(const cuda_engine::KernelParams&,
                                                            const PrefillLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
