// The chunked KDA reference: the WY/UT chunk algorithm of research/kda.md 3.1 in fp64, 16-token
// chunks. An independent second oracle (it shares only the loading plumbing and the gate with the
// recurrence) and the blueprint the GPU kernels follow. Engine "reference-chunked", listed after
// "reference", so it runs only when pinned.
#pragma once

#include <vector>

#include "groupattn/kda.h"
#include "kda/engine_list.h"

namespace groupattn {

// Tokens per chunk. The GPU engines use the same chunk so their intermediates can be compared.
inline constexpr int64_t kKdaRefChunk = 16;

// Results as kda_recurrent_fp64 (kda/reference.h): out [B, T, HV, V], final_state [N, HV, K, V].
Status kda_chunked_fp64(const KdaParams& p, std::vector<double>* out, std::vector<double>* final_state);

const KdaEngine& kda_reference_chunked_engine();

}  // namespace groupattn
