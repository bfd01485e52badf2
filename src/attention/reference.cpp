// The fp64 attention reference engine ("reference"). For every sequence b, query row i and query
// head h: gather the keys the mask lets row i see, score them in double (scale, then softcap), take
// a max-subtracted softmax and the weighted sum of V rows, and report LSE = m + log(sum). Plain
// loops over strided views; readability and exactness are the point.
//
// Concessions to speed (the GPU tier compares every engine against this, and its fp64 checks set
// the tier's host time):
// - Large problems spread their query rows over a few threads. Each row is computed by one thread
//   in the same order, so the bits do not depend on it.
// - Since session 11 the loops run per (query row, KV head) rather than per element (which looked
//   up the view, the page and the dtype for every multiply-add, ~8 ns each): each visible key's K
//   and V rows are found once (batched / varlen / paged through block_table, any strides; the last
//   dimension is contiguous), decoded to double once, and used by all the query heads of the group.
//   Each head's dot product still sums over d = 0..D-1 in order from 0.0; its max, its sum of
//   weights and its weighted V sums still run over the keys in order, in the same double operations
//   (scale * dot * k_scale, softcap, exp(s - m), w * v_scale, += wv * v, / sum, m + log(sum)). So O
//   and LSE are bit-for-bit those of the per-element loops (tests/cpu/reference_bitwise_test.cpp
//   runs the old code, kept verbatim in tests/cpu/reference_old.cpp, against this one; 7-34x less
//   CPU time on GPU-tier shapes, docs/TESTING.md). Several heads' dot products advance together
//   only so the CPU can overlap their chains; no sum is split or reordered.
#include "attention/reference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "attention/attention_views.h"
#include "attention/engine_list.h"
#include "attention/validate.h"
#include "core/dtype.h"
#include "core/validate.h"

namespace groupattn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Where each sequence's queries and keys live, read once from the host index tensors.
struct Geometry {
  bool varlen_q = false;
  KvLayout layout = KvLayout::kBatched;
  int64_t batch = 0, hq = 0, hkv = 0, d = 0, dv = 0, total_q = 0;
  int64_t sq = 0;         // batched Q: queries per sequence
  int64_t sk = 0;         // batched K/V: keys per cache row
  int64_t page_size = 0;  // paged K/V
  int64_t max_pages = 0;  // paged K/V: block_table columns
  std::vector<int64_t> cu_q, cu_k, seqlens_k, block_table;
  std::vector<int64_t> shard_offset, total_len;  // partial-output mode only (else empty)

  // First global query row of sequence b (varlen: cu_seqlens_q[b]; batched: b * Sq).
  int64_t q_begin(int64_t b) const { return varlen_q ? cu_q[static_cast<size_t>(b)] : b * sq; }
  int64_t q_len(int64_t b) const {
    return varlen_q ? cu_q[static_cast<size_t>(b) + 1] - cu_q[static_cast<size_t>(b)] : sq;
  }
  int64_t k_len(int64_t b) const {
    const auto i = static_cast<size_t>(b);
    if (layout == KvLayout::kVarlen) return cu_k[i + 1] - cu_k[i];
    if (!seqlens_k.empty()) return seqlens_k[i];  // paged always, batched when given
    return sk;
  }
  // Global position of the sequence's first local key, and its global key count (partial-output
  // mode; otherwise 0 and the local count).
  int64_t key_offset(int64_t b) const { return shard_offset.empty() ? 0 : shard_offset[static_cast<size_t>(b)]; }
  int64_t key_total(int64_t b) const { return total_len.empty() ? k_len(b) : total_len[static_cast<size_t>(b)]; }
};

Status read_host_indices(const TensorView& t, const char* name, std::vector<int64_t>* values) {
  bool read = false;
  GA_RETURN_IF_ERROR(read_indices(t, name, RunOptions{}, values, &read));
  if (!read) return NotSupported(std::string(name) + ": could not be read on the host");
  return Status::Ok();
}

