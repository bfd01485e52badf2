// The few CUDA runtime services host code outside the engines needs, behind plain C++ signatures
// so that this header (and its users) compile without CUDA. In a CPU-only build every function
// reports that CUDA is absent.
#pragma once

#include <cstddef>

#include "groupattn/status.h"

namespace groupattn {

bool cuda_compiled();
int cuda_device_count();  // 0 when none (or CPU-only build)
// Multiprocessor count and compute capability (major * 10 + minor) of the current device.
Status cuda_device_properties(int* sm_count, int* compute_capability);
// The same, and the current device's ordinal: one cudaGetDevice, the attributes from a per-device
// cache (asked once per device). Launchers that take the ordinal from here ask no more on the call.
Status cuda_current_device(int* device, int* sm_count, int* compute_capability);

Status copy_device_to_host(void* dst, const void* src, size_t bytes, const char* what);
Status allocate_workspace(size_t bytes, void* stream, void** out);
Status free_workspace(void* ptr, void* stream);

}  // namespace groupattn
