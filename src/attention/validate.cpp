// Attention validation: everything a caller can get wrong, checked before any engine runs, each
// failure an InvalidArgument naming the argument and the accepted values. Nothing here writes.
//
// Checks in order: presence and dtype, ranks per layout, layout (strides, alignment), shapes that
// must agree, devices, output/input overlap, scalar options. Index contents (cu_seqlens,
// seqlens_k, block_table) are checked separately by validate_attention_indices().
//
// seqlens_k with varlen K/V (cu_seqlens_k given) is rejected: the segment lengths already say how
// many keys each sequence has, and two sources of truth would invite disagreement.
#include "attention/validate.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention_views.h"
#include "core/validate.h"
#include "groupattn/supported.h"

namespace groupattn {
namespace {

std::string head_dim_list() {
  std::string s;
  for (int64_t d : kAttentionHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

Status check_attention_dtype(const TensorView& q) {
  for (DType d : kAttentionDTypes) {
    if (d == q.dtype) return Status::Ok();
  }
  return InvalidArgument(std::string("q: dtype ") + dtype_name(q.dtype) +
                         " not supported (accepted: " + dtype_list(kAttentionDTypes) + ")");
}

Status check_same_dtype(const TensorView& t, const char* name, const TensorView& q) {
  if (t.dtype == q.dtype) return Status::Ok();
  return InvalidArgument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from q's " +
                         dtype_name(q.dtype) + " (q, k, v and out share one dtype; accepted: " +
                         dtype_list(kAttentionDTypes) + ")");
}

// An fp8 KV cache: k and v both f8e4m3, q (and out) in one of kAttentionFp8QDTypes, both fp32
// scale tensors present (their shapes are checked with the others in check_shapes).
Status check_fp8_kv(const AttentionParams& p) {
  bool q_ok = false;
  for (DType d : kAttentionFp8QDTypes) q_ok = q_ok || d == p.q.dtype;
  if (!q_ok) {
    return InvalidArgument(std::string("q: dtype ") + dtype_name(p.q.dtype) + " with an " +
                           dtype_name(kAttentionFp8KvDType) + " KV cache (accepted q: " +
                           dtype_list(kAttentionFp8QDTypes) + ")");
  }
  for (const auto& [t, name, other] : {std::tuple{&p.k, "k", "v"}, std::tuple{&p.v, "v", "k"}}) {
    if (t->dtype != kAttentionFp8KvDType) {
      return InvalidArgument(std::string(name) + ": dtype " + dtype_name(t->dtype) + " while " + other + " is " +
                             dtype_name(kAttentionFp8KvDType) + " (an fp8 KV cache has k and v both in " +
                             dtype_name(kAttentionFp8KvDType) + ")");
    }
  }
  for (const auto& [t, name] : {std::pair{&p.k_scale, "k_scale"}, std::pair{&p.v_scale, "v_scale"}}) {
    if (!t->defined()) {
      return InvalidArgument(std::string(name) + ": required with " + dtype_name(kAttentionFp8KvDType) +
                             " k/v (fp32 [B, Hkv], or [num_pages, Hkv] with kv_scale_per_page)");
    }
    GA_RETURN_IF_ERROR(check_dtype(*t, name, {DType::kF32}));
    GA_RETURN_IF_ERROR(check_rank(*t, name, 2, "[B, Hkv], or [num_pages, Hkv] with kv_scale_per_page"));
  }
  if (p.kv_scale_per_page && kv_layout(p) != KvLayout::kPaged) {
    return InvalidArgument(
        "kv_scale_per_page: set on a K/V cache that is not paged (accepted: only with block_table given)");
  }
  return Status::Ok();
}

Status check_head_dim(int64_t d, const char* name, const char* what) {
  for (int64_t a : kAttentionHeadDims) {
    if (a == d) return Status::Ok();
  }
  return InvalidArgument(std::string(name) + ": head dim " + what + " = " + std::to_string(d) +
                         " not supported (accepted: " + head_dim_list() + ")");
}

Status check_index_tensor(const TensorView& t, const char* name, int rank, const char* layout) {
  GA_RETURN_IF_ERROR(check_dtype(t, name, {DType::kI32}));
  GA_RETURN_IF_ERROR(check_rank(t, name, rank, layout));
  return check_layout(t, name);
}

// Presence, dtypes and ranks of q/k/v/out/lse and the index tensors.
Status check_tensors(const AttentionParams& p) {
  GA_RETURN_IF_ERROR(check_defined(p.q, "q"));
  GA_RETURN_IF_ERROR(check_defined(p.k, "k"));
  GA_RETURN_IF_ERROR(check_defined(p.v, "v"));
  GA_RETURN_IF_ERROR(check_defined(p.out, "out"));
  GA_RETURN_IF_ERROR(check_attention_dtype(p.q));
  if (kv_is_fp8(p)) {
    GA_RETURN_IF_ERROR(check_fp8_kv(p));
  } else {
    GA_RETURN_IF_ERROR(check_same_dtype(p.k, "k", p.q));
    GA_RETURN_IF_ERROR(check_same_dtype(p.v, "v", p.q));
    for (const auto& [t, name] : {std::pair{&p.k_scale, "k_scale"}, std::pair{&p.v_scale, "v_scale"}}) {
      if (t->defined()) {
        return InvalidArgument(std::string(name) + ": given with " + dtype_name(p.k.dtype) + " k/v (accepted: only with " +
                               dtype_name(kAttentionFp8KvDType) + " k and v, an fp8 KV cache)");
      }
    }
    if (p.kv_scale_per_page) {
      return InvalidArgument(std::string("kv_scale_per_page: set with ") + dtype_name(p.k.dtype) +
                             " k/v (accepted: only with an " + dtype_name(kAttentionFp8KvDType) + " paged cache)");
    }
  }
  GA_RETURN_IF_ERROR(check_same_dtype(p.out, "out", p.q));
  if (p.lse.defined()) GA_RETURN_IF_ERROR(check_dtype(p.lse, "lse", {DType::kF32}));

  if (q_is_varlen(p)) {
    GA_RETURN_IF_ERROR(check_index_tensor(p.cu_seqlens_q, "cu_seqlens_q", 1, "[B+1]"));
    GA_RETURN_IF_ERROR(check_rank(p.q, "q", 3, "varlen [total_q, Hq, D] (cu_seqlens_q given)"));
    GA_RETURN_IF_ERROR(check_rank(p.out, "out", 3, "varlen [total_q, Hq, Dv] (cu_seqlens_q given)"));
  } else {
    GA_RETURN_IF_ERROR(check_rank(p.q, "q", 4, "batched [B, Sq, Hq, D] (no cu_seqlens_q)"));
    GA_RETURN_IF_ERROR(check_rank(p.out, "out", 4, "batched [B, Sq, Hq, Dv] (no cu_seqlens_q)"));
  }

  switch (kv_layout(p)) {
    case KvLayout::kPaged:
      if (p.cu_seqlens_k.defined()) {
        return InvalidArgument(
            "cu_seqlens_k: not accepted with paged K/V (block_table given); accepted: either "
            "cu_seqlens_k (varlen) or block_table + seqlens_k (paged)");
      }
      GA_RETURN_IF_ERROR(check_index_tensor(p.block_table, "block_table", 2, "[B, max_pages]"));
      if (!p.seqlens_k.defined()) {
        return InvalidArgument("seqlens_k: required with paged K/V (block_table given), int32 [B]");
      }
      GA_RETURN_IF_ERROR(check_index_tensor(p.seqlens_k, "seqlens_k", 1, "[B]"));
      GA_RETURN_IF_ERROR(check_rank(p.k, "k", 4, "paged [num_pages, page_size, Hkv, D] (block_table given)"));
      GA_RETURN_IF_ERROR(check_rank(p.v, "v", 4, "paged [num_pages, page_size, Hkv, Dv] (block_table given)"));
      break;
    case KvLayout::kVarlen:
      GA_RETURN_IF_ERROR(check_index_tensor(p.cu_seqlens_k, "cu_seqlens_k", 1, "[B+1]"));
      if (p.seqlens_k.defined()) {
        return InvalidArgument(
            "seqlens_k: not accepted with varlen K/V (cu_seqlens_k given); the segment lengths "
            "cu_seqlens_k[b+1] - cu_seqlens_k[b] are the key counts (accepted: seqlens_k with "
            "batched or paged K/V only)");
      }
      GA_RETURN_IF_ERROR(check_rank(p.k, "k", 3, "varlen [total_k, Hkv, D] (cu_seqlens_k given)"));
      GA_RETURN_IF_ERROR(check_rank(p.v, "v", 3, "varlen [total_k, Hkv, Dv] (cu_seqlens_k given)"));
      break;
    case KvLayout::kBatched:
      if (p.seqlens_k.defined()) GA_RETURN_IF_ERROR(check_index_tensor(p.seqlens_k, "seqlens_k", 1, "[B]"));
      GA_RETURN_IF_ERROR(check_rank(p.k, "k", 4, "batched [B, Sk, Hkv, D] (no cu_seqlens_k / block_table)"));
      GA_RETURN_IF_ERROR(check_rank(p.v, "v", 4, "batched [B, Sk, Hkv, Dv] (no cu_seqlens_k / block_table)"));
      break;
  }
  if (p.lse.defined()) GA_RETURN_IF_ERROR(check_rank(p.lse, "lse", 2, "[Hq, total_q]"));

  // Partial-output mode: both shard tensors or neither.
  if (kv_is_sharded(p)) {
    if (!p.kv_shard_offset.defined() || !p.kv_total_len.defined()) {
      return InvalidArgument(std::string(p.kv_shard_offset.defined() ? "kv_total_len" : "kv_shard_offset") +
                             ": required in partial-output mode (kv_shard_offset and kv_total_len, "
                             "int32 [B] each, come together; accepted: both or neither)");
    }
    GA_RETURN_IF_ERROR(check_index_tensor(p.kv_shard_offset, "kv_shard_offset", 1, "[B]"));
    GA_RETURN_IF_ERROR(check_index_tensor(p.kv_total_len, "kv_total_len", 1, "[B]"));
  }
  return Status::Ok();
}

Status check_layouts(const AttentionParams& p) {
  for (const NamedView& v : attention_views(p)) {
    if (v.view->defined()) GA_RETURN_IF_ERROR(check_layout(*v.view, v.name));
  }
  return Status::Ok();
}

// Shapes that must agree; ranks are already known to fit the layout.
Status check_shapes(const AttentionParams& p) {
  const bool varlen_q = q_is_varlen(p);
  const int hd = varlen_q ? 1 : 2;  // head dim index of q/out: [total_q, Hq, D] or [B, Sq, Hq, D]
  const int64_t batch = varlen_q ? p.cu_seqlens_q.shape[0] - 1 : p.q.shape[0];
  if (varlen_q && batch < 0) {
    return InvalidArgument("cu_seqlens_q: shape [0], expected [B+1] with B >= 0 (at least one entry)");
  }
  const int64_t hq = p.q.shape[hd];
  const int64_t d = p.q.shape[hd + 1];
  const int64_t total_q = varlen_q ? p.q.shape[0] : p.q.shape[0] * p.q.shape[1];
  const char* b_from = varlen_q ? "B from cu_seqlens_q" : "B from q";

  // K/V: [.., Hkv, D] in the last two dims for every layout.
  const int kh = p.k.rank - 2;
  const int64_t hkv = p.k.shape[kh];
  GA_RETURN_IF_ERROR(check_dim(p.v, "v", kh, "Hkv", hkv, "Hkv of k"));
  GA_RETURN_IF_ERROR(check_dim(p.k, "k", kh + 1, "D", d, "D of q"));
  const KvLayout layout = kv_layout(p);
  const char* const lead_names[] = {layout == KvLayout::kVarlen ? "total_k"
                                    : layout == KvLayout::kPaged ? "num_pages"
                                                                 : "B",
                                    layout == KvLayout::kPaged ? "page_size" : "Sk"};
  for (int i = 0; i < kh; ++i) {
    GA_RETURN_IF_ERROR(check_dim(p.v, "v", i, lead_names[i], p.k.shape[i], "from k"));
  }
  if (hkv < 1) return InvalidArgument("k: Hkv = " + std::to_string(hkv) + " (accepted: >= 1)");
  if (hq < 1) return InvalidArgument("q: Hq = " + std::to_string(hq) + " (accepted: >= 1)");
  if (hq % hkv != 0) {
    return InvalidArgument("q/k: Hq = " + std::to_string(hq) + " is not a multiple of Hkv = " +
                           std::to_string(hkv) + " (accepted: Hq % Hkv == 0)");
  }
  GA_RETURN_IF_ERROR(check_head_dim(d, "q", "D"));
  const int64_t dv = p.v.shape[kh + 1];
  GA_RETURN_IF_ERROR(check_head_dim(dv, "v", "Dv"));

  // out: q's leading dims, Dv last.
  for (int i = 0; i <= hd; ++i) {
    GA_RETURN_IF_ERROR(check_dim(p.out, "out", i, i == hd ? "Hq" : "a leading dim", p.q.shape[i], "from q"));
  }
  GA_RETURN_IF_ERROR(check_dim(p.out, "out", hd + 1, "Dv", dv, "Dv of v"));
  if (p.lse.defined()) {
    GA_RETURN_IF_ERROR(check_dim(p.lse, "lse", 0, "Hq", hq, "[Hq, total_q]"));
    GA_RETURN_IF_ERROR(check_dim(p.lse, "lse", 1, "total_q", total_q, "[Hq, total_q]"));
  }

  switch (layout) {
    case KvLayout::kBatched:
      GA_RETURN_IF_ERROR(check_dim(p.k, "k", 0, "B", batch, b_from));
      if (p.seqlens_k.defined()) GA_RETURN_IF_ERROR(check_dim(p.seqlens_k, "seqlens_k", 0, "B", batch, b_from));
      break;
    case KvLayout::kVarlen:
      GA_RETURN_IF_ERROR(check_dim(p.cu_seqlens_k, "cu_seqlens_k", 0, "B+1", batch + 1, b_from));
      break;
    case KvLayout::kPaged:
      GA_RETURN_IF_ERROR(check_dim(p.block_table, "block_table", 0, "B", batch, b_from));
      GA_RETURN_IF_ERROR(check_dim(p.seqlens_k, "seqlens_k", 0, "B", batch, b_from));
      if (p.k.shape[1] < 1) {
        return InvalidArgument("k: page_size = " + std::to_string(p.k.shape[1]) +
                               " in paged shape " + shape_string(p.k) + " (accepted: >= 1)");
      }
      break;
  }
  if (kv_is_sharded(p)) {
    GA_RETURN_IF_ERROR(check_dim(p.kv_shard_offset, "kv_shard_offset", 0, "B", batch, b_from));
    GA_RETURN_IF_ERROR(check_dim(p.kv_total_len, "kv_total_len", 0, "B", batch, b_from));
  }
  if (p.k_scale.defined()) {  // fp8 KV cache: scales per (sequence | page, KV head)
    for (const auto& [t, name] : {std::pair{&p.k_scale, "k_scale"}, std::pair{&p.v_scale, "v_scale"}}) {
      if (p.kv_scale_per_page) {
        GA_RETURN_IF_ERROR(check_dim(*t, name, 0, "num_pages", p.k.shape[0], "num_pages of k (kv_scale_per_page)"));
      } else {
        GA_RETURN_IF_ERROR(check_dim(*t, name, 0, "B", batch, b_from));
      }
      GA_RETURN_IF_ERROR(check_dim(*t, name, 1, "Hkv", hkv, "Hkv of k"));
    }
  }
  return Status::Ok();
}

Status check_devices_and_overlap(const AttentionParams& p) {
  const auto views = attention_views(p);
  for (const NamedView& v : views) {
    if (v.view != &p.q) GA_RETURN_IF_ERROR(check_same_device(p.q, "q", *v.view, v.name));
  }
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.out, "out"));
  GA_RETURN_IF_ERROR(check_no_self_overlap(p.lse, "lse"));
  for (const NamedView& v : views) {
    if (v.output) continue;
    GA_RETURN_IF_ERROR(check_no_overlap(p.out, "out", *v.view, v.name));
    GA_RETURN_IF_ERROR(check_no_overlap(p.lse, "lse", *v.view, v.name));
  }
  return check_no_overlap(p.lse, "lse", p.out, "out");
}

Status check_scalars(const AttentionParams& p) {
  if (p.window_left < -1) {
    return InvalidArgument("window_left: " + std::to_string(p.window_left) + " (accepted: -1 = unbounded, or >= 0)");
  }
  if (p.window_right < -1) {
    return InvalidArgument("window_right: " + std::to_string(p.window_right) + " (accepted: -1 = unbounded, or >= 0)");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0.f) {
    return InvalidArgument("softcap: " + std::to_string(p.softcap) + " (accepted: 0 = off, or finite > 0)");
  }
  if (std::isinf(p.softmax_scale)) {
    return InvalidArgument("softmax_scale: " + std::to_string(p.softmax_scale) +
                           " (accepted: a finite value, or NaN for the default 1/sqrt(D))");
  }
  if (p.num_splits < 0) {
    return InvalidArgument("num_splits: " + std::to_string(p.num_splits) +
                           " (accepted: 0 = automatic, or >= 1)");
  }
  if (p.max_seqlen_q < 0) {
    return InvalidArgument("max_seqlen_q: " + std::to_string(p.max_seqlen_q) +
                           " (accepted: 0 = computed from cu_seqlens_q, or >= 1)");
  }
  if (p.max_seqlen_k < 0) {
    return InvalidArgument("max_seqlen_k: " + std::to_string(p.max_seqlen_k) +
                           " (accepted: 0 = computed from the index tensors, or >= 1)");
  }
  return Status::Ok();
}

Status check_max_seqlen(int64_t given, int64_t longest, const char* name) {
  if (given > 0 && longest > given) {
    return InvalidArgument(std::string(name) + ": " + std::to_string(given) +
                           " is less than the longest sequence (" + std::to_string(longest) +
                           "); accepted: 0 = computed, or an upper bound >= " + std::to_string(longest));
  }
  return Status::Ok();
}

int64_t longest_segment(const std::vector<int64_t>& cu) {
  int64_t m = 0;
  for (size_t i = 1; i < cu.size(); ++i) m = std::max(m, cu[i] - cu[i - 1]);
  return m;
}

}  // namespace

