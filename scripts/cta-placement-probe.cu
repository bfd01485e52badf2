// Where the hardware places the CTAs of a grid that fits the GPU at once (docs/DECODE_SM90.md
// section 27): each CTA records its SM (%smid) and holds its place ~30 us, so the whole grid is
// resident together, as the sm90 decode kernel's 264-slot work-list grid is (160 threads, two CTAs
// an SM by shared memory). Prints, for the grid orders the decode kernel uses, how the first 128
// CTAs (a near-wave plan's work slots with one split a sequence) and the even CTAs 0, 2, .., 254
// (the even-first order) spread over the SMs.
//   nvcc -std=c++17 -arch=sm_90a -O3 scripts/cta-placement-probe.cu -o build-gpu/cta-placement-probe
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void record_sm(int* smid, unsigned long long hold_ns) {
  extern __shared__ unsigned char smem[];
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const int linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0) {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[linear] = id;
    smem[0] = static_cast<unsigned char>(id);
  }
  unsigned long long t = t0;
  while (t - t0 < hold_ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
}

static void report(const char* name, dim3 grid, size_t smem, int sms) {
  const int n = static_cast<int>(grid.x * grid.y * grid.z);
  int* d = nullptr;
  cudaMalloc(&d, n * sizeof(int));
  record_sm<<<grid, 160, smem>>>(d, 30000);
  std::vector<int> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (cudaGetLastError() != cudaSuccess) { std::printf("%s: launch failed\n", name); return; }
  auto spread = [&](const std::vector<int>& ctas, int* doubled, int* used) {
    std::vector<int> per(sms + 1, 0);
    for (int c : ctas) if (c < n) ++per[h[c]];
    *doubled = *used = 0;
    for (int s = 0; s < sms; ++s) { *used += per[s] > 0; *doubled += per[s] > 1; }
  };
  std::vector<int> first, even;
  for (int i = 0; i < 128 && i < n; ++i) first.push_back(i);
  for (int i = 0; i < 128 && 2 * i < n; ++i) even.push_back(2 * i);
  int dbl, used, dbl_e, used_e;
  spread(first, &dbl, &used);
  spread(even, &dbl_e, &used_e);
  std::printf("%-22s %4d CTAs: CTAs 0..127 on %3d SMs (%3d SMs hold two); CTAs 0,2,..,254 on %3d SMs (%3d hold two)\n",
              name, n, used, dbl, used_e, dbl_e);
  std::printf("   SM of CTA 0..23:");
  for (int i = 0; i < 24 && i < n; ++i) std::printf(" %d", h[i]);
  std::printf("\n");
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t smem = 100 * 1024;  // two CTAs an SM (228 KB an SM), as the D 128 decode kernel
  cudaFuncSetAttribute(record_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  std::printf("%d SMs, 160 threads, %zu KB dynamic shared memory a CTA\n", sms, smem / 1024);
  report("(1, 1, 128) ordinary", dim3(1, 1, 128), smem, sms);
  report("(1, 264, 1) list", dim3(1, 264, 1), smem, sms);
  report("(264, 1, 1)", dim3(264, 1, 1), smem, sms);
  report("(128, 1, 1)", dim3(128, 1, 1), smem, sms);
  return 0;
}
