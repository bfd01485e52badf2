// KDA validation beyond the public validate_kda(): index-tensor contents.
#pragma once

#include "groupattn/kda.h"

namespace groupattn {

// cu_seqlens monotonic and ending at T; state_indices within the pools' first dimension.
// Host-resident index tensors are always checked; device-resident ones only with
// options.check_device_indices.
Status validate_kda_indices(const KdaParams& p, const RunOptions& options);

}  // namespace groupattn
