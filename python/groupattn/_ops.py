"""The Python front end of the ops: FlashAttention-3 and fla conventions in, the C++ params struct
out. Each function allocates outputs in the caller's framework, asks for a workspace only when the
call runs on a GPU, and hands every tensor to the extension unchanged (no copies, no
.contiguous()): the library's validation judges shapes, dtypes and strides.

Eager calls on torch tensors first try groupattn._torch_fast (built where torch was importable at
build time): one crossing that reads the tensors as at::Tensor, allocates outputs and workspace
with at::empty and runs on torch's current stream (docs/HOST_COST.md). It returns NotImplemented
for anything it does not take, and the call continues on the generic path below, unchanged.
"""

import os

from . import _ext
from ._frameworks import framework_of

# Set by enable_torch_fast() once torch is imported (groupattn/__init__.py): the module, torch.Tensor
# and torch.compiler.is_compiling. None: every call takes the generic path.
_fast = None
_Tensor = None
_is_compiling = None


def enable_torch_fast(torch):
    """Routes eager torch calls through groupattn._torch_fast when this build has it and
    GROUPATTN_TORCH_FAST is not 0. Returns whether it is on."""
    global _fast, _Tensor, _is_compiling
    if os.environ.get("GROUPATTN_TORCH_FAST", "1") == "0":
        return False
    try:
        from . import _torch_fast
    except ImportError:  # built without torch, or against another torch than this one
        return False
    _fast, _Tensor, _is_compiling = _torch_fast, torch.Tensor, torch.compiler.is_compiling
    return True


def disable_torch_fast():
    """Every call takes the generic path (tests and benchmarks compare the two)."""
    global _fast
    _fast = None

# Library argument names that the Python API spells differently (FlashAttention / fla names).
_PY_NAMES = {"seqlens_k": "cache_seqlens", "state_indices": "ssm_state_indices", "softmax_scale": "scale"}


def _renamed(err):
    """The library's error with its argument name spelled as this API spells it."""
    msg = str(err)
    head, sep, rest = msg.partition(":")
    if sep and head in _PY_NAMES:
        return type(err)(f"{_PY_NAMES[head]}{sep}{rest}")
    return err


def _call(fn, *args):
    try:
        return fn(*args)
    except (ValueError, NotImplementedError) as e:
        raise _renamed(e) from None


# KDA gate modes, as in KdaGate (include/groupattn/kda.h).
_GATE_LOG_DECAY, _GATE_SOFTPLUS, _GATE_LOWER_BOUND = 0, 1, 2


def _rank(x, name, ranks, layout):
    if not hasattr(x, "shape") or len(x.shape) not in ranks:
        got = len(x.shape) if hasattr(x, "shape") else type(x).__name__
        raise ValueError(f"{name}: rank {got} not accepted (expected {layout})")


def _window(window):
    try:
        left, right = window
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(f"window: expected a pair (left, right) of ints, -1 = unbounded; got {window!r}") from None


def _max_seqlen(fw, cu, given):
    if given is not None:
        return int(given)
    if cu is None or not fw.is_cuda(cu):
        return 0  # the library reads host-resident cu_seqlens itself
    # Device cu_seqlens: engines size their grids from the bound. Reading it costs a sync (and is
    # impossible during CUDA-graph capture): pass max_seqlen_* to avoid it.
    return int((cu[1:] - cu[:-1]).max())


def _args(fw, q, k, v, out):
    """Extension arguments for q, k, v, out and the bf16 mask (bit i = tensor i is numpy
    bfloat16; bit 3 = out)."""
    aq, b0 = fw.arg(q)
    ak, b1 = fw.arg(k)
    av, b2 = fw.arg(v)
    aout, b3 = fw.arg(out)
    return aq, ak, av, aout, b0 | (b1 << 1) | (b2 << 2) | (b3 << 3)


