// GPU tier for context parallelism on ONE device: the cuda engine in partial-output mode over 1, 2,
// 3 and 5 KV shards (views of one batched K/V cache at shard offsets), the partials merged with
// attention_merge on the device, must match the fp64 reference of the unsharded problem
// (TESTING.md rules: bf16 relative error < 1e-2, LSE abs < 1e-3) and the unsharded cuda result.
// Includes prefill cases where a shard sees no key for some rows (LSE -inf, O = 0 in the partial).
// Prints one line per case: shards, rel error vs reference, vs unsharded engine, empty partial rows.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "groupattn/context_parallel.h"
#include "gpu/cuda_attention_harness.h"

namespace groupattn::test {
namespace {

class ContextParallelOneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

HostTensor i32(const std::vector<int64_t>& v) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set({static_cast<int64_t>(i)}, static_cast<double>(v[i]));
  return t;
}

// Shards the (batched, equal-length) problem `c` into `shards` near-equal key ranges, runs the cuda
// engine on each, merges on the device and checks. `o_dtype_f32` merges fp32 copies of the partials
// (the other accepted partial type) instead of the bf16 ones.
void check_sharded(const Case& c, int shards, bool o_dtype_f32 = false) {
  const std::string label = describe(c) + " shards=" + std::to_string(shards) + (o_dtype_f32 ? " (f32 partials)" : "");
  SCOPED_TRACE(label);
  auto p = make_problem(c);
  ASSERT_TRUE(run_reference(*p).ok());
  HostTensor whole_out = like(p->out), whole_lse = like(p->lse);
  const Status ws = run_cuda(*p, &whole_out, &whole_lse);
  ASSERT_TRUE(ws.ok()) << ws.to_string();

  const AttentionParams dp = p->device_params();
  const int64_t batch = dp.q.shape[0], sq = dp.q.shape[1], hq = dp.q.shape[2], dv = dp.v.shape[3];
  const int64_t sk = dp.k.shape[1], total_q = batch * sq;
  const size_t esize = dtype_size(dp.k.dtype);
  HostTensor o_parts_h(c.dtype, {shards, total_q, hq, dv}), lse_parts_h(DType::kF32, {shards, hq, total_q});
  DeviceTensor o_parts(o_parts_h), lse_parts(lse_parts_h);
  o_parts.poison();
  lse_parts.poison();
  HostTensor totals_h = i32(std::vector<int64_t>(static_cast<size_t>(batch), sk));
  DeviceTensor totals(totals_h);
  std::vector<std::unique_ptr<DeviceTensor>> offsets;
  for (int s = 0; s < shards; ++s) {
    const int64_t begin = sk * s / shards, end = sk * (s + 1) / shards;
    AttentionParams sp = dp;
    // K/V shard: keys [begin, end) of every row of the batched cache, as a view.
    for (TensorView* t : {&sp.k, &sp.v}) {
      t->data = static_cast<char*>(t->data) + begin * t->stride[1] * static_cast<int64_t>(esize);
      t->shape[1] = end - begin;
    }
    HostTensor off_h = i32(std::vector<int64_t>(static_cast<size_t>(batch), begin));
    offsets.push_back(std::make_unique<DeviceTensor>(off_h));
    sp.kv_shard_offset = offsets.back()->view();
    sp.kv_total_len = totals.view();
    char* o_slot = static_cast<char*>(o_parts.view().data) + s * total_q * hq * dv * static_cast<int64_t>(esize);
    char* l_slot = static_cast<char*>(lse_parts.view().data) + s * hq * total_q * static_cast<int64_t>(sizeof(float));
    sp.out = make_contiguous_view(o_slot, c.dtype, {batch, sq, hq, dv}, Device::kCUDA, 0);
    sp.lse = make_contiguous_view(l_slot, DType::kF32, {hq, total_q}, Device::kCUDA, 0);
    RunOptions o;
    o.engine = "cuda";
    const Status st = attention(sp, o);
    ASSERT_TRUE(st.ok()) << "shard " << s << ": " << st.to_string();
  }
  // Partials on the host (download synchronises the device): rows with no key in their shard must be exactly (O = 0, LSE = -inf).
  o_parts.download(&o_parts_h);
  lse_parts.download(&lse_parts_h);
  int empty = 0, bad_empty = 0;
  for (int64_t s = 0; s < shards; ++s)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r = 0; r < total_q; ++r) {
        const double l = lse_parts_h.at({s, h, r});
        EXPECT_FALSE(std::isnan(l)) << "unwritten partial LSE";
        if (l != -INFINITY) continue;
        ++empty;
        for (int64_t x = 0; x < dv; ++x) bad_empty += o_parts_h.at({s, r, h, x}) != 0.0;
      }
  EXPECT_EQ(bad_empty, 0) << "partial O of a row with no key must be 0";

