// The KDA op's engines, in selection order (fastest first, the reference last).
#pragma once

#include <vector>

#include "core/engine.h"
#include "groupattn/kda.h"

namespace groupattn {

using KdaEngine = Engine<KdaParams>;

const std::vector<const KdaEngine*>& kda_engines();

const KdaEngine& kda_reference_engine();  // reference.cpp (the per-token fp64 recurrence)

}  // namespace groupattn
