// The chunked KDA algorithm in fp64 (research/kda.md 3.1), one (sequence, value head) at a time.
//
// Per chunk of C <= 16 tokens (the last chunk of a sequence may be partial; chunks restart at
// every sequence start), with S0 the state entering the chunk (K x V):
//
//   Gamma_r = sum_{s<=r} g_s                 chunk-local cumulative log decay, per key channel
//   Qt[r] = q_r * exp(Gamma_r)               decay from the chunk start to token r
//   Kt[r] = k_r * exp(Gamma_r)
//   Kh[r] = k_r * exp(Gamma_C - Gamma_r)     decay from token r to the chunk end
//   L[r][s]   = beta_r * sum_d k_rd k_sd exp(Gamma_rd - Gamma_sd)   s < r   (strictly lower)
//   Aqk[r][s] = scale  * sum_d q_rd k_sd exp(Gamma_rd - Gamma_sd)   s <= r
//   Tm = (I + L)^{-1}                        the UT transform, by forward substitution
//   W = Tm Diag(beta) Kt,  U = Tm Diag(beta) V
//   D = U - W S0                             the true per-token writes beta_r * r_r
//   O   = scale * Qt S0 + Aqk D
//   S_C = Diag(exp(Gamma_C)) S0 + Kh^T D
//
// Why the exponents are arranged this way: g <= 0, so Gamma is non-increasing along the chunk and
// every exponent above (Gamma_r, Gamma_C - Gamma_r, Gamma_r - Gamma_s for s <= r) is <= 0. Each
// exp() is then in (0, 1]: it may underflow to 0 (the correct limit of a strong decay) but never
// overflows. The tempting factorisation Aqk = (q * exp(Gamma)) (k * exp(-Gamma))^T, which turns
// the C x C matrices into one matmul, needs exp(-Gamma_s) > 1 and overflows for strong gates
// (research/kda.md 3.2); this reference computes L and Aqk elementwise per channel instead (the
// exact "token-parallel" form), so it is exact for any gate, the unbounded softplus one included.
// A kernel that factorises must match this within its precision, which is what the tests check.
#include "kda/reference_chunked.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kda/reference.h"

namespace groupattn {

namespace {

// Row-major dense matrix in fp64, just enough for the chunk algebra.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> a;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), a(static_cast<size_t>(r * c), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return a[i * cols + j]; }
  double operator()(int64_t i, int64_t j) const { return a[i * cols + j]; }
};

// C = A B
Mat matmul(const Mat& A, const Mat& B) {
  Mat C(A.rows, B.cols);
  for (int64_t i = 0; i < A.rows; ++i) {
    for (int64_t m = 0; m < A.cols; ++m) {
      const double aim = A(i, m);
      for (int64_t j = 0; j < B.cols; ++j) C(i, j) += aim * B(m, j);
    }
  }
  return C;
}

// T = (I + L)^{-1} for strictly lower-triangular L, by forward substitution down the rows:
// (I + L) T = I gives T[r][s] = [r == s] - sum_{s <= m < r} L[r][m] T[m][s]. T is unit lower
// triangular. Substitution is exact in the algebra (no Neumann/doubling product, which loses
// conditioning for large chunks: research/kda.md 3.2).
Mat unit_lower_inverse(const Mat& L) {
  const int64_t n = L.rows;
  Mat T(n, n);
  for (int64_t r = 0; r < n; ++r) {
    T(r, r) = 1.0;
    for (int64_t s = 0; s < r; ++s) {
      double acc = 0;
      for (int64_t m = s; m < r; ++m) acc += L(r, m) * T(m, s);
      T(r, s) = -acc;
    }
  }
  return T;
}

void chunked_head(const KdaHeadSlice& x, std::vector<double>* o_out, std::vector<double>* s_io) {
  const int64_t K = x.K, V = x.V;
  Mat S(K, V);  // the state entering the current chunk (S0 of the formulas)
  S.a = *s_io;

  for (int64_t c0 = 0; c0 < x.T; c0 += kKdaRefChunk) {
    const int64_t C = std::min(kKdaRefChunk, x.T - c0);  // tokens in this chunk (last may be partial)
    auto q = [&](int64_t r, int64_t d) { return x.q[(c0 + r) * K + d]; };
    auto k = [&](int64_t r, int64_t d) { return x.k[(c0 + r) * K + d]; };
    auto beta = [&](int64_t r) { return x.beta[c0 + r]; };

    // Gamma: chunk-local cumulative log decay. Restarting at each chunk keeps every exponent a
    // difference inside one chunk (plus Gamma_C, the whole chunk's decay).
    Mat G(C, K);
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t d = 0; d < K; ++d) G(r, d) = (r > 0 ? G(r - 1, d) : 0.0) + x.g[(c0 + r) * K + d];
    }