  MergeParams m;
  std::unique_ptr<DeviceTensor> o_f32;
  if (o_dtype_f32) {
    HostTensor f(DType::kF32, {shards, total_q, hq, dv});
    for_each_index(f.shape(), [&](const std::vector<int64_t>& i) { f.set(i, o_parts_h.at(i)); });
    o_f32 = std::make_unique<DeviceTensor>(f);
    m.o_partials = o_f32->view();
  } else {
    m.o_partials = o_parts.view();
  }
  m.lse_partials = lse_parts.view();
  p->dout->poison();
  p->dlse->poison();
  m.out = p->dout->view();
  m.lse = p->dlse->view();
  const Status ms = attention_merge(m);
  ASSERT_TRUE(ms.ok()) << ms.to_string();
  HostTensor got = like(p->out), got_lse = like(p->lse);
  p->dout->download(&got);
  p->dlse->download(&got_lse);
  expect_matches_reference(*p, got, got_lse, label);
  const double rel_ref = rel_error(got.values(), p->out.values());
  const double rel_engine = rel_error(got.values(), whole_out.values());
  EXPECT_LT(rel_engine, 1e-2) << "merged vs unsharded cuda result";
  EXPECT_TRUE(p->dout->guards_intact() && p->dlse->guards_intact() && o_parts.guards_intact() &&
              lse_parts.guards_intact());
  std::printf("[cp one-gpu] %-70s rel_err_vs_fp64=%.2e rel_err_vs_unsharded=%.2e empty_partial_rows=%d\n",
              label.c_str(), rel_ref, rel_engine, empty);
}

TEST_F(ContextParallelOneGpu, DecodeGqa64To8ShardedMergeEqualsWhole) {
  for (int shards : {1, 2, 3, 5}) {
    Case c;
    c.hq = 64, c.hkv = 8, c.d = 128;
    c.q_lens = {1, 1};
    c.k_lens = {3001, 3001};
    c.causal = true;
    check_sharded(c, shards);
  }
}

TEST_F(ContextParallelOneGpu, DecodeFourTokensGqa12To4ForcedSplitAndNoSplit) {
  for (int splits : {1, 3}) {
    for (int shards : {2, 5}) {
      Case c;
      c.hq = 12, c.hkv = 4, c.d = 64;
      c.q_lens = {4, 4, 4};
      c.k_lens = {777, 777, 777};
      c.causal = true;
      c.num_splits = splits;
      check_sharded(c, shards);
    }
  }
}

TEST_F(ContextParallelOneGpu, PrefillCausalSqLessThanSkRowsWithNoKeyInLastShards) {
  for (int shards : {1, 2, 3, 5}) {
    Case c;
    c.hq = 8, c.hkv = 2, c.d = 128;
    c.q_lens = {200, 200};
    c.k_lens = {500, 500};
    c.causal = true;
    check_sharded(c, shards);
  }
}

TEST_F(ContextParallelOneGpu, PrefillSlidingWindowAndF32Partials) {
  for (int shards : {3, 5}) {
    Case c;
    c.hq = 8, c.hkv = 2, c.d = 64;
    c.q_lens = {150};
    c.k_lens = {400};
    c.causal = true;
    c.window_left = 60;
    check_sharded(c, shards);
    check_sharded(c, shards, /*o_dtype_f32=*/true);
  }
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
