// The fp64 attention reference against itself and against hand-computed tiny cases: decode vs
// prefill, paged vs contiguous, varlen vs per-sequence, GQA vs MHA copied up, split-and-merge vs
// whole, mask alignment, window, softcap, empty rows, D != Dv, strided views, guard bands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "attention/reference.h"
#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The tensors of one problem; absent ones stay default (undefined).
struct Problem {
  HostTensor q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table;

  // The tensors bound into `s`, whose scalar options are kept.
  AttentionParams bind(AttentionParams s = {}) const {
    s.q = q.view();
    s.k = k.view();
    s.v = v.view();
    s.out = out.view();
    s.lse = lse.view();
    s.cu_seqlens_q = cu_q.view();
    s.cu_seqlens_k = cu_k.view();
    s.seqlens_k = seqlens_k.view();
    s.block_table = block_table.view();
    return s;
  }
};

struct Result {
  std::vector<double> o, lse;
};

HostTensor int_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  HostTensor t(DType::kI32, std::move(shape));
  size_t n = 0;
  for_each_index(t.shape(), [&](const std::vector<int64_t>& i) { t.set(i, static_cast<double>(values[n++])); });
  return t;
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(1, 0);
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

// Row-major strides with `pad` extra elements in every non-last dimension: a non-contiguous view.
std::vector<int64_t> padded_strides(const std::vector<int64_t>& shape, int64_t pad) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * (shape[d + 1] + pad);
  return st;
}

// A copy of `src` with the given strides.
HostTensor restride(const HostTensor& src, const std::vector<int64_t>& strides) {
  HostTensor t(src.dtype(), src.shape(), strides);
  t.poison();
  for_each_index(src.shape(), [&](const std::vector<int64_t>& i) { t.set(i, src.at(i)); });
  return t;
}

// Runs the reference engine through the public API with poisoned outputs, and checks that every
// output element got written (no NaN left) and no guard band was touched.
Result run(Problem& pr, const AttentionParams& s = {}) {
  pr.out.poison();
  if (pr.lse.defined()) pr.lse.poison();
  RunOptions opts;
  opts.engine = "reference";
  const Status st = attention(pr.bind(s), opts);
  EXPECT_TRUE(st.ok()) << st.to_string();
  Result r{pr.out.values(), pr.lse.defined() ? pr.lse.values() : std::vector<double>{}};
  EXPECT_TRUE(all_finite(r.o)) << "out has an unwritten (NaN) or non-finite element";
  for (double x : r.lse) EXPECT_FALSE(std::isnan(x)) << "lse has an unwritten (NaN) element";
  for (const HostTensor* t : {&pr.q, &pr.k, &pr.v, &pr.out, &pr.lse, &pr.cu_q, &pr.cu_k, &pr.seqlens_k, &pr.block_table}) {
    if (t->defined()) {
      EXPECT_TRUE(t->guards_intact());
    }
  }
  return r;
}

// A batched problem with random Q/K/V.
Problem batched(std::mt19937_64& rng, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                int64_t dv, DType dtype = DType::kF32) {
  Problem pr;
  pr.q = HostTensor(dtype, {b, sq, hq, d});
  pr.k = HostTensor(dtype, {b, sk, hkv, d});
  pr.v = HostTensor(dtype, {b, sk, hkv, dv});
  pr.out = HostTensor(dtype, {b, sq, hq, dv});
  pr.lse = HostTensor(DType::kF32, {hq, b * sq});
  pr.q.fill_normal(rng);
  pr.k.fill_normal(rng);
  pr.v.fill_normal(rng);
  return pr;
}

// out[b, i, h, :] of a batched or varlen result, flattened as [total_q, Hq, Dv].
std::vector<double> o_row(const Result& r, int64_t row, int64_t h, int64_t hq, int64_t dv) {
  const auto at = static_cast<size_t>((row * hq + h) * dv);  // [total_q, Hq, Dv] row-major
  return {r.o.begin() + static_cast<std::ptrdiff_t>(at), r.o.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(dv))};
}
double lse_at(const Result& r, int64_t h, int64_t row, int64_t total_q) {
  return r.lse[static_cast<size_t>(h * total_q + row)];  // [Hq, total_q]
}

