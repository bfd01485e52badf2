// Status: the only way the library reports failure. No exceptions cross the API, nothing calls
// exit, nothing prints. A message names the argument at fault and, where there is a set of
// accepted values, lists it.
#pragma once

#include <string>
#include <utility>

namespace groupattn {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's problem description is wrong (shape, dtype, stride, index...)
  kNotSupported,     // valid problem, but the engine (or every engine) declines it
  kOutOfMemory,      // an allocation the library made on the caller's behalf failed
  kCudaError,        // a CUDA call inside the library failed
  kInternal,         // a bug in the library
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: q: dtype f32 not supported (accepted: bf16, f16)"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }

}  // namespace groupattn

// Propagate a non-ok Status to the caller.
#define GA_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::groupattn::Status ga_status_ = (expr);  \
    if (!ga_status_.ok()) return ga_status_;  \
  } while (0)
