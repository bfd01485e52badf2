// The fp64 reference engine: the per-token KDA recurrence (research/kda.md 1.1), on host memory.
// It is the oracle every other engine is tested against, so it is written for obviousness: load a
// (sequence, value head) slice into doubles, run the four lines of the recurrence per token,
// store. Nothing here is fast, and nothing needs to be.
#include "kda/reference.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/dtype.h"
#include "kda/engine_list.h"

namespace groupattn {

namespace {

double sigmoid(double x) {
  // Two branches so exp never overflows.
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

double softplus(double x) {
  // log(1 + e^x) = max(x, 0) + log1p(e^{-|x|}), exact for large |x| too.
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// Token range and batch row of sequence n.
struct SeqSpan {
  int64_t batch, bos, len;
};

int64_t read_index(const TensorView& t, int64_t i) { return static_cast<int64_t>(load(t, {i})); }

}  // namespace

double kda_effective_gate(KdaGate gate, double g, bool has_A_log, double A_log, double dt_bias,
                          double lower_bound) {
  switch (gate) {
    case KdaGate::kLogDecay:
      return g;
    case KdaGate::kSoftplus:
      return -std::exp(A_log) * softplus(g + dt_bias);
    case KdaGate::kLowerBound:
      return lower_bound * sigmoid(has_A_log ? std::exp(A_log) * (g + dt_bias) : g + dt_bias);
  }
  return g;
}

double kda_effective_beta(double beta, bool use_sigmoid, bool allow_neg_eigval) {
  if (!use_sigmoid) return beta;
  return (allow_neg_eigval ? 2.0 : 1.0) * sigmoid(beta);
}

double kda_effective_scale(const KdaParams& p) {
  return std::isnan(p.scale) ? 1.0 / std::sqrt(static_cast<double>(p.q.shape[3]))
                             : static_cast<double>(p.scale);
}

Status kda_check_host(const KdaParams& p) {
  const std::pair<const TensorView*, const char*> all[] = {
      {&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.g, "g"}, {&p.beta, "beta"}, {&p.out, "out"},
      {&p.initial_state, "initial_state"}, {&p.final_state, "final_state"}, {&p.cu_seqlens, "cu_seqlens"},
      {&p.state_indices, "state_indices"}, {&p.A_log, "A_log"}, {&p.dt_bias, "dt_bias"}};
  for (const auto& [t, name] : all) {
    if (t->defined() && t->device != Device::kCPU) {
      return NotSupported(std::string(name) + " is in " + device_name(t->device) +
                          " memory; the fp64 reference engines read host memory only (copy the "
                          "tensors to the host, or use a GPU engine)");
    }
  }
  return Status::Ok();
}

Status kda_solve_fp64(const KdaParams& p, const KdaHeadSolver& solve, std::vector<double>* out,
                      std::vector<double>* final_state) {
  GA_RETURN_IF_ERROR(kda_check_host(p));
  const int64_t B = p.q.shape[0], T = p.q.shape[1], H = p.q.shape[2], K = p.q.shape[3];
  const int64_t HV = p.v.shape[2], V = p.v.shape[3];
  const int64_t group = HV / H;  // value heads per qk head (GVA)

  std::vector<SeqSpan> seqs;
  if (p.cu_seqlens.defined()) {
    for (int64_t n = 0; n + 1 < p.cu_seqlens.shape[0]; ++n) {
      const int64_t bos = read_index(p.cu_seqlens, n), eos = read_index(p.cu_seqlens, n + 1);
      if (bos < 0 || eos < bos || eos > T) return InvalidArgument("cu_seqlens: entries out of order or range");
      seqs.push_back({0, bos, eos - bos});
    }
  } else {
    for (int64_t b = 0; b < B; ++b) seqs.push_back({b, 0, T});
  }
  const auto N = static_cast<int64_t>(seqs.size());

  // The state row sequence n reads (initial_state) when the states are pools.
  std::vector<int64_t> rows(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    rows[n] = p.state_indices.defined() ? read_index(p.state_indices, n) : n;
    if (p.initial_state.defined() && (rows[n] < 0 || rows[n] >= p.initial_state.shape[0])) {
      return InvalidArgument("state_indices: entry " + std::to_string(n) + " outside initial_state's pool");
    }
  }

  std::vector<double> o_all(static_cast<size_t>(B * T * HV * V), 0.0);
  std::vector<double> s_all(static_cast<size_t>(N * HV * K * V), 0.0);
  const double scale = kda_effective_scale(p);
  const bool v_first = p.state_layout == KdaStateLayout::kVFirst;

  KdaHeadSlice x;
  std::vector<double> o, s;
  for (int64_t n = 0; n < N; ++n) {
    const SeqSpan sq = seqs[n];
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / group;  // GVA: value head hv reads qk head hv / (HV / H)
      x.T = sq.len;
      x.K = K;
      x.V = V;
      x.scale = scale;
      x.q.assign(static_cast<size_t>(sq.len * K), 0.0);
      x.k.assign(static_cast<size_t>(sq.len * K), 0.0);
      x.v.assign(static_cast<size_t>(sq.len * V), 0.0);
      x.g.assign(static_cast<size_t>(sq.len * K), 0.0);
      x.beta.assign(static_cast<size_t>(sq.len), 0.0);
      const bool has_A_log = p.A_log.defined();
      const double A_log = has_A_log ? load(p.A_log, {hv}) : 0.0;
      for (int64_t t = 0; t < sq.len; ++t) {
        const int64_t tok = sq.bos + t;  // position along T of batch row sq.batch
        double qq = 0, kk = 0;
        for (int64_t d = 0; d < K; ++d) {
          const double qd = load(p.q, {sq.batch, tok, h, d});
          const double kd = load(p.k, {sq.batch, tok, h, d});
          x.q[t * K + d] = qd;
          x.k[t * K + d] = kd;
          qq += qd * qd;
          kk += kd * kd;
          const double dt = p.dt_bias.defined() ? load(p.dt_bias, {hv, d}) : 0.0;
          x.g[t * K + d] = kda_effective_gate(p.gate, load(p.g, {sq.batch, tok, hv, d}), has_A_log, A_log, dt,
                                              p.lower_bound);
        }
        if (p.use_qk_l2norm) {
          // x / sqrt(sum x^2 + 1e-6) per head row, before the scale.
          const double rq = 1.0 / std::sqrt(qq + 1e-6), rk = 1.0 / std::sqrt(kk + 1e-6);
          for (int64_t d = 0; d < K; ++d) {
            x.q[t * K + d] *= rq;
            x.k[t * K + d] *= rk;
          }
        }
        for (int64_t e = 0; e < V; ++e) x.v[t * V + e] = load(p.v, {sq.batch, tok, hv, e});
        x.beta[t] = kda_effective_beta(load(p.beta, {sq.batch, tok, hv}), p.use_beta_sigmoid, p.allow_neg_eigval);
      }
      x.s0.assign(static_cast<size_t>(K * V), 0.0);
      if (p.initial_state.defined()) {
        for (int64_t d = 0; d < K; ++d) {
          for (int64_t e = 0; e < V; ++e) {
            // V-first [row, hv, V, K] holds S^T; K-first [row, hv, K, V] holds S.
            x.s0[d * V + e] = v_first ? load(p.initial_state, {rows[n], hv, e, d})
                                      : load(p.initial_state, {rows[n], hv, d, e});
          }
        }
      }

      o.assign(static_cast<size_t>(sq.len * V), 0.0);
      s = x.s0;
      solve(x, &o, &s);

      for (int64_t t = 0; t < sq.len; ++t) {
        for (int64_t e = 0; e < V; ++e) {
          o_all[((sq.batch * T + sq.bos + t) * HV + hv) * V + e] = o[t * V + e];
        }
      }
      for (int64_t i = 0; i < K * V; ++i) s_all[(n * HV + hv) * K * V + i] = s[i];
    }
  }
  if (out != nullptr) *out = std::move(o_all);
  if (final_state != nullptr) *final_state = std::move(s_all);
  return Status::Ok();
}

Status kda_store_fp64(const KdaParams& p, const std::vector<double>& out, const std::vector<double>& final_state) {
  const int64_t B = p.q.shape[0], T = p.q.shape[1], K = p.q.shape[3];
  const int64_t HV = p.v.shape[2], V = p.v.shape[3];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hv = 0; hv < HV; ++hv) {
        for (int64_t e = 0; e < V; ++e) store(p.out, {b, t, hv, e}, out[((b * T + t) * HV + hv) * V + e]);
      }
    }
  }
  if (!p.final_state.defined()) return Status::Ok();
  const int64_t N = static_cast<int64_t>(final_state.size()) / (HV * K * V);
  const bool v_first = p.state_layout == KdaStateLayout::kVFirst;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = p.state_indices.defined() ? read_index(p.state_indices, n) : n;
    if (row < 0 || row >= p.final_state.shape[0]) {
      return InvalidArgument("state_indices: entry " + std::to_string(n) + " outside final_state's pool");
    }
    for (int64_t hv = 0; hv < HV; ++hv) {
      for (int64_t d = 0; d < K; ++d) {
        for (int64_t e = 0; e < V; ++e) {
          const double s = final_state[((n * HV + hv) * K + d) * V + e];
          if (v_first) {
            store(p.final_state, {row, hv, e, d}, s);
          } else {
            store(p.final_state, {row, hv, d, e}, s);
          }
        }
      }
    }
  }
  return Status::Ok();
}

