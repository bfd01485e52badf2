#include "attention/engines/cuda/host_params.h"

#include <algorithm>
#include <cmath>

namespace groupattn::cuda_engine {
namespace {

constexpr int64_t kUnboundedWindow = int64_t{1} << 31;
constexpr size_t kWorkspaceAlign = 256;

size_t align_up(size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

size_t partial_o_bytes(int splits, int64_t total_q, int64_t heads_q, int64_t head_dim_v) {
  return align_up(static_cast<size_t>(splits) * total_q * heads_q * head_dim_v * sizeof(float));
}

// The last three dims are (row, head, element); batched/paged tensors add a leading one.
void strides3(const TensorView& t, int64_t* batch, int64_t* row, int64_t* head) {
  *batch = t.rank == 4 ? t.stride[0] : 0;
  *row = t.stride[t.rank - 3];
  *head = t.stride[t.rank - 2];
}

}  // namespace

KernelParams kernel_params_from(const AttentionParams& p) {
  const KvLayout layout = kv_layout(p);
  const bool q_varlen = q_is_varlen(p);
  KernelParams kp;
  kp.q = p.q.data;
  kp.k = p.k.data;
  kp.v = p.v.data;
  kp.out = p.out.data;
  kp.lse = static_cast<float*>(p.lse.data);
  strides3(p.q, &kp.q_batch_stride, &kp.q_row_stride, &kp.q_head_stride);
  strides3(p.k, &kp.k_batch_stride, &kp.k_row_stride, &kp.k_head_stride);
  strides3(p.v, &kp.v_batch_stride, &kp.v_row_stride, &kp.v_head_stride);
  strides3(p.out, &kp.o_batch_stride, &kp.o_row_stride, &kp.o_head_stride);
  if (p.k_scale.defined()) {
    kp.k_scale = static_cast<const float*>(p.k_scale.data);
    kp.v_scale = static_cast<const float*>(p.v_scale.data);
    kp.k_scale_b_stride = p.k_scale.stride[0], kp.k_scale_h_stride = p.k_scale.stride[1];
    kp.v_scale_b_stride = p.v_scale.stride[0], kp.v_scale_h_stride = p.v_scale.stride[1];
  }
  if (p.lse.defined()) {
    kp.lse_head_stride = p.lse.stride[0];
    kp.lse_row_stride = p.lse.stride[1];
  }
  kp.cu_seqlens_q = static_cast<const int32_t*>(p.cu_seqlens_q.data);
  kp.cu_seqlens_k = static_cast<const int32_t*>(p.cu_seqlens_k.data);
  kp.seqlens_k = static_cast<const int32_t*>(p.seqlens_k.data);
  kp.kv_shard_offset = static_cast<const int32_t*>(p.kv_shard_offset.data);
  kp.kv_total_len = static_cast<const int32_t*>(p.kv_total_len.data);
  if (layout == KvLayout::kPaged) {
    kp.block_table = static_cast<const int32_t*>(p.block_table.data);
    kp.block_table_stride = p.block_table.stride[0];
    kp.page_size = static_cast<int>(p.k.size(1));
  }
  // Varlen Q: the bound the caller gave; batched Q: [B, Sq, ...].
  kp.batch = static_cast<int>(q_varlen ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0));
  kp.seqlen_q = static_cast<int>(q_varlen ? p.max_seqlen_q : p.q.size(1));
  kp.seqlen_k = layout == KvLayout::kBatched ? static_cast<int>(p.k.size(1)) : 0;
  kp.heads_q = static_cast<int>(p.q.size(-2));
  kp.heads_kv = static_cast<int>(p.k.size(-2));
  kp.group = kp.heads_kv > 0 ? kp.heads_q / kp.heads_kv : 0;
  kp.scale = std::isnan(p.softmax_scale) ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.q.size(-1))))
                                         : p.softmax_scale;
  kp.softcap = p.softcap;
  kp.causal = p.causal;
  kp.window_left = std::min(p.window_left, kUnboundedWindow);
  kp.window_right = std::min(p.window_right, kUnboundedWindow);
  return kp;
}

size_t split_workspace_bytes(int splits, int64_t total_q, int64_t heads_q, int64_t head_dim_v) {
  return partial_o_bytes(splits, total_q, heads_q, head_dim_v) +
         align_up(static_cast<size_t>(splits) * total_q * heads_q * sizeof(float));
}

size_t list_partials_bytes(int64_t slots, int64_t max_q, int64_t heads_q, int64_t head_dim_v) {
  return align_up(split_workspace_bytes(static_cast<int>(slots), max_q, heads_q, head_dim_v));
}

size_t list_workspace_bytes(int64_t slots, int64_t batch, int64_t max_q, int64_t heads_q,
                            int64_t head_dim_v) {
  return list_partials_bytes(slots, max_q, heads_q, head_dim_v) +
         sizeof(int32_t) * static_cast<size_t>(2 * batch);
}

void set_split_workspace(KernelParams* kp, void* workspace, int64_t total_q, int64_t head_dim_v) {
  kp->partial_rows = total_q * kp->heads_q;
  kp->o_partial = static_cast<float*>(workspace);
  kp->lse_partial = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                             partial_o_bytes(kp->num_splits, total_q, kp->heads_q, head_dim_v));
  // The combine kernel reads the tile kernel's layout: O [S, total_q, Hq, Dv], LSE [S, total_q, Hq].
  kp->o_partial_in = kp->o_partial;
  kp->part_o_split_stride = kp->partial_rows * head_dim_v;
  kp->part_o_row_stride = kp->heads_q * head_dim_v;
  kp->part_o_head_stride = head_dim_v;
  kp->part_lse_split_stride = kp->partial_rows;
  kp->part_lse_row_stride = kp->heads_q;
  kp->part_lse_head_stride = 1;
}

}  // namespace groupattn::cuda_engine
