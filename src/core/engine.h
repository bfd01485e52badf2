// Engine<Params>: the four questions every engine of an op answers, and selection over an ordered
// list of them. Engines are stateless singletons; everything a call needs comes in through the
// params struct, the workspace and the stream, so two streams can run the same engine at once.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "groupattn/run_options.h"
#include "groupattn/status.h"

namespace groupattn {

template <class Params>
class Engine {
 public:
  virtual ~Engine() = default;
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  // The problems this engine serves, one line, for `groupattn engines` and docs.
  virtual std::string supports() const = 0;
  // Whether the engine can run at all in this process (a GPU engine without a GPU cannot).
  virtual Status available() const { return Status::Ok(); }
  // Ok, or NotSupported with a reason a user can act on. Called only on validated params.
  virtual Status check_support(const Params& p) const = 0;
  virtual size_t workspace_bytes(const Params& p) const {
    (void)p;
    return 0;
  }
  // `workspace` holds at least workspace_bytes(p) bytes (nullptr when that is 0).
  virtual Status run(const Params& p, void* workspace, void* stream) const = 0;
};

// The engine name pinned by the options or, failing that, by GROUPATTN_ENGINE; nullptr if none.
const char* pinned_engine_name(const RunOptions& options);

// Walks `engines` in order and returns the first that is available and supports `p`; a pinned
// name selects that engine or fails with its reason. `op` names the op in messages. Runs on every
// call: the accepted-names list is built only for the unknown-name error (an engine passed over
// still builds its decline reason).
template <class Params>
Status select_engine(const char* op, const std::vector<const Engine<Params>*>& engines,
                     const Params& p, const RunOptions& options, const Engine<Params>** chosen) {
  const char* pinned = pinned_engine_name(options);
  std::string reasons;
  for (const Engine<Params>* e : engines) {
    if (pinned != nullptr && std::strcmp(pinned, e->name()) != 0) continue;
    Status s = e->available();
    if (s.ok()) s = e->check_support(p);
    if (s.ok()) {
      *chosen = e;
      return s;
    }
    if (pinned != nullptr) {
      return NotSupported(std::string("engine '") + pinned + "' declines this " + op +
                          " problem: " + s.message());
    }
    reasons += std::string("; ") + e->name() + ": " + s.message();
  }
  if (pinned != nullptr) {
    std::string names;
    for (const Engine<Params>* e : engines) names += (names.empty() ? "" : ", ") + std::string(e->name());
    return InvalidArgument(std::string("engine: unknown engine '") + pinned + "' for op " + op +
                           " (accepted: " + names + ")");
  }
  return NotSupported(std::string("no engine supports this ") + op + " problem" + reasons);
}

// Runs `engine` with the caller's workspace or, when the caller gave too little, one from the
// caller's workspace_allocator if set, else a stream-ordered allocation of the size it needs. `op` names the op in messages (a failed allocation names the op
// and the engine).
template <class Params>
Status run_engine(const char* op, const Engine<Params>& engine, const Params& p, const RunOptions& options);

// An engine's own host allocation failing (std::bad_alloc from a std::vector, e.g. the reference's
// scratch on a huge problem) becomes kOutOfMemory: no exception crosses the API.
template <class Params>
Status run_engine_or_oom(const Engine<Params>& engine, const Params& p, void* workspace, void* stream) {
  try {
    return engine.run(p, workspace, stream);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, std::string("engine '") + engine.name() + "': host allocation failed"};
  } catch (const std::length_error&) {
    return {StatusCode::kOutOfMemory, std::string("engine '") + engine.name() + "': host allocation too large"};
  }
}

template <class Params>
Status run_engine(const char* op, const Engine<Params>& engine, const Params& p, const RunOptions& options) {
  const size_t need = engine.workspace_bytes(p);
  host_timing::mark("workspace size");
  if (need == 0 || (options.workspace != nullptr && options.workspace_bytes >= need)) {
    return run_engine_or_oom(engine, p, need == 0 ? nullptr : options.workspace, options.stream);
  }
  if (options.workspace_allocator != nullptr) {
    void* ws = nullptr;
    const Status a = options.workspace_allocator(options.workspace_allocator_context, need, &ws);
    if (!a.ok() || ws == nullptr) {
      const std::string why = a.ok() ? "returned no memory for " + std::to_string(need) + " bytes" : a.message();
      return {a.ok() ? StatusCode::kOutOfMemory : a.code(),
              std::string(op) + " (engine '" + engine.name() + "'): workspace allocator: " + why};
    }
    host_timing::mark("workspace allocator");
    return run_engine_or_oom(engine, p, ws, options.stream);
  }
  void* ws = nullptr;
  if (Status a = allocate_workspace(need, options.stream, &ws); !a.ok()) {
    return {a.code(), std::string(op) + " (engine '" + engine.name() + "'): " + a.message()};
  }
  host_timing::mark("workspace cudaMallocAsync");
  Status s = run_engine_or_oom(engine, p, ws, options.stream);
  Status f = free_workspace(ws, options.stream);
  host_timing::mark("workspace cudaFreeAsync");
  return s.ok() ? f : s;
}

}  // namespace groupattn
