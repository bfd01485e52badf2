// Attention validation beyond the public validate_attention(): index-tensor contents.
#pragma once

#include "groupattn/attention.h"

namespace groupattn {

// cu_seqlens monotonic and within total_q / total_k, seqlens_k within the cache (batched) or the
// block table's capacity (paged), page ids within [0, num_pages). Host-resident index tensors are
// always checked; device-resident ones only with options.check_device_indices.
Status validate_attention_indices(const AttentionParams& p, const RunOptions& options);

}  // namespace groupattn
