// GPU reliability (issue 6): the cuda attention engine on two streams at once and from many host
// threads (no shared scratch), captured once in a CUDA graph and replayed with new inputs, a
// decode over a K/V cache larger than 4 GiB per tensor (offsets past 2^31 elements), and a call
// whose workspace cannot be allocated (out of device memory). Every result is checked against the
// fp64 reference on host copies. Skips without a GPU.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu/cuda_attention_harness.h"

namespace groupattn::test {
namespace {

class Reliability : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// A decode on a paged cache with automatic splits (the path with scratch: partials + combine) and
// a causal GQA prefill.
Case decode_case(uint64_t seed) {
  Case c;
  c.hq = 8, c.hkv = 2, c.d = 128;
  c.q_lens = {1, 1, 1};
  c.k_lens = {700, 1, 333};
  c.kv = KvKind::kPaged;
  c.page_size = 16;
  c.seed = seed;
  return c;
}

Case prefill_case(uint64_t seed) {
  Case c;
  c.hq = 12, c.hkv = 4, c.d = 64;
  c.q_lens = {130, 130};
  c.k_lens = {130, 130};
  c.causal = true;
  c.seed = seed;
  return c;
}

// Copies a host tensor's span into a device tensor of the same shape and strides, on `stream`.
void upload_into(const HostTensor& host, const DeviceTensor& dev, cudaStream_t stream) {
  if (!host.defined()) return;
  cuda_check(cudaMemcpyAsync(dev.view().data, host.view().data, static_cast<size_t>(host.view().span_bytes()),
                             cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync");
}

struct Streams {
  cudaStream_t s[2] = {nullptr, nullptr};
  Streams() {
    for (auto& x : s) cuda_check(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~Streams() {
    for (auto& x : s) cudaStreamDestroy(x);
  }
};

// Launches `p` on `stream` with the cuda engine (outputs poisoned first, synchronously).
Status launch(Problem& p, cudaStream_t stream) {
  RunOptions o;
  o.engine = "cuda";
  o.stream = stream;
  return attention(p.device_params(), o);
}

void download_and_check(Problem& p, const std::string& label) {
  HostTensor got_out = like(p.out), got_lse = like(p.lse);
  p.dout->download(&got_out);
  p.dlse->download(&got_lse);
  ASSERT_TRUE(run_reference(p).ok());
  expect_matches_reference(p, got_out, got_lse, label);
  EXPECT_TRUE(p.dout->guards_intact()) << label << ": out guard band";
  EXPECT_TRUE(p.dlse->guards_intact()) << label << ": lse guard band";
}

TEST_F(Reliability, TwoStreamsAtOnceDifferentInputs) {
  for (bool decode : {true, false}) {
    Streams streams;
    std::unique_ptr<Problem> a = make_problem(decode ? decode_case(11) : prefill_case(11));
    std::unique_ptr<Problem> b = make_problem(decode ? decode_case(12) : prefill_case(12));
    a->dout->poison(), a->dlse->poison(), b->dout->poison(), b->dlse->poison();
    // Interleave many launches so the two streams' kernels overlap; the last one on each counts.
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(launch(*a, streams.s[0]).ok());
      ASSERT_TRUE(launch(*b, streams.s[1]).ok());
    }
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    download_and_check(*a, decode ? "decode stream 0" : "prefill stream 0");
    download_and_check(*b, decode ? "decode stream 1" : "prefill stream 1");
  }
}

TEST_F(Reliability, ManyHostThreadsAtOnce) {
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Problem>> problems;
  for (int t = 0; t < kThreads; ++t) {
    problems.push_back(make_problem(t % 2 ? decode_case(100 + t) : prefill_case(100 + t)));
    problems.back()->dout->poison(), problems.back()->dlse->poison();
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        failures[t] = 1;
        return;
      }
      for (int i = 0; i < 10; ++i) failures[t] += launch(*problems[t], s).ok() ? 0 : 1;
      failures[t] += cudaStreamSynchronize(s) == cudaSuccess ? 0 : 1;
      cudaStreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    download_and_check(*problems[t], "thread " + std::to_string(t));
  }
}

// Capture once, replay 100 times with new inputs (same shapes) copied into the captured buffers.
// Catches state kept between calls and workspaces sized or filled at capture time only.
TEST_F(Reliability, GraphCaptureReplayWithNewInputs) {
  constexpr int kReplays = 100;
  for (bool decode : {true, false}) {
    const Case base = decode ? decode_case(1) : prefill_case(1);
    std::unique_ptr<Problem> cap = make_problem(base);
    Streams streams;
    cudaStream_t s = streams.s[0];
    RunOptions o;
    o.engine = "cuda";
    o.stream = s;
    size_t ws_bytes = 0;
    ASSERT_TRUE(attention_workspace_bytes(cap->device_params(), o, &ws_bytes).ok());
    void* ws = nullptr;
    if (ws_bytes > 0) cuda_check(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
    o.workspace = ws;
    o.workspace_bytes = ws_bytes;

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    // Global mode, PyTorch's default: any capture-unsafe call inside attention() fails the capture.
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    const Status captured = attention(cap->device_params(), o);
    cuda_check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    ASSERT_TRUE(captured.ok()) << captured.to_string();
    cuda_check(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "cudaGraphInstantiate");

    int failed = 0;
    for (int r = 0; r < kReplays && failed == 0; ++r) {
      Case c = base;
      c.seed = 1000 + static_cast<uint64_t>(r);
      std::unique_ptr<Problem> fresh = make_problem(c);  // host copies of the new inputs
      const std::vector<std::pair<const HostTensor*, const DeviceTensor*>> inputs = {
          {&fresh->q, cap->dq.get()},         {&fresh->k, cap->dk.get()},
          {&fresh->v, cap->dv.get()},         {&fresh->cu_q, cap->dcu_q.get()},
          {&fresh->cu_k, cap->dcu_k.get()},   {&fresh->seqlens_k, cap->dseqlens_k.get()},
          {&fresh->block_table, cap->dblock_table.get()}};
      for (const auto& [h, d] : inputs) {
        if (d != nullptr) upload_into(*h, *d, s);
      }
      cap->dout->poison(), cap->dlse->poison();
      cuda_check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      HostTensor got_out = like(fresh->out), got_lse = like(fresh->lse);
      cap->dout->download(&got_out);
      cap->dlse->download(&got_lse);
      ASSERT_TRUE(run_reference(*fresh).ok());
      const int before = ::testing::Test::HasFailure() ? 1 : 0;
      expect_matches_reference(*fresh, got_out, got_lse,
                               std::string(decode ? "decode" : "prefill") + " replay " + std::to_string(r));
      failed = (::testing::Test::HasFailure() ? 1 : 0) - before;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    if (ws != nullptr) cudaFree(ws);
  }
}

// K and V of 4 GiB + 32 KiB each (bf16 [1, 2^23 + 64, 2, 128], 2^31 + 16384 elements): a decode
// query whose window sees only the last 64 keys, so every read is past element 2^31. Everything
// outside the window is NaN: reading it would poison the answer. The paged form puts the sequence's
// pages at the end of a pool of the same size, in reverse order.
TEST_F(Reliability, DecodeOnKvCachePast4GiB) {
  constexpr int64_t kWindow = 64, kHkv = 2, kHq = 8, kD = 128, kPage = 16;
  constexpr int64_t kSk = (int64_t{1} << 23) + kWindow;
  const int64_t row = kHkv * kD;  // elements per key position
  const size_t bytes = static_cast<size_t>(kSk * row) * 2;
  ASSERT_GT(bytes, size_t{4} << 30);
  void* k_big = nullptr;
  void* v_big = nullptr;
  if (cudaMalloc(&k_big, bytes) != cudaSuccess || cudaMalloc(&v_big, bytes) != cudaSuccess) {
    cudaFree(k_big);
    cudaGetLastError();  // clear the allocation error
    GTEST_SKIP() << "not enough device memory for two " << bytes << "-byte tensors";
  }
  cuda_check(cudaMemset(k_big, 0xFF, bytes), "cudaMemset");  // NaN in bf16
  cuda_check(cudaMemset(v_big, 0xFF, bytes), "cudaMemset");

  // The reference problem: the 64 visible keys only.
  std::mt19937_64 rng(64);
  HostTensor q(DType::kBF16, {1, 1, kHq, kD}), k(DType::kBF16, {1, kWindow, kHkv, kD}),
      v(DType::kBF16, {1, kWindow, kHkv, kD});
  q.fill_normal(rng), k.fill_normal(rng), v.fill_normal(rng);
  HostTensor ref_out(DType::kBF16, {1, 1, kHq, kD}), ref_lse(DType::kF32, {kHq, 1});
  AttentionParams ref;
  ref.q = q.view(), ref.k = k.view(), ref.v = v.view(), ref.out = ref_out.view(), ref.lse = ref_lse.view();
  RunOptions ro;
  ro.engine = "reference";
  ASSERT_TRUE(attention(ref, ro).ok());

  DeviceTensor dq(q);
  HostTensor got_out(DType::kBF16, {1, 1, kHq, kD}), got_lse(DType::kF32, {kHq, 1});
  DeviceTensor dout(got_out), dlse(got_lse);
  const auto check = [&](const AttentionParams& p, const char* label) {
    dout.poison(), dlse.poison();
    RunOptions o;
    o.engine = "cuda";
    const Status s = attention(p, o);
    ASSERT_TRUE(s.ok()) << label << ": " << s.to_string();
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    dout.download(&got_out);
    dlse.download(&got_lse);
    const std::vector<double> a = got_out.values(), b = ref_out.values();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    EXPECT_TRUE(std::isfinite(num)) << label << ": NaN/Inf in O (read outside the window?)";
    EXPECT_LT(std::sqrt(num / den), 1e-2) << label << ": relative error of O";
    const std::vector<double> la = got_lse.values(), lb = ref_lse.values();
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-3) << label << ": LSE head " << i;
  };

  // Batched cache: the last 64 positions hold the keys; causal + window_left = 63.
  const size_t tail = static_cast<size_t>((kSk - kWindow) * row) * 2;
  const size_t window_bytes = static_cast<size_t>(kWindow * row) * 2;
  cuda_check(cudaMemcpy(static_cast<char*>(k_big) + tail, k.view().data, window_bytes, cudaMemcpyHostToDevice), "k");
  cuda_check(cudaMemcpy(static_cast<char*>(v_big) + tail, v.view().data, window_bytes, cudaMemcpyHostToDevice), "v");
  AttentionParams p;
  p.q = dq.view(), p.out = dout.view(), p.lse = dlse.view();
  p.k = make_contiguous_view(k_big, DType::kBF16, {1, kSk, kHkv, kD}, Device::kCUDA);
  p.v = make_contiguous_view(v_big, DType::kBF16, {1, kSk, kHkv, kD}, Device::kCUDA);
  p.causal = true;
  p.window_left = kWindow - 1;
  check(p, "batched, window at the end");
  for (int splits : {1, 3}) {
    p.num_splits = splits;
    check(p, splits == 1 ? "batched, 1 split" : "batched, 3 splits");
  }

  // Paged: pool [kSk / 16, 16, 2, 128]; the sequence's 4 pages are the pool's last 4, reversed.
  cuda_check(cudaMemset(k_big, 0xFF, bytes), "cudaMemset");
  cuda_check(cudaMemset(v_big, 0xFF, bytes), "cudaMemset");
  const int64_t num_pages = kSk / kPage;
  const int64_t pages = kWindow / kPage;
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t j = 0; j < pages; ++j) {
    table[static_cast<size_t>(j)] = static_cast<int32_t>(num_pages - 1 - j);
    const size_t dst = static_cast<size_t>(table[static_cast<size_t>(j)] * kPage * row) * 2;
    const size_t src = static_cast<size_t>(j * kPage * row) * 2;
    const size_t n = static_cast<size_t>(kPage * row) * 2;
    cuda_check(cudaMemcpy(static_cast<char*>(k_big) + dst, static_cast<char*>(k.view().data) + src, n,
                          cudaMemcpyHostToDevice), "k page");
    cuda_check(cudaMemcpy(static_cast<char*>(v_big) + dst, static_cast<char*>(v.view().data) + src, n,
                          cudaMemcpyHostToDevice), "v page");
  }
  HostTensor h_table(DType::kI32, {1, pages}), h_lens(DType::kI32, {1});
  for (int64_t j = 0; j < pages; ++j) h_table.set({0, j}, table[static_cast<size_t>(j)]);
  h_lens.set({0}, static_cast<double>(kWindow));
  DeviceTensor d_table(h_table), d_lens(h_lens);
  AttentionParams pp;
  pp.q = dq.view(), pp.out = dout.view(), pp.lse = dlse.view();
  pp.k = make_contiguous_view(k_big, DType::kBF16, {num_pages, kPage, kHkv, kD}, Device::kCUDA);
  pp.v = make_contiguous_view(v_big, DType::kBF16, {num_pages, kPage, kHkv, kD}, Device::kCUDA);
  pp.block_table = d_table.view();
  pp.seqlens_k = d_lens.view();
  pp.max_seqlen_k = kWindow;
  check(pp, "paged, last pages of the pool");

  cudaFree(k_big);
  cudaFree(v_big);
}

// Device memory the test owns, freed on every exit path (an ASSERT returns early).
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { cuda_check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { (void)cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Whether every one of `bytes` device bytes at `ptr` is `value` (read back in 64 MiB pieces).
bool device_bytes_all(const void* ptr, size_t bytes, unsigned char value) {
  constexpr size_t kPiece = size_t{64} << 20;
  std::vector<unsigned char> host(std::min(bytes, kPiece));
  for (size_t at = 0; at < bytes; at += kPiece) {
    const size_t n = std::min(kPiece, bytes - at);
    cuda_check(cudaMemcpy(host.data(), static_cast<const char*>(ptr) + at, n, cudaMemcpyDeviceToHost),
               "download");
    if (!std::all_of(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(n),
                     [&](unsigned char b) { return b == value; })) {
      return false;
    }
  }
  return true;
}

// Out of device memory: a call whose split-KV workspace is about twice the device's memory, made
// with no caller workspace, so the library's own stream-ordered allocation (run_engine)
// fails. The call must return kOutOfMemory naming the op, the engine and the allocation, launch
// nothing (out and lse keep their poison), leave no CUDA error behind for the next launch check,
// and leave the device usable: the next call (a small one, whose workspace the library allocates
// the same way) succeeds and matches the reference.
TEST_F(Reliability, WorkspaceAllocationFailureReturnsOutOfMemory) {
  size_t free_bytes = 0, total_bytes = 0;
  cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  // Workspace = splits x Sq x Hq rows of (Dv + 1) floats (partial O and LSE); q and out are Sq x Hq
  // rows of D bf16, 1/257 of it each (about 1.1 GB on an H200). K/V hold a few keys.
  constexpr int64_t kHq = 16, kHkv = 2, kD = 256, kSk = 64;
  constexpr int kSplits = 128;  // the most the cuda engine plans (cuda_engine::kMaxSplits)
  const double row_bytes = double(kSplits) * double(kD + 1) * sizeof(float);
  const auto sq = static_cast<int64_t>(std::ceil(2.0 * double(total_bytes) / row_bytes / double(kHq)));
  const size_t q_bytes = static_cast<size_t>(sq * kHq * kD) * 2,
               lse_bytes = static_cast<size_t>(kHq * sq) * 4;
  const size_t kv_bytes = static_cast<size_t>(kSk * kHkv * kD) * 2;
  DeviceBuffer q(q_bytes), out(q_bytes), lse(lse_bytes), k(kv_bytes), v(kv_bytes);
  cuda_check(cudaMemset(q.ptr, 0, q_bytes), "memset");
  cuda_check(cudaMemset(k.ptr, 0, kv_bytes), "memset");
  cuda_check(cudaMemset(v.ptr, 0, kv_bytes), "memset");
  cuda_check(cudaMemset(out.ptr, 0xFF, q_bytes), "memset");  // poison: NaN in bf16 and f32
  cuda_check(cudaMemset(lse.ptr, 0xFF, lse_bytes), "memset");

  AttentionParams p;
  p.q = make_contiguous_view(q.ptr, DType::kBF16, {1, sq, kHq, kD}, Device::kCUDA);
  p.out = make_contiguous_view(out.ptr, DType::kBF16, {1, sq, kHq, kD}, Device::kCUDA);
  p.lse = make_contiguous_view(lse.ptr, DType::kF32, {kHq, sq}, Device::kCUDA);
  p.k = make_contiguous_view(k.ptr, DType::kBF16, {1, kSk, kHkv, kD}, Device::kCUDA);
  p.v = make_contiguous_view(v.ptr, DType::kBF16, {1, kSk, kHkv, kD}, Device::kCUDA);
  p.num_splits = kSplits;
  RunOptions o;
  o.engine = "cuda";  // no workspace: the library allocates it
  size_t need = 0;
  const Status ws = attention_workspace_bytes(p, o, &need);
  ASSERT_TRUE(ws.ok()) << ws.to_string();
  ASSERT_GT(need, total_bytes) << "the workspace must exceed the device's memory (Sq " << sq << ")";

  (void)cudaGetLastError();  // start from a clean error state
  const Status s = attention(p, o);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  for (const char* word : {"attention", "'cuda'", "workspace"})
    EXPECT_NE(s.message().find(word), std::string::npos)
        << "message lacks '" << word << "': " << s.to_string();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess)
      << "the failed allocation left an error for the next launch check";
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the failed call");
  EXPECT_TRUE(device_bytes_all(out.ptr, q_bytes, 0xFF)) << "out was written by a call that failed";
  EXPECT_TRUE(device_bytes_all(lse.ptr, lse_bytes, 0xFF)) << "lse was written by a call that failed";

  Case small = decode_case(11);
  small.num_splits = 3;  // a workspace again, allocated by the library: this time it fits
  check_case(small);
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
