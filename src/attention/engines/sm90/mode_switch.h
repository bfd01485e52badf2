// Measurement switches of the sm90 engines (an A/B inside one process): core/mode_switch.h's
// switches::BoolSwitch (the environment read once, overridden by tests with a mode -1 the
// environment, 0 off, 1 on).
#pragma once

#include "core/mode_switch.h"
