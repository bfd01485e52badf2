// Measurement switches of the sm90 engines (an A/B inside one process): the CUDA engines' helpers
// (cuda/mode_switch.h: a value from the environment read once by each switch, overridden by tests
// with a mode -1 the environment, 0 off, 1 on).
#pragma once

#include "attention/engines/cuda/mode_switch.h"

namespace groupattn::sm90_engine {

using cuda_engine::clamp_mode;
using cuda_engine::env_switch;
using cuda_engine::switch_value;

}  // namespace groupattn::sm90_engine