    // Decayed q and k (exponents Gamma_r <= 0) and k decayed to the chunk end (Gamma_C - Gamma_r <= 0).
    Mat Qt(C, K), Kt(C, K), Kh(C, K);
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t d = 0; d < K; ++d) {
        Qt(r, d) = q(r, d) * std::exp(G(r, d));
        Kt(r, d) = k(r, d) * std::exp(G(r, d));
        Kh(r, d) = k(r, d) * std::exp(G(C - 1, d) - G(r, d));
      }
    }

    // The intra-chunk matrices, elementwise per channel: exp(Gamma_rd - Gamma_sd) with s <= r is
    // <= 1 for every channel, for any gate strength. No reference point, no growing factor.
    Mat L(C, C), Aqk(C, C);
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t s = 0; s <= r; ++s) {
        double kk = 0, qk = 0;
        for (int64_t d = 0; d < K; ++d) {
          const double decay = std::exp(G(r, d) - G(s, d));
          kk += k(r, d) * k(s, d) * decay;
          qk += q(r, d) * k(s, d) * decay;
        }
        if (s < r) L(r, s) = beta(r) * kk;
        Aqk(r, s) = x.scale * qk;
      }
    }

    // UT transform. Unrolling the recurrence in the chunk gives (I + L) D = Diag(beta)(V - Kt S0),
    // hence D = Tm Diag(beta) V - Tm Diag(beta) Kt S0 = U - W S0.
    const Mat Tm = unit_lower_inverse(L);
    Mat BK(C, K), BV(C, V);  // Diag(beta) Kt, Diag(beta) V
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t d = 0; d < K; ++d) BK(r, d) = beta(r) * Kt(r, d);
      for (int64_t e = 0; e < V; ++e) BV(r, e) = beta(r) * x.v[(c0 + r) * V + e];
    }
    const Mat W = matmul(Tm, BK);
    const Mat U = matmul(Tm, BV);
    const Mat WS = matmul(W, S);
    Mat D(C, V);
    for (size_t i = 0; i < D.a.size(); ++i) D.a[i] = U.a[i] - WS.a[i];

    // Output: the carried state seen through the decay to token r, plus this chunk's writes.
    const Mat QS = matmul(Qt, S);
    const Mat AD = matmul(Aqk, D);
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t e = 0; e < V; ++e) (*o_out)[(c0 + r) * V + e] = x.scale * QS(r, e) + AD(r, e);
    }

    // State pass (the only sequential step): S <- Diag(exp(Gamma_C)) S0 + Kh^T D.
    Mat next(K, V);
    for (int64_t d = 0; d < K; ++d) {
      const double a = std::exp(G(C - 1, d));
      for (int64_t e = 0; e < V; ++e) {
        double acc = a * S(d, e);
        for (int64_t r = 0; r < C; ++r) acc += Kh(r, d) * D(r, e);
        next(d, e) = acc;
      }
    }
    S = std::move(next);
  }
  *s_io = S.a;
}

class ReferenceChunkedKda final : public KdaEngine {
 public:
  const char* name() const override { return "reference-chunked"; }
  const char* description() const override {
    return "fp64 chunked (WY/UT, 16-token chunks) on the CPU (host memory): the GPU kernels' blueprint";
  }
  std::string supports() const override {
    return "everything the API accepts, host tensors; runs only when pinned";
  }
  Status check_support(const KdaParams& p) const override { return kda_check_host(p); }
  Status run(const KdaParams& p, void*, void*) const override {
    std::vector<double> out, final_state;
    GA_RETURN_IF_ERROR(kda_chunked_fp64(p, &out, &final_state));
    return kda_store_fp64(p, out, final_state);
  }
};

}  // namespace

Status kda_chunked_fp64(const KdaParams& p, std::vector<double>* out, std::vector<double>* final_state) {
  return kda_solve_fp64(p, chunked_head, out, final_state);
}

const KdaEngine& kda_reference_chunked_engine() {
  static const ReferenceChunkedKda engine;
  return engine;
}

}  // namespace groupattn
