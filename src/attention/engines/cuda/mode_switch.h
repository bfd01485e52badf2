// Measurement switches of the CUDA engines (an A/B inside one process): the shared helpers of
// core/mode_switch.h (a value from the environment read once by each switch, overridden by tests
// with a mode -1 the environment, 0 off, 1 on): switches::BoolSwitch for the boolean ones with a fixed
// default, the helpers below for a default that depends on the launch.
#pragma once

#include "core/mode_switch.h"

namespace groupattn::cuda_engine {

using switches::clamp_mode;
using switches::env_mode;
using switches::switch_value_or;

}  // namespace groupattn::cuda_engine
