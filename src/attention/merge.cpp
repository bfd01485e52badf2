// attention_merge: validation, the host merge (fp64, through combine_partials) and dispatch to the
// cuda engine's combine kernel for device tensors. Math and layouts: groupattn/context_parallel.h.
#include <cmath>
#include <string>
#include <vector>

#include "attention/reference.h"
#include "core/dtype.h"
#include "core/validate.h"
#include "groupattn/context_parallel.h"
#include "groupattn/supported.h"
#if GROUPATTN_WITH_CUDA
#include "attention/engines/cuda/merge.h"
#endif

namespace groupattn {
namespace {

// Global query row r of out: varlen-style [total_q, Hq, Dv] row r, batched [B, Sq, Hq, Dv] (r / Sq, r % Sq).
int64_t out_offset(const TensorView& out, int64_t r, int64_t h, int64_t c) {
  if (out.rank == 3) return out.offset_of({r, h, c});
  const int64_t sq = out.shape[1];
  return out.offset_of({r / sq, r % sq, h, c});
}

Status merge_on_host(const MergeParams& p) {
  const int64_t parts = p.o_partials.shape[0], total_q = p.o_partials.shape[1];
  const int64_t hq = p.o_partials.shape[2], dv = p.o_partials.shape[3];
  std::vector<AttentionPartial> partials(static_cast<size_t>(parts));
  for (int64_t s = 0; s < parts; ++s) {
    AttentionPartial& part = partials[static_cast<size_t>(s)];
    part.o.resize(static_cast<size_t>(total_q * hq * dv));
    part.lse.resize(static_cast<size_t>(hq * total_q));
    for (int64_t r = 0; r < total_q; ++r) {
      for (int64_t h = 0; h < hq; ++h) {
        // lse_partials [R, Hq, total_q] -> part.lse [Hq, total_q]
        part.lse[static_cast<size_t>(h * total_q + r)] =
            load_as_double(p.lse_partials.data, p.lse_partials.dtype, p.lse_partials.offset_of({s, h, r}));
        for (int64_t c = 0; c < dv; ++c) {
          // o_partials [R, total_q, Hq, Dv] -> part.o [total_q, Hq, Dv]
          part.o[static_cast<size_t>((r * hq + h) * dv + c)] =
              load_as_double(p.o_partials.data, p.o_partials.dtype, p.o_partials.offset_of({s, r, h, c}));
        }
      }
    }
  }
  std::vector<double> o, lse;
  combine_partials(partials, total_q, hq, dv, &o, &lse);
  // Everything is computed; only now touch the outputs.
  for (int64_t r = 0; r < total_q; ++r) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t c = 0; c < dv; ++c) {
        store_from_double(p.out.data, p.out.dtype, out_offset(p.out, r, h, c),
                          o[static_cast<size_t>((r * hq + h) * dv + c)]);
      }
      if (p.lse.defined()) {
        store_from_double(p.lse.data, p.lse.dtype, p.lse.offset_of({h, r}),
                          static_cast<double>(static_cast<float>(lse[static_cast<size_t>(h * total_q + r)])));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate_attention_merge(const MergeParams& p) {
  GA_RETURN_IF_ERROR(check_defined(p.o_partials, "o_partials"));
  GA_RETURN_IF_ERROR(check_defined(p.lse_partials, "lse_partials"));
  GA_RETURN_IF_ERROR(check_defined(p.out, "out"));
  GA_RETURN_IF_ERROR(check_dtype(p.out, "out", {DType::kBF16, DType::kF16, DType::kF32}));
  if (p.o_partials.dtype != DType::kF32 && p.o_partials.dtype != p.out.dtype) {
    return InvalidArgument(std::string("o_partials: dtype ") + dtype_name(p.o_partials.dtype) +
                           " (accepted: f32, or out's dtype " + dtype_name(p.out.dtype) + "; out accepts " +
                           dtype_list(kAttentionDTypes) + ")");
  }
  GA_RETURN_IF_ERROR(check_dtype(p.lse_partials, "lse_partials", {DType::kF32}));
  if (p.lse.defined()) GA_RETURN_IF_ERROR(check_dtype(p.lse, "lse", {DType::kF32}));
  GA_RETURN_IF_ERROR(check_rank(p.o_partials, "o_partials", 4, "[R, total_q, Hq, Dv]"));
  GA_RETURN_IF_ERROR(check_rank(p.lse_partials, "lse_partials", 3, "[R, Hq, total_q]"));
  if (p.out.rank != 3 && p.out.rank != 4) {
    return InvalidArgument("out: rank " + std::to_string(p.out.rank) + ", shape " + shape_string(p.out) +
                           " (accepted: [total_q, Hq, Dv] or batched [B, Sq, Hq, Dv])");
  }
  if (p.lse.defined()) GA_RETURN_IF_ERROR(check_rank(p.lse, "lse", 2, "[Hq, total_q]"));
  for (const auto& [t, name] : {std::pair{&p.o_partials, "o_partials"}, std::pair{&p.lse_partials, "lse_partials"},
                                std::pair{&p.out, "out"}, std::pair{&p.lse, "lse"}}) {
    if (t->defined()) GA_RETURN_IF_ERROR(check_layout(*t, name));
  }

  const int64_t parts = p.o_partials.shape[0], total_q = p.o_partials.shape[1];
  const int64_t hq = p.o_partials.shape[2], dv = p.o_partials.shape[3];
  if (parts < 1) {
    return InvalidArgument("o_partials: R = " + std::to_string(parts) + " partials (accepted: >= 1)");
  }
  GA_RETURN_IF_ERROR(check_dim(p.lse_partials, "lse_partials", 0, "R", parts, "R of o_partials"));
  GA_RETURN_IF_ERROR(check_dim(p.lse_partials, "lse_partials", 1, "Hq", hq, "Hq of o_partials"));
  GA_RETURN_IF_ERROR(check_dim(p.lse_partials, "lse_partials", 2, "total_q", total_q, "total_q of o_partials"));
  const int hd = p.out.rank - 2;  // out's head dim index
  const int64_t out_rows = p.out.rank == 3 ? p.out.shape[0] : p.out.shape[0] * p.out.shape[1];
  if (out_rows != total_q) {
    return InvalidArgument("out: " + std::to_string(out_rows) + " query rows in shape " + shape_string(p.out) +
                           " (expected total_q = " + std::to_string(total_q) + " from o_partials)");
  }
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", hd, "Hq", hq, "Hq of o_partials"));
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", hd + 1, "Dv", dv, "Dv of o_partials"));
  if (p.lse.defined()) {
    GA_RETURN_IF_ERROR(check_dim(p.lse, "lse", 0, "Hq", hq, "[Hq, total_q]"));
    GA_RETURN_IF_ERROR(check_dim(p.lse, "lse", 1, "total_q", total_q, "[Hq, total_q]"));
  }

  GA_RETURN_IF_ERROR(check_same_device(p.o_partials, "o_partials",
                                       {{&p.lse_partials, "lse_partials"}, {&p.out, "out"}, {&p.lse, "lse"}}));
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.out, "out"));
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.lse, "lse"));
  for (const auto& [t, name] : {std::pair{&p.o_partials, "o_partials"}, std::pair{&p.lse_partials, "lse_partials"}}) {
    GA_RETURN_IF_ERROR(check_no_overlap(p.out, "out", *t, name));
    GA_RETURN_IF_ERROR(check_no_overlap(p.lse, "lse", *t, name));
  }
  return check_no_overlap(p.lse, "lse", p.out, "out");
}

Status attention_merge(const MergeParams& p, const RunOptions& options) {
  GA_RETURN_IF_ERROR(validate_attention_merge(p));
  if (p.o_partials.device == Device::kCPU) return merge_on_host(p);
#if GROUPATTN_WITH_CUDA
  return cuda_engine::merge_on_device(p, options.stream);
#else
  (void)options;
  return NotSupported("attention_merge: device tensors need a CUDA build (this build is CPU-only)");
#endif
}

}  // namespace groupattn
