// RunOptions::workspace_allocator (run_options.h): run_engine asks it for the workspace the selected
// engine needs when the caller gave none or too little, passes its memory to the engine, and
// returns its error (naming op and engine) without running. A fake engine with a workspace makes
// the path reachable without a GPU (the host engines need none).
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "common/small_attention.h"
#include "core/engine.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

struct FakeParams {};

class FakeEngine final : public Engine<FakeParams> {
 public:
  explicit FakeEngine(size_t need) : need_(need) {}
  const char* name() const override { return "fake"; }
  const char* description() const override { return "test engine with a workspace"; }
  std::string supports() const override { return "anything"; }
  Status check_support(const FakeParams&) const override { return Status::Ok(); }
  size_t workspace_bytes(const FakeParams&) const override { return need_; }
  Status run(const FakeParams&, void* workspace, void* stream) const override {
    ++runs;
    seen_workspace = workspace;
    seen_stream = stream;
    return Status::Ok();
  }
  mutable int runs = 0;
  mutable void* seen_workspace = nullptr;
  mutable void* seen_stream = nullptr;

 private:
  size_t need_;
};

// Records each request and hands out `buffer` (or fails, or returns no memory).
struct Recorder {
  std::vector<size_t> requests;
  std::array<unsigned char, 4096> buffer{};
  Status fail = Status::Ok();
  bool give_null = false;

  static Status allocate(void* context, size_t bytes, void** ptr) {
    auto* r = static_cast<Recorder*>(context);
    r->requests.push_back(bytes);
    if (!r->fail.ok()) return r->fail;
    *ptr = r->give_null ? nullptr : r->buffer.data();
    return Status::Ok();
  }
  RunOptions options() {
    RunOptions o;
    o.stream = reinterpret_cast<void*>(0x1234);
    o.workspace_allocator = &Recorder::allocate;
    o.workspace_allocator_context = this;
    return o;
  }
};

TEST(WorkspaceAllocator, AskedOnceForWhatTheEngineNeedsAndItsMemoryRuns) {
  FakeEngine engine(1024);
  Recorder rec;
  const RunOptions o = rec.options();
  ASSERT_TRUE(run_engine("attention", engine, FakeParams{}, o).ok());
  ASSERT_EQ(rec.requests, std::vector<size_t>{1024});
  EXPECT_EQ(engine.runs, 1);
  EXPECT_EQ(engine.seen_workspace, rec.buffer.data());
  EXPECT_EQ(engine.seen_stream, o.stream);
}

TEST(WorkspaceAllocator, NotAskedWhenTheEngineNeedsNoneOrTheCallerGaveEnough) {
  Recorder rec;
  FakeEngine none(0);
  ASSERT_TRUE(run_engine("attention", none, FakeParams{}, rec.options()).ok());
  EXPECT_EQ(none.seen_workspace, nullptr);

  FakeEngine some(512);
  std::array<unsigned char, 512> mine{};
  RunOptions o = rec.options();
  o.workspace = mine.data();
  o.workspace_bytes = mine.size();
  ASSERT_TRUE(run_engine("attention", some, FakeParams{}, o).ok());
  EXPECT_EQ(some.seen_workspace, mine.data());
  EXPECT_TRUE(rec.requests.empty());

  o.workspace_bytes = 511;  // too little: the allocator supplies the whole need
  ASSERT_TRUE(run_engine("attention", some, FakeParams{}, o).ok());
  EXPECT_EQ(rec.requests, std::vector<size_t>{512});
  EXPECT_EQ(some.seen_workspace, rec.buffer.data());
}

TEST(WorkspaceAllocator, ItsErrorIsReturnedWithOpAndEngineAndNothingRuns) {
  FakeEngine engine(256);
  Recorder rec;
  rec.fail = Status(StatusCode::kOutOfMemory, "pool exhausted");
  const Status s = run_engine("kda", engine, FakeParams{}, rec.options());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.message(), "kda (engine 'fake'): workspace allocator: pool exhausted");
  EXPECT_EQ(engine.runs, 0);
}

TEST(WorkspaceAllocator, NoMemoryWithOkIsOutOfMemoryAndNothingRuns) {
  FakeEngine engine(256);
  Recorder rec;
  rec.give_null = true;
  const Status s = run_engine("attention", engine, FakeParams{}, rec.options());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.message(), "attention (engine 'fake'): workspace allocator: returned no memory for 256 bytes");
  EXPECT_EQ(engine.runs, 0);
}

// Through the public API: a host problem runs the reference engine, which needs no workspace, so
// the allocator is never asked (the Python bindings set one on every call).
TEST(WorkspaceAllocator, PublicAttentionOnTheHostNeverAsks) {
  SmallHostAttention a;
  Recorder rec;
  RunOptions o = rec.options();
  o.stream = nullptr;
  ASSERT_TRUE(attention(a.p, o).ok());
  EXPECT_TRUE(rec.requests.empty());
}

}  // namespace
}  // namespace groupattn::test
