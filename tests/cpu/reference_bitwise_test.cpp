// The fp64 reference's session-11 speed-up changed how its loops walk memory, not its arithmetic:
// this runs the reference as it was (reference_old.cpp, verbatim) and as it is on a seeded random
// matrix of problems and requires O and LSE to be equal byte for byte (memcmp). The matrix: MHA,
// GQA, MQA and non-power-of-two groups; D and Dv from every accepted head dim, Dv != D too; bf16,
// f16, f32, and fp8 K/V (bf16/f16 q) with per-(sequence, KV head) or per-(page, KV head) scales;
// batched Q or varlen Q; batched K/V (with and without seqlens_k), varlen K/V, paged K/V (page
// sizes 1, 16, 64 and odd ones, shuffled pages, spare pages); strided views; causal (bottom-right,
// Sq < Sk and Sq > Sk), windows, softcap, explicit scale; empty sequences and rows that see no key;
// partial-output mode and key sub-ranges; every K/V row no key reads (and every gap of a strided
// view) NaN; and cases whose K/V hold raw bit patterns (every finite code, subnormals included).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention/reference.h"
#include "common/host_tensor.h"
#include "core/dtype.h"
#include "cpu/reference_old.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

enum class Kv { kBatched, kBatchedSeqlens, kVarlen, kPaged };

struct Spec {
  int64_t hq = 8, hkv = 2, d = 128, dv = 128;
  DType dtype = DType::kBF16;  // q and out (and k/v unless fp8)
  bool fp8 = false, scale_per_page = false, scale_shared = false;
  bool varlen_q = false;
  Kv kv = Kv::kBatched;
  int64_t page_size = 16;
  int64_t pad = 0;  // extra elements per non-last dim: strided views
  bool causal = false, sharded = false, raw_bits = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f, softmax_scale = NAN;
  std::vector<int64_t> q_lens, k_lens;  // per sequence (batched Q: all equal)
  int64_t key_begin = 0, key_end = std::numeric_limits<int64_t>::max();

  std::string describe() const {
    static const char* kv_names[] = {"batched", "batched+seqlens_k", "varlen", "paged"};
    std::ostringstream s;
    s << hq << "/" << hkv << " d" << d << " dv" << dv << " " << dtype_name(dtype) << (fp8 ? " fp8-kv" : "")
      << (scale_per_page ? " scale/page" : "") << (scale_shared ? " scale-stride0" : "")
      << (varlen_q ? " varlen-q" : " batched-q") << " kv=" << kv_names[static_cast<int>(kv)];
    if (kv == Kv::kPaged) s << " page" << page_size;
    s << " pad" << pad << (causal ? " causal" : "") << " win" << window_left << "," << window_right << " cap"
      << softcap << " scale" << softmax_scale << (sharded ? " sharded" : "") << (raw_bits ? " raw-bits" : "")
      << " keys[" << key_begin << "," << key_end << ") q_lens";
    for (int64_t l : q_lens) s << " " << l;
    s << " k_lens";
    for (int64_t l : k_lens) s << " " << l;
    return s.str();
  }
};

// Row-major strides with `pad` extra elements in every non-last dimension.
std::vector<int64_t> padded_strides(const std::vector<int64_t>& shape, int64_t pad) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * (shape[d + 1] + pad);
  return st;
}

HostTensor poisoned(DType dtype, const std::vector<int64_t>& shape, int64_t pad) {
  HostTensor t(dtype, shape, padded_strides(shape, pad));
  t.poison();
  return t;
}

HostTensor int_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  HostTensor t(DType::kI32, std::move(shape));
  size_t n = 0;
  for_each_index(t.shape(),
                 [&](const std::vector<int64_t>& i) { t.set(i, static_cast<double>(values[n++])); });
  return t;
}

