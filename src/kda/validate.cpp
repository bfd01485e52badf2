// KDA validation: every way a KdaParams can be wrong gets InvalidArgument naming the argument and,
// where there is one, the accepted set. Validation only reads (shapes, dtypes, strides, and the
// contents of host-readable index tensors); it never writes an output.
#include "kda/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/validate.h"
#include "groupattn/supported.h"

namespace groupattn {
namespace {

template <size_t N>
std::string list_string(const std::array<DType, N>& set) {
  std::string s;
  for (DType d : set) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

template <size_t N>
std::string list_string(const std::array<int64_t, N>& set) {
  std::string s;
  for (int64_t x : set) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

template <class T, size_t N>
bool contains(const std::array<T, N>& set, T x) {
  for (const T& y : set) {
    if (y == x) return true;
  }
  return false;
}

Status check_kda_dtype(const TensorView& t, const char* name) {
  if (contains(kKdaDTypes, t.dtype)) return Status::Ok();
  return InvalidArgument(std::string(name) + ": dtype " + dtype_name(t.dtype) +
                         " not supported (accepted: " + list_string(kKdaDTypes) + ")");
}

// `t` must have q's dtype (k, v and out all share it).
Status check_same_dtype_as_q(const TensorView& t, const char* name, const TensorView& q) {
  if (t.dtype == q.dtype) return Status::Ok();
  return InvalidArgument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from q's " +
                         dtype_name(q.dtype) + " (accepted: " + dtype_name(q.dtype) +
                         ", the dtype of q)");
}

Status check_head_dim(int64_t dim, const char* name, const char* dim_name) {
  if (contains(kKdaHeadDims, dim)) return Status::Ok();
  return InvalidArgument(std::string(name) + ": head dim " + dim_name + " = " + std::to_string(dim) +
                         " not supported (accepted: " + list_string(kKdaHeadDims) + ")");
}

// Defined, the expected rank (checked first: its message says the expected layout), a valid strided layout.
Status check_tensor(const TensorView& t, const char* name, int rank, const char* layout) {
  GA_RETURN_IF_ERROR(check_defined(t, name));
  GA_RETURN_IF_ERROR(check_rank(t, name, rank, layout));
  return check_layout(t, name);
}

// The same view: one tensor passed twice (the in-place state-pool update).
bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i] || a.stride[i] != b.stride[i]) return false;
  }
  return true;
}

// initial_state / final_state: f32 [N or pool, HV, V, K] (V-first) or [., HV, K, V] (K-first).
Status check_state(const TensorView& s, const char* name, const KdaParams& p, int64_t N, int64_t HV,
                   int64_t K, int64_t V) {
  const bool v_first = p.state_layout == KdaStateLayout::kVFirst;
  GA_RETURN_IF_ERROR(check_tensor(s, name, 4, v_first ? "[N, HV, V, K] (V-first)" : "[N, HV, K, V] (K-first)"));
  GA_RETURN_IF_ERROR(check_dtype(s, name, {DType::kF32}));
  if (!p.state_indices.defined()) {
    GA_RETURN_IF_ERROR(check_dim(s, name, 0, "N", N,
                                 p.cu_seqlens.defined() ? "len(cu_seqlens) - 1" : "B of q"));
  }
  GA_RETURN_IF_ERROR(check_dim(s, name, 1, "HV", HV, "value heads of v"));
  const char* layout = v_first ? "V-first state layout" : "K-first state layout";
  GA_RETURN_IF_ERROR(check_dim(s, name, 2, v_first ? "V" : "K", v_first ? V : K, layout));
  return check_dim(s, name, 3, v_first ? "K" : "V", v_first ? K : V, layout);
}

