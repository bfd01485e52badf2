// The sm90 engine (experimental Hopper decode) stays out of the way until asked for: without
// GROUPATTN_EXPERIMENTAL=1 pinning it fails with the reason, and automatic selection never picks
// it (it is registered last). Runs without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

#if GROUPATTN_WITH_CUDA

struct DecodeProblem {
  HostTensor q{DType::kBF16, {1, 1, 8, 128}}, k{DType::kBF16, {1, 64, 2, 128}}, v{DType::kBF16, {1, 64, 2, 128}},
      out{DType::kBF16, {1, 1, 8, 128}}, lse{DType::kF32, {8, 1}};
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

TEST(Sm90EngineGate, PinnedWithoutExperimentalFlagIsUnavailableWithReason) {
  unsetenv("GROUPATTN_EXPERIMENTAL");
  DecodeProblem d;
  RunOptions o;
  o.engine = "sm90";
  const char* name = nullptr;
  const Status s = attention_engine_for(d.p, o, &name);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("sm90 engine is experimental and not yet verified on hardware"), std::string::npos)
      << s.to_string();
  EXPECT_NE(s.to_string().find("GROUPATTN_EXPERIMENTAL=1"), std::string::npos) << s.to_string();
}

TEST(Sm90EngineGate, AutomaticSelectionNeverPicksIt) {
  setenv("GROUPATTN_EXPERIMENTAL", "1", 1);
  DecodeProblem d;  // host tensors: the reference serves them, and it comes before sm90
  const char* name = nullptr;
  const Status s = attention_engine_for(d.p, RunOptions{}, &name);
  unsetenv("GROUPATTN_EXPERIMENTAL");
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_STRNE(name, "sm90");
}

#endif  // GROUPATTN_WITH_CUDA

}  // namespace
}  // namespace groupattn::test