// A finite value of `dtype`: normal(0, 1), or (raw_bits) a random finite bit pattern of the dtype.
double draw(std::mt19937_64& rng, DType dtype, bool raw_bits) {
  if (!raw_bits || dtype == DType::kF32) return std::normal_distribution<double>(0.0, 1.0)(rng);
  for (;;) {
    const auto bits = static_cast<uint32_t>(rng());
    double x = 0.0;
    if (dtype == DType::kF8E4M3)
      x = e4m3_bits_to_float(static_cast<uint8_t>(bits));
    else if (dtype == DType::kF16)
      x = half_bits_to_float(static_cast<uint16_t>(bits));
    else
      x = bf16_bits_to_float(static_cast<uint16_t>(bits));
    // bf16 codes beyond ~1e30 would overflow the dot products: keep them but not that large.
    if (std::isfinite(x) && std::fabs(x) < 1e30) return x;
  }
}

// Writes one row (the last dim) of t at leading index `lead` with drawn values.
void fill_row(HostTensor& t, std::vector<int64_t> lead, std::mt19937_64& rng, bool raw_bits) {
  const int64_t n = t.shape().back();
  lead.push_back(0);
  for (int64_t c = 0; c < n; ++c) {
    lead.back() = c;
    t.set(lead, draw(rng, t.dtype(), raw_bits));
  }
}

struct Built {
  HostTensor q, k, v, out, cu_q, cu_k, seqlens_k, block_table, k_scale, v_scale, shard_offset, total_len;
  AttentionParams p;
};

