// STUB: replaced by the fp64 reference engine.
#include "attention/engine_list.h"

namespace groupattn {
namespace {
class ReferenceAttention final : public AttentionEngine {
 public:
  const char* name() const override { return "reference"; }
  const char* description() const override { return "fp64 on the CPU (host memory): the oracle"; }
  std::string supports() const override { return "everything the API accepts, host tensors"; }
  Status check_support(const AttentionParams&) const override { return NotSupported("stub"); }
  Status run(const AttentionParams&, void*, void*) const override { return NotSupported("stub"); }
};
}  // namespace
const AttentionEngine& attention_reference_engine() {
  static const ReferenceAttention engine;
  return engine;
}
}  // namespace groupattn
