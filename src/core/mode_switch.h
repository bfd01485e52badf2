// Measurement switches (an A/B inside one process): a value from the environment, read once by
// each switch (BoolSwitch, or a static in its function: no getenv per call), that tests override with
// a mode held in an atomic (-1: back to the environment). Boolean switches take 0 off / 1 on; integer ones
// (a kernel kind, a stage count) any value >= 0. The attention engines' helpers
// (attention/engines/cuda/mode_switch.h, sm90/mode_switch.h) and the KDA engine's switches
// (kda_chunked.cu) are these.
#pragma once

#include <atomic>
#include <cstdlib>

namespace groupattn::switches {

// Unset gives -1 (the switch's own default applies), else 1 where the variable's integer value != 0,
// else 0.
inline int env_mode(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr ? -1 : (std::atoi(e) != 0 ? 1 : 0);
}

// Unset gives `fallback`, else the variable's integer value != 0.
inline bool env_switch(const char* name, bool fallback) {
  const int m = env_mode(name);
  return m < 0 ? fallback : m > 0;
}

// Unset gives `fallback`, else the variable's integer value.
inline int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e == nullptr ? fallback : std::atoi(e);
}

inline bool switch_value(const std::atomic<int>& mode, bool from_env) {
  const int m = mode.load(std::memory_order_relaxed);
  return m < 0 ? from_env : m > 0;
}

// An integer switch: the test's mode if set (>= 0), else the environment's value.
inline int switch_int(const std::atomic<int>& mode, int from_env) {
  const int m = mode.load(std::memory_order_relaxed);
  return m >= 0 ? m : from_env;
}

// A switch whose default depends on the launch: the test's mode if set, else the environment's
// (env_mode), else `fallback`.
inline bool switch_value_or(const std::atomic<int>& mode, int from_env, bool fallback) {
  const int m = mode.load(std::memory_order_relaxed);
  const int chosen = m < 0 ? from_env : m;
  return chosen < 0 ? fallback : chosen > 0;
}

inline int clamp_mode(int mode) { return mode < 0 ? -1 : (mode > 0 ? 1 : 0); }

// One boolean switch with a fixed default: its environment variable, read on first use and then
// kept (no getenv per call; two threads that both read it first read the same value), and the test
// override set_mode (-1 back to the environment, 0 off, 1 on). A namespace-scope object
// (constant-initialised) whose getter and setter the engine exports.
class BoolSwitch {
 public:
  constexpr BoolSwitch(const char* env_name, bool default_on) : name_(env_name), default_(default_on) {}
  BoolSwitch(const BoolSwitch&) = delete;
  BoolSwitch& operator=(const BoolSwitch&) = delete;

  void set_mode(int mode) { mode_.store(clamp_mode(mode), std::memory_order_relaxed); }
  bool on() const {
    const int m = mode_.load(std::memory_order_relaxed);
    if (m >= 0) return m > 0;
    int e = env_.load(std::memory_order_relaxed);
    if (e < 0) {
      e = env_switch(name_, default_) ? 1 : 0;
      env_.store(e, std::memory_order_relaxed);
    }
    return e > 0;
  }

 private:
  const char* name_;
  bool default_;
  std::atomic<int> mode_{-1};
  mutable std::atomic<int> env_{-1};  // -1 not read yet, else the environment's 0 / 1
};

}  // namespace groupattn::switches