Status validate_attention(const AttentionParams& p) {
  GA_RETURN_IF_ERROR(check_tensors(p));
  GA_RETURN_IF_ERROR(check_layouts(p));
  GA_RETURN_IF_ERROR(check_shapes(p));
  GA_RETURN_IF_ERROR(check_devices_and_overlap(p));
  return check_scalars(p);
}

namespace {

// Index contents of Q and K/V (cu_seqlens, seqlens_k, block_table).
Status check_qkv_indices(const AttentionParams& p, const RunOptions& options) {
  bool read = false;
  if (q_is_varlen(p)) {
    std::vector<int64_t> cu;
    GA_RETURN_IF_ERROR(read_indices(p.cu_seqlens_q, "cu_seqlens_q", options, &cu, &read));
    if (read) {
      GA_RETURN_IF_ERROR(check_cu_seqlens(cu, "cu_seqlens_q", p.q.shape[0], "total_q (q.shape[0])"));
      GA_RETURN_IF_ERROR(check_max_seqlen(p.max_seqlen_q, longest_segment(cu), "max_seqlen_q"));
    }
  }
  const KvLayout layout = kv_layout(p);
  if (layout == KvLayout::kVarlen) {
    std::vector<int64_t> cu;
    GA_RETURN_IF_ERROR(read_indices(p.cu_seqlens_k, "cu_seqlens_k", options, &cu, &read));
    if (read) {
      GA_RETURN_IF_ERROR(check_cu_seqlens(cu, "cu_seqlens_k", p.k.shape[0], "total_k (k.shape[0])"));
      GA_RETURN_IF_ERROR(check_max_seqlen(p.max_seqlen_k, longest_segment(cu), "max_seqlen_k"));
    }
    return Status::Ok();
  }
  if (!p.seqlens_k.defined()) return Status::Ok();  // batched K/V without fill levels

  std::vector<int64_t> lens;
  GA_RETURN_IF_ERROR(read_indices(p.seqlens_k, "seqlens_k", options, &lens, &read));
  if (!read) return Status::Ok();
  const bool paged = layout == KvLayout::kPaged;
  const int64_t page_size = paged ? p.k.shape[1] : 0;
  const int64_t max_pages = paged ? p.block_table.shape[1] : 0;
  // Batched: the cache holds Sk keys per row; paged: the block table addresses max_pages pages.
  // Saturated: views too large to allocate still reach this check (found by the fuzzer: a block
  // table ~2^62 pages wide times page_size 2 overflowed int64).
  const int64_t capacity = !paged ? p.k.shape[1]
                           : page_size > 0 && max_pages > std::numeric_limits<int64_t>::max() / page_size
                               ? std::numeric_limits<int64_t>::max()
                               : max_pages * page_size;
  const char* capacity_name = paged ? "max_pages * page_size" : "Sk (k.shape[1])";
  int64_t longest = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    if (lens[b] < 0 || lens[b] > capacity) {
      return InvalidArgument("seqlens_k: seqlens_k[" + std::to_string(b) + "] = " + std::to_string(lens[b]) +
                             " out of range (accepted: 0.." + std::to_string(capacity) + " = " +
                             capacity_name + ")");
    }
    longest = std::max(longest, lens[b]);
  }
  GA_RETURN_IF_ERROR(check_max_seqlen(p.max_seqlen_k, longest, "max_seqlen_k"));
  if (!paged) return Status::Ok();

