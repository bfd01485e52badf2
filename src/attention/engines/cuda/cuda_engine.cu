// STUB: the portable CUDA engine (sm80+), declining everything until its kernels land.
#include "attention/engine_list.h"

namespace groupattn {
namespace {
class CudaAttention final : public AttentionEngine {
 public:
  const char* name() const override { return "cuda"; }
  const char* description() const override { return "portable CUDA (mma.sync), sm80 and newer"; }
  std::string supports() const override { return "nothing yet"; }
  Status available() const override {
    return cuda_device_count() > 0 ? Status::Ok() : NotSupported("no CUDA device visible");
  }
  Status check_support(const AttentionParams&) const override { return NotSupported("not implemented yet"); }
  Status run(const AttentionParams&, void*, void*) const override { return NotSupported("not implemented yet"); }
};
}  // namespace
const AttentionEngine& attention_cuda_engine() {
  static const CudaAttention engine;
  return engine;
}
}  // namespace groupattn
