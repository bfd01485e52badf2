"""Context-parallel attention over torch.distributed (docs/CONTEXT_PARALLEL.md, "Python").

Every rank of the process group holds the whole Q and one contiguous shard of each sequence's
keys. Each rank computes its partial (O, LSE) over its shard (attention() in partial-output mode),
the partials are all-gathered in the group, and every rank merges all of them in rank order with
attention_merge, so every rank returns the same bits. This is the C++ context_parallel_attention
exchange (groupattn_cp) written with torch collectives, so it runs on any backend: gloo with CPU
tensors (the reference engine), NCCL with CUDA tensors.

Exchange: partial O travels in q's dtype (as in the C++ path: half the bytes of fp32 for bf16/f16;
the merge reads it in fp32 and each partial is rounded once, like an unsharded output), LSE in
fp32 in the library's [Hq, total_q] layout. Two all-gathers (O, then LSE), no reduce.

Importing this module imports torch.
"""

import torch
import torch.distributed as dist

from ._frameworks import framework_of
from ._ops import alloc_attention_outputs, cache_seqlens_tensor, run_attention, run_merge


def _per_sequence(x, q, b, name):
    """An int -> int32 [B] on q's device; a tensor passes through (the library validates it)."""
    if x is None:
        raise ValueError(f"{name}: required (int32 [B] tensor or an int for every sequence)")
    if hasattr(x, "shape"):
        return x
    return torch.full((b,), int(x), dtype=torch.int32, device=q.device)


def _all_gather(buf, local, group):
    """buf [R, ...] <- every rank's `local`, in group-rank order."""
    if dist.get_backend(group) == "gloo":
        # gloo has no all_gather_into_tensor on every torch version: gather into views of buf.
        dist.all_gather(list(buf.unbind(0)), local, group=group)
    else:
        dist.all_gather_into_tensor(buf, local, group=group)


def context_parallel_attention(q, k_shard, v_shard, *, shard_offset, total_len, group=None,
                               causal=False, window=(-1, -1), softcap=0.0, scale=None, engine=None,
                               cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                               max_seqlen_k=None, cache_seqlens=None, block_table=None,
                               num_splits=0, out=None, return_lse=True):
    """Attention of the whole Q over keys sharded across the ranks of `group` (default: the
    world group). Every rank calls it with the same Q (same shapes, same values) and its own shard.

    q: [B, Sq, Hq, D], or varlen [total_q, Hq, D] with cu_seqlens_q.
    k_shard, v_shard: this rank's keys in any layout attention() / attention_with_kvcache()
    accepts (batched, varlen with cu_seqlens_k, KV cache with cache_seqlens / block_table).
    shard_offset, total_len: int32 [B] tensors (or ints, the same for every sequence): the shard
    sits at global key positions [shard_offset[b], shard_offset[b] + Sk_b) of a sequence of
    total_len[b] keys. Masks use global positions (causal is bottom-right aligned to the whole
    sequence). Shards need not be equal, may be empty, and need not cover in rank order; they must
    together cover each sequence's keys exactly once for the result to be the whole attention.

    Returns (out, lse) like attention(): out like q with Dv; lse fp32 [B, Hq, Sq] (batched) or
    [Hq, total_q] (varlen), None with return_lse=False. Identical on every rank.
    """
    fw = framework_of(q)
    if fw.name != "torch":
        raise TypeError(f"q: context_parallel_attention needs torch tensors (got {type(q).__module__})")
    varlen = cu_seqlens_q is not None
    b = (cu_seqlens_q.shape[0] - 1) if varlen else q.shape[0]
    offset = _per_sequence(shard_offset, q, b, "shard_offset")
    total = _per_sequence(total_len, q, b, "total_len")
    hq, dv = q.shape[-2], v_shard.shape[-1]
    total_q = q.shape[0] if (varlen or q.dim() != 4) else q.shape[0] * q.shape[1]

    # 1. This rank's partial: O in q's dtype, LSE fp32 [Hq, total_q] (the library's layout).
    o_local = torch.empty((total_q, hq, dv), dtype=q.dtype, device=q.device)
    o_view = o_local.view(tuple(q.shape[:-1]) + (dv,))
    _, lse_local = run_attention(q, k_shard, v_shard, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  seqlens_k=cache_seqlens_tensor(fw, q, cache_seqlens), block_table=block_table,
                  kv_shard_offset=offset, kv_total_len=total, max_seqlen_q=max_seqlen_q,
                  max_seqlen_k=max_seqlen_k, scale=scale, causal=causal, window=window,
                  softcap=softcap, num_splits=num_splits, out=o_view, return_lse=True,
                  engine=engine)
    if lse_local.dim() == 3:  # batched: [B, Hq, Sq] is a view of the library's [Hq, B * Sq] buffer
        lse_local = lse_local.permute(1, 0, 2).reshape(hq, total_q)

    # 2. All-gather the partials, rank r's in slot r.
    world = dist.get_world_size(group)
    o_all = torch.empty((world, total_q, hq, dv), dtype=q.dtype, device=q.device)
    lse_all = torch.empty((world, hq, total_q), dtype=torch.float32, device=q.device)
    _all_gather(o_all, o_local, group)
    _all_gather(lse_all, lse_local, group)

    # 3. Merge in rank order (deterministic: the same bits on every rank).
    out, lse_ret, lse = alloc_attention_outputs(fw, q, v_shard, varlen, return_lse, out)
    run_merge(fw, o_all, lse_all, out, lse)
    return out, lse_ret
