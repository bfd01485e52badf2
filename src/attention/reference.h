// The fp64 attention reference: the oracle every engine is tested against, and the partial-output
// ("attention over a KV shard") plus LSE-merge math that split-KV and context parallelism share.
// Host memory only. Semantics: include/groupattn/attention.h.
#pragma once

#include <cstdint>
#include <vector>

#include "groupattn/attention.h"

namespace groupattn {

// Attention in double over validated, host-resident params, with each sequence's visible keys
// further restricted to key positions [key_begin, key_end) (positions are not renumbered, so the
// causal alignment and the window are those of the whole problem; in partial-output mode they are
// global positions, kv_shard_offset-based). Writes nothing to p.out/p.lse;
// fills o [total_q, Hq, Dv] and lse [Hq, total_q] (natural log; -inf where a row sees no key, with
// that row's O = 0). Batched Q rows are numbered b * Sq + i. Validates p (and its indices) first.
Status reference_attention_fp64(const AttentionParams& p, int64_t key_begin, int64_t key_end,
                                std::vector<double>* o, std::vector<double>* lse);

// One partial result of reference_attention_fp64 (or of an engine's split) in the same layout.
struct AttentionPartial {
  std::vector<double> o;    // [total_q, Hq, Dv]
  std::vector<double> lse;  // [Hq, total_q]
};

// Merges partials over disjoint key shards: O = sum_s exp(lse_s - m) O_s / sum_s exp(lse_s - m)
// and LSE = m + log(sum_s exp(lse_s - m)) with m the max of the partials' LSEs. Partials with
// LSE = -inf (no visible key in the shard) contribute nothing; a row that is -inf in all of them
// gets O = 0 and LSE = -inf.
void combine_partials(const std::vector<AttentionPartial>& parts, int64_t total_q, int64_t hq,
                      int64_t dv, std::vector<double>* o, std::vector<double>* lse);

}  // namespace groupattn
