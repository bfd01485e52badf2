// The KDA fp64 references: the shared plumbing (load one (sequence, value head) slice with every
// option applied, store the results) and the per-token recurrence, the definition of the op.
// The chunked reference (reference_chunked.h) reuses the plumbing and the gate, and nothing of the
// recurrence, so the two agree only if the chunked algebra is right.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "groupattn/kda.h"

namespace groupattn {

// The effective log decay of one key channel (include/groupattn/kda.h, research/kda.md 2.1).
// `g` is the raw g element; `A_log` is used only when `has_A_log`; `dt_bias` is 0 when absent.
double kda_effective_gate(KdaGate gate, double g, bool has_A_log, double A_log, double dt_bias,
                          double lower_bound);
// The effective beta: as given, sigmoid(beta), or 2 * sigmoid(beta) with allow_neg_eigval.
double kda_effective_beta(double beta, bool use_sigmoid, bool allow_neg_eigval);
// p.scale, or 1/sqrt(K) when it is NaN.
double kda_effective_scale(const KdaParams& p);

// One sequence and one value head, in fp64, options applied: q and k l2-normalised when asked
// (not scaled), g the effective log decay, beta the effective beta, s0 the initial state.
struct KdaHeadSlice {
  int64_t T = 0, K = 0, V = 0;
  double scale = 0;
  std::vector<double> q, k;   // [T][K]
  std::vector<double> v;      // [T][V]
  std::vector<double> g;      // [T][K]
  std::vector<double> beta;   // [T]
  std::vector<double> s0;     // [K][V] (S in R^{K x V}, whatever the tensor's layout)
};

// Computes o [T][V] and the final state s [K][V] of one slice.
using KdaHeadSolver =
    std::function<void(const KdaHeadSlice& x, std::vector<double>* o, std::vector<double>* s)>;

// Runs `solve` on every (sequence, value head) of a host problem. `out` receives [B, T, HV, V]
// and `final_state` [N, HV, K, V] (K-first, one row per sequence, whatever p.state_layout and
// p.state_indices say), both row-major fp64; either may be nullptr. Every input, initial states
// included, is read before anything is returned, so storing afterwards is safe in place.
// Does not run validate_kda (so the tests can use any K and V, and an f64 initial state); it
// only refuses device tensors (NotSupported) and out-of-range indices (InvalidArgument).
Status kda_solve_fp64(const KdaParams& p, const KdaHeadSolver& solve, std::vector<double>* out,
                      std::vector<double>* final_state);
// Writes results of kda_solve_fp64 into p.out (rounded to its dtype) and p.final_state (f32, in
// p.state_layout, at row state_indices[n] when given).
Status kda_store_fp64(const KdaParams& p, const std::vector<double>& out,
                      const std::vector<double>& final_state);
// NotSupported naming the first tensor not in host memory.
Status kda_check_host(const KdaParams& p);

// The per-token recurrence in fp64 (the definition). Results as in kda_solve_fp64.
Status kda_recurrent_fp64(const KdaParams& p, std::vector<double>* out, std::vector<double>* final_state);

}  // namespace groupattn
