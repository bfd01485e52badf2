// Engine listing: which engines exist for each op in this build, in selection order.
#pragma once

#include <string>
#include <vector>

namespace groupattn {

enum class Op { kAttention, kKda };

const char* op_name(Op op);

struct EngineInfo {
  Op op;
  std::string name;         // what RunOptions::engine and --engine take
  std::string description;  // one line: what it is and where it runs
  std::string supports;     // the problems it serves (dtypes, head dims, features)
  bool available;           // false when compiled in but not usable here (e.g. no GPU)
  std::string unavailable_reason;
};

std::vector<EngineInfo> list_engines(Op op);

// Library build facts: "cuda" when CUDA engines were compiled in, the arch list, the version.
struct BuildInfo {
  std::string version;
  bool cuda_compiled;
  std::string cuda_archs;
};
BuildInfo build_info();

// True when at least one CUDA device is visible (false in CPU-only builds).
bool cuda_device_available();

}  // namespace groupattn
