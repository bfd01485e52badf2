#include "gpu/cuda_attention_harness.h"

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

namespace groupattn::test {

namespace {
// TESTING.md: relative error on O, absolute error on LSE.
constexpr double kRelTolBf16 = 1e-2;
constexpr double kRelTolF16 = 2e-3;
constexpr double kLseAbsTol = 1e-3;
// Strided views: every non-last stride gets this many extra elements (16 bytes of 16-bit data).
constexpr int64_t kStridePad = 8;

// Shape with padded strides (each stride = the inner extent * inner stride + kStridePad).
HostTensor make_tensor(DType dt, const std::vector<int64_t>& shape, bool strided) {
  if (!strided) return HostTensor(dt, shape);
  const int64_t pad = dt == DType::kF8E4M3 ? 2 * kStridePad : kStridePad;  // 16 bytes for 1-byte elements
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1] + pad;
  return HostTensor(dt, shape, st);
}

HostTensor int_tensor(const std::vector<int>& values) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set({static_cast<int64_t>(i)}, values[i]);
  return t;
}

std::vector<int> prefix_sums(const std::vector<int>& lens) {
  std::vector<int> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

std::unique_ptr<DeviceTensor> mirror(const HostTensor& t) {
  return t.defined() ? std::make_unique<DeviceTensor>(t) : nullptr;
}
TensorView dview(const std::unique_ptr<DeviceTensor>& t) { return t ? t->view() : TensorView{}; }

}  // namespace

HostTensor like(const HostTensor& t) {
  std::vector<int64_t> st(t.view().stride, t.view().stride + t.view().rank);
  return HostTensor(t.dtype(), t.shape(), st);
}