// The problem of `s`, every K/V row that no key of a sequence addresses (and every gap) NaN.
void build(const Spec& s, std::mt19937_64& rng, Built* x) {
  const auto batch = static_cast<int64_t>(s.k_lens.size());
  const DType kv_dtype = s.fp8 ? DType::kF8E4M3 : s.dtype;
  // Q / out.
  std::vector<int64_t> cu_q(1, 0);
  for (int64_t l : s.q_lens) cu_q.push_back(cu_q.back() + l);
  const int64_t q_spare = s.varlen_q ? 2 : 0;  // varlen Q rows past cu_seqlens_q[B]: never read
  std::vector<int64_t> q_shape = s.varlen_q ? std::vector<int64_t>{cu_q.back() + q_spare, s.hq, s.d}
                                            : std::vector<int64_t>{batch, s.q_lens[0], s.hq, s.d};
  std::vector<int64_t> out_shape = q_shape;
  out_shape.back() = s.dv;
  x->q = poisoned(s.dtype, q_shape, s.pad);
  x->out = poisoned(s.dtype, out_shape, 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < s.q_lens[static_cast<size_t>(b)]; ++i) {
      for (int64_t h = 0; h < s.hq; ++h) {
        fill_row(x->q,
                 s.varlen_q ? std::vector<int64_t>{cu_q[static_cast<size_t>(b)] + i, h}
                            : std::vector<int64_t>{b, i, h},
                 rng, false);
      }
    }
  }
  if (s.varlen_q) x->cu_q = int_tensor({batch + 1}, cu_q);

  // K/V: where key j of sequence b lives, as a leading index (the head and channel follow).
  std::vector<std::vector<int64_t>> where(static_cast<size_t>(batch));  // filled per layout below
  auto key_lead = [&](int64_t b, int64_t j) -> std::vector<int64_t> {
    switch (s.kv) {
      case Kv::kVarlen:
        return {where[static_cast<size_t>(b)][0] + j};
      case Kv::kPaged: {
        const int64_t page = where[static_cast<size_t>(b)][static_cast<size_t>(j / s.page_size)];
        return {page, j % s.page_size};
      }
      default:
        return {b, j};
    }
  };
  std::vector<int64_t> lead_shape;
  int64_t num_pages = 0;
  if (s.kv == Kv::kVarlen) {
    std::vector<int64_t> cu_k(1, 0);
    for (int64_t l : s.k_lens) cu_k.push_back(cu_k.back() + l);
    for (int64_t b = 0; b < batch; ++b) where[static_cast<size_t>(b)] = {cu_k[static_cast<size_t>(b)]};
    lead_shape = {cu_k.back() + 3};  // 3 spare token rows past cu_seqlens_k[B]
    x->cu_k = int_tensor({batch + 1}, cu_k);
  } else if (s.kv == Kv::kPaged) {
    int64_t max_pages = 1;
    for (int64_t l : s.k_lens) max_pages = std::max(max_pages, (l + s.page_size - 1) / s.page_size);
    max_pages += 1;                     // a column no sequence uses
    num_pages = batch * max_pages + 2;  // spare pages
    std::vector<int64_t> order(static_cast<size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> table(static_cast<size_t>(batch * max_pages), -1);  // unused entries: -1
    size_t next = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t used = (s.k_lens[static_cast<size_t>(b)] + s.page_size - 1) / s.page_size;
      for (int64_t c = 0; c < used; ++c) {
        table[static_cast<size_t>(b * max_pages + c)] = order[next];
        where[static_cast<size_t>(b)].push_back(order[next++]);
      }
    }
    lead_shape = {num_pages, s.page_size};
    x->block_table = int_tensor({batch, max_pages}, table);
    x->seqlens_k = int_tensor({batch}, s.k_lens);
  } else {
    int64_t sk = 0;
    for (int64_t l : s.k_lens) sk = std::max(sk, l);
    if (s.kv == Kv::kBatchedSeqlens) {
      sk += 2;  // rows past every fill level
      x->seqlens_k = int_tensor({batch}, s.k_lens);
    }
    lead_shape = {batch, sk};
  }
  std::vector<int64_t> k_shape = lead_shape, v_shape = lead_shape;
  k_shape.insert(k_shape.end(), {s.hkv, s.d});
  v_shape.insert(v_shape.end(), {s.hkv, s.dv});
  x->k = poisoned(kv_dtype, k_shape, s.pad);
  x->v = poisoned(kv_dtype, v_shape, s.pad);
  for (int64_t b = 0; b < batch; ++b) {
    // Batched K/V without seqlens_k: every row of the cache is a key.
    const int64_t live = s.kv == Kv::kBatched ? lead_shape[1] : s.k_lens[static_cast<size_t>(b)];
    for (int64_t j = 0; j < live; ++j) {
      for (int64_t hk = 0; hk < s.hkv; ++hk) {
        std::vector<int64_t> lead = key_lead(b, j);
        lead.push_back(hk);
        fill_row(x->k, lead, rng, s.raw_bits);
        fill_row(x->v, lead, rng, s.raw_bits);
      }
    }
  }
  if (s.fp8) {
    const int64_t rows = s.scale_per_page ? num_pages : batch;
    const std::vector<int64_t> shape = {rows, s.hkv};
    // stride 0 on the first dim: one scale per KV head shared by every sequence
    const std::vector<int64_t> strides =
        s.scale_shared ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{s.hkv, 1};
    x->k_scale = HostTensor(DType::kF32, shape, strides);
    x->v_scale = HostTensor(DType::kF32, shape, strides);
    x->k_scale.fill_uniform(rng, 0.25, 4.0);
    x->v_scale.fill_uniform(rng, 0.25, 4.0);
  }
  if (s.sharded) {
    std::vector<int64_t> offset, total;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t local = s.kv == Kv::kBatched ? lead_shape[1] : s.k_lens[static_cast<size_t>(b)];
      const int64_t before = static_cast<int64_t>(rng() % 40), after = static_cast<int64_t>(rng() % 40);
      offset.push_back(before);
      total.push_back(before + local + after);
    }
    x->shard_offset = int_tensor({batch}, offset);
    x->total_len = int_tensor({batch}, total);
  }
  AttentionParams& p = x->p;
  p = AttentionParams{};
  p.q = x->q.view();
  p.k = x->k.view();
  p.v = x->v.view();
  p.out = x->out.view();
  p.cu_seqlens_q = x->cu_q.view();
  p.cu_seqlens_k = x->cu_k.view();
  p.seqlens_k = x->seqlens_k.view();
  p.block_table = x->block_table.view();
  p.k_scale = x->k_scale.view();
  p.v_scale = x->v_scale.view();
  p.kv_scale_per_page = s.scale_per_page;
  p.kv_shard_offset = x->shard_offset.view();
  p.kv_total_len = x->total_len.view();
  p.causal = s.causal;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.softcap = s.softcap;
  p.softmax_scale = s.softmax_scale;
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> options) {
  return *(options.begin() + static_cast<std::ptrdiff_t>(rng() % options.size()));
}

