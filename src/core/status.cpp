#include "groupattn/status.h"

namespace groupattn {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotSupported: return "not supported";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kCudaError: return "CUDA error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace groupattn