Status read_geometry(const AttentionParams& p, Geometry* g) {
  g->varlen_q = q_is_varlen(p);
  g->layout = kv_layout(p);
  const int hd = g->varlen_q ? 1 : 2;  // q: [total_q, Hq, D] or [B, Sq, Hq, D]
  g->hq = p.q.shape[hd];
  g->d = p.q.shape[hd + 1];
  g->hkv = p.k.shape[p.k.rank - 2];
  g->dv = p.v.shape[p.v.rank - 1];
  if (g->varlen_q) {
    GA_RETURN_IF_ERROR(read_host_indices(p.cu_seqlens_q, "cu_seqlens_q", &g->cu_q));
    g->batch = p.cu_seqlens_q.shape[0] - 1;
    g->total_q = p.q.shape[0];
  } else {
    g->batch = p.q.shape[0];
    g->sq = p.q.shape[1];
    g->total_q = g->batch * g->sq;
  }
  switch (g->layout) {
    case KvLayout::kVarlen:
      GA_RETURN_IF_ERROR(read_host_indices(p.cu_seqlens_k, "cu_seqlens_k", &g->cu_k));
      break;
    case KvLayout::kPaged:
      GA_RETURN_IF_ERROR(read_host_indices(p.block_table, "block_table", &g->block_table));
      GA_RETURN_IF_ERROR(read_host_indices(p.seqlens_k, "seqlens_k", &g->seqlens_k));
      g->page_size = p.k.shape[1];
      g->max_pages = p.block_table.shape[1];
      break;
    case KvLayout::kBatched:
      g->sk = p.k.shape[1];
      if (p.seqlens_k.defined()) GA_RETURN_IF_ERROR(read_host_indices(p.seqlens_k, "seqlens_k", &g->seqlens_k));
      break;
  }
  if (kv_is_sharded(p)) {
    GA_RETURN_IF_ERROR(read_host_indices(p.kv_shard_offset, "kv_shard_offset", &g->shard_offset));
    GA_RETURN_IF_ERROR(read_host_indices(p.kv_total_len, "kv_total_len", &g->total_len));
  }
  return Status::Ok();
}

// Byte offset of element (key j of sequence b, KV head hk, channel c) in k or v.
int64_t kv_offset(const Geometry& g, const TensorView& t, int64_t b, int64_t j, int64_t hk, int64_t c) {
  switch (g.layout) {
    case KvLayout::kVarlen:
      // varlen [total_k, Hkv, D]: key j of sequence b is token row cu_seqlens_k[b] + j
      return t.offset_of({g.cu_k[static_cast<size_t>(b)] + j, hk, c});
    case KvLayout::kPaged: {
      // paged [num_pages, page_size, Hkv, D]: page block_table[b][j / page_size], row j % page_size
      const int64_t page = g.block_table[static_cast<size_t>(b * g.max_pages + j / g.page_size)];
      return t.offset_of({page, j % g.page_size, hk, c});
    }
    case KvLayout::kBatched:
      // batched [B, Sk, Hkv, D]: row b, position j
      return t.offset_of({b, j, hk, c});
  }
  return 0;
}

// The first element of key j's row (sequence b, KV head hk) in k or v; the row's D (or Dv) elements
// follow contiguously (every view has a contiguous last dimension).
const char* kv_row(const Geometry& g, const TensorView& t, int64_t b, int64_t j, int64_t hk) {
  return static_cast<const char*>(t.data) + kv_offset(g, t, b, j, hk, 0);
}

// FP8 KV cache: the dequantization scale of key j of sequence b, KV head hk, in k_scale or
// v_scale ([B, Hkv], or [num_pages, Hkv] per page); 1 when the cache is not fp8.
double kv_scale(const AttentionParams& p, const Geometry& g, const TensorView& scale, int64_t b, int64_t j,
                int64_t hk) {
  if (!scale.defined()) return 1.0;
  const int64_t row = p.kv_scale_per_page ? g.block_table[static_cast<size_t>(b * g.max_pages + j / g.page_size)] : b;
  return load(scale, {row, hk});
}

// Byte offset of element (global query row r = q_begin(b) + i, head h, channel c) in q or out.
int64_t q_offset(const Geometry& g, const TensorView& t, int64_t b, int64_t i, int64_t h, int64_t c) {
  // varlen [total_q, Hq, D]: token row q_begin(b) + i; batched [B, Sq, Hq, D]: row b, position i
  return g.varlen_q ? t.offset_of({g.q_begin(b) + i, h, c}) : t.offset_of({b, i, h, c});
}