namespace {
int max_of(const std::vector<int>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
}  // namespace

std::string describe(const Case& c) {
  std::ostringstream os;
  os << dtype_name(c.dtype) << " Hq/Hkv=" << c.hq << "/" << c.hkv << " D=" << c.d << " q_lens=";
  for (int x : c.q_lens) os << x << ",";
  os << " k_lens=";
  for (int x : c.k_lens) os << x << ",";
  os << (c.q_varlen ? " q-varlen" : " q-batched")
     << (c.kv == KvKind::kBatched  ? " kv-batched"
         : c.kv == KvKind::kVarlen ? " kv-varlen"
                                   : " kv-paged");
  if (c.kv == KvKind::kPaged) os << " page=" << c.page_size;
  os << (c.causal ? " causal" : "") << " window=(" << c.window_left << "," << c.window_right << ")"
     << " softcap=" << c.softcap << " splits=" << c.num_splits << (c.strided ? " strided" : "")
     << (c.kv_fp8 ? " kv-f8e4m3" : "") << (c.stale_rows_nan ? " stale-rows-nan" : "");
  return os.str();
}

std::unique_ptr<Problem> make_problem(const Case& c) {
  auto p = make_host_problem(c);
  p->upload();
  return p;
}

namespace {
// Batched K or V [B, Sk, Hkv, D] of case c (Case::stale_rows_nan): the rows each sequence's keys
// use drawn in row-major order (sequence, key, head, channel), every row past them NaN.
void draw_live_rows_nan_past(const Case& c, std::mt19937_64& rng, HostTensor* t) {
  const int64_t rows = t->shape()[1];
  const TensorView& to = t->view();
  const auto esize = static_cast<int64_t>(dtype_size(to.dtype));
  const auto run = static_cast<size_t>(c.d * esize);  // one head's D channels, unit stride
  HostTensor nan_run(to.dtype, {c.d});
  nan_run.fill(std::nan(""));
  auto row_at = [&](int64_t b, int64_t j, int64_t h) {
    return static_cast<char*>(to.data) + (b * to.stride[0] + j * to.stride[1] + h * to.stride[2]) * esize;
  };
  for (int64_t b = 0; b < static_cast<int64_t>(c.k_lens.size()); ++b) {
    const int64_t live = c.k_lens[static_cast<size_t>(b)];
    if (live > 0) {
      HostTensor drawn(to.dtype, {live, c.hkv, c.d});  // contiguous
      drawn.fill_normal(rng);
      for (int64_t j = 0; j < live; ++j) {
        for (int64_t h = 0; h < c.hkv; ++h) {
          std::memcpy(row_at(b, j, h),
                      static_cast<const char*>(drawn.view().data) + (j * c.hkv + h) * c.d * esize, run);
        }
      }
    }
    for (int64_t j = live; j < rows; ++j) {
      for (int64_t h = 0; h < c.hkv; ++h) std::memcpy(row_at(b, j, h), nan_run.view().data, run);
    }
  }
}

// The inputs of case c, drawn (see make_host_problem: check's draw, bit for bit, unless
// stale_rows_nan).
std::unique_ptr<Problem> draw_host_problem(const Case& c) {
  auto p = std::make_unique<Problem>();
  p->c = c;
  std::mt19937_64 rng(c.seed);
  const int64_t batch = static_cast<int64_t>(c.q_lens.size());
  const int64_t total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), int64_t{0});
  const DType kv_dtype = c.kv_fp8 ? DType::kF8E4M3 : c.dtype;
  if (c.q_varlen) {
    p->q = make_tensor(c.dtype, {total_q, c.hq, c.d}, c.strided);
    p->out = make_tensor(c.dtype, {total_q, c.hq, c.d}, c.strided);
    p->cu_q = int_tensor(prefix_sums(c.q_lens));
  } else {
    p->q = make_tensor(c.dtype, {batch, c.q_lens[0], c.hq, c.d}, c.strided);
    p->out = make_tensor(c.dtype, {batch, c.q_lens[0], c.hq, c.d}, c.strided);
  }
  p->lse = c.strided ? HostTensor(DType::kF32, {c.hq, total_q}, {total_q + 3, 1})
                     : HostTensor(DType::kF32, {c.hq, total_q});
  switch (c.kv) {
    case KvKind::kBatched: {
      const int sk = max_of(c.k_lens);
      p->k = make_tensor(kv_dtype, {batch, sk, c.hkv, c.d}, c.strided);
      p->v = make_tensor(kv_dtype, {batch, sk, c.hkv, c.d}, c.strided);
      if (std::any_of(c.k_lens.begin(), c.k_lens.end(), [&](int x) { return x != sk; }))
        p->seqlens_k = int_tensor(c.k_lens);
      break;
    }
    case KvKind::kVarlen: {
      const int total_k = std::accumulate(c.k_lens.begin(), c.k_lens.end(), 0);
      p->k = make_tensor(kv_dtype, {total_k, c.hkv, c.d}, c.strided);
      p->v = make_tensor(kv_dtype, {total_k, c.hkv, c.d}, c.strided);
      p->cu_k = int_tensor(prefix_sums(c.k_lens));
      break;
    }
    case KvKind::kPaged: {
      // Shuffled page ids, spare pages that no sequence uses, one spare column in the table.
      std::vector<int> pages_of(c.k_lens.size());
      int used = 0, max_pages = 0;
      for (size_t b = 0; b < c.k_lens.size(); ++b) {
        pages_of[b] = (c.k_lens[b] + c.page_size - 1) / c.page_size;
        used += pages_of[b];
        max_pages = std::max(max_pages, pages_of[b]);
      }
      const int num_pages = used + 3;
      std::vector<int> ids(static_cast<size_t>(num_pages));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      p->k = make_tensor(kv_dtype, {num_pages, c.page_size, c.hkv, c.d}, c.strided);
      p->v = make_tensor(kv_dtype, {num_pages, c.page_size, c.hkv, c.d}, c.strided);
      p->block_table = HostTensor(DType::kI32, {batch, max_pages + 1});
      int next = 0;
      for (int64_t b = 0; b < batch; ++b) {
        for (int j = 0; j <= max_pages; ++j) {
          const bool live = j < pages_of[static_cast<size_t>(b)];
          p->block_table.set(
              {b, j}, live ? ids[static_cast<size_t>(next++)] : ids[static_cast<size_t>(num_pages - 1)]);
        }
      }
      p->seqlens_k = int_tensor(c.k_lens);
      break;
    }
  }
  p->q.fill_normal(rng);
  if (c.stale_rows_nan && p->seqlens_k.defined() && c.kv == KvKind::kBatched) {
    for (HostTensor* t : {&p->k, &p->v}) draw_live_rows_nan_past(c, rng, t);
  } else {
    p->k.fill_normal(rng);
    p->v.fill_normal(rng);
  }
  if (c.kv_fp8) {  // drawn last: the other cases' inputs do not change
    p->k_scale = HostTensor(DType::kF32, {batch, c.hkv});
    p->v_scale = HostTensor(DType::kF32, {batch, c.hkv});
    p->k_scale.fill_uniform(rng, 0.25, 1.0);
    p->v_scale.fill_uniform(rng, 0.25, 1.0);
  }
  return p;
}

