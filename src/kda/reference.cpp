// STUB: replaced by the fp64 reference engine.
#include "kda/engine_list.h"

namespace groupattn {
namespace {
class ReferenceKda final : public KdaEngine {
 public:
  const char* name() const override { return "reference"; }
  const char* description() const override { return "fp64 on the CPU (host memory): the oracle"; }
  std::string supports() const override { return "everything the API accepts, host tensors"; }
  Status check_support(const KdaParams&) const override { return NotSupported("stub"); }
  Status run(const KdaParams&, void*, void*) const override { return NotSupported("stub"); }
};
}  // namespace
const KdaEngine& kda_reference_engine() {
  static const ReferenceKda engine;
  return engine;
}
}  // namespace groupattn
