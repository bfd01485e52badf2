// GPU reliability for the KDA cuda engine (issue 6): two streams at once with different inputs,
// many host threads at once, CUDA-graph capture once + replays with new inputs, and a state pool
// past 4 GiB (offsets past 2^31 elements) with every row no sequence names NaN. Every result is
// checked against the fp64 per-token recurrence on host copies (TESTING.md: relative RMS < 5e-3 on
// output and final state). Skips without a GPU.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu/kda_cuda_harness.h"
#include "kda/engines/cuda/kda_cuda_engine.h"
#include "kda/reference.h"

namespace groupattn::test {
namespace {

class KdaReliability : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// Production-like: bf16, GVA 2 -> 4, K = V = 128, l2norm, beta logits, lower-bound gate.
KdaCase base_case() {
  KdaCase c;
  c.dtype = DType::kBF16;
  c.B = 2, c.T = 77, c.H = 2, c.HV = 4, c.K = 128, c.V = 128;
  c.l2norm = true, c.beta_sigmoid = true;
  c.gate = KdaGate::kLowerBound;
  c.with_A_log = true, c.with_dt_bias = true;
  c.g_lo = -2.0, c.g_hi = 6.0;
  return c;
}

// Chunked prefill (T = 100, separate initial and final states: idempotent, so repeated launches
// leave the same result) and a recurrent decode (T = 1, 6 sequences, separate states).
std::unique_ptr<KdaGpuRun> prefill_run(uint64_t seed) {
  auto r = std::make_unique<KdaGpuRun>();
  r->c = base_case();
  r->c.T = 100;
  r->setup(seed, -1, false);
  return r;
}
std::unique_ptr<KdaGpuRun> decode_run(uint64_t seed) {
  auto r = std::make_unique<KdaGpuRun>();
  r->c = base_case();
  r->c.B = 6, r->c.T = 1;
  r->setup(seed, -1, false);
  return r;
}

Status launch(const KdaGpuRun& r, cudaStream_t stream) {
  RunOptions o;
  o.engine = "cuda";
  o.stream = stream;
  return kda(r.device_params(), o);
}

void poison_outputs(KdaGpuRun& r) {
  r.dout->poison();
  if (r.dfinal) r.dfinal->poison();
}

void upload_into(const HostTensor& host, const DeviceTensor& dev, cudaStream_t stream) {
  cuda_check(cudaMemcpyAsync(dev.view().data, host.view().data, static_cast<size_t>(host.view().span_bytes()),
                             cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync");
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

TEST_F(KdaReliability, TwoStreamsAtOnceDifferentInputs) {
  for (bool decode : {true, false}) {
    Stream s0, s1;
    std::unique_ptr<KdaGpuRun> a = decode ? decode_run(11) : prefill_run(11);
    std::unique_ptr<KdaGpuRun> b = decode ? decode_run(12) : prefill_run(12);
    poison_outputs(*a), poison_outputs(*b);
    // Interleaved launches so the two streams' kernels overlap (the chunked path also allocates its
    // workspace stream-ordered on each stream); the last launch on each stream counts.
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(launch(*a, s0.s).ok());
      ASSERT_TRUE(launch(*b, s1.s).ok());
    }
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const std::string ea = kda_compare(*a, *a), eb = kda_compare(*b, *b);
    EXPECT_EQ(ea, "") << (decode ? "decode" : "prefill") << " stream 0: " << kda_describe(a->c, "");
    EXPECT_EQ(eb, "") << (decode ? "decode" : "prefill") << " stream 1: " << kda_describe(b->c, "");
  }
}

TEST_F(KdaReliability, ManyHostThreadsAtOnce) {
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<KdaGpuRun>> runs;
  for (int t = 0; t < kThreads; ++t) {
    runs.push_back(t % 2 ? decode_run(100 + static_cast<uint64_t>(t)) : prefill_run(100 + static_cast<uint64_t>(t)));
    poison_outputs(*runs.back());
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        failures[static_cast<size_t>(t)] = 1;
        return;
      }
      for (int i = 0; i < 10; ++i) failures[static_cast<size_t>(t)] += launch(*runs[static_cast<size_t>(t)], s).ok() ? 0 : 1;
      failures[static_cast<size_t>(t)] += cudaStreamSynchronize(s) == cudaSuccess ? 0 : 1;
      cudaStreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << "thread " << t;
    const std::string e = kda_compare(*runs[static_cast<size_t>(t)], *runs[static_cast<size_t>(t)]);
    EXPECT_EQ(e, "") << "thread " << t << ": " << kda_describe(runs[static_cast<size_t>(t)]->c, "");
  }
}

// Capture once (caller workspace, global capture mode), replay 20 times with new inputs copied into
// the captured buffers, each replay checked. Three problems: chunked prefill (separate states),
// recurrent decode on a state pool in place (the pool and state_indices replaced each replay), and
// varlen prefill (cu_seqlens kept, its contents read at replay time).
TEST_F(KdaReliability, GraphCaptureReplayWithNewInputs) {
  constexpr int kReplays = 20;
  struct Shape {
    const char* name;
    int64_t B, T;
    std::vector<int64_t> cu;
    int pool_extra;
  };
  const Shape shapes[] = {{"chunked prefill", 2, 100, {}, -1},
                          {"decode on a pool in place", 5, 1, {}, 7},
                          {"varlen prefill", 1, 90, {0, 0, 17, 60, 90}, -1},
                          {"small prefill (fused path, no workspace)", 2, 40, {}, -1}};
  for (const Shape& sh : shapes) {
    auto make = [&](uint64_t seed, bool upload) {
      auto r = std::make_unique<KdaGpuRun>();
      r->c = base_case();
      r->c.B = sh.B, r->c.T = sh.T, r->c.cu = sh.cu;
      r->setup(seed, sh.pool_extra, false, upload);
      return r;
    };
    std::unique_ptr<KdaGpuRun> cap = make(1, true);
    Stream stream;
    RunOptions o;
    o.engine = "cuda";
    o.stream = stream.s;
    size_t ws_bytes = 0;
    ASSERT_TRUE(kda_workspace_bytes(cap->device_params(), o, &ws_bytes).ok());
    void* ws = nullptr;
    if (ws_bytes > 0) cuda_check(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
    o.workspace = ws;
    o.workspace_bytes = ws_bytes;

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    const Status captured = kda(cap->device_params(), o);
    cuda_check(cudaStreamEndCapture(stream.s, &graph), "cudaStreamEndCapture");
    ASSERT_TRUE(captured.ok()) << sh.name << ": " << captured.to_string();
    cuda_check(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "cudaGraphInstantiate");

    for (int r = 0; r < kReplays; ++r) {
      std::unique_ptr<KdaGpuRun> fresh = make(1000 + static_cast<uint64_t>(r), false);  // host copies only
      const auto dst = cap->inputs();
      const auto src = fresh->inputs();
      for (size_t i = 0; i < src.size(); ++i) {
        if (src[i].first->defined() && dst[i].second != nullptr) upload_into(*src[i].first, *dst[i].second, stream.s);
      }
      poison_outputs(*cap);
      cuda_check(cudaGraphLaunch(exec, stream.s), "cudaGraphLaunch");
      cuda_check(cudaStreamSynchronize(stream.s), "cudaStreamSynchronize");
      const std::string e = kda_compare(*fresh, *cap);
      EXPECT_EQ(e, "") << sh.name << " replay " << r << ": " << kda_describe(fresh->c, "");
      if (!e.empty()) break;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    if (ws != nullptr) cudaFree(ws);
  }
}

// A state pool [P, HV = 4, V = 128, K = 128] fp32 of P = 2^15 + 64 rows: 2^31 + 2^22 elements,
// 8 GiB + 16 MiB (past 4 GiB and past 2^31 elements). state_indices pick rows 2^15 (its first
// element is element 2^31), P - 1 (the last) and P - 5; every other row is NaN, so a stray read
// poisons a result and a stray write shows in the neighbouring rows. Recurrent decode (T = 1, auto
// and pinned) and the chunked path (T = 37), both layouts.
TEST_F(KdaReliability, StatePoolPast4GiB) {
  constexpr int64_t kHV = 4, kDim = 128, kRows = (int64_t{1} << 15) + 64;
  constexpr int64_t kRowElems = kHV * kDim * kDim;  // 65536
  const size_t pool_bytes = static_cast<size_t>(kRows * kRowElems) * sizeof(float);
  ASSERT_GT(static_cast<double>(kRows * kRowElems), 2147483648.0);
  size_t free_bytes = 0, total_bytes = 0;
  cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (free_bytes < pool_bytes + (size_t{512} << 20)) {
    GTEST_SKIP() << "not enough free device memory for a " << pool_bytes << "-byte state pool (free " << free_bytes
                 << " of " << total_bytes << ")";
  }
  float* pool = nullptr;
  if (cudaMalloc(&pool, pool_bytes) != cudaSuccess) {
    cudaGetLastError();
    GTEST_SKIP() << "cudaMalloc of a " << pool_bytes << "-byte state pool failed";
  }
  const std::vector<int32_t> rows = {int32_t{1} << 15, static_cast<int32_t>(kRows - 1), static_cast<int32_t>(kRows - 5)};
  // Rows whose contents must stay NaN: the neighbours of the selected ones, the first row.
  const std::vector<int64_t> watch = {0, (int64_t{1} << 15) - 1, (int64_t{1} << 15) + 1, kRows - 2, kRows - 4,
                                      kRows - 6};
  struct Variant {
    int64_t T;
    KdaCudaPath path;
    KdaStateLayout layout;
  };
  const Variant variants[] = {{1, KdaCudaPath::kAuto, KdaStateLayout::kVFirst},
                              {1, KdaCudaPath::kRecurrent, KdaStateLayout::kKFirst},
                              {37, KdaCudaPath::kChunked, KdaStateLayout::kVFirst},
                              {37, KdaCudaPath::kChunked, KdaStateLayout::kKFirst},
                              {37, KdaCudaPath::kChunkedFused, KdaStateLayout::kVFirst},
                              {37, KdaCudaPath::kChunkedFused, KdaStateLayout::kKFirst}};
  for (const Variant& var : variants) {
    const std::string label = std::string("T=") + std::to_string(var.T) +
                              (var.path == KdaCudaPath::kAuto           ? " auto"
                               : var.path == KdaCudaPath::kChunked      ? " chunked"
                               : var.path == KdaCudaPath::kChunkedFused ? " chunked-fused"
                                                                        : " recurrent") +
                              (var.layout == KdaStateLayout::kKFirst ? " K-first" : " V-first");
    // Host problem: 3 sequences with their own initial and final states (the reference's view).
    KdaGpuRun r;
    r.c = base_case();
    r.c.B = 3, r.c.T = var.T, r.c.H = 2, r.c.HV = kHV, r.c.K = kDim, r.c.V = kDim;
    r.c.layout = var.layout;
    r.setup(4096 + static_cast<uint64_t>(var.T), -1, false);
    std::vector<double> ref_out, ref_state;
    ASSERT_TRUE(kda_recurrent_fp64(r.host_params(), &ref_out, &ref_state).ok());

    cuda_check(cudaMemset(pool, 0xFF, pool_bytes), "cudaMemset");  // NaN everywhere
    const size_t row_bytes = static_cast<size_t>(kRowElems) * sizeof(float);
    for (size_t n = 0; n < rows.size(); ++n) {
      cuda_check(cudaMemcpy(pool + static_cast<int64_t>(rows[n]) * kRowElems,
                            static_cast<const char*>(r.c.initial.view().data) + n * row_bytes, row_bytes,
                            cudaMemcpyHostToDevice),
                 "row upload");
    }
    HostTensor h_idx(DType::kI32, {3});
    for (int64_t n = 0; n < 3; ++n) h_idx.set({n}, rows[static_cast<size_t>(n)]);
    DeviceTensor d_idx(h_idx);
    KdaParams p = r.device_params();
    p.initial_state = p.final_state =
        make_contiguous_view(pool, DType::kF32, {kRows, kHV, kDim, kDim}, Device::kCUDA);
    p.state_indices = d_idx.view();
    r.dout->poison();
    RunOptions o;
    o.engine = "cuda";
    const Status s = var.path == KdaCudaPath::kAuto ? kda(p, o) : kda_cuda_run_path(p, var.path, nullptr);
    ASSERT_TRUE(s.ok()) << label << ": " << s.to_string();
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    HostTensor out = r.c.out;
    r.dout->download(&out);
    const std::vector<double> got = out.values();
    EXPECT_TRUE(all_finite(got)) << label << ": NaN/Inf in out (a read outside the selected rows?)";
    EXPECT_LT(rel_error(got, ref_out), kKdaGpuRelTol) << label << ": out rel RMS";
    // The selected rows, gathered in the reference's order [N, HV, K, V].
    std::vector<float> row(static_cast<size_t>(kRowElems));
    std::vector<double> st;
    for (size_t n = 0; n < rows.size(); ++n) {
      cuda_check(cudaMemcpy(row.data(), pool + static_cast<int64_t>(rows[n]) * kRowElems, row_bytes,
                            cudaMemcpyDeviceToHost),
                 "row download");
      for (int64_t hv = 0; hv < kHV; ++hv) {
        for (int64_t d = 0; d < kDim; ++d) {
          for (int64_t e = 0; e < kDim; ++e) {
            const int64_t at = var.layout == KdaStateLayout::kVFirst ? (hv * kDim + e) * kDim + d : (hv * kDim + d) * kDim + e;
            st.push_back(row[static_cast<size_t>(at)]);
          }
        }
      }
    }
    EXPECT_TRUE(all_finite(st)) << label << ": NaN/Inf in the selected rows' final state";
    EXPECT_LT(rel_error(st, ref_state), kKdaGpuRelTol) << label << ": final state rel RMS";
    for (int64_t w : watch) {
      cuda_check(cudaMemcpy(row.data(), pool + w * kRowElems, row_bytes, cudaMemcpyDeviceToHost), "row download");
      int64_t touched = 0;
      for (float x : row) {
        uint32_t bits = 0;
        std::memcpy(&bits, &x, sizeof bits);
        touched += bits != 0xFFFFFFFFu ? 1 : 0;
      }
      EXPECT_EQ(touched, 0) << label << ": row " << w << " (not selected) was written";
    }
  }
  cudaFree(pool);
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
