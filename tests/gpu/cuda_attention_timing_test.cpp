// Rough timings of the cuda engine (not a benchmark: no peers, no graph replay, no input rotation;
// see BENCHMARKING.md for the real protocol). Disabled by default; run with
//   groupattn_tests_gpu --gtest_also_run_disabled_tests --gtest_filter='*Timing*'
// Correctness of these shapes' code paths is covered by cuda_attention_test.cpp.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "common/device_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

constexpr int kWarmup = 3;
constexpr int kIters = 20;

// Device buffer of n bf16 values drawn uniformly from +-[0.5, 2) (random sign, exponent, mantissa).
void* random_bf16(size_t n, std::mt19937_64& rng) {
  std::vector<uint16_t> h(n);
  for (auto& x : h) {
    const uint64_t r = rng();
    x = static_cast<uint16_t>(((r & 1) << 15) |
                              (0x3F00u + ((r >> 1) & 0xFFu)));  // sign | exp 126-127 | mantissa
  }
  void* d = nullptr;
  cuda_check(cudaMalloc(&d, n * 2), "cudaMalloc");
  cuda_check(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

// Mean time per call over kIters back-to-back calls after kWarmup, in milliseconds.
double time_ms(const AttentionParams& p) {
  RunOptions o;
  o.engine = "cuda";
  size_t ws_bytes = 0;
  EXPECT_TRUE(attention_workspace_bytes(p, o, &ws_bytes).ok());
  void* ws = nullptr;
  if (ws_bytes > 0) cuda_check(cudaMalloc(&ws, ws_bytes), "cudaMalloc ws");
  o.workspace = ws;
  o.workspace_bytes = ws_bytes;
  for (int i = 0; i < kWarmup; ++i) EXPECT_TRUE(attention(p, o).ok());
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "event");
  cuda_check(cudaEventCreate(&b), "event");
  cuda_check(cudaEventRecord(a), "record");
  for (int i = 0; i < kIters; ++i) (void)attention(p, o);
  cuda_check(cudaEventRecord(b), "record");
  cuda_check(cudaEventSynchronize(b), "sync");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cuda_check(cudaEventDestroy(a), "event");
  cuda_check(cudaEventDestroy(b), "event");
  if (ws) (void)cudaFree(ws);
  return ms / kIters;
}

TEST(CudaAttentionTiming, DISABLED_Prefill) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(7);
  struct Shape {
    int64_t b, s, hq, hkv, d;
  };
  for (Shape sh : {Shape{8, 2048, 32, 8, 128}, Shape{2, 8192, 64, 8, 128}, Shape{8, 2048, 32, 8, 64},
                   Shape{4, 2048, 16, 4, 256}}) {
    void* q = random_bf16(sh.b * sh.s * sh.hq * sh.d, rng);
    void* k = random_bf16(sh.b * sh.s * sh.hkv * sh.d, rng);
    void* v = random_bf16(sh.b * sh.s * sh.hkv * sh.d, rng);
    void* out = nullptr;
    cuda_check(cudaMalloc(&out, sh.b * sh.s * sh.hq * sh.d * 2), "cudaMalloc");
    AttentionParams p;
    p.q = make_contiguous_view(q, DType::kBF16, {sh.b, sh.s, sh.hq, sh.d}, Device::kCUDA);
    p.k = make_contiguous_view(k, DType::kBF16, {sh.b, sh.s, sh.hkv, sh.d}, Device::kCUDA);
    p.v = make_contiguous_view(v, DType::kBF16, {sh.b, sh.s, sh.hkv, sh.d}, Device::kCUDA);
    p.out = make_contiguous_view(out, DType::kBF16, {sh.b, sh.s, sh.hq, sh.d}, Device::kCUDA);
    for (bool causal : {false, true}) {
      p.causal = causal;
      const auto s = static_cast<double>(sh.s);
      const double pairs = causal ? s * (s + 1) / 2.0 : s * s;
      const double flops = 4.0 * pairs * static_cast<double>(sh.d * sh.hq * sh.b);
      const double ms = time_ms(p);
      std::printf("TIMING prefill bf16 %lld/%lld d%lld B%lld S%lld %-10s %8.3f ms %7.1f TFLOP/s\n",
                  (long long)sh.hq, (long long)sh.hkv, (long long)sh.d, (long long)sh.b, (long long)sh.s,
                  causal ? "causal" : "non-causal", ms, flops / ms / 1e9);
    }
    for (void* x : {q, k, v, out}) (void)cudaFree(x);
  }
}

TEST(CudaAttentionTiming, DISABLED_Decode) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(8);
  const int64_t b = 8, hq = 32, hkv = 8, d = 128, sk = 8192, page = 64;
  void* k = random_bf16(b * sk * hkv * d, rng);
  void* v = random_bf16(b * sk * hkv * d, rng);
  std::vector<int32_t> table(b * (sk / page)), lens(b, static_cast<int32_t>(sk));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), rng);
  void *dtable = nullptr, *dlens = nullptr;
  cuda_check(cudaMalloc(&dtable, table.size() * 4), "cudaMalloc");
  cuda_check(cudaMalloc(&dlens, lens.size() * 4), "cudaMalloc");
  cuda_check(cudaMemcpy(dtable, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "cpy");
  cuda_check(cudaMemcpy(dlens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "cpy");
  const auto kv_bytes = static_cast<double>(2 * b * sk * hkv * d * 2);
  for (int64_t sq : {1, 4, 16}) {
    void* q = random_bf16(b * sq * hq * d, rng);
    void* out = nullptr;
    cuda_check(cudaMalloc(&out, b * sq * hq * d * 2), "cudaMalloc");
    for (bool paged : {false, true}) {
      AttentionParams p;
      p.q = make_contiguous_view(q, DType::kBF16, {b, sq, hq, d}, Device::kCUDA);
      p.out = make_contiguous_view(out, DType::kBF16, {b, sq, hq, d}, Device::kCUDA);
      p.causal = true;
      if (paged) {
        p.k = make_contiguous_view(k, DType::kBF16, {b * sk / page, page, hkv, d}, Device::kCUDA);
        p.v = make_contiguous_view(v, DType::kBF16, {b * sk / page, page, hkv, d}, Device::kCUDA);
        p.block_table = make_contiguous_view(dtable, DType::kI32, {b, sk / page}, Device::kCUDA);
        p.seqlens_k = make_contiguous_view(dlens, DType::kI32, {b}, Device::kCUDA);
        p.max_seqlen_k = sk;
      } else {
        p.k = make_contiguous_view(k, DType::kBF16, {b, sk, hkv, d}, Device::kCUDA);
        p.v = make_contiguous_view(v, DType::kBF16, {b, sk, hkv, d}, Device::kCUDA);
      }
      const double ms = time_ms(p);
      std::printf(
          "TIMING decode bf16 %lld/%lld d%lld B%lld kv%lld new%lld %-6s %8.4f ms %7.1f GB/s (K+V bytes)\n",
          (long long)hq, (long long)hkv, (long long)d, (long long)b, (long long)sk, (long long)sq,
          paged ? "paged" : "contig", ms, kv_bytes / ms / 1e6);
    }
    (void)cudaFree(q);
    (void)cudaFree(out);
  }
  for (void* x : {k, v, dtable, dlens}) (void)cudaFree(x);
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
