// context_parallel_attention: this rank's partial attention, one NCCL all-gather of the partials,
// attention_merge. Library groupattn_cp (built only when NCCL is found; CMakeLists.txt).
//
// Workspace (caller-provided, or allocated stream-ordered for the call):
//   o_all   [R, total_q, Hq, Dv] in Q's dtype    slot `rank` is this rank's partial O
//   lse_all fp32 [R, Hq, total_q]                slot `rank` is this rank's partial LSE
//   then the local engine's own workspace (split-KV partials), if it needs any.
// The local engine writes straight into its slots, and the all-gathers run in place
// (sendbuff = recvbuff + rank * count), so nothing is copied besides what NCCL moves.
// NVLink multicast (NVLS) is never asked for: plain all-gather, no cuMulticast* anywhere.
#include <nccl.h>

#include <string>

#include "core/cuda_runtime_shim.h"
#include "groupattn/context_parallel.h"

namespace groupattn {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return {StatusCode::kCudaError, std::string("context_parallel_attention: ") + what + " failed: " +
                                      ncclGetErrorString(r)};
}

struct Plan {
  int ranks = 0, rank = 0;
  int64_t total_q = 0, hq = 0, dv = 0;
  size_t o_slot_bytes = 0, lse_slot_bytes = 0;  // one rank's partial
  size_t o_all_bytes = 0, lse_all_bytes = 0;    // R slots, aligned
  size_t engine_bytes = 0;
  size_t total() const { return o_all_bytes + lse_all_bytes + align_up(engine_bytes); }
};

Status make_plan(const AttentionParams& p, void* nccl_comm, const RunOptions& options, Plan* plan) {
  if (nccl_comm == nullptr) return InvalidArgument("nccl_comm: null (accepted: an initialised ncclComm_t)");
  GA_RETURN_IF_ERROR(validate_attention(p));
  if (!p.kv_shard_offset.defined() || !p.kv_total_len.defined()) {
    return InvalidArgument(
        "kv_shard_offset / kv_total_len: required by context_parallel_attention (the local problem is "
        "this rank's KV shard in partial-output mode)");
  }
  if (p.q.device != Device::kCUDA) {
    return InvalidArgument(std::string("q: in ") + device_name(p.q.device) +
                           " memory (accepted: cuda; NCCL moves device memory)");
  }
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  GA_RETURN_IF_ERROR(nccl_status(ncclCommCount(comm, &plan->ranks), "ncclCommCount"));
  GA_RETURN_IF_ERROR(nccl_status(ncclCommUserRank(comm, &plan->rank), "ncclCommUserRank"));
  const bool varlen_q = q_is_varlen(p);
  plan->total_q = varlen_q ? p.q.shape[0] : p.q.shape[0] * p.q.shape[1];
  plan->hq = p.q.size(-2);
  plan->dv = p.v.size(-1);
  plan->o_slot_bytes = static_cast<size_t>(plan->total_q * plan->hq * plan->dv) * dtype_size(p.q.dtype);
  plan->lse_slot_bytes = static_cast<size_t>(plan->hq * plan->total_q) * sizeof(float);
  plan->o_all_bytes = align_up(plan->o_slot_bytes * static_cast<size_t>(plan->ranks));
  plan->lse_all_bytes = align_up(plan->lse_slot_bytes * static_cast<size_t>(plan->ranks));
  // The local engine's scratch depends on the geometry only, so the caller's own out/lse stand in
  // for the workspace slots the run writes.
  return attention_workspace_bytes(p, options, &plan->engine_bytes);
}

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      return ncclFloat32;
  }
}

Status run_with_workspace(const AttentionParams& p, ncclComm_t comm, const RunOptions& options,
                          const Plan& plan, char* ws) {
  char* o_all = ws;
  char* lse_all = ws + plan.o_all_bytes;
  char* engine_ws = lse_all + plan.lse_all_bytes;
  char* o_slot = o_all + static_cast<size_t>(plan.rank) * plan.o_slot_bytes;
  char* lse_slot = lse_all + static_cast<size_t>(plan.rank) * plan.lse_slot_bytes;
  const Device dev = p.q.device;
  const int id = p.q.device_id;

  // 1. This rank's partial (O, LSE) into its slots: out shaped like the caller's (rank 3 or 4), contiguous.
  AttentionParams local = p;
  if (p.out.rank == 4) {
    local.out = make_contiguous_view(o_slot, p.out.dtype, {p.out.shape[0], p.out.shape[1], plan.hq, plan.dv}, dev, id);
  } else {
    local.out = make_contiguous_view(o_slot, p.out.dtype, {plan.total_q, plan.hq, plan.dv}, dev, id);
  }
  local.lse = make_contiguous_view(lse_slot, DType::kF32, {plan.hq, plan.total_q}, dev, id);
  RunOptions local_options = options;
  local_options.workspace = plan.engine_bytes > 0 ? engine_ws : nullptr;
  local_options.workspace_bytes = plan.engine_bytes;
  GA_RETURN_IF_ERROR(attention(local, local_options));

  // 2. All-gather both partials in place, as one NCCL group (one launch, one synchronisation).
  auto stream = static_cast<cudaStream_t>(options.stream);
  GA_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart"));
  const ncclResult_t r1 = ncclAllGather(o_slot, o_all, plan.o_slot_bytes / dtype_size(p.q.dtype),
                                        nccl_dtype(p.q.dtype), comm, stream);
  const ncclResult_t r2 = ncclAllGather(lse_slot, lse_all, plan.lse_slot_bytes / sizeof(float), ncclFloat32, comm, stream);
  const ncclResult_t r3 = ncclGroupEnd();
  GA_RETURN_IF_ERROR(nccl_status(r1, "ncclAllGather (O)"));
  GA_RETURN_IF_ERROR(nccl_status(r2, "ncclAllGather (LSE)"));
  GA_RETURN_IF_ERROR(nccl_status(r3, "ncclGroupEnd"));

  // 3. Merge the R partials in rank order into the caller's out / lse.
  MergeParams m;
  m.o_partials = make_contiguous_view(o_all, p.q.dtype, {plan.ranks, plan.total_q, plan.hq, plan.dv}, dev, id);
  m.lse_partials = make_contiguous_view(lse_all, DType::kF32, {plan.ranks, plan.hq, plan.total_q}, dev, id);
  m.out = p.out;
  m.lse = p.lse;
  return attention_merge(m, options);
}

}  // namespace

Status context_parallel_workspace_bytes(const AttentionParams& local_shard, void* nccl_comm,
                                        const RunOptions& options, size_t* bytes) {
  Plan plan;
  GA_RETURN_IF_ERROR(make_plan(local_shard, nccl_comm, options, &plan));
  *bytes = plan.total();
  return Status::Ok();
}

Status context_parallel_attention(const AttentionParams& local_shard, void* nccl_comm, const RunOptions& options) {
  Plan plan;
  GA_RETURN_IF_ERROR(make_plan(local_shard, nccl_comm, options, &plan));
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  const size_t need = plan.total();
  if (options.workspace != nullptr && options.workspace_bytes >= need) {
    return run_with_workspace(local_shard, comm, options, plan, static_cast<char*>(options.workspace));
  }
  void* ws = nullptr;
  GA_RETURN_IF_ERROR(allocate_workspace(need, options.stream, &ws));
  Status s = run_with_workspace(local_shard, comm, options, plan, static_cast<char*>(ws));
  Status f = free_workspace(ws, options.stream);
  return s.ok() ? f : s;
}

}  // namespace groupattn
