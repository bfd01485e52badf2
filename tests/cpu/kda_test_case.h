// A KDA problem on the host for the CPU tests: owns the tensors, fills them from a seed, and hands
// out KdaParams. Shared by kda_reference_test.cpp and kda_validation_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/host_tensor.h"
#include "groupattn/kda.h"

namespace groupattn::test {

struct KdaCase {
  int64_t B = 1, T = 17, H = 2, HV = 2, K = 32, V = 32;
  DType dtype = DType::kF32;
  KdaGate gate = KdaGate::kLogDecay;
  float lower_bound = -5.f;
  bool l2norm = true, beta_sigmoid = false, neg_eigval = false;
  bool with_A_log = false, with_dt_bias = false;
  bool with_initial = true, with_final = true;
  KdaStateLayout layout = KdaStateLayout::kVFirst;
  std::vector<int64_t> cu;  // empty: dense batch
  DType cu_dtype = DType::kI32;
  float scale = NAN;
  // Raw g ~ U(g_lo, g_hi): the log decay itself for kLogDecay, the gate input otherwise.
  double g_lo = -1.0, g_hi = 0.0;
  double A_log_lo = -1.0, A_log_hi = 1.0;
  double dt_bias_std = 0.5;

  HostTensor q, k, v, g, beta, out, initial, final_state, A_log, dt_bias, cu_seqlens;

  int64_t N() const { return cu.empty() ? B : static_cast<int64_t>(cu.size()) - 1; }
  std::vector<int64_t> state_shape(int64_t rows) const {
    return layout == KdaStateLayout::kVFirst ? std::vector<int64_t>{rows, HV, V, K}
                                             : std::vector<int64_t>{rows, HV, K, V};
  }

  void build(uint64_t seed) {
    std::mt19937_64 rng(seed);
    q = HostTensor(dtype, {B, T, H, K});
    k = HostTensor(dtype, {B, T, H, K});
    v = HostTensor(dtype, {B, T, HV, V});
    g = HostTensor(DType::kF32, {B, T, HV, K});
    beta = HostTensor(DType::kF32, {B, T, HV});
    out = HostTensor(dtype, {B, T, HV, V});
    q.fill_normal(rng);
    // Keys of about unit norm even without l2norm, so beta * |k|^2 < 2 and the recurrence stays
    // contractive (the two references then agree to rounding, not to an amplified difference).
    k.fill_normal(rng, 0.0, 1.0 / std::sqrt(static_cast<double>(K)));
    v.fill_normal(rng);
    g.fill_uniform(rng, g_lo, g_hi);
    if (beta_sigmoid) {
      beta.fill_normal(rng);
    } else {
      beta.fill_uniform(rng, 0.05, 0.95);
    }
    out.poison();
    if (with_A_log) {
      A_log = HostTensor(DType::kF32, {HV});
      A_log.fill_uniform(rng, A_log_lo, A_log_hi);
    }
    if (with_dt_bias) {
      dt_bias = HostTensor(DType::kF32, {HV, K});
      dt_bias.fill_normal(rng, 0.0, dt_bias_std);
    }
    if (with_initial) {
      initial = HostTensor(DType::kF32, state_shape(N()));
      initial.fill_normal(rng, 0.0, 0.5);
    }
    if (with_final) {
      final_state = HostTensor(DType::kF32, state_shape(N()));
      final_state.poison();
    }
    if (!cu.empty()) {
      cu_seqlens = HostTensor(cu_dtype, {static_cast<int64_t>(cu.size())});
      for (size_t i = 0; i < cu.size(); ++i) cu_seqlens.set({static_cast<int64_t>(i)}, static_cast<double>(cu[i]));
    }
  }

  KdaParams params() const {
    KdaParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.g = g.view();
    p.beta = beta.view();
    p.out = out.view();
    if (initial.defined()) p.initial_state = initial.view();
    if (final_state.defined()) p.final_state = final_state.view();
    if (cu_seqlens.defined()) p.cu_seqlens = cu_seqlens.view();
    p.state_layout = layout;
    p.gate = gate;
    if (A_log.defined()) p.A_log = A_log.view();
    if (dt_bias.defined()) p.dt_bias = dt_bias.view();
    p.lower_bound = lower_bound;
    p.use_qk_l2norm = l2norm;
    p.use_beta_sigmoid = beta_sigmoid;
    p.allow_neg_eigval = neg_eigval;
    p.scale = scale;
    return p;
  }
};

// A view of tokens [start, start + len) along dim 1 (T) of a [B, T, ...] tensor.
inline TensorView slice_tokens(TensorView t, int64_t start, int64_t len) {
  t.data = static_cast<char*>(t.data) + start * t.stride[1] * static_cast<int64_t>(dtype_size(t.dtype));
  t.shape[1] = len;
  return t;
}

// The same problem on tokens [start, start + len): q, k, v, g, beta and out sliced along T; states,
// indices and options as they are.
inline KdaParams slice_problem_tokens(KdaParams p, int64_t start, int64_t len) {
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.out}) *t = slice_tokens(*t, start, len);
  return p;
}

// A view of rows [start, start + len) along dim 0.
inline TensorView slice_rows(TensorView t, int64_t start, int64_t len) {
  t.data = static_cast<char*>(t.data) + start * t.stride[0] * static_cast<int64_t>(dtype_size(t.dtype));
  t.shape[0] = len;
  return t;
}

}  // namespace groupattn::test