// A random case; `n` (the case number) steers a few features so each appears regularly.
Spec random_spec(std::mt19937_64& rng, int n) {
  Spec s;
  const auto heads = pick<std::pair<int64_t, int64_t>>(
      rng, {{4, 4}, {8, 2}, {8, 1}, {12, 4}, {6, 3}, {16, 2}, {5, 1}, {32, 4}});
  s.hq = heads.first;
  s.hkv = heads.second;
  s.d = pick<int64_t>(rng, {64, 128, 256, 64, 128, 256, 32, 96, 192});
  s.dv = rng() % 3 == 0 ? pick<int64_t>(rng, {32, 64, 128, 256}) : s.d;
  s.kv = static_cast<Kv>(n % 4);
  s.fp8 = n % 5 == 1;
  s.dtype =
      s.fp8 ? pick(rng, {DType::kBF16, DType::kF16}) : pick(rng, {DType::kBF16, DType::kF16, DType::kF32});
  s.scale_per_page = s.fp8 && s.kv == Kv::kPaged && rng() % 2 == 0;
  s.scale_shared = s.fp8 && !s.scale_per_page && rng() % 3 == 0;
  s.varlen_q = rng() % 2 == 0;
  s.page_size = pick<int64_t>(rng, {1, 16, 64, 5, 13});
  s.pad = rng() % 3 == 0 ? pick<int64_t>(rng, {1, 8}) : 0;
  s.causal = rng() % 2 == 0;
  if (rng() % 3 == 0) s.window_left = static_cast<int64_t>(rng() % 48);
  if (rng() % 4 == 0) s.window_right = static_cast<int64_t>(rng() % 16);
  if (rng() % 3 == 0) s.softcap = pick(rng, {5.f, 15.f, 30.f});
  if (rng() % 3 == 0) s.softmax_scale = pick(rng, {0.05f, 0.125f, 0.3f});
  s.sharded = n % 7 == 3;
  s.raw_bits = n % 9 == 5;
  const int64_t batch = 1 + static_cast<int64_t>(rng() % 4);
  const bool decode = rng() % 2 == 0;
  const int64_t sq = decode ? 1 + static_cast<int64_t>(rng() % 4) : 1 + static_cast<int64_t>(rng() % 40);
  for (int64_t b = 0; b < batch; ++b) {
    // Empty sequences (q or k) now and then; Sq > Sk and Sq < Sk both.
    const int64_t ql =
        s.varlen_q ? (rng() % 6 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(sq))) : sq;
    const int64_t kl =
        rng() % 7 == 0 ? static_cast<int64_t>(rng() % 3) : static_cast<int64_t>(rng() % (decode ? 300 : 90));
    s.q_lens.push_back(ql);
    s.k_lens.push_back(kl);
  }
  if (rng() % 5 == 0) {  // a key sub-range, as split-KV and the partial tests use
    s.key_begin = static_cast<int64_t>(rng() % 40);
    s.key_end = s.key_begin + static_cast<int64_t>(rng() % 200);
  }
  return s;
}