// Every Case field the drawn inputs depend on.
bool same_draw(const Case& a, const Case& b) {
  return a.dtype == b.dtype && a.hq == b.hq && a.hkv == b.hkv && a.d == b.d && a.q_lens == b.q_lens &&
         a.k_lens == b.k_lens && a.q_varlen == b.q_varlen && a.kv == b.kv && a.page_size == b.page_size &&
         a.strided == b.strided && a.kv_fp8 == b.kv_fp8 && a.stale_rows_nan == b.stale_rows_nan &&
         a.seed == b.seed;
}
// ... and the reference's O and LSE besides (num_splits is a run option only).
bool same_reference(const Case& a, const Case& b) {
  const bool same_scale = std::isnan(a.scale) ? std::isnan(b.scale) : a.scale == b.scale;
  return same_draw(a, b) && a.causal == b.causal && a.window_left == b.window_left &&
         a.window_right == b.window_right && a.softcap == b.softcap && same_scale;
}

// The last case's drawn inputs and, once run, its reference O and LSE. The GPU tier's long tests run
// one case several ways in a row (split counts, switches on and off, repeat runs, NaN in its stale
// rows, masks over one draw); drawing (~30 ns an element: 2e8 for a B24 x 32K cache) and the fp64
// reference (8-20 ns a multiply-add) were most of their host time, paid again for each way.
struct LastCase {
  Case c;                         // the draw's case
  std::unique_ptr<Problem> host;  // host tensors only
  bool have_reference = false;    // out / lse hold the reference of reference_case
  Case reference_case;
  HostTensor out, lse;
};

LastCase& last_case() {
  static LastCase last;
  return last;
}

const Problem& cached_host_problem(const Case& c) {
  LastCase& last = last_case();
  if (!last.host || !same_draw(last.c, c)) {
    last.host.reset();  // at most one cache alive: the long tests' K/V are GBs
    last.have_reference = false;
    last.out = HostTensor();
    last.lse = HostTensor();
    last.host = draw_host_problem(c);
    last.c = c;
  }
  return *last.host;
}
}  // namespace

std::unique_ptr<Problem> make_host_problem(const Case& c) {
  const Problem& drawn = cached_host_problem(c);
  auto p = std::make_unique<Problem>();
  p->c = c;
  p->q = drawn.q;
  p->k = drawn.k;
  p->v = drawn.v;
  p->out = drawn.out;
  p->lse = drawn.lse;
  p->cu_q = drawn.cu_q;
  p->cu_k = drawn.cu_k;
  p->seqlens_k = drawn.seqlens_k;
  p->block_table = drawn.block_table;
  p->k_scale = drawn.k_scale;
  p->v_scale = drawn.v_scale;
  return p;
}

std::unique_ptr<Problem> make_copied_up(const Problem& g) {
  auto p = make_host_copied_up(g);
  p->upload();
  return p;
}

std::unique_ptr<Problem> make_host_copied_up(const Problem& g) {
  // What make_host_problem gives for g's case with Hkv = Hq (same seed: the same shapes and index
  // tensors, the page shuffle being drawn before any value), with Q, K/V and the fp8 scales then
  // copied from g. Built without that draw: only the copies survive it.
  auto p = std::make_unique<Problem>();
  p->c = g.c;
  p->c.hkv = p->c.hq;
  const int64_t hq = p->c.hq, group = g.c.hq / g.c.hkv;
  p->q = g.q;
  p->out = like(g.out);
  p->lse = like(g.lse);
  p->cu_q = g.cu_q;
  p->cu_k = g.cu_k;
  p->seqlens_k = g.seqlens_k;
  p->block_table = g.block_table;
  std::vector<int64_t> kv_shape = g.k.shape();  // [..., Hkv, D] -> [..., Hq, D]
  kv_shape[kv_shape.size() - 2] = hq;
  p->k = make_tensor(g.k.dtype(), kv_shape, p->c.strided);
  p->v = make_tensor(g.v.dtype(), kv_shape, p->c.strided);
  for (HostTensor* dst : {&p->k, &p->v}) {
    const TensorView& to = dst->view();
    const TensorView& from = (dst == &p->k ? g.k : g.v).view();
    const int rank = to.rank;
    const auto esize = static_cast<int64_t>(dtype_size(to.dtype));
    const auto run = static_cast<size_t>(to.shape[rank - 1] * esize);  // D elements, unit stride
    const std::vector<int64_t> outer(kv_shape.begin(), kv_shape.end() - 2);
    for_each_index(outer, [&](const std::vector<int64_t>& i) {
      int64_t t = 0, f = 0;  // element offsets of (i..., head 0, channel 0)
      for (size_t d = 0; d < i.size(); ++d) t += i[d] * to.stride[d], f += i[d] * from.stride[d];
      for (int64_t h = 0; h < hq; ++h) {  // MHA head h holds GQA KV head h / group
        std::memcpy(static_cast<char*>(to.data) + (t + h * to.stride[rank - 2]) * esize,
                    static_cast<const char*>(from.data) + (f + h / group * from.stride[rank - 2]) * esize,
                    run);
      }
    });
  }
  for (HostTensor* dst : {&p->k_scale, &p->v_scale}) {  // fp8: MHA head h takes KV head h / group's scale
    const HostTensor& src = dst == &p->k_scale ? g.k_scale : g.v_scale;
    if (!src.defined()) continue;
    *dst = HostTensor(DType::kF32, {src.shape()[0], hq});
    for_each_index(dst->shape(), [&](const std::vector<int64_t>& i) { dst->set(i, src.at({i[0], i[1] / group})); });
  }
  return p;
}