def alloc_attention_outputs(fw, q, v, varlen, return_lse, out=None):
    """out like q with v's head dim; lse fp32. Batched q [B, Sq, Hq, D] returns lse as
    [B, Hq, Sq] (FlashAttention's shape), strided as a view of the library's [Hq, B * Sq] buffer;
    varlen q returns the library's [Hq, total_q]. Returns (out, lse_returned, lse_for_library).
    The extension takes a rank-3 lse as that [B, Hq, Sq] view and merges B and Sq back into
    total_q itself, so the batched case costs one allocation and no view ops."""
    if out is None:
        out = fw.empty(q, tuple(q.shape[:-1]) + (v.shape[-1],), "like")
    if not return_lse:
        return out, None, None
    shape = q.shape
    if varlen or len(shape) != 4:
        lse = fw.empty(q, (shape[-2], shape[0]), "float32")
        return out, lse, lse
    lse = fw.empty_lse(q, shape[0], shape[2], shape[1])
    return out, lse, lse


def run_attention(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None, block_table=None,
                  kv_shard_offset=None, kv_total_len=None, max_seqlen_q=None, max_seqlen_k=None, scale=None, causal=False, window=(-1, -1),
                  softcap=0.0, num_splits=0, out=None, return_lse=True, engine=None, k_scale=None, v_scale=None,
                  kv_scale_per_page=False):
    """Validates nothing itself beyond what allocation needs; returns (out, lse)."""
    fw = framework_of(q)
    _rank(q, "q", (3, 4), "[B, Sq, Hq, D], or [total_q, Hq, D] with cu_seqlens_q")
    _rank(v, "v", (3, 4), "[B, Sk, Hkv, Dv], [total_k, Hkv, Dv] or [num_pages, page_size, Hkv, Dv]")
    wl, wr = _window(window)
    out, lse_ret, lse = alloc_attention_outputs(fw, q, v, cu_seqlens_q is not None, return_lse, out)
    aq, ak, av, aout, mask = _args(fw, q, k, v, out)
    max_q = _max_seqlen(fw, cu_seqlens_q, max_seqlen_q)
    max_k = _max_seqlen(fw, cu_seqlens_k, max_seqlen_k)
    if fw.converts:
        c = fw.convert
        lse, cu_seqlens_q, cu_seqlens_k = c(lse), c(cu_seqlens_q), c(cu_seqlens_k)
        seqlens_k, block_table = c(seqlens_k), c(block_table)
        kv_shard_offset, kv_total_len = c(kv_shard_offset), c(kv_total_len)
        k_scale, v_scale = c(k_scale), c(v_scale)
    # One crossing: the extension validates and selects once, and calls workspace_alloc only when
    # the selected GPU engine needs a workspace (None for host calls: they need none).
    try:
        _ext.attention_call(aq, ak, av, aout, lse, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table,
                            kv_shard_offset, kv_total_len, max_q, max_k, None if scale is None else float(scale), bool(causal), wl,
                            wr, float(softcap), int(num_splits), engine, fw.stream(q),
                            fw.workspace_alloc(q), mask, k_scale, v_scale, bool(kv_scale_per_page))
    except (ValueError, NotImplementedError) as e:
        raise _renamed(e) from None
    return out, lse_ret


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, out=None, return_lse=True,
              engine=None, kv_shard_offset=None, kv_total_len=None):
    """Softmax attention with grouped K/V heads (MHA/GQA/MQA), FlashAttention-3 conventions.

    q: [B, Sq, Hq, D] or varlen [total_q, Hq, D] with cu_seqlens_q (int32 [B+1]).
    k, v: [B, Sk, Hkv, D] / [.., Dv] or varlen [total_k, Hkv, D] with cu_seqlens_k.
    Hq % Hkv == 0; query head h reads KV head h // (Hq // Hkv). Causal masking is bottom-right
    aligned when Sq != Sk. window=(left, right), -1 = unbounded. scale defaults to 1/sqrt(D).

    Returns (out, lse): out like q with Dv; lse fp32 natural log, [B, Hq, Sq] for batched q and
    [Hq, total_q] for varlen q; lse is None when return_lse=False. A row that sees no key gives
    out = 0 and lse = -inf. engine= pins an engine by name (see engines()).

    Partial output (context parallelism): kv_shard_offset and kv_total_len (int32 [B], both or
    neither) say that k/v are one shard of each sequence's keys, at global positions
    [kv_shard_offset[b], kv_shard_offset[b] + Sk_b) of kv_total_len[b] keys. Masks use global
    positions (query i at kv_total_len[b] - Sq_b + i); out/lse are the attention over the shard's
    keys alone, and attention_merge() of the shards' (out, lse) is the whole attention.
    """
    if _fast is not None and type(q) is _Tensor and not _is_compiling():
        try:
            r = _fast.attention(q, k, v, out, cu_seqlens_q, cu_seqlens_k, None, None, kv_shard_offset,
                                kv_total_len, max_seqlen_q, max_seqlen_k, scale, causal, window, softcap, 0,
                                engine, return_lse, None, None, False, False)
        except (ValueError, NotImplementedError) as e:
            raise _renamed(e) from None
        if r is not NotImplemented:
            return r
    if framework_of(q).compiling():
        if out is not None:
            raise NotImplementedError("attention: out= is not supported under torch.compile")
        _no_shard_under_compile("attention", kv_shard_offset, kv_total_len)
        import torch

        o, lse = torch.ops.groupattn.attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q or 0), int(max_seqlen_k or 0),
            scale, causal, *_window(window), float(softcap), engine)
        return o, (lse if return_lse else None)
    return run_attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, scale=scale,
                         causal=causal, window=window, softcap=softcap, out=out,
                         return_lse=return_lse, engine=engine, kv_shard_offset=kv_shard_offset,
                         kv_total_len=kv_total_len)