TEST(AttentionReference, DecodeEqualsLastRowsOfPrefill) {
  std::mt19937_64 rng(1);
  const int64_t hq = 8, hkv = 2, d = 32, dv = 64, cap = 48, sq = 3;
  const std::vector<int64_t> lens = {37, 21};
  const int64_t batch = static_cast<int64_t>(lens.size());
  Problem dec = batched(rng, batch, sq, cap, hq, hkv, d, dv);
  dec.seqlens_k = int_tensor({batch}, lens);
  AttentionParams s;
  s.causal = true;
  const Result rd = run(dec, s);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    Problem pre = batched(rng, 1, len, len, hq, hkv, d, dv);
    // the last sq prefill queries are the decode queries; keys are the cache's first len rows
    for_each_index({sq, hq, d}, [&](const std::vector<int64_t>& i) {
      pre.q.set({0, len - sq + i[0], i[1], i[2]}, dec.q.at({b, i[0], i[1], i[2]}));
    });
    for_each_index({len, hkv, d}, [&](const std::vector<int64_t>& i) { pre.k.set({0, i[0], i[1], i[2]}, dec.k.at({b, i[0], i[1], i[2]})); });
    for_each_index({len, hkv, dv}, [&](const std::vector<int64_t>& i) { pre.v.set({0, i[0], i[1], i[2]}, dec.v.at({b, i[0], i[1], i[2]})); });
    const Result rp = run(pre, s);
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        EXPECT_EQ(o_row(rd, b * sq + i, h, hq, dv), o_row(rp, len - sq + i, h, hq, dv)) << "b=" << b << " i=" << i << " h=" << h;
        EXPECT_EQ(lse_at(rd, h, b * sq + i, batch * sq), lse_at(rp, h, len - sq + i, len));
      }
    }
  }
}

// Paged copy of a batched cache [B, cap, Hkv, D]: pages shuffled among spare pages that hold NaN
// (so reading one would show), unused block-table entries set to -1.
void page_into(std::mt19937_64& rng, const HostTensor& cache, const std::vector<int64_t>& lens, int64_t page_size,
               HostTensor* paged, HostTensor* table) {
  const int64_t batch = cache.shape()[0], hkv = cache.shape()[2], d = cache.shape()[3];
  const int64_t cap = cache.shape()[1];
  const int64_t max_pages = (cap + page_size - 1) / page_size + 1;
  int64_t used = 0;
  for (int64_t l : lens) used += (l + page_size - 1) / page_size;
  const int64_t num_pages = used + 3;  // spare pages
  std::vector<int64_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  *paged = HostTensor(cache.dtype(), {num_pages, page_size, hkv, d});
  paged->poison();
  std::vector<int64_t> bt(static_cast<size_t>(batch * max_pages), -1);
  size_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    for (int64_t pg = 0; pg * page_size < len; ++pg) bt[static_cast<size_t>(b * max_pages + pg)] = ids[next++];
    for_each_index({len, hkv, d}, [&](const std::vector<int64_t>& i) {
      const int64_t page = bt[static_cast<size_t>(b * max_pages + i[0] / page_size)];  // key j -> page j / page_size
      paged->set({page, i[0] % page_size, i[1], i[2]}, cache.at({b, i[0], i[1], i[2]}));
    });
  }
  *table = int_tensor({batch, max_pages}, bt);
}

TEST(AttentionReference, PagedWithShuffledAndSparePagesEqualsContiguous) {
  std::mt19937_64 rng(2);
  const std::vector<int64_t> lens = {37, 5, 70, 0};
  const int64_t batch = 4, cap = 70, sq = 4, hq = 4, hkv = 2, d = 32, dv = 32;
  Problem con = batched(rng, batch, sq, cap, hq, hkv, d, dv);
  con.seqlens_k = int_tensor({batch}, lens);
  AttentionParams s;
  s.causal = true;
  const Result rc = run(con, s);
  for (int64_t page_size : {1, 16, 64}) {
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    Problem pg;
    pg.q = con.q;
    pg.out = HostTensor(DType::kF32, {batch, sq, hq, dv});
    pg.lse = HostTensor(DType::kF32, {hq, batch * sq});
    pg.seqlens_k = int_tensor({batch}, lens);
    HostTensor table_v;
    std::mt19937_64 rng_v = rng;  // same shuffle for V so both follow one block table
    page_into(rng, con.k, lens, page_size, &pg.k, &pg.block_table);
    page_into(rng_v, con.v, lens, page_size, &pg.v, &table_v);
    ASSERT_TRUE(bitwise_equal(pg.block_table, table_v));
    const Result rp = run(pg, s);
    EXPECT_EQ(rp.o, rc.o);
    EXPECT_EQ(rp.lse, rc.lse);
  }
}

