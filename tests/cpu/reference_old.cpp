// The fp64 attention reference as it was before session 11's speed-up (main 2a8e9e5,
// src/attention/reference.cpp), kept verbatim for the CPU test that checks the current reference
// gives bit-for-bit the same O and LSE (reference_bitwise_test.cpp). Only changes: the namespace,
// and the engine class, combine_partials and the engine getter left out (not part of the math).
// Test-only: do not call it from library code.
#include "cpu/reference_old.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "attention/attention_views.h"
#include "attention/validate.h"
#include "core/dtype.h"
#include "core/validate.h"

namespace groupattn::reference_old {
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

// One (sequence, query row, query head): softmax over the visible keys, into o_row [Dv] and *lse.
void attend_row(const AttentionParams& p, const Geometry& g, int64_t b, int64_t i, int64_t h,
                int64_t key_begin, int64_t key_end, double* o_row, double* lse) {
  // Global key positions: the shard's local key jl is global key_offset + jl (0 unless sharded).
  const int64_t off = g.key_offset(b);
  const int64_t sk = g.key_total(b);
  const int64_t pos = sk - g.q_len(b) + i;  // bottom-right alignment, on the global positions
  const int64_t hk = h / (g.hq / g.hkv);    // GQA: query head h reads KV head h / group
  const double scale = std::isnan(p.softmax_scale) ? 1.0 / std::sqrt(static_cast<double>(g.d))
                                                   : static_cast<double>(p.softmax_scale);
  const double cap = static_cast<double>(p.softcap);
  int64_t lo = 0, hi = 0;
  visible_range(p, pos, sk, std::max(key_begin, off), std::min(key_end, off + g.k_len(b)), &lo, &hi);
  std::fill(o_row, o_row + g.dv, 0.0);
  if (lo >= hi) {
    *lse = kNegInf;
    return;
  }
  std::vector<double> q(static_cast<size_t>(g.d));
  for (int64_t c = 0; c < g.d; ++c) {
    q[static_cast<size_t>(c)] = load_as_double(p.q.data, p.q.dtype, q_offset(g, p.q, b, i, h, c));
  }
  std::vector<double> s(static_cast<size_t>(hi - lo));
  double m = kNegInf;
  for (int64_t j = lo; j < hi; ++j) {
    double dot = 0.0;
    for (int64_t c = 0; c < g.d; ++c) {
      dot += q[static_cast<size_t>(c)] * load_as_double(p.k.data, p.k.dtype, kv_offset(g, p.k, b, j - off, hk, c));
    }
    double score = scale * dot * kv_scale(p, g, p.k_scale, b, j - off, hk);
    if (cap > 0.0) score = cap * std::tanh(score / cap);
    s[static_cast<size_t>(j - lo)] = score;
    m = std::max(m, score);
  }
  double sum = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    const double w = std::exp(s[static_cast<size_t>(j - lo)] - m);
    sum += w;
    const double wv = w * kv_scale(p, g, p.v_scale, b, j - off, hk);  // the value is v * v_scale
    for (int64_t c = 0; c < g.dv; ++c) {
      o_row[c] += wv * load_as_double(p.v.data, p.v.dtype, kv_offset(g, p.v, b, j - off, hk, c));
    }
  }
  for (int64_t c = 0; c < g.dv; ++c) o_row[c] /= sum;
  *lse = m + std::log(sum);
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
    for (size_t n = first; n < rows.size(); n += stride) {
      const auto [b, i] = rows[n];
      const int64_t r = g.q_begin(b) + i;  // global query row
      for (int64_t h = 0; h < g.hq; ++h) {
        // o: [total_q, Hq, Dv] row-major; lse: [Hq, total_q] row-major
        attend_row(p, g, b, i, h, key_begin, key_end, o->data() + (r * g.hq + h) * g.dv,
                   lse->data() + h * g.total_q + r);
      }
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

}  // namespace groupattn::reference_old