bool bytes_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Runs old and new on `s`; returns the number of rows that saw a key (0: the case tested little).
int64_t expect_bitwise(const Spec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Built x;
  build(s, rng, &x);
  std::vector<double> o_new, lse_new, o_old, lse_old;
  const Status st_new = reference_attention_fp64(x.p, s.key_begin, s.key_end, &o_new, &lse_new);
  const Status st_old =
      reference_old::reference_attention_fp64(x.p, s.key_begin, s.key_end, &o_old, &lse_old);
  EXPECT_TRUE(st_new.ok()) << st_new.message() << " -- " << s.describe();
  EXPECT_TRUE(st_old.ok()) << st_old.message() << " -- " << s.describe();
  EXPECT_TRUE(bytes_equal(o_new, o_old)) << "O differs: " << s.describe();
  EXPECT_TRUE(bytes_equal(lse_new, lse_old)) << "LSE differs: " << s.describe();
  // Stale rows are NaN: a finite result shows no key outside the sequences' was read.
  int64_t seen = 0;
  for (double l : lse_new) {
    EXPECT_TRUE(std::isfinite(l) || l == -std::numeric_limits<double>::infinity()) << s.describe();
    seen += std::isfinite(l) ? 1 : 0;
  }
  for (double o : o_new) EXPECT_TRUE(std::isfinite(o)) << s.describe();
  return seen;
}

TEST(ReferenceBitwise, RandomMatrixOldEqualsNew) {
  constexpr int kCases = 160;
  std::mt19937_64 rng(20261130);
  int64_t rows_seen = 0;
  int cases_with_keys = 0;
  for (int n = 0; n < kCases; ++n) {
    const Spec s = random_spec(rng, n);
    const int64_t seen = expect_bitwise(s, rng());
    rows_seen += seen;
    cases_with_keys += seen > 0 ? 1 : 0;
    if (HasFailure()) break;  // one case's report is enough to start from
  }
  EXPECT_GT(cases_with_keys, kCases * 3 / 4);  // the matrix is not mostly empty rows
  RecordProperty("rows_seen", static_cast<int>(rows_seen));
}

// The features the random matrix might draw rarely, each at least once: every page size with
// shuffled pages, fp8 with per-page scales, causal with Sq > Sk (rows that see no key) and Sq < Sk,
// MQA 8/1 d128 and 32/2 d256 (the GPU tier's shapes), raw bit patterns of every dtype.
TEST(ReferenceBitwise, NamedCasesOldEqualsNew) {
  std::vector<Spec> specs;
  for (int64_t page : {1, 16, 64, 7}) {
    Spec s;
    s.kv = Kv::kPaged;
    s.page_size = page;
    s.hq = 8, s.hkv = 1, s.d = 128, s.dv = 128;
    s.q_lens = {1, 1, 1};
    s.k_lens = {130, 0, 67};
    specs.push_back(s);
  }
  {
    Spec s;  // fp8, per-page scales, f16 q, strided
    s.kv = Kv::kPaged;
    s.fp8 = true;
    s.scale_per_page = true;
    s.dtype = DType::kF16;
    s.page_size = 16;
    s.pad = 8;
    s.hq = 64, s.hkv = 8, s.d = 128, s.dv = 128;
    s.q_lens = {8, 8};
    s.k_lens = {100, 37};
    s.causal = true;
    specs.push_back(s);
  }
  for (int64_t sq : {40, 3}) {
    Spec s;  // causal bottom-right, Sq > Sk (first rows see nothing) and Sq < Sk
    s.causal = true;
    s.hq = 32, s.hkv = 2, s.d = 256, s.dv = 256;
    s.q_lens = {sq, sq};
    s.k_lens = {25, 25};
    s.kv = Kv::kBatched;
    s.softcap = 30.f;
    s.window_left = 9;
    specs.push_back(s);
  }
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    Spec s;  // raw bit patterns: subnormals and extremes through the decoders
    s.dtype = dt;
    s.raw_bits = true;
    s.hq = 4, s.hkv = 2, s.d = 64, s.dv = 32;
    s.q_lens = {2};
    s.k_lens = {300};
    specs.push_back(s);
  }
  {
    Spec s;
    s.fp8 = true;
    s.raw_bits = true;
    s.hq = 4, s.hkv = 1, s.d = 64, s.dv = 64;
    s.q_lens = {2};
    s.k_lens = {300};
    s.kv = Kv::kBatchedSeqlens;
    specs.push_back(s);
  }
  uint64_t seed = 11;
  for (const Spec& s : specs) {
    expect_bitwise(s, seed++);
    if (HasFailure()) break;
  }
}