TEST(AttentionReference, VarlenEqualsPerSequenceBatched) {
  std::mt19937_64 rng(3);
  const std::vector<int64_t> lq = {5, 0, 7, 1}, lk = {9, 4, 7, 0};
  const int64_t batch = 4, hq = 4, hkv = 2, d = 32, dv = 32;
  const std::vector<int64_t> cq = prefix_sums(lq), ck = prefix_sums(lk);
  const int64_t total_q = cq.back(), total_k = ck.back(), cap = 9;
  Problem vl;
  vl.q = HostTensor(DType::kF32, {total_q, hq, d});
  vl.k = HostTensor(DType::kF32, {total_k, hkv, d});
  vl.v = HostTensor(DType::kF32, {total_k, hkv, dv});
  vl.out = HostTensor(DType::kF32, {total_q, hq, dv});
  vl.lse = HostTensor(DType::kF32, {hq, total_q});
  vl.cu_q = int_tensor({batch + 1}, cq);
  vl.cu_k = int_tensor({batch + 1}, ck);
  vl.q.fill_normal(rng);
  vl.k.fill_normal(rng);
  vl.v.fill_normal(rng);
  AttentionParams s;
  s.causal = true;
  const Result rv = run(vl, s);

  // Varlen Q against a batched cache with fill levels: the same keys.
  Problem vb;
  vb.q = vl.q;
  vb.out = HostTensor(DType::kF32, {total_q, hq, dv});
  vb.lse = HostTensor(DType::kF32, {hq, total_q});
  vb.cu_q = int_tensor({batch + 1}, cq);
  vb.k = HostTensor(DType::kF32, {batch, cap, hkv, d});
  vb.v = HostTensor(DType::kF32, {batch, cap, hkv, dv});
  vb.k.fill_normal(rng);
  vb.v.fill_normal(rng);
  vb.seqlens_k = int_tensor({batch}, lk);
  for (int64_t b = 0; b < batch; ++b) {
    for_each_index({lk[static_cast<size_t>(b)], hkv, d}, [&](const std::vector<int64_t>& i) {
      vb.k.set({b, i[0], i[1], i[2]}, vl.k.at({ck[static_cast<size_t>(b)] + i[0], i[1], i[2]}));  // token row cu_k[b] + j
      vb.v.set({b, i[0], i[1], i[2]}, vl.v.at({ck[static_cast<size_t>(b)] + i[0], i[1], i[2]}));
    });
  }
  const Result rvb = run(vb, s);
  EXPECT_EQ(rvb.o, rv.o);
  EXPECT_EQ(rvb.lse, rv.lse);

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t nq = lq[static_cast<size_t>(b)], nk = lk[static_cast<size_t>(b)];
    Problem one = batched(rng, 1, nq, nk, hq, hkv, d, dv);
    for_each_index({nq, hq, d}, [&](const std::vector<int64_t>& i) { one.q.set({0, i[0], i[1], i[2]}, vl.q.at({cq[static_cast<size_t>(b)] + i[0], i[1], i[2]})); });
    for_each_index({nk, hkv, d}, [&](const std::vector<int64_t>& i) {
      one.k.set({0, i[0], i[1], i[2]}, vl.k.at({ck[static_cast<size_t>(b)] + i[0], i[1], i[2]}));
      one.v.set({0, i[0], i[1], i[2]}, vl.v.at({ck[static_cast<size_t>(b)] + i[0], i[1], i[2]}));
    });
    const Result r1 = run(one, s);
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        EXPECT_EQ(o_row(r1, i, h, hq, dv), o_row(rv, cq[static_cast<size_t>(b)] + i, h, hq, dv));
        EXPECT_EQ(lse_at(r1, h, i, nq), lse_at(rv, h, cq[static_cast<size_t>(b)] + i, total_q));
      }
    }
  }
  // Sequence 3 has one query and no key: O = 0, LSE = -inf.
  EXPECT_EQ(lse_at(rv, 0, total_q - 1, total_q), -kInf);
}