void Problem::upload() {
  dq = mirror(q);
  dk = mirror(k);
  dv = mirror(v);
  dout = mirror(out);
  dlse = mirror(lse);
  dcu_q = mirror(cu_q);
  dcu_k = mirror(cu_k);
  dseqlens_k = mirror(seqlens_k);
  dblock_table = mirror(block_table);
  dk_scale = mirror(k_scale);
  dv_scale = mirror(v_scale);
}

namespace {
AttentionParams common_params(const Case& c) {
  AttentionParams a;
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.softcap = c.softcap;
  a.softmax_scale = c.scale;
  a.num_splits = c.num_splits;
  if (c.q_varlen) a.max_seqlen_q = max_of(c.q_lens);
  if (c.kv == KvKind::kVarlen || c.kv == KvKind::kPaged) a.max_seqlen_k = max_of(c.k_lens);
  return a;
}
}  // namespace

AttentionParams Problem::host_params() {
  AttentionParams a = common_params(c);
  a.q = q.view();
  a.k = k.view();
  a.v = v.view();
  a.out = out.view();
  a.lse = lse.view();
  a.cu_seqlens_q = cu_q.view();
  a.cu_seqlens_k = cu_k.view();
  a.seqlens_k = seqlens_k.view();
  a.block_table = block_table.view();
  a.k_scale = k_scale.view();
  a.v_scale = v_scale.view();
  return a;
}

AttentionParams Problem::device_params() const {
  AttentionParams a = common_params(c);
  a.q = dview(dq);
  a.k = dview(dk);
  a.v = dview(dv);
  a.out = dview(dout);
  a.lse = dview(dlse);
  a.cu_seqlens_q = dview(dcu_q);
  a.cu_seqlens_k = dview(dcu_k);
  a.seqlens_k = dview(dseqlens_k);
  a.block_table = dview(dblock_table);
  a.k_scale = dview(dk_scale);
  a.v_scale = dview(dv_scale);
  return a;
}

Status run_cuda(Problem& p, HostTensor* got_out, HostTensor* got_lse, const char* engine) {
  p.dout->poison();
  p.dlse->poison();
  RunOptions o;
  o.engine = engine;
  GA_RETURN_IF_ERROR(attention(p.device_params(), o));
  p.dout->download(got_out);
  p.dlse->download(got_lse);
  return Status::Ok();
}