// Not part of the tier (disabled): wall and CPU seconds of the old and the new reference on shapes
// like the GPU tier's heaviest, for docs/TESTING.md. Run with
//   groupattn_tests_cpu --gtest_also_run_disabled_tests --gtest_filter='ReferenceBitwise.DISABLED_*'
// K/V rows are filled only where keys read them (the rest stays zero), with a cheap generator.
struct TimingCase {
  const char* name;
  int64_t hq, hkv, d, batch, sq, sk;  // sk: cache rows (batched) or longest sequence (paged)
  DType dtype;
  bool fp8, paged, causal, spread;  // spread: seqlens_k spread evenly over 1..sk
};

void cheap_fill_rows(HostTensor& t, int64_t rows_per_lead, const std::vector<int64_t>& live,
                     uint64_t* state) {
  // t is contiguous [lead, rows, H, D]; fills rows [0, live[lead]) of every lead index.
  const auto esize = static_cast<int64_t>(dtype_size(t.dtype()));
  const int64_t row_elems = t.shape()[2] * t.shape()[3];
  for (size_t l = 0; l < live.size(); ++l) {
    const int64_t first = static_cast<int64_t>(l) * rows_per_lead * row_elems;
    for (int64_t e = 0; e < live[l] * row_elems; ++e) {
      *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;  // xorshift64
      const double u = static_cast<double>(*state >> 11) * 0x1p-53 * 4.0 - 2.0;
      store_from_double(t.view().data, t.dtype(), (first + e) * esize, u);
    }
  }
}