// The visible key range [lo, hi) of a query at key position `pos` in a sequence of `sk` keys,
// intersected with [key_begin, key_end). All positions are global (partial-output mode: the
// caller passes the sequence's total key count and intersects with the shard's positions). The mask is an interval, so a range suffices.
// Windows may be any int64 (INT64_MAX means "as good as unbounded"), so the bounds saturate.
int64_t saturating_add(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) return y > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

void visible_range(const AttentionParams& p, int64_t pos, int64_t sk, int64_t key_begin, int64_t key_end,
                   int64_t* lo, int64_t* hi) {
  int64_t a = std::max<int64_t>(0, key_begin);
  int64_t z = std::min(sk, key_end);  // exclusive
  if (p.causal) z = std::min(z, pos + 1);
  if (p.window_left >= 0) a = std::max(a, saturating_add(pos, -p.window_left));
  if (p.window_right >= 0) z = std::min(z, saturating_add(saturating_add(pos, p.window_right), 1));
  *lo = a;
  *hi = std::max(a, z);
}

// Decode tables built by core/dtype's own decoders, so each entry is exactly what load_as_double
// gives for that code (a table lookup instead of a call per element).
const std::array<double, 256>& e4m3_to_double() {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> t{};
    for (int code = 0; code < 256; ++code)
      t[static_cast<size_t>(code)] = e4m3_bits_to_float(static_cast<uint8_t>(code));
    return t;
  }();
  return table;
}
const std::vector<float>& f16_to_float() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (int code = 0; code < 65536; ++code)
      t[static_cast<size_t>(code)] = half_bits_to_float(static_cast<uint16_t>(code));
    return t;
  }();
  return table;
}

// n contiguous elements of `dtype` at `row`, as double: for each element the value load_as_double
// gives (the dtype is looked at once per row, not once per element).
void row_to_double(const char* row, DType dtype, int64_t n, double* out) {
  switch (dtype) {
    case DType::kBF16:
      for (int64_t c = 0; c < n; ++c) {
        uint16_t bits;
        std::memcpy(&bits, row + 2 * c, 2);
        const uint32_t f32_bits = static_cast<uint32_t>(bits) << 16;  // bf16_bits_to_float
        float f;
        std::memcpy(&f, &f32_bits, 4);
        out[c] = f;
      }
      return;
    case DType::kF16: {
      const float* table = f16_to_float().data();
      for (int64_t c = 0; c < n; ++c) {
        uint16_t bits;
        std::memcpy(&bits, row + 2 * c, 2);
        out[c] = table[bits];
      }
      return;
    }
    case DType::kF32:
      for (int64_t c = 0; c < n; ++c) {
        float f;
        std::memcpy(&f, row + 4 * c, 4);
        out[c] = f;
      }
      return;
    case DType::kF8E4M3: {
      const double* table = e4m3_to_double().data();
      for (int64_t c = 0; c < n; ++c) out[c] = table[static_cast<unsigned char>(row[c])];
      return;
    }
    default:  // not an attention dtype today; the generic path keeps this total
      for (int64_t c = 0; c < n; ++c)
        out[c] = load_as_double(row, dtype, c * static_cast<int64_t>(dtype_size(dtype)));
      return;
  }
}

// One thread's working rows, reused from query row to query row. G = the group (Hq / Hkv query heads
// per KV head); "head-minor" arrays hold one value per head of the group at [x * G + gh].
struct Scratch {
  std::vector<double> q;           // [D][G]: the group's query rows as double, head-minor
  std::vector<double> kv;          // [max(D, Dv)]: one K or V row as double
  std::vector<double> s;           // [keys][G]: scores, head-minor
  std::vector<double> acc;         // [G][Dv]: weighted V sums, one row per head
  std::vector<double> m, sum, wv;  // [G] each: max score, sum of weights, weight x v_scale
};

