// RunOptions: how an op runs (which engine, which stream, which workspace), as opposed to what it
// computes (the params struct).
#pragma once

#include <cstddef>

#include "groupattn/status.h"

namespace groupattn {

// Supplies a workspace when the selected engine needs more than RunOptions gives: sets *ptr to at
// least `bytes` bytes (device memory of the op's device for GPU engines, 256-byte aligned) and
// returns Ok, or returns an error, which the op returns with nothing run. Called at most once per
// op call, after validation and engine selection, on the calling thread. The library never frees
// the memory: it must stay valid for the work the op enqueues on RunOptions::stream, so a
// stream-ordered allocator on that stream (torch's caching allocator, cudaMallocAsync) may take it
// back as soon as the op call returns. `context` is RunOptions::workspace_allocator_context.
using WorkspaceAllocator = Status (*)(void* context, size_t bytes, void** ptr);

struct RunOptions {
  // Pin an engine by name ("reference", "cuda", "sm90"). nullptr = the GROUPATTN_ENGINE
  // environment variable if set, else automatic selection. Pinning an engine that declines the
  // problem is an error carrying the engine's reason.
  const char* engine = nullptr;

  // cudaStream_t as void*, so this header needs no CUDA headers. nullptr = the legacy default stream.
  void* stream = nullptr;

  // Caller-owned scratch of `workspace_bytes` bytes (device memory for GPU engines), at least
  // 256-byte aligned. If the engine needs scratch and none (or too little) is given, the library
  // allocates it stream-ordered for this call alone (cudaMallocAsync / cudaFreeAsync).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Where a missing workspace comes from instead of the library's own stream-ordered allocation:
  // a caller that allocates per call (a framework binding) sizes it without a separate
  // *_workspace_bytes query, so validation and selection run once per call, not twice.
  WorkspaceAllocator workspace_allocator = nullptr;
  void* workspace_allocator_context = nullptr;

  // Read device-resident index tensors (cu_seqlens, seqlens_k, block_table) back to the host and
  // check their contents. Costs a synchronisation; host-resident index tensors are always checked.
  bool check_device_indices = false;
};

}  // namespace groupattn