def _no_shard_under_compile(name, kv_shard_offset, kv_total_len):
    if kv_shard_offset is not None or kv_total_len is not None:
        raise NotImplementedError(f"{name}: kv_shard_offset/kv_total_len are not supported under "
                                  "torch.compile (the registered custom op has no partial mode)")


def attention_merge(o_partials, lse_partials, *, out=None, return_lse=True):
    """Merges R partial attention results (attention() with kv_shard_offset/kv_total_len over
    R KV shards) into the whole: the split-KV combine, visiting the partials in index order
    (deterministic; the same bits wherever the same partials are merged).

    o_partials: [R, total_q, Hq, Dv], fp32 or out's dtype (a batched partial out [B, Sq, Hq, Dv]
    is row b * Sq + i: reshape it to [B * Sq, Hq, Dv]). lse_partials: fp32 [R, Hq, total_q], the
    library's layout (for a batched partial, the lse attention() returns as [B, Hq, Sq] is a view
    of that buffer: lse.transpose(1, 0, 2).reshape(Hq, B * Sq)). -inf = no key in that partial.
    out: optional [total_q, Hq, Dv] or batched [B, Sq, Hq, Dv] (bf16/f16/fp32); by default
    [total_q, Hq, Dv] in o_partials' dtype.

    Returns (out, lse fp32 [Hq, total_q], or None when return_lse=False). A row with -inf in
    every partial gets out = 0, lse = -inf. Host tensors merge in fp64; CUDA tensors on the
    current stream.
    """
    fw = framework_of(o_partials, "o_partials")
    _rank(o_partials, "o_partials", (4,), "[R, total_q, Hq, Dv]")
    _rank(lse_partials, "lse_partials", (3,), "[R, Hq, total_q]")
    if out is None:
        out = fw.empty(o_partials, tuple(o_partials.shape[1:]), "like")
    lse = None
    if return_lse:
        lse = fw.empty(o_partials, (o_partials.shape[2], o_partials.shape[1]), "float32")
    run_merge(fw, o_partials, lse_partials, out, lse)
    return out, lse