Status check_gate(const KdaParams& p, int64_t HV, int64_t K) {
  if (p.gate == KdaGate::kLogDecay) {
    // Never silently ignore an argument: gate parameters without an in-kernel gate are a mistake.
    if (p.A_log.defined()) {
      return InvalidArgument(
          "A_log: given but gate is kLogDecay (accepted: no A_log, or gate kSoftplus / kLowerBound)");
    }
    if (p.dt_bias.defined()) {
      return InvalidArgument(
          "dt_bias: given but gate is kLogDecay (accepted: no dt_bias, or gate kSoftplus / kLowerBound)");
    }
    return Status::Ok();
  }
  if (p.gate != KdaGate::kSoftplus && p.gate != KdaGate::kLowerBound) {
    return InvalidArgument("gate: unknown value " + std::to_string(static_cast<int>(p.gate)) +
                           " (accepted: kLogDecay, kSoftplus, kLowerBound)");
  }
  if (p.gate == KdaGate::kSoftplus && !p.A_log.defined()) {
    return InvalidArgument("A_log: required by gate kSoftplus (f32 [HV]) but missing");
  }
  if (p.gate == KdaGate::kLowerBound && !(std::isfinite(p.lower_bound) && p.lower_bound < 0.f)) {
    return InvalidArgument("lower_bound: " + std::to_string(p.lower_bound) +
                           " with gate kLowerBound (accepted: finite values < 0, e.g. -5)");
  }
  if (p.A_log.defined()) {
    GA_RETURN_IF_ERROR(check_tensor(p.A_log, "A_log", 1, "[HV]"));
    GA_RETURN_IF_ERROR(check_dtype(p.A_log, "A_log", {DType::kF32}));
    GA_RETURN_IF_ERROR(check_dim(p.A_log, "A_log", 0, "HV", HV, "value heads of v"));
  }
  if (p.dt_bias.defined()) {
    GA_RETURN_IF_ERROR(check_tensor(p.dt_bias, "dt_bias", 2, "[HV, K]"));
    GA_RETURN_IF_ERROR(check_dtype(p.dt_bias, "dt_bias", {DType::kF32}));
    GA_RETURN_IF_ERROR(check_dim(p.dt_bias, "dt_bias", 0, "HV", HV, "value heads of v"));
    GA_RETURN_IF_ERROR(check_dim(p.dt_bias, "dt_bias", 1, "K", K, "head dim of q"));
  }
  return Status::Ok();
}

}  // namespace

