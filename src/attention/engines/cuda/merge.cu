// attention_merge on the device: the combine kernel (combine_kernel.cuh) with the partials'
// strides taken from the caller's [R, total_q, Hq, Dv] O and [R, Hq, total_q] LSE tensors.
// Instantiated over the output type (bf16, f16), the partial O type (fp32 or the output type)
// and Dv (32, 64, 128, 256).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "attention/engines/cuda/combine_kernel.cuh"
#include "attention/engines/cuda/merge.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.cuh"

namespace groupattn::cuda_engine {
namespace {

template <class T, class TPart, int kDv>
Status launch_merge(const KernelParams& kp, cudaStream_t stream) {
  using Combine = CombineTraits<T, kDv, TPart>;
  const int rows = kp.seqlen_q * kp.heads_q;
  const dim3 grid(static_cast<unsigned>((rows + Combine::kWarps - 1) / Combine::kWarps),
                  static_cast<unsigned>(kp.batch));
  // An ordinary stream-ordered launch: the partials come from a collective or a copy, not from a
  // kernel that triggers a programmatic launch.
  return cuda::launch_maybe_pdl(combine_kernel<Combine>, grid, dim3(Combine::kThreads), 0, stream,
                                /*use_pdl=*/false, "launching combine_kernel (attention_merge)", kp);
}

template <class T, class TPart>
Status dispatch_dv(int64_t dv, const KernelParams& kp, cudaStream_t stream) {
  switch (dv) {
    case 32:
      return launch_merge<T, TPart, 32>(kp, stream);
    case 64:
      return launch_merge<T, TPart, 64>(kp, stream);
    case 128:
      return launch_merge<T, TPart, 128>(kp, stream);
    case 256:
      return launch_merge<T, TPart, 256>(kp, stream);
    default:
      return NotSupported("attention_merge on the device: Dv = " + std::to_string(dv) +
                          " not compiled (accepted: 32, 64, 128, 256)");
  }
}

}  // namespace

Status merge_on_device(const MergeParams& p, void* stream) {
  if (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kF16) {
    return NotSupported(std::string("attention_merge on the device: out dtype ") + dtype_name(p.out.dtype) +
                        " (accepted: bf16, f16)");
  }
  const int64_t parts = p.o_partials.shape[0], total_q = p.o_partials.shape[1];
  const int64_t hq = p.o_partials.shape[2], dv = p.o_partials.shape[3];
  constexpr int64_t kIntMax = 2147483647;
  if (total_q * hq > kIntMax || parts > kIntMax) {
    return NotSupported("attention_merge on the device: total_q * Hq and R must fit in int32");
  }
  if (total_q == 0 || hq == 0) return Status::Ok();
  KernelParams kp;
  kp.out = p.out.data;
  kp.lse = static_cast<float*>(p.lse.data);
  if (p.lse.defined()) {
    kp.lse_head_stride = p.lse.stride[0];
    kp.lse_row_stride = p.lse.stride[1];
  }
  if (p.out.rank == 4) {  // batched [B, Sq, Hq, Dv]: one grid row per sequence
    kp.batch = static_cast<int>(p.out.shape[0]);
    kp.seqlen_q = static_cast<int>(p.out.shape[1]);
    kp.o_batch_stride = p.out.stride[0];
  } else {  // [total_q, Hq, Dv]: one "sequence" of total_q rows
    kp.batch = 1;
    kp.seqlen_q = static_cast<int>(total_q);
  }
  if (kp.batch == 0 || kp.seqlen_q == 0) return Status::Ok();
  kp.o_row_stride = p.out.stride[p.out.rank - 3];
  kp.o_head_stride = p.out.stride[p.out.rank - 2];
  kp.heads_q = static_cast<int>(hq);
  kp.num_splits = static_cast<int>(parts);
  kp.o_partial_in = p.o_partials.data;
  kp.part_o_split_stride = p.o_partials.stride[0];
  kp.part_o_row_stride = p.o_partials.stride[1];
  kp.part_o_head_stride = p.o_partials.stride[2];
  kp.lse_partial = static_cast<float*>(p.lse_partials.data);  // read only
  kp.part_lse_split_stride = p.lse_partials.stride[0];
  kp.part_lse_head_stride = p.lse_partials.stride[1];
  kp.part_lse_row_stride = p.lse_partials.stride[2];
  const auto s = static_cast<cudaStream_t>(stream);
  const bool same_type = p.o_partials.dtype == p.out.dtype;
  if (p.out.dtype == DType::kBF16) {
    return same_type ? dispatch_dv<__nv_bfloat16, __nv_bfloat16>(dv, kp, s)
                     : dispatch_dv<__nv_bfloat16, float>(dv, kp, s);
  }
  return same_type ? dispatch_dv<__half, __half>(dv, kp, s) : dispatch_dv<__half, float>(dv, kp, s);
}

}  // namespace groupattn::cuda_engine