namespace {

// One slice, token by token (include/groupattn/kda.h): decay, residual, rank-1 write, output.
void recurrent_head(const KdaHeadSlice& x, std::vector<double>* o, std::vector<double>* s_io) {
  const int64_t K = x.K, V = x.V;
  std::vector<double>& S = *s_io;  // [K][V]
  std::vector<double> r(static_cast<size_t>(V));
  for (int64_t t = 0; t < x.T; ++t) {
    const double* q = &x.q[t * K];
    const double* k = &x.k[t * K];
    const double* v = &x.v[t * V];
    const double* g = &x.g[t * K];
    for (int64_t d = 0; d < K; ++d) {  // S = Diag(exp(g_t)) S
      const double a = std::exp(g[d]);
      for (int64_t e = 0; e < V; ++e) S[d * V + e] *= a;
    }
    for (int64_t e = 0; e < V; ++e) {  // r = v_t - S^T k_t
      double acc = 0;
      for (int64_t d = 0; d < K; ++d) acc += S[d * V + e] * k[d];
      r[e] = v[e] - acc;
    }
    for (int64_t d = 0; d < K; ++d) {  // S += beta_t k_t r^T
      for (int64_t e = 0; e < V; ++e) S[d * V + e] += x.beta[t] * k[d] * r[e];
    }
    for (int64_t e = 0; e < V; ++e) {  // o_t = S^T (scale q_t)
      double acc = 0;
      for (int64_t d = 0; d < K; ++d) acc += S[d * V + e] * (x.scale * q[d]);
      (*o)[t * V + e] = acc;
    }
  }
}

class ReferenceKda final : public KdaEngine {
 public:
  const char* name() const override { return "reference"; }
  const char* description() const override {
    return "fp64 per-token recurrence on the CPU (host memory): the oracle";
  }
  std::string supports() const override {
    return "everything the API accepts, host tensors (all gates, GVA, varlen, state pools)";
  }
  Status check_support(const KdaParams& p) const override { return kda_check_host(p); }
  Status run(const KdaParams& p, void*, void*) const override {
    std::vector<double> out, final_state;
    GA_RETURN_IF_ERROR(kda_recurrent_fp64(p, &out, &final_state));
    return kda_store_fp64(p, out, final_state);
  }
};

}  // namespace

Status kda_recurrent_fp64(const KdaParams& p, std::vector<double>* out, std::vector<double>* final_state) {
  return kda_solve_fp64(p, recurrent_head, out, final_state);
}

const KdaEngine& kda_reference_engine() {
  static const ReferenceKda engine;
  return engine;
}

}  // namespace groupattn
