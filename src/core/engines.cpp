// Engine listing across ops, and build facts.
#include "groupattn/engines.h"

#include "attention/engine_list.h"
#include "core/cuda_runtime_shim.h"
#include "kda/engine_list.h"

namespace groupattn {

const char* op_name(Op op) { return op == Op::kAttention ? "attention" : "kda"; }

namespace {
template <class Params>
std::vector<EngineInfo> describe(Op op, const std::vector<const Engine<Params>*>& engines) {
  std::vector<EngineInfo> out;
  for (const Engine<Params>* e : engines) {
    const Status avail = e->available();
    out.push_back({op, e->name(), e->description(), e->supports(), avail.ok(), avail.message()});
  }
  return out;
}
}  // namespace

std::vector<EngineInfo> list_engines(Op op) {
  return op == Op::kAttention ? describe(op, attention_engines()) : describe(op, kda_engines());
}

BuildInfo build_info() { return {GROUPATTN_VERSION, cuda_compiled(), GROUPATTN_CUDA_ARCHS}; }

}  // namespace groupattn
