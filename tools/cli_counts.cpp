#include "cli_counts.h"

#include <algorithm>
#include <map>

namespace groupattn::cli {

namespace {

// [lo, hi] (inclusive) of the keys a query at key position `pos` sees; empty when lo > hi.
std::pair<int64_t, int64_t> row_range(int64_t pos, int64_t sk, bool causal, int64_t wl, int64_t wr) {
  const int64_t lo = wl < 0 ? 0 : std::max<int64_t>(0, pos - wl);
  int64_t hi = sk - 1;
  if (causal) hi = std::min(hi, pos);
  if (wr >= 0) hi = std::min(hi, pos + wr);
  return {lo, hi};
}

int64_t sum_range(int64_t a, int64_t b) { return b < a ? 0 : (a + b) * (b - a + 1) / 2; }

// ((sq, sk), multiplicity) over the distinct sequences.
std::map<std::pair<int64_t, int64_t>, int64_t> per_sequence(const AttnCountProblem& p) {
  std::map<std::pair<int64_t, int64_t>, int64_t> m;
  for (size_t i = 0; i < p.seqlens_q.size() && i < p.seqlens_k.size(); ++i) ++m[{p.seqlens_q[i], p.seqlens_k[i]}];
  return m;
}

int64_t dv_of(const AttnCountProblem& p) { return p.head_dim_v > 0 ? p.head_dim_v : p.head_dim; }

}  // namespace

int64_t visible_pairs(int64_t sq, int64_t sk, bool causal, int64_t wl, int64_t wr) {
  if (sq <= 0 || sk <= 0) return 0;
  if (wl < 0 && wr < 0) {
    if (!causal) return sq * sk;
    // Rows first..Sq-1 (first = max(0, Sq - Sk)) see Sk - Sq + first + 1 .. Sk keys.
    const int64_t first = std::max<int64_t>(0, sq - sk);
    return sum_range(sk - sq + first + 1, sk);
  }
  int64_t total = 0;
  for (int64_t i = 0; i < sq; ++i) {
    const auto [lo, hi] = row_range(sk - sq + i, sk, causal, wl, wr);
    if (hi >= lo) total += hi - lo + 1;
  }
  return total;
}

std::pair<int64_t, int64_t> visible_key_span(int64_t sq, int64_t sk, bool causal, int64_t wl, int64_t wr) {
  if (sq <= 0 || sk <= 0) return {0, 0};
  if (wl < 0 && wr < 0) return {0, sk};
  bool any = false;
  int64_t lo_all = 0, hi_all = 0;
  for (int64_t i = 0; i < sq; ++i) {
    const auto [lo, hi] = row_range(sk - sq + i, sk, causal, wl, wr);
    if (hi < lo) continue;
    lo_all = any ? std::min(lo_all, lo) : lo;
    hi_all = any ? std::max(hi_all, hi) : hi;
    any = true;
  }
  if (!any) return {0, 0};
  return {lo_all, hi_all + 1};
}

AttnCountProblem batched_problem(int64_t batch, int64_t sq, int64_t sk, int64_t heads_q, int64_t heads_kv,
                                 int64_t head_dim) {
  AttnCountProblem p;
  p.seqlens_q.assign(static_cast<size_t>(batch), sq);
  p.seqlens_k.assign(static_cast<size_t>(batch), sk);
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  return p;
}

int64_t attention_flops(const AttnCountProblem& p) {
  int64_t pairs = 0;
  for (const auto& [s, m] : per_sequence(p)) {
    pairs += m * visible_pairs(s.first, s.second, p.causal, p.window_left, p.window_right);
  }
  return 2 * (p.head_dim + dv_of(p)) * p.heads_q * pairs;
}

int64_t keys_read(const AttnCountProblem& p) {
  int64_t total = 0;
  for (const auto& [s, m] : per_sequence(p)) {
    const auto [lo, hi] = visible_key_span(s.first, s.second, p.causal, p.window_left, p.window_right);
    if (hi <= lo) continue;
    if (p.page_size > 0) {
      const int64_t first_page = lo / p.page_size, last_page = (hi - 1) / p.page_size;
      total += m * (last_page - first_page + 1) * p.page_size;
    } else {
      total += m * (hi - lo);
    }
  }
  return total;
}

AttnBytes attention_bytes(const AttnCountProblem& p) {
  int64_t total_q = 0;
  for (int64_t s : p.seqlens_q) total_q += s;
  const int64_t kr = keys_read(p), e = p.elem_bytes, ekv = p.kv_elem_bytes > 0 ? p.kv_elem_bytes : e;
  AttnBytes b;
  b.q = total_q * p.heads_q * p.head_dim * e;
  b.k = kr * p.heads_kv * p.head_dim * ekv;
  b.v = kr * p.heads_kv * dv_of(p) * ekv;
  b.o = total_q * p.heads_q * dv_of(p) * e;
  b.lse = p.lse ? total_q * p.heads_q * 4 : 0;
  b.total = b.q + b.k + b.v + b.o + b.lse;
  return b;
}

int64_t kda_bytes(int64_t total_t, int64_t heads, int64_t heads_v, int64_t k, int64_t v, int64_t num_seqs,
                  int64_t elem_bytes, bool initial_state, bool final_state, bool in_kernel_gate_params) {
  const int64_t state = num_seqs * heads_v * k * v * 4;
  return 2 * total_t * heads * k * elem_bytes          // q, k
         + 2 * total_t * heads_v * v * elem_bytes      // v, o
         + total_t * heads_v * k * 4                   // g
         + total_t * heads_v * 4                       // beta
         + (initial_state ? state : 0) + (final_state ? state : 0)
         + (in_kernel_gate_params ? (heads_v + heads_v * k) * 4 : 0);
}

}  // namespace groupattn::cli
