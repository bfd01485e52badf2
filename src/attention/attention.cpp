// The attention op's entry points: validate, select an engine, run.
#include "groupattn/attention.h"

#include "attention/engine_list.h"
#include "attention/validate.h"
#include "core/host_timing.h"
#include "groupattn/supported.h"

namespace groupattn {

KvLayout kv_layout(const AttentionParams& p) {
  if (p.block_table.defined()) return KvLayout::kPaged;
  if (p.cu_seqlens_k.defined()) return KvLayout::kVarlen;
  return KvLayout::kBatched;
}

bool q_is_varlen(const AttentionParams& p) { return p.cu_seqlens_q.defined(); }

bool kv_is_sharded(const AttentionParams& p) { return p.kv_shard_offset.defined() || p.kv_total_len.defined(); }

bool kv_is_fp8(const AttentionParams& p) {
  return p.k.dtype == kAttentionFp8KvDType || p.v.dtype == kAttentionFp8KvDType;
}

const std::vector<const AttentionEngine*>& attention_engines() {
  static const std::vector<const AttentionEngine*> engines = [] {
    std::vector<const AttentionEngine*> list;
#if GROUPATTN_WITH_CUDA
    list.push_back(&attention_sm90_engine());  // Hopper decode first: it declines all else
    list.push_back(&attention_sm90_rows_engine());  // never chosen automatically: sm90 serves its problems first
    list.push_back(&attention_sm90_split_engine());  // never chosen automatically: sm90 serves its problems first
    list.push_back(&attention_sm90_prefill_engine());  // Hopper prefill: batched D = 128 only
    list.push_back(&attention_cuda_engine());
    list.push_back(&attention_cuda_tile_engine());    // never chosen automatically: cuda serves its problems first
    list.push_back(&attention_cuda_decode_engine());  // never chosen automatically: cuda serves its problems first
#endif
    list.push_back(&attention_reference_engine());
    return list;
  }();
  return engines;
}

namespace {
Status prepare(const AttentionParams& p, const RunOptions& options, const AttentionEngine** engine) {
  host_timing::begin("enter");
  GA_RETURN_IF_ERROR(validate_attention(p));
  GA_RETURN_IF_ERROR(validate_attention_indices(p, options));
  host_timing::mark("validate");
  Status s = select_engine("attention", attention_engines(), p, options, engine);
  host_timing::mark("select engine");
  return s;
}
}  // namespace

Status attention(const AttentionParams& p, const RunOptions& options) {
  const AttentionEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  return run_engine("attention", *engine, p, options);
}

Status attention_workspace_bytes(const AttentionParams& p, const RunOptions& options, size_t* bytes) {
  const AttentionEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  *bytes = engine->workspace_bytes(p);
  return Status::Ok();
}

Status attention_engine_for(const AttentionParams& p, const RunOptions& options, const char** name) {
  const AttentionEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  *name = engine->name();
  return Status::Ok();
}

}  // namespace groupattn
