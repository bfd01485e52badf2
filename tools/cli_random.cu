// Random inputs for `groupattn bench`, generated on the device: a counter-based hash of (seed,
// element index) -> uniform or Box-Muller normal values, so that filling over a GiB of rotating
// input sets takes milliseconds instead of minutes of host RNG and upload.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cli_device.h"

namespace groupattn::cli {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
__device__ __forceinline__ T convert(float x);
template <>
__device__ __forceinline__ float convert<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half convert<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __nv_fp8_e4m3 convert<__nv_fp8_e4m3>(float x) { return __nv_fp8_e4m3(x); }  // satfinite

template <typename T>
__global__ void fill_random_kernel(T* data, int64_t n, uint64_t seed, bool normal, float a, float b) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t h = splitmix64(seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(i));
    // Two 24-bit uniforms in (0, 1].
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = (static_cast<float>((h >> 16) & 0xFFFFFFull) + 1.0f) * (1.0f / 16777216.0f);
    float x;
    if (normal) {
      x = a + b * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    } else {
      x = a + (b - a) * (u1 - 1.0f / 16777216.0f);  // [a, b)
    }
    data[i] = convert<T>(x);
  }
}

template <typename T>
cudaError_t launch(void* data, int64_t n, uint64_t seed, bool normal, double a, double b, cudaStream_t s) {
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65536 ? (want > 0 ? want : 1) : 65536);
  fill_random_kernel<T><<<blocks, threads, 0, s>>>(static_cast<T*>(data), n, seed, normal, static_cast<float>(a),
                                                    static_cast<float>(b));
  return cudaGetLastError();
}

}  // namespace

Status device_fill_random(void* data, DType dtype, int64_t n, uint64_t seed, bool normal, double a, double b,
                          void* stream) {
  if (n <= 0) return Status::Ok();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (dtype) {
    case DType::kF32: e = launch<float>(data, n, seed, normal, a, b, s); break;
    case DType::kF16: e = launch<__half>(data, n, seed, normal, a, b, s); break;
    case DType::kBF16: e = launch<__nv_bfloat16>(data, n, seed, normal, a, b, s); break;
    case DType::kF8E4M3: e = launch<__nv_fp8_e4m3>(data, n, seed, normal, a, b, s); break;
    default: return NotSupported(std::string("device_fill_random: dtype ") + dtype_name(dtype));
  }
  if (e != cudaSuccess) return {StatusCode::kCudaError, std::string("fill_random_kernel: ") + cudaGetErrorString(e)};
  return Status::Ok();
}

}  // namespace groupattn::cli