// dot[h] = sum over c = 0..D-1, in order, of q[c * G + h] * k[c], for kHeads heads at once: each
// sum is its own chain (starting from 0.0, as a plain loop would), the heads only let the CPU
// overlap the chains, and kHeads fixed keeps the sums in registers.
template <size_t kHeads>
void dot_heads(const double* q, size_t G, const double* k, size_t D, double* dot) {
  double acc[kHeads] = {};
  for (size_t c = 0; c < D; ++c) {
    for (size_t h = 0; h < kHeads; ++h) acc[h] += q[c * G + h] * k[c];
  }
  for (size_t h = 0; h < kHeads; ++h) dot[h] = acc[h];
}

// The group's G dot products with one K row (q head-minor [D][G]), in blocks of 8, 4 and 1 heads.
void dot_group(const double* q, size_t G, const double* k, size_t D, double* dot) {
  size_t h = 0;
  for (; h + 8 <= G; h += 8) dot_heads<8>(q + h, G, k, D, dot + h);
  for (; h + 4 <= G; h += 4) dot_heads<4>(q + h, G, k, D, dot + h);
  for (; h < G; ++h) dot_heads<1>(q + h, G, k, D, dot + h);
}

// One (sequence b, query row i), every query head: softmax over the visible keys, into o_rows
// ([Hq, Dv], row r of the result) and lse_col[h * lse_stride]. For each KV head hk and its group of
// query heads h0 .. h0 + G - 1, per head exactly the old per-element loops (see the file comment).
void attend_query_row(const AttentionParams& p, const Geometry& g, int64_t b, int64_t i, int64_t key_begin,
                      int64_t key_end, double* o_rows, double* lse_col, int64_t lse_stride, Scratch* sc) {
  // Global key positions: the shard's local key jl is global key_offset + jl (0 unless sharded).
  const int64_t off = g.key_offset(b);
  const int64_t sk = g.key_total(b);
  const int64_t pos = sk - g.q_len(b) + i;  // bottom-right alignment, on the global positions
  const int64_t group = g.hq / g.hkv;       // GQA: query head h reads KV head h / group
  const double scale = std::isnan(p.softmax_scale) ? 1.0 / std::sqrt(static_cast<double>(g.d))
                                                   : static_cast<double>(p.softmax_scale);
  const double cap = static_cast<double>(p.softcap);
  int64_t lo = 0, hi = 0;
  visible_range(p, pos, sk, std::max(key_begin, off), std::min(key_end, off + g.k_len(b)), &lo, &hi);
  std::fill(o_rows, o_rows + g.hq * g.dv, 0.0);
  if (lo >= hi) {
    for (int64_t h = 0; h < g.hq; ++h) lse_col[h * lse_stride] = kNegInf;
    return;
  }
  const auto G = static_cast<size_t>(group);
  const auto D = static_cast<size_t>(g.d), Dv = static_cast<size_t>(g.dv);
  sc->q.resize(D * G);
  sc->kv.resize(std::max(D, Dv));
  sc->s.resize(static_cast<size_t>(hi - lo) * G);
  sc->acc.resize(Dv * G);
  sc->m.resize(G);
  sc->sum.resize(G);
  sc->wv.resize(G);
  double* kv = sc->kv.data();
  for (int64_t hk = 0; hk < g.hkv; ++hk) {
    const int64_t h0 = hk * group;  // the group's first query head
    for (size_t gh = 0; gh < G; ++gh) {
      const char* q_row =
          static_cast<const char*>(p.q.data) + q_offset(g, p.q, b, i, h0 + static_cast<int64_t>(gh), 0);
      row_to_double(q_row, p.q.dtype, g.d, kv);
      for (size_t c = 0; c < D; ++c) sc->q[c * G + gh] = kv[c];
    }
    // Scores: per head, dot = sum over c in order of q[c] * k[c]; then scale, k_scale, softcap.
    std::fill(sc->m.begin(), sc->m.end(), kNegInf);
    for (int64_t j = lo; j < hi; ++j) {
      row_to_double(kv_row(g, p.k, b, j - off, hk), p.k.dtype, g.d, kv);
      double* dot = sc->s.data() + static_cast<size_t>(j - lo) * G;
      dot_group(sc->q.data(), G, kv, D, dot);
      const double k_scale = kv_scale(p, g, p.k_scale, b, j - off, hk);
      for (size_t gh = 0; gh < G; ++gh) {
        double score = scale * dot[gh] * k_scale;
        if (cap > 0.0) score = cap * std::tanh(score / cap);
        dot[gh] = score;
        sc->m[gh] = std::max(sc->m[gh], score);
      }
    }
    // Weighted V sums: per head and channel, acc += (exp(s - m) * v_scale) * v over the keys in order.
    std::fill(sc->acc.begin(), sc->acc.end(), 0.0);
    std::fill(sc->sum.begin(), sc->sum.end(), 0.0);
    for (int64_t j = lo; j < hi; ++j) {
      row_to_double(kv_row(g, p.v, b, j - off, hk), p.v.dtype, g.dv, kv);
      const double v_scale = kv_scale(p, g, p.v_scale, b, j - off, hk);
      const double* s = sc->s.data() + static_cast<size_t>(j - lo) * G;
      for (size_t gh = 0; gh < G; ++gh) {
        const double w = std::exp(s[gh] - sc->m[gh]);
        sc->sum[gh] += w;
        sc->wv[gh] = w * v_scale;  // the value is v * v_scale
      }
      for (size_t gh = 0; gh < G; ++gh) {
        double* acc = sc->acc.data() + gh * Dv;
        for (size_t c = 0; c < Dv; ++c) acc[c] += sc->wv[gh] * kv[c];
      }
    }
    for (size_t gh = 0; gh < G; ++gh) {
      const int64_t h = h0 + static_cast<int64_t>(gh);
      double* o_row = o_rows + h * g.dv;
      for (size_t c = 0; c < Dv; ++c) o_row[c] = sc->acc[gh * Dv + c] / sc->sum[gh];
      lse_col[h * lse_stride] = sc->m[gh] + std::log(sc->sum[gh]);
    }
  }
}