def run_merge(fw, o_partials, lse_partials, out, lse):
    """attention_merge into caller-allocated out / lse (lse None, or fp32 [Hq, total_q])."""
    ao, b0 = fw.arg(o_partials)
    aout, b1 = fw.arg(out)
    if fw.converts:
        lse, lse_partials = fw.convert(lse), fw.convert(lse_partials)
    _call(_ext.attention_merge, ao, lse_partials, aout, lse, fw.stream(o_partials), b0 | (b1 << 1))


def cache_seqlens_tensor(fw, q, cache_seqlens):
    """FlashAttention accepts an int for cache_seqlens (every sequence filled to that length)."""
    if cache_seqlens is None or hasattr(cache_seqlens, "shape"):
        return cache_seqlens
    return fw.full_int32(q, q.shape[0], int(cache_seqlens))


def attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, causal=False,
                           window=(-1, -1), softcap=0.0, scale=None, num_splits=0, out=None,
                           engine=None, kv_shard_offset=None, kv_total_len=None, k_descale=None,
                           v_descale=None, descale_per_page=False, return_lse=True):
    """Decode against a KV cache, FlashAttention-3 flash_attn_with_kvcache semantics.

    q: [B, Sq, Hq, D] (Sq new tokens per sequence, typically 1..16).
    k_cache, v_cache: batched [B, Sk, Hkv, D] / [.., Dv], or paged [num_pages, page_size, Hkv, D]
    with block_table (int32 [B, max_pages]).
    cache_seqlens: int32 [B] (or an int): keys in use per sequence, including the Sq new ones
    (which the caller has already written into the cache). Required for a paged cache.
    num_splits: split-KV count, 0 = automatic, 1 = no split.

    Returns (out [B, Sq, Hq, Dv], lse fp32 [B, Hq, Sq]). Appending new k/v to the cache
    (FlashAttention's k=, v= arguments) is not done here: write them into the cache first.
    kv_shard_offset / kv_total_len: partial output over a KV shard, as in attention(); the cache
    (cache_seqlens[b] keys) is then the shard at global offset kv_shard_offset[b].
    return_lse=False: returns (out, None) and allocates no LSE (with out= given, the call allocates
    nothing but a split-KV workspace: the cheapest call from Python).
    k_descale, v_descale: an fp8 KV cache (k_cache and v_cache float8_e4m3fn, q bf16/f16): fp32
    [B, Hkv] scales (FlashAttention-3's names and shape), the key being k_cache * k_descale and the
    value v_cache * v_descale; with descale_per_page=True on a paged cache, [num_pages, Hkv].
    """
    if _fast is not None and type(q) is _Tensor and not _is_compiling():
        try:
            r = _fast.attention(q, k_cache, v_cache, out, None, None, cache_seqlens, block_table,
                                kv_shard_offset, kv_total_len, None, None, scale, causal, window, softcap,
                                num_splits, engine, return_lse, k_descale, v_descale, descale_per_page, True)
        except (ValueError, NotImplementedError) as e:
            raise _renamed(e) from None
        if r is not NotImplemented:
            return r
    fw = framework_of(q)
    seqlens = cache_seqlens_tensor(fw, q, cache_seqlens)
    if fw.compiling():
        if out is not None:
            raise NotImplementedError("attention_with_kvcache: out= is not supported under torch.compile")
        if not return_lse:
            raise NotImplementedError("attention_with_kvcache: return_lse=False is not supported under torch.compile")
        if k_descale is not None or v_descale is not None:
            raise NotImplementedError("attention_with_kvcache: an fp8 KV cache (k_descale/v_descale) is not "
                                      "supported under torch.compile yet")
        _no_shard_under_compile("attention_with_kvcache", kv_shard_offset, kv_total_len)
        import torch

        return torch.ops.groupattn.attention_with_kvcache(
            q, k_cache, v_cache, seqlens, block_table, scale, causal, *_window(window),
            float(softcap), int(num_splits), engine)
    _rank(q, "q", (4,), "[B, Sq, Hq, D]")
    return run_attention(q, k_cache, v_cache, seqlens_k=seqlens, block_table=block_table, scale=scale,
                         causal=causal, window=window, softcap=softcap, num_splits=num_splits,
                         out=out, engine=engine, kv_shard_offset=kv_shard_offset,
                         kv_total_len=kv_total_len, k_scale=k_descale, v_scale=v_descale,
                         kv_scale_per_page=descale_per_page, return_lse=return_lse)


