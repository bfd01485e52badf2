"""torch.library custom ops for the groupattn functions, with fake implementations.

Eager calls do not go through these ops: the dispatcher's Python custom-op path costs tens of
microseconds, so groupattn.attention(...) calls the extension directly (CUDA-graph capture works
there too: outputs and workspace come from torch's caching allocator, and the kernels run on the
current stream). While torch.compile traces (torch.compiler.is_compiling()), the functions call
torch.ops.groupattn.* instead, so the graph holds one opaque node whose fake implementation gives
the output shapes, dtypes and strides.

Ops are functional (fresh outputs), except fused_recurrent_kda, which updates initial_state in
place when ssm_state_indices makes it a state pool. An absent output is returned as an empty
tensor (shape [0]) since custom ops cannot return None.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _ops
from ._frameworks import framework_of

_EMPTY = (0,)


def _attention_fake_outputs(q, v, varlen):
    out, lse, _ = _ops.alloc_attention_outputs(framework_of(q), q, v, varlen, True)
    return out, lse


@torch.library.custom_op("groupattn::attention", mutates_args=())
def _attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
               cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
               scale: Optional[float], causal: bool, window_left: int, window_right: int,
               softcap: float, engine: Optional[str]) -> Tuple[Tensor, Tensor]:
    return _ops.run_attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                              max_seqlen_q=max_seqlen_q or None, max_seqlen_k=max_seqlen_k or None,
                              scale=scale, causal=causal, window=(window_left, window_right),
                              softcap=softcap, engine=engine)


@_attention.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window_left,
      window_right, softcap, engine):
    return _attention_fake_outputs(q, v, cu_seqlens_q is not None)


@torch.library.custom_op("groupattn::attention_with_kvcache", mutates_args=())
def _attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                            cache_seqlens: Optional[Tensor], block_table: Optional[Tensor],
                            scale: Optional[float], causal: bool, window_left: int,
                            window_right: int, softcap: float, num_splits: int,
                            engine: Optional[str]) -> Tuple[Tensor, Tensor]:
    return _ops.run_attention(q, k_cache, v_cache, seqlens_k=cache_seqlens, block_table=block_table,
                              scale=scale, causal=causal, window=(window_left, window_right),
                              softcap=softcap, num_splits=num_splits, engine=engine)


@_attention_with_kvcache.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, scale, causal, window_left, window_right,
      softcap, num_splits, engine):
    return _attention_fake_outputs(q, v_cache, False)


def _kda_outputs(q, v, state_v_first, cu_seqlens, want_final):
    o, final = _ops.alloc_kda_outputs(framework_of(q), q, v, state_v_first, cu_seqlens, want_final)
    return o, final


def _empty_like_state(q):
    return torch.empty(_EMPTY, dtype=torch.float32, device=q.device)


@torch.library.custom_op("groupattn::chunk_kda", mutates_args=())
def _chunk_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: Optional[float],
               initial_state: Optional[Tensor], output_final_state: bool, use_qk_l2norm: bool,
               gate: int, use_beta_sigmoid: bool, allow_neg_eigval: bool, lower_bound: float,
               A_log: Optional[Tensor], dt_bias: Optional[Tensor], state_v_first: bool,
               cu_seqlens: Optional[Tensor], engine: Optional[str]) -> Tuple[Tensor, Tensor]:
    o, final = _kda_outputs(q, v, state_v_first, cu_seqlens, output_final_state)
    _ops.run_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state, final_state=final,
                 cu_seqlens=cu_seqlens, state_v_first=state_v_first, gate=gate, A_log=A_log,
                 dt_bias=dt_bias, lower_bound=lower_bound, use_qk_l2norm=use_qk_l2norm,
                 use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval, out=o,
                 engine=engine)
    return o, (final if final is not None else _empty_like_state(q))


@_chunk_kda.register_fake
def _(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm, gate,
      use_beta_sigmoid, allow_neg_eigval, lower_bound, A_log, dt_bias, state_v_first, cu_seqlens,
      engine):
    o, final = _kda_outputs(q, v, state_v_first, cu_seqlens, output_final_state)
    return o, (final if final is not None else _empty_like_state(q))


@torch.library.custom_op("groupattn::fused_recurrent_kda", mutates_args=("initial_state",))
def _fused_recurrent_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                         scale: Optional[float], initial_state: Optional[Tensor],
                         output_final_state: bool, ssm_state_indices: Optional[Tensor],
                         use_qk_l2norm: bool, gate: int, use_beta_sigmoid: bool,
                         allow_neg_eigval: bool, lower_bound: float, A_log: Optional[Tensor],
                         dt_bias: Optional[Tensor], state_v_first: bool,
                         cu_seqlens: Optional[Tensor], engine: Optional[str]) -> Tuple[Tensor, Tensor]:
    pool = ssm_state_indices is not None
    o, final = _kda_outputs(q, v, state_v_first, cu_seqlens, output_final_state and not pool)
    _ops.run_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                 final_state=initial_state if pool else final, cu_seqlens=cu_seqlens,
                 state_indices=ssm_state_indices, state_v_first=state_v_first, gate=gate,
                 A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound, use_qk_l2norm=use_qk_l2norm,
                 use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval, out=o,
                 engine=engine)
    return o, (final if final is not None else _empty_like_state(q))


@_fused_recurrent_kda.register_fake
def _(q, k, v, g, beta, scale, initial_state, output_final_state, ssm_state_indices, use_qk_l2norm,
      gate, use_beta_sigmoid, allow_neg_eigval, lower_bound, A_log, dt_bias, state_v_first,
      cu_seqlens, engine):
    pool = ssm_state_indices is not None
    o, final = _kda_outputs(q, v, state_v_first, cu_seqlens, output_final_state and not pool)
    return o, (final if final is not None else _empty_like_state(q))