TEST(AttentionReference, GqaEqualsMhaOnCopiedUpKv) {
  const std::pair<int64_t, int64_t> ratios[] = {{8, 4}, {8, 2}, {64, 8}, {32, 2}, {8, 1}, {12, 4}};
  for (const auto& [hq, hkv] : ratios) {
    SCOPED_TRACE(std::to_string(hq) + "/" + std::to_string(hkv));
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      std::mt19937_64 rng(static_cast<uint64_t>(hq * 100 + hkv));
      const int64_t sq = 5, sk = 9, d = 32, dv = 32;
      Problem gqa = batched(rng, 1, sq, sk, hq, hkv, d, dv, dtype);
      Problem mha = batched(rng, 1, sq, sk, hq, hq, d, dv, dtype);
      mha.q = gqa.q;
      const int64_t group = hq / hkv;
      for_each_index({1, sk, hq, d}, [&](const std::vector<int64_t>& i) {
        mha.k.set(i, gqa.k.at({i[0], i[1], i[2] / group, i[3]}));  // MHA head h holds KV head h / group
        mha.v.set(i, gqa.v.at({i[0], i[1], i[2] / group, i[3]}));
      });
      AttentionParams s;
      s.causal = true;
      run(gqa, s);
      run(mha, s);
      EXPECT_TRUE(bitwise_equal(gqa.out, mha.out));
      EXPECT_TRUE(bitwise_equal(gqa.lse, mha.lse));
    }
  }
}

TEST(AttentionReference, SplitPartialsCombineToWhole) {
  std::mt19937_64 rng(5);
  const int64_t batch = 2, sq = 6, sk = 23, hq = 4, hkv = 2, d = 32, dv = 32;
  Problem pr = batched(rng, batch, sq, sk, hq, hkv, d, dv);
  pr.seqlens_k = int_tensor({batch}, {23, 11});
  AttentionParams s = pr.bind();
  s.causal = true;
  s.window_left = 15;  // some rows of sequence 0 see nothing in the first shard
  std::vector<double> whole_o, whole_lse;
  ASSERT_TRUE(reference_attention_fp64(s, 0, sk, &whole_o, &whole_lse).ok());
  const std::vector<std::vector<int64_t>> shardings = {
      {0, 23}, {0, 8, 16, 23}, {0, 1, 17, 23}, {0, 5, 5, 100}};  // boundaries; includes an empty shard
  for (const auto& bounds : shardings) {
    std::vector<AttentionPartial> parts;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      AttentionPartial part;
      ASSERT_TRUE(reference_attention_fp64(s, bounds[i], bounds[i + 1], &part.o, &part.lse).ok());
      parts.push_back(std::move(part));
    }
    std::vector<double> o, lse;
    combine_partials(parts, batch * sq, hq, dv, &o, &lse);
    EXPECT_LT(max_abs_error(o, whole_o), 1e-12) << bounds.size() - 1 << " shards";
    ASSERT_EQ(lse.size(), whole_lse.size());
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], whole_lse[i], 1e-12);
  }
  // All-empty partials merge to O = 0, LSE = -inf.
  AttentionPartial empty{std::vector<double>(whole_o.size(), 0.0), std::vector<double>(whole_lse.size(), -kInf)};
  std::vector<double> o, lse;
  combine_partials({empty, empty}, batch * sq, hq, dv, &o, &lse);
  for (double x : o) EXPECT_EQ(x, 0.0);
  for (double x : lse) EXPECT_EQ(x, -kInf);
}

