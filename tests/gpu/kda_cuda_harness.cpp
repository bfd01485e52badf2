#include "gpu/kda_cuda_harness.h"

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>

#include "kda/reference.h"

namespace groupattn::test {

namespace {

std::unique_ptr<DeviceTensor> mirror(const HostTensor& t) {
  return t.defined() ? std::make_unique<DeviceTensor>(t) : nullptr;
}
TensorView dview(const std::unique_ptr<DeviceTensor>& t) { return t ? t->view() : TensorView{}; }

// A copy of `t` with every non-last stride padded by `pad` elements (gaps NaN).
HostTensor padded(const HostTensor& t, int pad) {
  if (!t.defined()) return t;
  const std::vector<int64_t>& shape = t.shape();
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1] + pad;
  HostTensor s(t.dtype(), shape, st);
  s.poison();
  for_each_index(shape, [&](const std::vector<int64_t>& i) { s.set(i, t.at(i)); });
  return s;
}

// The states of `st` (downloaded pool or final state, laid out as run.c's) per sequence of `run`,
// as [N, HV, K, V].
std::vector<double> gather_states(const HostTensor& st, const KdaGpuRun& run) {
  std::vector<double> s;
  for (int64_t n = 0; n < run.c.N(); ++n) {
    const int64_t r = run.row(n);
    for (int64_t hv = 0; hv < run.c.HV; ++hv) {
      for (int64_t d = 0; d < run.c.K; ++d) {
        for (int64_t e = 0; e < run.c.V; ++e) {
          s.push_back(run.c.layout == KdaStateLayout::kVFirst ? st.at({r, hv, e, d}) : st.at({r, hv, d, e}));
        }
      }
    }
  }
  return s;
}

}  // namespace

void KdaGpuRun::setup(uint64_t seed, int pool_extra, bool strided, bool do_upload) {
  c.build(seed);
  pool = false;
  idx = HostTensor();
  if (pool_extra >= 0) {
    pool = true;
    const int64_t N = c.N(), rows = N + pool_extra;
    std::mt19937_64 rng(seed + 7);
    c.initial = HostTensor(DType::kF32, c.state_shape(rows));
    c.initial.fill_normal(rng, 0.0, 0.5);
    std::vector<int> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    idx = HostTensor(DType::kI32, {N});
    for (int64_t n = 0; n < N; ++n) idx.set({n}, perm[static_cast<size_t>(n)]);
    c.final_state = HostTensor();
  }
  if (strided) {
    for (HostTensor* t : {&c.q, &c.k, &c.v, &c.g, &c.beta, &c.out, &c.initial, &c.final_state, &c.dt_bias}) {
      *t = padded(*t, stride_pad);
    }
  }
  if (do_upload) upload();
}

void KdaGpuRun::upload() {
  dq = mirror(c.q), dk = mirror(c.k), dv = mirror(c.v), dg = mirror(c.g), dbeta = mirror(c.beta);
  dout = mirror(c.out), dinit = mirror(c.initial), dfinal = mirror(c.final_state);
  dAlog = mirror(c.A_log), ddt = mirror(c.dt_bias), dcu = mirror(c.cu_seqlens), didx = mirror(idx);
}

KdaParams KdaGpuRun::host_params() const {
  KdaParams p = c.params();
  if (pool) p.state_indices = idx.view();
  return p;
}

KdaParams KdaGpuRun::device_params() const {
  KdaParams p = c.params();
  p.q = dview(dq), p.k = dview(dk), p.v = dview(dv), p.g = dview(dg), p.beta = dview(dbeta);
  p.out = dview(dout);
  p.initial_state = dview(dinit);
  p.final_state = pool ? dview(dinit) : dview(dfinal);
  p.A_log = dview(dAlog), p.dt_bias = dview(ddt), p.cu_seqlens = dview(dcu);
  if (pool) p.state_indices = dview(didx);
  return p;
}

int64_t KdaGpuRun::row(int64_t n) const { return pool ? static_cast<int64_t>(idx.at({n})) : n; }

std::vector<double> KdaGpuRun::final_states() const {
  if (!pool && dfinal == nullptr) return {};
  HostTensor st = pool ? c.initial : c.final_state;
  (pool ? dinit : dfinal)->download(&st);
  return gather_states(st, *this);
}

