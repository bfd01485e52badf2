// STUB: replaced by full validation.
#include "kda/validate.h"

namespace groupattn {
Status validate_kda(const KdaParams&) { return Status::Ok(); }
Status validate_kda_indices(const KdaParams&, const RunOptions&) { return Status::Ok(); }
}  // namespace groupattn