# ---------------------------------------------------------------------------------------------
# KDA


def kda_gate(use_gate_in_kernel, lower_bound):
    if not use_gate_in_kernel:
        return _GATE_LOG_DECAY
    return _GATE_SOFTPLUS if lower_bound is None else _GATE_LOWER_BOUND


def alloc_kda_outputs(fw, q, v, state_v_first, cu_seqlens, want_final_state):
    """o [B, T, HV, V] in q's dtype; final state fp32 [N, HV, V, K] (V-first) or [N, HV, K, V]."""
    _rank(q, "q", (4,), "[B, T, H, K]")
    _rank(v, "v", (4,), "[B, T, HV, V]")
    o = fw.empty(q, tuple(v.shape), "like")
    final = None
    if want_final_state:
        n = (cu_seqlens.shape[0] - 1) if cu_seqlens is not None else q.shape[0]
        hv, kd, vd = v.shape[2], q.shape[3], v.shape[3]
        shape = (n, hv, vd, kd) if state_v_first else (n, hv, kd, vd)
        final = fw.empty(q, shape, "float32")
    return o, final


def run_kda(q, k, v, g, beta, *, scale=None, initial_state=None, final_state=None, cu_seqlens=None,
            state_indices=None, state_v_first=True, gate=_GATE_LOG_DECAY, A_log=None, dt_bias=None,
            lower_bound=None, use_qk_l2norm=False, use_beta_sigmoid=False, allow_neg_eigval=False,
            out=None, engine=None):
    fw = framework_of(q)
    aq, ak, av, aout, mask = _args(fw, q, k, v, out)
    if fw.converts:
        c = fw.convert
        g, beta, initial_state, final_state = c(g), c(beta), c(initial_state), c(final_state)
        cu_seqlens, state_indices, A_log, dt_bias = c(cu_seqlens), c(state_indices), c(A_log), c(dt_bias)
    try:
        _ext.kda_call(aq, ak, av, g, beta, aout, initial_state, final_state, cu_seqlens, state_indices,
                      bool(state_v_first), gate, A_log, dt_bias,
                      -5.0 if lower_bound is None else float(lower_bound), bool(use_qk_l2norm),
                      bool(use_beta_sigmoid), bool(allow_neg_eigval),
                      None if scale is None else float(scale), engine, fw.stream(q),
                      fw.workspace_alloc(q), mask)
    except (ValueError, NotImplementedError) as e:
        raise _renamed(e) from None


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, lower_bound=None, A_log=None, dt_bias=None, state_v_first=False,
              cu_seqlens=None, engine=None):
    """Kimi Delta Attention, chunked prefill; fla chunk_kda argument names.

    q, k: [B, T, H, K]; v: [B, T, HV, V] (HV % H == 0); g: fp32 [B, T, HV, K] (log decay, or the
    raw gate input with use_gate_in_kernel: softplus gate with A_log, or the lower-bound sigmoid
    gate when lower_bound is given); beta: fp32 [B, T, HV]. Varlen: B == 1 and cu_seqlens [N+1].
    States are fp32 [N, HV, K, V] (state_v_first=False, fla's default, so ported fla code means
    what it meant there) or [N, HV, V, K] (state_v_first=True, the serving layout of vLLM/SGLang
    state pools and fla's own KDA layer).

    Returns (o [B, T, HV, V], final_state or None).
    """
    if _fast is not None and type(q) is _Tensor and not _is_compiling():
        try:
            r = _fast.kda(q, k, v, g, beta, scale, initial_state, 1 if output_final_state else 0, cu_seqlens,
                          None, state_v_first, kda_gate(use_gate_in_kernel, lower_bound), A_log, dt_bias,
                          lower_bound, use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel,
                          allow_neg_eigval, engine)
        except (ValueError, NotImplementedError) as e:
            raise _renamed(e) from None
        if r is not NotImplemented:
            return r
    fw = framework_of(q)
    if fw.compiling():
        import torch

        o, final = torch.ops.groupattn.chunk_kda(
            q, k, v, g, beta, scale, initial_state, bool(output_final_state),
            bool(use_qk_l2norm_in_kernel), kda_gate(use_gate_in_kernel, lower_bound),
            bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
            -5.0 if lower_bound is None else float(lower_bound), A_log, dt_bias, bool(state_v_first),
            cu_seqlens, engine)
        return o, (final if output_final_state else None)
    o, final = alloc_kda_outputs(fw, q, v, state_v_first, cu_seqlens, output_final_state)
    run_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state, final_state=final,
            cu_seqlens=cu_seqlens, state_v_first=state_v_first,
            gate=kda_gate(use_gate_in_kernel, lower_bound), A_log=A_log, dt_bias=dt_bias,
            lower_bound=lower_bound, use_qk_l2norm=use_qk_l2norm_in_kernel,
            use_beta_sigmoid=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval, out=o,
            engine=engine)
    return o, final