Status validate_kda(const KdaParams& p) {
  // q fixes B, T, H, K; v fixes HV, V. Everything else is checked against those.
  GA_RETURN_IF_ERROR(check_tensor(p.q, "q", 4, "[B, T, H, K]"));
  GA_RETURN_IF_ERROR(check_kda_dtype(p.q, "q"));
  const int64_t B = p.q.shape[0], T = p.q.shape[1], H = p.q.shape[2], K = p.q.shape[3];
  GA_RETURN_IF_ERROR(check_head_dim(K, "q", "K"));
  if (H < 1) return InvalidArgument("q: H = " + std::to_string(H) + " heads (accepted: H >= 1)");

  GA_RETURN_IF_ERROR(check_tensor(p.k, "k", 4, "[B, T, H, K]"));
  GA_RETURN_IF_ERROR(check_same_dtype_as_q(p.k, "k", p.q));
  GA_RETURN_IF_ERROR(check_dim(p.k, "k", 0, "B", B, "batch of q"));
  GA_RETURN_IF_ERROR(check_dim(p.k, "k", 1, "T", T, "tokens of q"));
  GA_RETURN_IF_ERROR(check_dim(p.k, "k", 2, "H", H, "heads of q"));
  GA_RETURN_IF_ERROR(check_dim(p.k, "k", 3, "K", K, "head dim of q"));

  GA_RETURN_IF_ERROR(check_tensor(p.v, "v", 4, "[B, T, HV, V]"));
  GA_RETURN_IF_ERROR(check_same_dtype_as_q(p.v, "v", p.q));
  GA_RETURN_IF_ERROR(check_dim(p.v, "v", 0, "B", B, "batch of q"));
  GA_RETURN_IF_ERROR(check_dim(p.v, "v", 1, "T", T, "tokens of q"));
  const int64_t HV = p.v.shape[2], V = p.v.shape[3];
  GA_RETURN_IF_ERROR(check_head_dim(V, "v", "V"));
  if (HV < 1 || HV % H != 0) {
    return InvalidArgument("v/q: HV = " + std::to_string(HV) + " is not a multiple of H = " +
                           std::to_string(H) + " (accepted: HV = m * H, m >= 1; value head hv uses qk head hv / (HV / H))");
  }

  GA_RETURN_IF_ERROR(check_tensor(p.g, "g", 4, "[B, T, HV, K]"));
  GA_RETURN_IF_ERROR(check_dtype(p.g, "g", {DType::kF32}));
  GA_RETURN_IF_ERROR(check_dim(p.g, "g", 0, "B", B, "batch of q"));
  GA_RETURN_IF_ERROR(check_dim(p.g, "g", 1, "T", T, "tokens of q"));
  GA_RETURN_IF_ERROR(check_dim(p.g, "g", 2, "HV", HV, "value heads of v"));
  GA_RETURN_IF_ERROR(check_dim(p.g, "g", 3, "K", K, "head dim of q"));

  GA_RETURN_IF_ERROR(check_tensor(p.beta, "beta", 3, "[B, T, HV]"));
  GA_RETURN_IF_ERROR(check_dtype(p.beta, "beta", {DType::kF32}));
  GA_RETURN_IF_ERROR(check_dim(p.beta, "beta", 0, "B", B, "batch of q"));
  GA_RETURN_IF_ERROR(check_dim(p.beta, "beta", 1, "T", T, "tokens of q"));
  GA_RETURN_IF_ERROR(check_dim(p.beta, "beta", 2, "HV", HV, "value heads of v"));

  GA_RETURN_IF_ERROR(check_tensor(p.out, "out", 4, "[B, T, HV, V]"));
  GA_RETURN_IF_ERROR(check_same_dtype_as_q(p.out, "out", p.q));
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", 0, "B", B, "batch of q"));
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", 1, "T", T, "tokens of q"));
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", 2, "HV", HV, "value heads of v"));
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", 3, "V", V, "head dim of v"));

  // Sequences: B dense ones, or len(cu_seqlens) - 1 packed along T of a single batch row.
  int64_t N = B;
  if (p.cu_seqlens.defined()) {
    GA_RETURN_IF_ERROR(check_rank(p.cu_seqlens, "cu_seqlens", 1, "[N + 1]"));
    GA_RETURN_IF_ERROR(check_layout(p.cu_seqlens, "cu_seqlens"));
    GA_RETURN_IF_ERROR(check_dtype(p.cu_seqlens, "cu_seqlens", {DType::kI32, DType::kI64}));
    if (p.cu_seqlens.shape[0] < 1) {
      return InvalidArgument("cu_seqlens: empty (accepted: [N + 1] entries from 0 to T)");
    }
    if (B != 1) {
      return InvalidArgument("cu_seqlens: requires B == 1 (q has B = " + std::to_string(B) +
                             "); pack the sequences along T");
    }
    N = p.cu_seqlens.shape[0] - 1;
  }

  if (p.state_indices.defined()) {
    GA_RETURN_IF_ERROR(check_rank(p.state_indices, "state_indices", 1, "[N]"));
    GA_RETURN_IF_ERROR(check_layout(p.state_indices, "state_indices"));
    GA_RETURN_IF_ERROR(check_dtype(p.state_indices, "state_indices", {DType::kI32}));
    GA_RETURN_IF_ERROR(check_dim(p.state_indices, "state_indices", 0, "N", N,
                                 p.cu_seqlens.defined() ? "len(cu_seqlens) - 1" : "B of q"));
    if (!p.initial_state.defined() && !p.final_state.defined()) {
      return InvalidArgument(
          "state_indices: given without initial_state or final_state (state_indices index the state pools)");
    }
  }
  if (p.state_layout != KdaStateLayout::kVFirst && p.state_layout != KdaStateLayout::kKFirst) {
    return InvalidArgument("state_layout: unknown value " + std::to_string(static_cast<int>(p.state_layout)) +
                           " (accepted: kVFirst, kKFirst)");
  }
  if (p.initial_state.defined()) {
    GA_RETURN_IF_ERROR(check_state(p.initial_state, "initial_state", p, N, HV, K, V));
  }
  if (p.final_state.defined()) {
    GA_RETURN_IF_ERROR(check_state(p.final_state, "final_state", p, N, HV, K, V));
  }

  GA_RETURN_IF_ERROR(check_gate(p, HV, K));
  if (p.allow_neg_eigval && !p.use_beta_sigmoid) {
    return InvalidArgument(
        "allow_neg_eigval: requires use_beta_sigmoid (accepted: allow_neg_eigval = false, or "
        "use_beta_sigmoid = true)");
  }
  if (std::isinf(p.scale)) {
    return InvalidArgument("scale: " + std::to_string(p.scale) +
                           " (accepted: a finite value, or NaN for the default 1/sqrt(K))");
  }

  GA_RETURN_IF_ERROR(check_same_device(
      p.q, "q",
      {{&p.k, "k"}, {&p.v, "v"}, {&p.g, "g"}, {&p.beta, "beta"}, {&p.out, "out"},
       {&p.initial_state, "initial_state"}, {&p.final_state, "final_state"}, {&p.cu_seqlens, "cu_seqlens"},
       {&p.state_indices, "state_indices"}, {&p.A_log, "A_log"}, {&p.dt_bias, "dt_bias"}}));

  // Outputs must not share memory with any input or with each other. The one exception is
  // final_state passed as exactly the same view as initial_state: the in-place pool update.
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.out, "out"));
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.final_state, "final_state"));
  // A plain array: no heap allocation on every call (host cost, issue 11).
  const std::pair<const TensorView*, const char*> inputs[] = {
      {&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.g, "g"}, {&p.beta, "beta"},
      {&p.cu_seqlens, "cu_seqlens"}, {&p.state_indices, "state_indices"}, {&p.A_log, "A_log"},
      {&p.dt_bias, "dt_bias"}, {&p.initial_state, "initial_state"}};
  for (const auto& [in, name] : inputs) {
    GA_RETURN_IF_ERROR(check_no_overlap(p.out, "out", *in, name));
    if (in == &p.initial_state && p.final_state.defined() && same_view(p.final_state, p.initial_state)) continue;
    Status s = check_no_overlap(p.final_state, "final_state", *in, name);
    if (!s.ok() && in == &p.initial_state) {
      return InvalidArgument(s.message() +
                             " (accepted: disjoint memory, or exactly the same view for an in-place update)");
    }
    GA_RETURN_IF_ERROR(s);
  }
  GA_RETURN_IF_ERROR(check_no_overlap(p.final_state, "final_state", p.out, "out"));
  return Status::Ok();
}