bool have_sm90_device() {
  if (!have_cuda_device()) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

void expect_declines(const Case& c, const char* engine, const std::string& reason) {
  auto p = make_problem(c);
  HostTensor o = like(p->out), l = like(p->lse);
  const Status s = run_cuda(*p, &o, &l, engine);
  ASSERT_FALSE(s.ok()) << describe(c);
  EXPECT_NE(s.to_string().find(reason), std::string::npos) << describe(c) << ": " << s.to_string();
}

Status run_reference(Problem& p) {
  RunOptions o;
  o.engine = "reference";
  return attention(p.host_params(), o);
}

Status run_case_reference(Problem& p) {
  LastCase& last = last_case();
  if (!last.host || !same_draw(last.c, p.c)) return run_reference(p);  // not the cached draw
  if (!last.have_reference || !same_reference(last.reference_case, p.c)) {
    last.have_reference = false;
    GA_RETURN_IF_ERROR(run_reference(p));
    last.out = p.out;
    last.lse = p.lse;
    last.reference_case = p.c;
    last.have_reference = true;
    return Status::Ok();
  }
  p.out = last.out;  // same dtype, shape and strides: the same case
  p.lse = last.lse;
  return Status::Ok();
}

void expect_matches_reference(const Problem& p, const HostTensor& got_out, const HostTensor& got_lse,
                              const std::string& label) {
  const std::vector<double> out = got_out.values(), ref = p.out.values();
  EXPECT_TRUE(all_finite(out)) << label << ": NaN/Inf in O";
  const double tol = p.c.dtype == DType::kBF16 ? kRelTolBf16 : kRelTolF16;
  const double rel = rel_error(out, ref);
  EXPECT_LT(rel, tol) << label << ": relative error of O";
  const std::vector<double> lse = got_lse.values(), lse_ref = p.lse.values();
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i]) && lse_ref[i] < 0) {
      if (!(std::isinf(lse[i]) && lse[i] < 0)) ++bad;  // no visible key: LSE must be -inf
    } else if (!std::isfinite(lse[i])) {
      ++bad;
    } else {
      worst = std::max(worst, std::abs(lse[i] - lse_ref[i]));
    }
  }
  EXPECT_EQ(bad, 0) << label << ": LSE rows with the wrong -inf/finite state";
  EXPECT_LT(worst, kLseAbsTol) << label << ": LSE abs error";
}

void expect_gqa_equals_copied_up(const Case& c, const char* engine) {
  auto gqa = make_problem(c);
  auto mha = make_copied_up(*gqa);
  HostTensor o1 = like(gqa->out), l1 = like(gqa->lse), o2 = like(mha->out), l2 = like(mha->lse);
  ASSERT_TRUE(run_cuda(*gqa, &o1, &l1, engine).ok()) << describe(c);
  ASSERT_TRUE(run_cuda(*mha, &o2, &l2, engine).ok()) << describe(c);
  EXPECT_TRUE(bitwise_equal(o1, o2)) << describe(c) << ": O differs";
  EXPECT_TRUE(bitwise_equal(l1, l2)) << describe(c) << ": LSE differs";
}

void check_case(const Case& c, const char* engine) {
  const std::string label = describe(c);
  auto p = make_problem(c);
  const Status rs = run_case_reference(*p);
  ASSERT_TRUE(rs.ok()) << label << ": reference: " << rs.to_string();
  HostTensor out = like(p->out), lse = like(p->lse);
  const Status s = run_cuda(*p, &out, &lse, engine);
  ASSERT_TRUE(s.ok()) << label << ": " << engine << ": " << s.to_string();
  expect_matches_reference(*p, out, lse, label);
  EXPECT_TRUE(p->dout->guards_intact()) << label << ": write outside out";
  EXPECT_TRUE(p->dlse->guards_intact()) << label << ": write outside lse";
  for (auto* t : {p->dq.get(), p->dk.get(), p->dv.get()})
    EXPECT_TRUE(t->guards_intact()) << label << ": inputs' guards";
}

void expect_ignores_stale_rows(const Case& c, const char* engine) {
  auto p = make_problem(c);
  ASSERT_TRUE(p->k.view().rank == 4) << describe(c) << ": batched or paged K/V";
  const int64_t outers = p->k.shape()[0], rows = p->k.shape()[1];  // [B | pages, Sk | page_size, Hkv, D]
  std::vector<char> live(static_cast<size_t>(outers * rows), 0);
  for (int64_t b = 0; b < static_cast<int64_t>(c.k_lens.size()); ++b) {
    for (int64_t j = 0; j < c.k_lens[static_cast<size_t>(b)]; ++j) {
      int64_t outer = b, row = j;
      if (c.kv == KvKind::kPaged) {
        outer = static_cast<int64_t>(p->block_table.at({b, j / c.page_size}));
        row = j % c.page_size;
      }
      live[static_cast<size_t>(outer * rows + row)] = 1;
    }
  }
  const double nan = std::nan("");
  for (int64_t o = 0; o < outers; ++o) {
    for (int64_t r = 0; r < rows; ++r) {
      if (live[static_cast<size_t>(o * rows + r)]) continue;
      p->k.fill_sub({o, r}, nan);  // every head and channel of the row
      p->v.fill_sub({o, r}, nan);
    }
  }
  p->upload();
  ASSERT_TRUE(run_case_reference(*p).ok());
  HostTensor out = like(p->out), lse = like(p->lse);
  ASSERT_TRUE(run_cuda(*p, &out, &lse, engine).ok()) << describe(c);
  expect_matches_reference(*p, out, lse, describe(c) + " (NaN in stale cache rows)");
}

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