def fused_recurrent_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, cu_seqlens=None, ssm_state_indices=None,
                        use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                        allow_neg_eigval=False, lower_bound=None, A_log=None, dt_bias=None,
                        state_v_first=False, engine=None):
    """KDA recurrent step(s), fla fused_recurrent_kda argument names (the decode path of vLLM and
    SGLang). Same tensors as chunk_kda. With ssm_state_indices (int32 [N]), initial_state is a
    state pool [pool, HV, ., .]: sequence n starts from row ssm_state_indices[n] and its final
    state is written back to that row in place; the pool is returned as final_state.

    Returns (o, final_state or None).
    """
    gate = kda_gate(use_gate_in_kernel, lower_bound)
    if _fast is not None and type(q) is _Tensor and not _is_compiling():
        pool = ssm_state_indices is not None
        if not (pool and initial_state is None):  # that error is raised below
            try:
                r = _fast.kda(q, k, v, g, beta, scale, initial_state, 2 if pool else (1 if output_final_state else 0),
                              cu_seqlens, ssm_state_indices, state_v_first, gate, A_log, dt_bias, lower_bound,
                              use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, engine)
            except (ValueError, NotImplementedError) as e:
                raise _renamed(e) from None
            if r is not NotImplemented:
                return r
    fw = framework_of(q)
    if fw.compiling():
        import torch

        o, final = torch.ops.groupattn.fused_recurrent_kda(
            q, k, v, g, beta, scale, initial_state, bool(output_final_state), ssm_state_indices,
            bool(use_qk_l2norm_in_kernel), gate, bool(use_beta_sigmoid_in_kernel),
            bool(allow_neg_eigval), -5.0 if lower_bound is None else float(lower_bound), A_log,
            dt_bias, bool(state_v_first), cu_seqlens, engine)
        if ssm_state_indices is not None:
            return o, initial_state
        return o, (final if output_final_state else None)
    pool = ssm_state_indices is not None
    if pool and initial_state is None:
        raise ValueError("initial_state: required with ssm_state_indices (it is the state pool "
                         "updated in place)")
    o, final = alloc_kda_outputs(fw, q, v, state_v_first, cu_seqlens, output_final_state and not pool)
    if pool:
        final = initial_state
    run_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state, final_state=final,
            cu_seqlens=cu_seqlens, state_indices=ssm_state_indices, state_v_first=state_v_first,
            gate=gate, A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound,
            use_qk_l2norm=use_qk_l2norm_in_kernel, use_beta_sigmoid=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval, out=o, engine=engine)
    return o, final


# ---------------------------------------------------------------------------------------------
# Workspace queries (for callers that own their allocator, e.g. a serving engine's arena)