Status check_host(const AttentionParams& p) {
  for (const NamedView& v : attention_views(p)) {
    if (v.view->defined() && v.view->device != Device::kCPU) {
      return NotSupported(std::string(v.name) + " is in " + device_name(v.view->device) +
                          " memory; the reference engine reads host (cpu) memory only");
    }
  }
  return Status::Ok();
}

class ReferenceAttention final : public AttentionEngine {
 public:
  const char* name() const override { return "reference"; }
  const char* description() const override { return "fp64 on the CPU (host memory): the oracle"; }
  std::string supports() const override { return "everything the API accepts, host tensors"; }
  Status check_support(const AttentionParams& p) const override { return check_host(p); }

  Status run(const AttentionParams& p, void*, void*) const override {
    std::vector<double> o, lse;
    GA_RETURN_IF_ERROR(reference_attention_fp64(p, 0, std::numeric_limits<int64_t>::max(), &o, &lse));
    Geometry g;
    GA_RETURN_IF_ERROR(read_geometry(p, &g));
    // Everything is computed; only now touch the outputs.
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t i = 0; i < g.q_len(b); ++i) {
        const int64_t r = g.q_begin(b) + i;  // global query row
        for (int64_t h = 0; h < g.hq; ++h) {
          for (int64_t c = 0; c < g.dv; ++c) {
            // o is [total_q, Hq, Dv] contiguous
            store_from_double(p.out.data, p.out.dtype, q_offset(g, p.out, b, i, h, c),
                              o[static_cast<size_t>((r * g.hq + h) * g.dv + c)]);
          }
          if (p.lse.defined()) {
            // lse is [Hq, total_q]; the result vector too
            store_from_double(p.lse.data, p.lse.dtype, p.lse.offset_of({h, r}),
                              static_cast<double>(static_cast<float>(lse[static_cast<size_t>(h * g.total_q + r)])));
          }
        }
      }
    }
    return Status::Ok();
  }
};

}  // namespace

