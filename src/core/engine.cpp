#include "core/engine.h"

#include <cstdlib>

namespace groupattn {

const char* pinned_engine_name(const RunOptions& options) {
  if (options.engine != nullptr && options.engine[0] != '\0') return options.engine;
  const char* env = std::getenv("GROUPATTN_ENGINE");
  if (env != nullptr && env[0] != '\0') return env;
  return nullptr;
}

}  // namespace groupattn