TEST(ReferenceBitwise, DISABLED_TimingOldVsNew) {
  const TimingCase cases[] = {
      {"8/1 d128 bf16 B24 Sq1, seqlens_k 1..32K (batched)", 8, 1, 128, 24, 1, 32768, DType::kBF16, false,
       false, false, true},
      {"32/2 d256 bf16 B8 Sq1, seqlens_k 1..16K (batched)", 32, 2, 256, 8, 1, 16384, DType::kBF16, false,
       false, false, true},
      {"64/8 d128 f16 q + fp8 KV paged16 B1 Sq8 x 8K", 64, 8, 128, 1, 8, 8192, DType::kF16, true, true, true,
       false},
      {"8/2 d128 bf16 prefill S2048 causal B1", 8, 2, 128, 1, 2048, 2048, DType::kBF16, false, false, true,
       false},
      {"16/16 d128 f32 prefill S512 causal B1 (MHA)", 16, 16, 128, 1, 512, 512, DType::kF32, false, false,
       true, false},
  };
  for (const TimingCase& tc : cases) {
    Built x;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    std::vector<int64_t> lens(static_cast<size_t>(tc.batch), tc.sk);
    if (tc.spread) {
      for (int64_t b = 0; b < tc.batch; ++b)
        lens[static_cast<size_t>(b)] =
            std::max<int64_t>(1, tc.sk * (b + 1) / tc.batch - static_cast<int64_t>(b % 3));
    }
    const DType kv_dtype = tc.fp8 ? DType::kF8E4M3 : tc.dtype;
    x.q = HostTensor(tc.dtype, {tc.batch, tc.sq, tc.hq, tc.d});
    x.out = HostTensor(tc.dtype, {tc.batch, tc.sq, tc.hq, tc.d});
    cheap_fill_rows(x.q, tc.sq, std::vector<int64_t>(static_cast<size_t>(tc.batch), tc.sq), &state);
    constexpr int64_t kPage = 16;
    if (tc.paged) {
      const int64_t per_seq = (tc.sk + kPage - 1) / kPage;
      std::vector<int64_t> table(static_cast<size_t>(tc.batch * per_seq));
      std::iota(table.begin(), table.end(), 0);
      std::mt19937_64 rng(1);
      std::shuffle(table.begin(), table.end(), rng);
      x.k = HostTensor(kv_dtype, {tc.batch * per_seq, kPage, tc.hkv, tc.d});
      x.v = HostTensor(kv_dtype, {tc.batch * per_seq, kPage, tc.hkv, tc.d});
      cheap_fill_rows(x.k, kPage, std::vector<int64_t>(static_cast<size_t>(tc.batch * per_seq), kPage),
                      &state);
      cheap_fill_rows(x.v, kPage, std::vector<int64_t>(static_cast<size_t>(tc.batch * per_seq), kPage),
                      &state);
      x.block_table = int_tensor({tc.batch, per_seq}, table);
      x.seqlens_k = int_tensor({tc.batch}, lens);
      x.k_scale = HostTensor(DType::kF32, {tc.batch * per_seq, tc.hkv});
      x.v_scale = HostTensor(DType::kF32, {tc.batch * per_seq, tc.hkv});
    } else {
      x.k = HostTensor(kv_dtype, {tc.batch, tc.sk, tc.hkv, tc.d});
      x.v = HostTensor(kv_dtype, {tc.batch, tc.sk, tc.hkv, tc.d});
      cheap_fill_rows(x.k, tc.sk, lens, &state);
      cheap_fill_rows(x.v, tc.sk, lens, &state);
      x.seqlens_k = int_tensor({tc.batch}, lens);
      if (tc.fp8) {
        x.k_scale = HostTensor(DType::kF32, {tc.batch, tc.hkv});
        x.v_scale = HostTensor(DType::kF32, {tc.batch, tc.hkv});
      }
    }
    if (tc.fp8) {
      x.k_scale.fill(0.75);
      x.v_scale.fill(1.5);
    }
    AttentionParams p;
    p.q = x.q.view();
    p.k = x.k.view();
    p.v = x.v.view();
    p.out = x.out.view();
    p.seqlens_k = x.seqlens_k.view();
    p.block_table = x.block_table.view();
    p.k_scale = x.k_scale.view();
    p.v_scale = x.v_scale.view();
    p.kv_scale_per_page = tc.fp8 && tc.paged;
    p.causal = tc.causal;
    std::vector<double> o_old, lse_old, o_new, lse_new;
    auto time = [&](auto&& fn, double* wall, double* cpu) {
      const auto w0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      ASSERT_TRUE(fn().ok());
      *cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      *wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    };
    const int64_t end = std::numeric_limits<int64_t>::max();
    double old_wall = 0, old_cpu = 0, new_wall = 0, new_cpu = 0;
    time([&] { return reference_old::reference_attention_fp64(p, 0, end, &o_old, &lse_old); }, &old_wall,
         &old_cpu);
    time([&] { return reference_attention_fp64(p, 0, end, &o_new, &lse_new); }, &new_wall, &new_cpu);
    EXPECT_TRUE(bytes_equal(o_old, o_new)) << tc.name;
    EXPECT_TRUE(bytes_equal(lse_old, lse_new)) << tc.name;
    std::printf("| %s | %.2f (%.2f) | %.2f (%.2f) | %.1fx | %s |\n", tc.name, old_wall, old_cpu, new_wall,
                new_cpu, old_cpu / new_cpu,
                bytes_equal(o_old, o_new) && bytes_equal(lse_old, lse_new) ? "yes" : "NO");
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace groupattn::test