  std::vector<int64_t> table;
  GA_RETURN_IF_ERROR(read_indices(p.block_table, "block_table", options, &table, &read));
  if (!read) return Status::Ok();
  const int64_t num_pages = p.k.shape[0];
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t used = (lens[b] + page_size - 1) / page_size;  // pages sequence b actually reads
    for (int64_t j = 0; j < used; ++j) {
      const int64_t page = table[b * static_cast<size_t>(max_pages) + static_cast<size_t>(j)];  // row-major [B, max_pages]
      if (page < 0 || page >= num_pages) {
        return InvalidArgument("block_table: block_table[" + std::to_string(b) + "][" + std::to_string(j) +
                               "] = " + std::to_string(page) + " out of range (accepted: 0.." +
                               std::to_string(num_pages - 1) + ", num_pages = " +
                               std::to_string(num_pages) + ")");
      }
    }
  }
  return Status::Ok();
}

// Partial-output mode: 0 <= kv_shard_offset[b], kv_shard_offset[b] + Sk_b <= kv_total_len[b]
// <= INT32_MAX (key positions are int32 on the device). Sk_b comes from whichever of
// cu_seqlens_k / seqlens_k / k's shape says it; unreadable (device) lengths skip that part.
Status check_shard_indices(const AttentionParams& p, const RunOptions& options) {
  std::vector<int64_t> offset, total;
  bool read_offset = false, read_total = false;
  GA_RETURN_IF_ERROR(read_indices(p.kv_shard_offset, "kv_shard_offset", options, &offset, &read_offset));
  GA_RETURN_IF_ERROR(read_indices(p.kv_total_len, "kv_total_len", options, &total, &read_total));
  if (!read_offset || !read_total) return Status::Ok();
  std::vector<int64_t> lens;  // Sk_b when known on the host
  bool read_lens = false;
  if (kv_layout(p) == KvLayout::kVarlen) {
    std::vector<int64_t> cu;
    GA_RETURN_IF_ERROR(read_indices(p.cu_seqlens_k, "cu_seqlens_k", options, &cu, &read_lens));
    for (size_t b = 0; read_lens && b + 1 < cu.size(); ++b) lens.push_back(cu[b + 1] - cu[b]);
  } else if (p.seqlens_k.defined()) {
    GA_RETURN_IF_ERROR(read_indices(p.seqlens_k, "seqlens_k", options, &lens, &read_lens));
  } else {
    lens.assign(offset.size(), p.k.shape[1]);  // batched without fill levels: Sk keys per row
    read_lens = true;
  }
  constexpr int64_t kMaxTotal = 2147483647;  // INT32_MAX
  for (size_t b = 0; b < offset.size(); ++b) {
    std::string at = "[";  // "[b] = " (built by appends: GCC 12's -Wrestrict misfires on "[" + ...)
    at += std::to_string(b);
    at += "] = ";
    if (offset[b] < 0) {
      return InvalidArgument("kv_shard_offset: kv_shard_offset" + at + std::to_string(offset[b]) +
                             " (accepted: >= 0)");
    }
    if (total[b] < 0) {
      return InvalidArgument("kv_total_len: kv_total_len" + at + std::to_string(total[b]) + " (accepted: >= 0)");
    }
    const int64_t len = read_lens && b < lens.size() ? lens[b] : 0;
    if (offset[b] + len > total[b] || total[b] > kMaxTotal) {
      return InvalidArgument("kv_total_len: kv_total_len" + at + std::to_string(total[b]) +
                             " but the shard holds keys [" + std::to_string(offset[b]) + ", " +
                             std::to_string(offset[b] + len) + ") (accepted: kv_shard_offset[b] + Sk_b <= "
                             "kv_total_len[b] <= 2147483647)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate_attention_indices(const AttentionParams& p, const RunOptions& options) {
  GA_RETURN_IF_ERROR(check_qkv_indices(p, options));
  if (kv_is_sharded(p)) GA_RETURN_IF_ERROR(check_shard_indices(p, options));
  return Status::Ok();
}

}  // namespace groupattn