// Tiny cases whose answers are written out by hand: B = 1, one head, D = Dv = 32 with only channel
// 0 of q/k/v non-zero and channel 1 of v equal to 1 (so O[.., 1] = 1 exactly when a key is seen).
Problem tiny(const std::vector<double>& qv, const std::vector<double>& kv, const std::vector<double>& vv) {
  const auto sq = static_cast<int64_t>(qv.size()), sk = static_cast<int64_t>(kv.size());
  Problem pr;
  pr.q = HostTensor(DType::kF32, {1, sq, 1, 32});
  pr.k = HostTensor(DType::kF32, {1, sk, 1, 32});
  pr.v = HostTensor(DType::kF32, {1, sk, 1, 32});
  pr.out = HostTensor(DType::kF32, {1, sq, 1, 32});
  pr.lse = HostTensor(DType::kF32, {1, sq});
  for (int64_t i = 0; i < sq; ++i) pr.q.set({0, i, 0, 0}, qv[static_cast<size_t>(i)]);
  for (int64_t j = 0; j < sk; ++j) {
    pr.k.set({0, j, 0, 0}, kv[static_cast<size_t>(j)]);
    pr.v.set({0, j, 0, 0}, vv[static_cast<size_t>(j)]);
    pr.v.set({0, j, 0, 1}, 1.0);
  }
  return pr;
}

// Row i sees exactly the keys `seen`; scores are scale * q_i * k_j, optionally soft-capped.
void expect_row(const Problem& pr, const Result& r, int64_t i, const std::vector<int64_t>& seen, double scale,
                double cap = 0.0) {
  SCOPED_TRACE("row " + std::to_string(i));
  const int64_t sq = pr.q.shape()[1];
  if (seen.empty()) {
    for (int64_t c = 0; c < 32; ++c) EXPECT_EQ(r.o[static_cast<size_t>(i * 32 + c)], 0.0);
    EXPECT_EQ(r.lse[static_cast<size_t>(i)], -kInf);
    return;
  }
  double num = 0.0, den = 0.0;
  for (int64_t j : seen) {
    double s = scale * pr.q.at({0, i, 0, 0}) * pr.k.at({0, j, 0, 0});
    if (cap > 0.0) s = cap * std::tanh(s / cap);
    num += std::exp(s) * pr.v.at({0, j, 0, 0});
    den += std::exp(s);
  }
  EXPECT_NEAR(r.o[static_cast<size_t>(i * 32)], num / den, 1e-6);  // out [1, Sq, 1, 32]
  EXPECT_NEAR(r.o[static_cast<size_t>(i * 32 + 1)], 1.0, 1e-6);
  EXPECT_NEAR(r.lse[static_cast<size_t>(i)], std::log(den), 1e-6);
  (void)sq;
}

TEST(AttentionReference, CausalBottomRightWhenSqGreaterThanSk) {
  Problem pr = tiny({0.5, -1.0, 2.0}, {1.0, 0.3}, {2.0, -3.0});
  AttentionParams s;
  s.causal = true;
  s.softmax_scale = 1.f;
  const Result r = run(pr, s);
  // Sq = 3, Sk = 2: query i sits at key position i - 1.
  expect_row(pr, r, 0, {}, 1.0);
  expect_row(pr, r, 1, {0}, 1.0);
  expect_row(pr, r, 2, {0, 1}, 1.0);
}

TEST(AttentionReference, CausalBottomRightWhenSqLessThanSk) {
  Problem pr = tiny({0.5, -1.0}, {1.0, 0.3, -0.7, 1.5}, {2.0, -3.0, 0.25, 4.0});
  AttentionParams s;
  s.causal = true;
  s.softmax_scale = 1.f;
  const Result r = run(pr, s);
  // Sq = 2, Sk = 4: query i sits at key position i + 2.
  expect_row(pr, r, 0, {0, 1, 2}, 1.0);
  expect_row(pr, r, 1, {0, 1, 2, 3}, 1.0);
}

