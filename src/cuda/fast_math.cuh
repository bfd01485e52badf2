// Fast device math shared by the attention kernels.
#pragma once

namespace groupattn::cuda {

// 2^x by the SFU alone (ex2.approx.ftz: ~2 ulp; results below 2^-126 flush to 0, far below what a
// 16-bit P or an fp32 row sum can hold next to the row maximum's 1). 2^0 = 1 and 2^-inf = 0
// exactly, which keeps fully masked tiles from changing a row's softmax state.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace groupattn::cuda
