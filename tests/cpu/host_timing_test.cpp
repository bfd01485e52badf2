// core/host_timing.h (groupattn bench --host-breakdown): off, an op call records nothing; on, it
// records its stages in order, starting afresh at each call's entry; the fake engine's workspace
// allocator shows up as its own stage.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/small_attention.h"
#include "core/engine.h"
#include "core/host_timing.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

std::vector<std::string> stage_names() {
  const host_timing::Marks& m = host_timing::thread_marks();
  std::vector<std::string> names;
  for (int i = 0; i < m.count; ++i) names.emplace_back(m.names[i]);
  return names;
}

// Turns the marks on for one scope (and off again however the test leaves it).
struct MarksOn {
  MarksOn() { host_timing::enabled.store(true); }
  ~MarksOn() { host_timing::enabled.store(false); }
  MarksOn(const MarksOn&) = delete;
  MarksOn& operator=(const MarksOn&) = delete;
};

Status host_attention() {
  SmallHostAttention a;
  RunOptions o;
  o.engine = "reference";
  return attention(a.p, o);
}

TEST(HostTiming, OffRecordsNothing) {
  host_timing::thread_marks().count = 0;
  ASSERT_FALSE(host_timing::enabled.load());
  ASSERT_TRUE(host_attention().ok());
  EXPECT_EQ(host_timing::thread_marks().count, 0);
}

TEST(HostTiming, OnRecordsTheStagesOfEachCallInOrder) {
  MarksOn on;
  for (int call = 0; call < 2; ++call) {  // the second call starts a fresh list
    ASSERT_TRUE(host_attention().ok());
    EXPECT_EQ(stage_names(), (std::vector<std::string>{"enter", "validate", "select engine", "workspace size"}));
    const host_timing::Marks& m = host_timing::thread_marks();
    for (int i = 1; i < m.count; ++i) EXPECT_GE(m.ns[i], m.ns[i - 1]) << m.names[i];
  }
}

struct FakeParams {};
class FakeEngine final : public Engine<FakeParams> {
 public:
  const char* name() const override { return "fake"; }
  const char* description() const override { return "test engine with a workspace"; }
  std::string supports() const override { return "anything"; }
  Status check_support(const FakeParams&) const override { return Status::Ok(); }
  size_t workspace_bytes(const FakeParams&) const override { return 64; }
  Status run(const FakeParams&, void*, void*) const override {
    host_timing::mark("fake launch");
    return Status::Ok();
  }
};

Status give_buffer(void* context, size_t, void** ptr) {
  *ptr = context;
  return Status::Ok();
}

TEST(HostTiming, WorkspaceAllocatorAndEngineStages) {
  MarksOn on;
  unsigned char buffer[64];
  RunOptions o;
  o.workspace_allocator = &give_buffer;
  o.workspace_allocator_context = buffer;
  host_timing::begin("enter");
  ASSERT_TRUE(run_engine("attention", FakeEngine{}, FakeParams{}, o).ok());
  EXPECT_EQ(stage_names(), (std::vector<std::string>{"enter", "workspace size", "workspace allocator", "fake launch"}));
}

}  // namespace
}  // namespace groupattn::test