TEST(AttentionReference, SlidingWindow) {
  Problem pr = tiny({0.5, -1.0, 2.0, 1.0, 3.0}, {1.0, 0.3, -0.7, 1.5, 0.2}, {2.0, -3.0, 0.25, 4.0, -1.0});
  const double scale = 1.0 / std::sqrt(32.0);  // default softmax_scale
  AttentionParams s;
  s.window_left = 1;
  s.window_right = 0;
  Result r = run(pr, s);
  expect_row(pr, r, 0, {0}, scale);
  expect_row(pr, r, 1, {0, 1}, scale);
  expect_row(pr, r, 4, {3, 4}, scale);
  s.window_left = 0;
  s.window_right = 2;
  r = run(pr, s);
  expect_row(pr, r, 0, {0, 1, 2}, scale);
  expect_row(pr, r, 3, {3, 4}, scale);
  expect_row(pr, r, 4, {4}, scale);
  // Causal with a left window, Sq < Sk: query i at position i + 3 sees [i + 1, i + 3].
  Problem dec = tiny({0.5, -1.0}, {1.0, 0.3, -0.7, 1.5, 0.2}, {2.0, -3.0, 0.25, 4.0, -1.0});
  s = {};
  s.causal = true;
  s.window_left = 2;
  r = run(dec, s);
  expect_row(dec, r, 0, {1, 2, 3}, scale);
  expect_row(dec, r, 1, {2, 3, 4}, scale);
}

TEST(AttentionReference, Softcap) {
  Problem pr = tiny({3.0, -2.0}, {2.0, -1.0, 0.5}, {1.0, 2.0, -4.0});
  AttentionParams s;
  s.softmax_scale = 0.75f;
  s.softcap = 0.5f;
  const Result r = run(pr, s);
  expect_row(pr, r, 0, {0, 1, 2}, 0.75, 0.5);
  expect_row(pr, r, 1, {0, 1, 2}, 0.75, 0.5);
}

TEST(AttentionReference, RowWithNoVisibleKeyIsZeroWithMinusInfLse) {
  std::mt19937_64 rng(6);
  // Causal Sq = 5 > Sk = 2: rows 0..2 see nothing. Plus a batch row with an empty cache.
  Problem pr = batched(rng, 2, 5, 4, 2, 1, 32, 32);
  pr.seqlens_k = int_tensor({2}, {2, 0});
  AttentionParams s;
  s.causal = true;
  const Result r = run(pr, s);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 5; ++i) {
      const bool empty = b == 1 || i < 3;
      for (int64_t h = 0; h < 2; ++h) {
        const std::vector<double> row = o_row(r, b * 5 + i, h, 2, 32);
        if (empty) {
          EXPECT_EQ(row, std::vector<double>(32, 0.0));
          EXPECT_EQ(lse_at(r, h, b * 5 + i, 10), -kInf);
        } else {
          EXPECT_TRUE(std::isfinite(lse_at(r, h, b * 5 + i, 10)));
        }
      }
    }
  }
}

TEST(AttentionReference, DvDiffersFromD) {
  std::mt19937_64 rng(7);
  const int64_t batch = 2, sq = 4, sk = 7, hq = 4, hkv = 2, d = 64, dv = 128;
  Problem whole = batched(rng, batch, sq, sk, hq, hkv, d, dv);
  AttentionParams s;
  s.causal = true;
  const Result rw = run(whole, s);
  // Each half of V's channels, as a strided view into the same buffer, gives that half of O.
  for (int64_t half = 0; half < 2; ++half) {
    Problem part = batched(rng, batch, sq, sk, hq, hkv, d, dv / 2);
    part.q = whole.q;
    part.k = whole.k;
    for_each_index(part.v.shape(), [&](const std::vector<int64_t>& i) {
      part.v.set(i, whole.v.at({i[0], i[1], i[2], half * (dv / 2) + i[3]}));
    });
    const Result rp = run(part, s);
    EXPECT_EQ(rp.lse, rw.lse);
    for_each_index(part.out.shape(), [&](const std::vector<int64_t>& i) {
      EXPECT_EQ(part.out.at(i), whole.out.at({i[0], i[1], i[2], half * (dv / 2) + i[3]}));
    });
  }
}

