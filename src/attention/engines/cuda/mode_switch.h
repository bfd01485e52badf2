// Measurement switches of the CUDA engines (an A/B inside one process): a value from the
// environment, read once by each switch (a static in its function, so no getenv per call), that
// tests override with a mode (-1 the environment, 0 off, 1 on) held in an atomic. The sm90 engine's
// switches use the same helpers (sm90/mode_switch.h).
#pragma once

#include <atomic>
#include <cstdlib>

namespace groupattn::cuda_engine {

// Unset gives `fallback`, else the variable's integer value != 0.
inline bool env_switch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  return e == nullptr ? fallback : std::atoi(e) != 0;
}

inline bool switch_value(const std::atomic<int>& mode, bool from_env) {
  const int m = mode.load(std::memory_order_relaxed);
  return m < 0 ? from_env : m > 0;
}

inline int clamp_mode(int mode) { return mode < 0 ? -1 : (mode > 0 ? 1 : 0); }

}  // namespace groupattn::cuda_engine