Status validate_kda_indices(const KdaParams& p, const RunOptions& options) {
  const int64_t T = p.q.rank == 4 ? p.q.shape[1] : 0;
  if (p.cu_seqlens.defined()) {
    std::vector<int64_t> cu;
    bool read = false;
    GA_RETURN_IF_ERROR(read_indices(p.cu_seqlens, "cu_seqlens", options, &cu, &read));
    if (read) {
      GA_RETURN_IF_ERROR(check_cu_seqlens(cu, "cu_seqlens", T, "T"));
      if (cu.back() != T) {
        return InvalidArgument("cu_seqlens: last entry " + std::to_string(cu.back()) +
                               " must equal T = " + std::to_string(T) + " (every token belongs to a sequence)");
      }
    }
  }
  if (p.state_indices.defined()) {
    std::vector<int64_t> idx;
    bool read = false;
    GA_RETURN_IF_ERROR(read_indices(p.state_indices, "state_indices", options, &idx, &read));
    if (!read) return Status::Ok();
    const std::pair<const TensorView*, const char*> pools[] = {{&p.initial_state, "initial_state"},
                                                               {&p.final_state, "final_state"}};
    for (const auto& [pool, name] : pools) {
      if (!pool->defined()) continue;
      const int64_t P = pool->shape[0];
      for (size_t n = 0; n < idx.size(); ++n) {
        if (idx[n] < 0 || idx[n] >= P) {
          return InvalidArgument("state_indices: entry " + std::to_string(n) + " = " + std::to_string(idx[n]) +
                                 " is outside " + name + "'s pool (accepted: 0.." + std::to_string(P - 1) + ")");
        }
      }
    }
    // Two sequences writing one pool row would race (and, in place, read each other's result).
    if (p.final_state.defined()) {
      std::vector<std::pair<int64_t, size_t>> sorted;  // (row, entry)
      for (size_t n = 0; n < idx.size(); ++n) sorted.emplace_back(idx[n], n);
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 1; i < sorted.size(); ++i) {
        if (sorted[i].first == sorted[i - 1].first) {
          return InvalidArgument("state_indices: entries " + std::to_string(sorted[i - 1].second) + " and " +
                                 std::to_string(sorted[i].second) + " both name row " +
                                 std::to_string(sorted[i].first) +
                                 " of final_state (accepted: distinct rows when final_state is written)");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace groupattn