TEST(AttentionReference, StridedViewsEqualContiguousBatched) {
  std::mt19937_64 rng(8);
  const int64_t batch = 2, sq = 5, sk = 9, hq = 4, hkv = 2, d = 32, dv = 64;
  Problem con = batched(rng, batch, sq, sk, hq, hkv, d, dv);
  con.seqlens_k = int_tensor({batch}, {9, 6});
  AttentionParams s;
  s.causal = true;
  const Result rc = run(con, s);
  Problem st;
  st.q = restride(con.q, padded_strides(con.q.shape(), 3));
  st.k = restride(con.k, {sk * hkv * d, d, sk * d, 1});  // heads-major storage [B, Hkv, Sk, D] seen as [B, Sk, Hkv, D]
  st.v = restride(con.v, padded_strides(con.v.shape(), 1));
  st.out = HostTensor(DType::kF32, con.out.shape(), padded_strides(con.out.shape(), 2));
  st.lse = HostTensor(DType::kF32, con.lse.shape(), padded_strides(con.lse.shape(), 5));
  st.seqlens_k = con.seqlens_k;
  const Result rs = run(st, s);
  EXPECT_EQ(rs.o, rc.o);
  EXPECT_EQ(rs.lse, rc.lse);
}

TEST(AttentionReference, StridedViewsEqualContiguousVarlenQPagedKv) {
  std::mt19937_64 rng(9);
  const std::vector<int64_t> lq = {3, 1, 4}, lk = {20, 1, 33};
  const int64_t batch = 3, hq = 8, hkv = 2, d = 32, dv = 32, page_size = 16, cap = 33;
  const std::vector<int64_t> cq = prefix_sums(lq);
  const int64_t total_q = cq.back();
  Problem con;
  con.q = HostTensor(DType::kF32, {total_q, hq, d});
  con.q.fill_normal(rng);
  con.out = HostTensor(DType::kF32, {total_q, hq, dv});
  con.lse = HostTensor(DType::kF32, {hq, total_q});
  con.cu_q = int_tensor({batch + 1}, cq);
  con.seqlens_k = int_tensor({batch}, lk);
  HostTensor cache_k(DType::kF32, {batch, cap, hkv, d}), cache_v(DType::kF32, {batch, cap, hkv, dv});
  cache_k.fill_normal(rng);
  cache_v.fill_normal(rng);
  HostTensor table_v;
  std::mt19937_64 rng_v = rng;  // same shuffle for V so both follow one block table
  page_into(rng, cache_k, lk, page_size, &con.k, &con.block_table);
  page_into(rng_v, cache_v, lk, page_size, &con.v, &table_v);
  ASSERT_TRUE(bitwise_equal(con.block_table, table_v));
  AttentionParams s;
  s.causal = true;
  const Result rc = run(con, s);
  Problem st;
  st.cu_q = con.cu_q;
  st.seqlens_k = con.seqlens_k;
  st.q = restride(con.q, padded_strides(con.q.shape(), 2));
  st.k = restride(con.k, padded_strides(con.k.shape(), 1));
  st.v = restride(con.v, padded_strides(con.v.shape(), 3));
  st.out = HostTensor(DType::kF32, con.out.shape(), padded_strides(con.out.shape(), 4));
  st.lse = HostTensor(DType::kF32, con.lse.shape(), padded_strides(con.lse.shape(), 1));
  st.block_table = restride(con.block_table, padded_strides(con.block_table.shape(), 2));
  const Result rs = run(st, s);
  EXPECT_EQ(rs.o, rc.o);
  EXPECT_EQ(rs.lse, rc.lse);
}

TEST(AttentionReference, OutputsFullyWrittenAndGuardsIntact) {
  std::mt19937_64 rng(10);
  Problem pr = batched(rng, 2, 7, 7, 4, 4, 32, 32, DType::kBF16);
  AttentionParams s;
  s.causal = true;
  const Result r = run(pr, s);  // run() poisons out/lse with NaN and checks both properties
  EXPECT_TRUE(all_finite(r.o));
  EXPECT_TRUE(all_finite(r.lse));
  EXPECT_TRUE(pr.out.guards_intact());
  EXPECT_TRUE(pr.lse.guards_intact());
  // Without lse the op still writes O fully.
  pr.lse = HostTensor();
  const Result r2 = run(pr, s);
  EXPECT_EQ(r2.o, r.o);
}

}  // namespace
}  // namespace groupattn::test