Status reference_attention_fp64(const AttentionParams& p, int64_t key_begin, int64_t key_end,
                                std::vector<double>* o, std::vector<double>* lse) {
  GA_RETURN_IF_ERROR(validate_attention(p));
  GA_RETURN_IF_ERROR(validate_attention_indices(p, RunOptions{}));
  GA_RETURN_IF_ERROR(check_host(p));
  Geometry g;
  GA_RETURN_IF_ERROR(read_geometry(p, &g));
  // Rows of a varlen Q that no sequence covers (past cu_seqlens_q[B]) keep O = 0, LSE = -inf.
  o->assign(static_cast<size_t>(g.total_q * g.hq * g.dv), 0.0);
  lse->assign(static_cast<size_t>(g.hq * g.total_q), kNegInf);
  std::vector<std::pair<int64_t, int64_t>> rows;  // (sequence, query row) pairs
  double macs = 0.0;                              // work estimate: query-key pairs x heads x D
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < g.q_len(b); ++i) rows.emplace_back(b, i);
    macs += static_cast<double>(g.q_len(b)) * static_cast<double>(g.k_len(b)) * static_cast<double>(g.hq * (g.d + g.dv));
  }
  // Rows first, first + stride, ...: interleaved, so causal masks (later rows see more keys) balance.
  auto attend_rows = [&](size_t first, size_t stride) {
    Scratch scratch;
    for (size_t n = first; n < rows.size(); n += stride) {
      const auto [b, i] = rows[n];
      const int64_t r = g.q_begin(b) + i;  // global query row
      // o: [total_q, Hq, Dv] row-major (row r: Hq x Dv); lse: [Hq, total_q] row-major (column r)
      attend_query_row(p, g, b, i, key_begin, key_end, o->data() + r * g.hq * g.dv, lse->data() + r,
                       g.total_q, &scratch);
    }
  };
  // Threads only where they pay for themselves (~1e7 multiply-adds is a few ms of these loops).
  constexpr double kMacsPerThread = 1e7;
  constexpr unsigned kMaxThreads = 8;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const auto want = static_cast<size_t>(std::min<double>({static_cast<double>(std::min(hw, kMaxThreads)),
                                                          macs / kMacsPerThread, static_cast<double>(rows.size())}));
  const size_t n_threads = std::max<size_t>(1, want);
  std::vector<std::thread> threads;
  struct JoinAll {  // also when the calling thread's share throws
    std::vector<std::thread>& ts;
    ~JoinAll() {
      for (std::thread& th : ts) th.join();
    }
  } join_all{threads};
  size_t started = 1;  // row class 0 is the calling thread's
  for (; started < n_threads; ++started) {
    try {
      threads.emplace_back(attend_rows, started, n_threads);
    } catch (const std::system_error&) {
      break;  // no more threads: the calling thread takes the classes left
    }
  }
  for (size_t t = started; t < n_threads; ++t) attend_rows(t, n_threads);
  attend_rows(0, n_threads);
  return Status::Ok();
}

void combine_partials(const std::vector<AttentionPartial>& parts, int64_t total_q, int64_t hq,
                      int64_t dv, std::vector<double>* o, std::vector<double>* lse) {
  o->assign(static_cast<size_t>(total_q * hq * dv), 0.0);
  lse->assign(static_cast<size_t>(hq * total_q), kNegInf);
  for (int64_t r = 0; r < total_q; ++r) {
    for (int64_t h = 0; h < hq; ++h) {
      const auto li = static_cast<size_t>(h * total_q + r);  // lse: [Hq, total_q]
      const auto oi = static_cast<size_t>((r * hq + h) * dv);  // o: [total_q, Hq, Dv], row start
      double m = kNegInf;
      for (const AttentionPartial& part : parts) m = std::max(m, part.lse[li]);
      if (m == kNegInf) continue;  // no shard saw a key: O = 0, LSE = -inf
      double sum = 0.0;
      for (const AttentionPartial& part : parts) {
        if (part.lse[li] == kNegInf) continue;  // empty shard for this row
        const double w = std::exp(part.lse[li] - m);
        sum += w;
        for (int64_t c = 0; c < dv; ++c) (*o)[oi + static_cast<size_t>(c)] += w * part.o[oi + static_cast<size_t>(c)];
      }
      for (int64_t c = 0; c < dv; ++c) (*o)[oi + static_cast<size_t>(c)] /= sum;
      (*lse)[li] = m + std::log(sum);
    }
  }
}

const AttentionEngine& attention_reference_engine() {
  static const ReferenceAttention engine;
  return engine;
}

}  // namespace groupattn
