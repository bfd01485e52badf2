// RunOptions: how an op runs (which engine, which stream, which workspace), as opposed to what it
// computes (the params struct).
#pragma once

#include <cstddef>

namespace groupattn {

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

  // Read device-resident index tensors (cu_seqlens, seqlens_k, block_table) back to the host and
  // check their contents. Costs a synchronisation; host-resident index tensors are always checked.
  bool check_device_indices = false;
};

}  // namespace groupattn
