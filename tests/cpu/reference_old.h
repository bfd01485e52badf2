// The pre-session-11 fp64 attention reference, verbatim (reference_old.cpp), for the bitwise
// old-vs-new check. Same contract as groupattn::reference_attention_fp64.
#pragma once

#include <cstdint>
#include <vector>

#include "groupattn/attention.h"

namespace groupattn::reference_old {

Status reference_attention_fp64(const AttentionParams& p, int64_t key_begin, int64_t key_end,
                                std::vector<double>* o, std::vector<double>* lse);

}  // namespace groupattn::reference_old
