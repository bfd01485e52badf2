// The sm90 engine (Hopper decode) is registered first but serves only device tensors on a compute
// capability 9.0 device: host problems go to the reference, and pinning it without such a device
// fails with the reason; the same holds for the sm90-prefill engine. Runs without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

#if GROUPATTN_WITH_CUDA

struct DecodeProblem {
  HostTensor q{DType::kBF16, {1, 1, 8, 128}}, k{DType::kBF16, {1, 64, 2, 128}},
      v{DType::kBF16, {1, 64, 2, 128}}, out{DType::kBF16, {1, 1, 8, 128}}, lse{DType::kF32, {8, 1}};
  AttentionParams p;
  DecodeProblem() {
    q.fill(0.5);
    k.fill(0.25);
    v.fill(1.0);
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
  }
};

TEST(Sm90EngineGate, HostTensorsGoToTheReference) {
  DecodeProblem d;
  const char* name = nullptr;
  const Status s = attention_engine_for(d.p, RunOptions{}, &name);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_STREQ(name, "reference");
}

// Pinning a Hopper engine on host tensors fails with the reason: without a device "no CUDA device
// visible", with one the host tensors (or a device that is not compute capability 9.0).
void expect_pinned_on_host_declines(const char* engine) {
  DecodeProblem d;
  RunOptions o;
  o.engine = engine;
  const char* name = nullptr;
  const Status s = attention_engine_for(d.p, o, &name);
  ASSERT_FALSE(s.ok()) << engine;
  const std::string msg = s.to_string();
  EXPECT_TRUE(msg.find("no CUDA device visible") != std::string::npos ||
              msg.find("device (CUDA) tensors only") != std::string::npos ||
              msg.find("compute capability 9.0") != std::string::npos)
      << engine << ": " << msg;
}

TEST(Sm90EngineGate, PinnedOnHostTensorsDeclinesWithReason) { expect_pinned_on_host_declines("sm90"); }

TEST(Sm90EngineGate, PrefillPinnedOnHostTensorsDeclinesWithReason) {
  expect_pinned_on_host_declines("sm90-prefill");
}

#endif  // GROUPATTN_WITH_CUDA

}  // namespace
}  // namespace groupattn::test