def attention_workspace_bytes(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, cache_seqlens=None,
                              block_table=None, max_seqlen_q=None, max_seqlen_k=None, causal=False,
                              window=(-1, -1), softcap=0.0, scale=None, num_splits=0, engine=None,
                              kv_shard_offset=None, kv_total_len=None, k_descale=None, v_descale=None,
                              descale_per_page=False):
    """Bytes of device workspace the selected engine needs for this problem (0 for most)."""
    return _attention_query(_ext.attention_workspace_bytes, q, k, v, cu_seqlens_q, cu_seqlens_k,
                            cache_seqlens, block_table, max_seqlen_q, max_seqlen_k, causal, window,
                            softcap, scale, num_splits, engine, kv_shard_offset, kv_total_len,
                            k_descale, v_descale, descale_per_page)


def _attention_query(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, cache_seqlens, block_table, max_seqlen_q,
                     max_seqlen_k, causal, window, softcap, scale, num_splits, engine,
                     kv_shard_offset=None, kv_total_len=None, k_scale=None, v_scale=None, kv_scale_per_page=False):
    fw = framework_of(q)
    out, _, lse = alloc_attention_outputs(fw, q, v, cu_seqlens_q is not None, True)
    aq, ak, av, aout, mask = _args(fw, q, k, v, out)
    wl, wr = _window(window)
    return _call(
        fn, aq, ak, av, aout, lse, cu_seqlens_q, cu_seqlens_k, cache_seqlens_tensor(fw, q, cache_seqlens),
        block_table, kv_shard_offset, kv_total_len, _max_seqlen(fw, cu_seqlens_q, max_seqlen_q), _max_seqlen(fw, cu_seqlens_k, max_seqlen_k),
        None if scale is None else float(scale), bool(causal), wl, wr, float(softcap), int(num_splits),
        engine, mask, k_scale, v_scale, bool(kv_scale_per_page))


def attention_engine_for(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, cache_seqlens=None,
                         block_table=None, max_seqlen_q=None, max_seqlen_k=None, causal=False,
                         window=(-1, -1), softcap=0.0, scale=None, num_splits=0, engine=None,
                         kv_shard_offset=None, kv_total_len=None, k_descale=None, v_descale=None,
                         descale_per_page=False):
    """The name of the engine attention() / attention_with_kvcache() would run for these
    arguments (the same keywords; cache_seqlens/block_table make it a KV-cache call), after the
    same validation, without running it. Raises as the call would."""
    return _attention_query(_ext.attention_engine_for, q, k, v, cu_seqlens_q, cu_seqlens_k,
                            cache_seqlens, block_table, max_seqlen_q, max_seqlen_k, causal, window,
                            softcap, scale, num_splits, engine, kv_shard_offset, kv_total_len,
                            k_descale, v_descale, descale_per_page)


def kda_engine_for(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                   use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                   A_log=None, dt_bias=None, state_v_first=False, cu_seqlens=None,
                   ssm_state_indices=None, engine=None):
    """The name of the engine chunk_kda() / fused_recurrent_kda() would run for these arguments
    (their keywords), after the same validation, without running it. Raises as the call would."""
    fw = framework_of(q)
    pool = ssm_state_indices is not None
    if pool and initial_state is None:
        raise ValueError("initial_state: required with ssm_state_indices (it is the state pool "
                         "updated in place)")
    o, final = alloc_kda_outputs(fw, q, v, state_v_first, cu_seqlens, output_final_state and not pool)
    if pool:
        final = initial_state
    aq, ak, av, aout, mask = _args(fw, q, k, v, o)
    return _call(
        _ext.kda_engine_for, aq, ak, av, g, beta, aout, initial_state, final, cu_seqlens,
        ssm_state_indices, bool(state_v_first), kda_gate(use_gate_in_kernel, lower_bound), A_log,
        dt_bias, -5.0 if lower_bound is None else float(lower_bound), bool(use_qk_l2norm_in_kernel),
        bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
        None if scale is None else float(scale), engine, mask)
