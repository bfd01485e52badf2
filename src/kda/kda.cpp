// The KDA op's entry points: validate, select an engine, run.
#include "groupattn/kda.h"

#include "core/host_timing.h"

#include "kda/engine_list.h"
#include "kda/engines/cuda/kda_cuda_engine.h"
#include "kda/reference_chunked.h"
#include "kda/validate.h"

namespace groupattn {

const std::vector<const KdaEngine*>& kda_engines() {
  static const std::vector<const KdaEngine*> engines = [] {
    std::vector<const KdaEngine*> list;
#if GROUPATTN_WITH_CUDA
    list.push_back(&kda_cuda_engine());  // device tensors; declines host ones, so the reference follows
#endif
    list.push_back(&kda_reference_engine());
    list.push_back(&kda_reference_chunked_engine());  // after "reference": reached only when pinned
    return list;
  }();
  return engines;
}

namespace {
Status prepare(const KdaParams& p, const RunOptions& options, const KdaEngine** engine) {
  host_timing::begin("enter");
  GA_RETURN_IF_ERROR(validate_kda(p));
  GA_RETURN_IF_ERROR(validate_kda_indices(p, options));
  host_timing::mark("validate");
  Status s = select_engine("kda", kda_engines(), p, options, engine);
  host_timing::mark("select engine");
  return s;
}
}  // namespace

Status kda(const KdaParams& p, const RunOptions& options) {
  const KdaEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  return run_engine("kda", *engine, p, options);
}

Status kda_workspace_bytes(const KdaParams& p, const RunOptions& options, size_t* bytes) {
  const KdaEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  *bytes = engine->workspace_bytes(p);
  return Status::Ok();
}

Status kda_engine_for(const KdaParams& p, const RunOptions& options, const char** name) {
  const KdaEngine* engine = nullptr;
  GA_RETURN_IF_ERROR(prepare(p, options, &engine));
  *name = engine->name();
  return Status::Ok();
}

}  // namespace groupattn
