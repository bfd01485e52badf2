// The KDA op (Kimi Delta Attention): chunked prefill and the recurrent decode step, one params
// struct. The definition is the per-token recurrence, per sequence and value head hv (qk head
// h = hv / (HV / H)), state S in R^{K x V}:
//
//   a_t = exp(g_t)                 (g_t in R^K, log decay per key channel, after the gate below)
//   S   = Diag(a_t) S              decay first
//   r_t = v_t - S^T k_t            residual read from the decayed state
//   S   = S + beta_t k_t r_t^T     rank-1 write
//   o_t = S^T (scale * q_t)        output reads the state after this token's write
//
//   q, k   [B, T, H, K]   bf16/f16 (the reference also takes f32)
//   v      [B, T, HV, V]  same dtype as q
//   g      [B, T, HV, K]  fp32: log decay, or the raw gate input for the in-kernel gate modes
//   beta   [B, T, HV]     fp32: beta, or logits with use_beta_sigmoid
//   out    [B, T, HV, V]  dtype of q
//   initial_state / final_state  fp32 [N, HV, V, K] (V-first, the serving layout) or
//                                [N, HV, K, V] (K-first); both optional
//   cu_seqlens  int32 or int64 [N+1] with B == 1 (varlen): sequences are packed along T
//   state_indices int32 [N]: initial_state and final_state are pools [pool, HV, ., .] and
//                sequence n uses row state_indices[n] of each (decode on a state pool; the two
//                may be the same tensor, updated in place)
//
// Gate modes (research/kda.md section 2.1), per value head hv and key channel d:
//   kLogDecay:   g is the log decay (<= 0)
//   kSoftplus:   g_eff = -exp(A_log[hv]) * softplus(g + dt_bias[hv, d])          (unbounded)
//   kLowerBound: g_eff = lower_bound * sigmoid(exp(A_log[hv]) * (g + dt_bias[hv, d]))
//                (A_log absent: lower_bound * sigmoid(g + dt_bias)); lower_bound < 0
// dt_bias is optional in both in-kernel modes; A_log is required for kSoftplus.
// use_qk_l2norm: q, k <- x / sqrt(sum x^2 + 1e-6) per head row, before the scale.
// use_beta_sigmoid: beta <- sigmoid(beta) (2 * sigmoid(beta) with allow_neg_eigval).
#pragma once

#include <cmath>
#include <cstdint>

#include "groupattn/run_options.h"
#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn {

enum class KdaGate { kLogDecay, kSoftplus, kLowerBound };
enum class KdaStateLayout { kVFirst, kKFirst };

struct KdaParams {
  TensorView q, k, v, g, beta;
  TensorView out;

  TensorView initial_state;  // optional; zero state when absent
  TensorView final_state;    // optional output
  TensorView cu_seqlens;     // optional, int32 or int64, requires B == 1
  TensorView state_indices;  // optional, int32 [N]: states are pools indexed per sequence
  KdaStateLayout state_layout = KdaStateLayout::kVFirst;

  KdaGate gate = KdaGate::kLogDecay;
  TensorView A_log;    // fp32 [HV]
  TensorView dt_bias;  // fp32 [HV, K]
  float lower_bound = -5.f;

  bool use_qk_l2norm = false;
  bool use_beta_sigmoid = false;
  bool allow_neg_eigval = false;  // requires use_beta_sigmoid

  float scale = NAN;  // NaN = 1 / sqrt(K)
};

Status kda(const KdaParams& p, const RunOptions& options = {});
Status kda_workspace_bytes(const KdaParams& p, const RunOptions& options, size_t* bytes);
Status validate_kda(const KdaParams& p);
// The name of the engine kda() would run for `p` (after validation), without running it.
Status kda_engine_for(const KdaParams& p, const RunOptions& options, const char** name);

}  // namespace groupattn