std::vector<std::pair<const HostTensor*, const DeviceTensor*>> KdaGpuRun::inputs() const {
  return {{&c.q, dq.get()},         {&c.k, dk.get()},        {&c.v, dv.get()},     {&c.g, dg.get()},
          {&c.beta, dbeta.get()},   {&c.initial, dinit.get()}, {&c.A_log, dAlog.get()}, {&c.dt_bias, ddt.get()},
          {&c.cu_seqlens, dcu.get()}, {&idx, didx.get()}};
}

std::string kda_describe(const KdaCase& c, const std::string& extra) {
  std::ostringstream os;
  os << dtype_name(c.dtype) << " B=" << c.B << " T=" << c.T << " H/HV=" << c.H << "/" << c.HV << " K=" << c.K
     << " V=" << c.V << " gate="
     << (c.gate == KdaGate::kLogDecay ? "log" : c.gate == KdaGate::kSoftplus ? "softplus" : "lb")
     << " lb=" << c.lower_bound << " g=[" << c.g_lo << "," << c.g_hi << "]" << (c.with_A_log ? " A_log" : "")
     << (c.with_dt_bias ? " dt_bias" : "") << (c.l2norm ? " l2" : "") << (c.beta_sigmoid ? " bsig" : "")
     << (c.neg_eigval ? " neg" : "") << (c.layout == KdaStateLayout::kKFirst ? " K-first" : " V-first")
     << (c.with_initial ? "" : " no-h0") << (c.with_final ? "" : " no-ht");
  if (!std::isnan(c.scale)) os << " scale=" << c.scale;
  if (!c.cu.empty()) {
    os << " cu(" << dtype_name(c.cu_dtype) << ")=";
    for (int64_t x : c.cu) os << x << ",";
  }
  os << extra;
  return os.str();
}

std::string kda_compare(const KdaGpuRun& ref, const KdaGpuRun& dev, double* out_err, double* state_err) {
  std::ostringstream bad;
  std::vector<double> ref_out, ref_state;
  const Status rs = kda_recurrent_fp64(ref.host_params(), &ref_out, &ref_state);
  if (!rs.ok()) return "reference failed: " + rs.to_string();
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  HostTensor out = ref.c.out;
  dev.dout->download(&out);
  const std::vector<double> got = out.values();
  const double eo = rel_error(got, ref_out);
  if (out_err != nullptr) *out_err = eo;
  if (!all_finite(got)) bad << "NaN/Inf in out; ";
  if (!(eo < kKdaGpuRelTol)) bad << "out rel RMS " << eo << " >= " << kKdaGpuRelTol << "; ";
  // Final states per sequence in the reference's order [N, HV, K, V].
  const bool has_final = dev.pool || dev.dfinal != nullptr;
  if (has_final) {
    HostTensor st = dev.pool ? ref.c.initial : ref.c.final_state;
    (dev.pool ? dev.dinit : dev.dfinal)->download(&st);
    const std::vector<double> s = gather_states(st, ref);
    const double es = rel_error(s, ref_state);
    if (state_err != nullptr) *state_err = es;
    if (!all_finite(s)) bad << "NaN/Inf in final state; ";
    if (!(es < kKdaGpuRelTol)) bad << "final state rel RMS " << es << " >= " << kKdaGpuRelTol << "; ";
    if (dev.pool) {  // rows no sequence names are untouched, bit for bit
      std::vector<bool> used(static_cast<size_t>(ref.c.initial.shape()[0]), false);
      for (int64_t n = 0; n < ref.c.N(); ++n) used[static_cast<size_t>(ref.row(n))] = true;
      int changed = 0;
      for_each_index(ref.c.initial.shape(), [&](const std::vector<int64_t>& i) {
        const double a = st.at(i), b = ref.c.initial.at(i);
        if (!used[static_cast<size_t>(i[0])] && !(a == b || (std::isnan(a) && std::isnan(b)))) ++changed;
      });
      if (changed != 0) bad << changed << " elements of unreferenced pool rows changed; ";
    }
  } else if (state_err != nullptr) {
    *state_err = 0;
  }
  for (auto* t : {dev.dq.get(), dev.dk.get(), dev.dv.get(), dev.dg.get(), dev.dbeta.get(), dev.dout.get(),
                  dev.dinit.get(), dev.dfinal.get(), dev.dAlog.get(), dev.ddt.get(), dev.dcu.get(), dev.didx.get()}) {
    if (t != nullptr && !t->guards_intact()) {
      bad << "a guard band was overwritten; ";
      break;
    }
  }
  std::string s = bad.str();
  if (s.size() >= 2) s.resize(s.size() - 2);
  return s;
}

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
