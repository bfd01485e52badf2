"""groupattn.nn: torch modules whose attention runs through groupattn (inference only).

Importing this module imports torch; ``import groupattn`` alone does not.
"""

import math
import warnings

import torch
from torch import nn

from . import _ops


class KVCache:
    """A batched KV cache for decode: k, v [B, max_seqlen, Hkv, D] and the fill level per
    sequence (int32 [B], on the cache's device). All sequences advance together."""

    def __init__(self, batch, max_seqlen, num_kv_heads, head_dim, *, dtype, device):
        self.k = torch.zeros(batch, max_seqlen, num_kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.seqlens = torch.zeros(batch, dtype=torch.int32, device=device)
        self.length = 0  # host copy of the common fill level (no device read per step)

    @property
    def max_seqlen(self):
        return self.k.shape[1]

    def append(self, k, v):
        """Writes k, v [B, T, Hkv, D] at the current fill level and advances it."""
        t = k.shape[1]
        if self.length + t > self.max_seqlen:
            raise ValueError(f"KVCache: {self.length} + {t} tokens exceed max_seqlen {self.max_seqlen}")
        self.k[:, self.length:self.length + t].copy_(k)
        self.v[:, self.length:self.length + t].copy_(v)
        self.length += t
        self.seqlens.fill_(self.length)


class GroupedQueryAttention(nn.Module):
    """Multi-head attention with grouped K/V heads (GQA; MHA when num_kv_heads == num_heads, MQA
    when 1): q/k/v/o projections, attention through groupattn.

    forward(x [B, T, hidden], kv_cache=None) -> [B, T, hidden]. With a KVCache, the new tokens'
    k/v are appended and the queries attend to the whole cache (causal, bottom-right aligned), so
    prefill and decode steps share one call.

    groupattn has no backward pass and serves bf16/f16 on GPU engines (and f16/bf16/f32 on the CPU
    reference). Where no engine serves a call (gradients needed, an unsupported dtype, ...) forward
    raises with the reason; with fallback="sdpa" it runs torch's scaled_dot_product_attention
    instead and warns once per reason — never silently.
    """

    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None, *, bias=False, causal=True,
                 fallback=None, engine=None, device=None, dtype=None):
        super().__init__()
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads = {num_heads} is not a multiple of num_kv_heads = {num_kv_heads}")
        if fallback not in (None, "sdpa"):
            raise ValueError(f"fallback: {fallback!r} not accepted (accepted: None, 'sdpa')")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_heads
        self.causal, self.fallback, self.engine = causal, fallback, engine
        kw = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=bias, **kw)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=bias, **kw)
        self._warned = set()

    def new_kv_cache(self, batch, max_seqlen, *, dtype=None, device=None):
        w = self.k_proj.weight
        return KVCache(batch, max_seqlen, self.num_kv_heads, self.head_dim, dtype=dtype or w.dtype,
                       device=device or w.device)

    def forward(self, x, kv_cache=None):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        if kv_cache is not None:
            kv_cache.append(k.detach(), v.detach())
        out = self._attend(q, k, v, kv_cache)
        return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim))

    def _attend(self, q, k, v, kv_cache):
        reason = None
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            reason = ("gradients are required and groupattn has no backward pass "
                      "(run under torch.no_grad() / torch.inference_mode())")
        else:
            try:
                if kv_cache is None:
                    return _ops.attention(q, k, v, causal=self.causal, return_lse=False,
                                          engine=self.engine)[0]
                return _ops.attention_with_kvcache(q, kv_cache.k, kv_cache.v, cache_seqlens=kv_cache.seqlens,
                                                   causal=self.causal, engine=self.engine)[0]
            except NotImplementedError as e:  # no engine serves this problem (dtype, head dim...)
                reason = str(e)
        if self.fallback != "sdpa":
            raise NotImplementedError(f"GroupedQueryAttention: groupattn cannot serve this call: {reason}; "
                                      "construct with fallback='sdpa' to use torch SDPA instead")
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(f"GroupedQueryAttention: falling back to torch SDPA: {reason}", stacklevel=3)
        return self._sdpa(q, k, v, kv_cache)

    def _sdpa(self, q, k, v, kv_cache):
        if kv_cache is not None:
            k = kv_cache.k[:, :kv_cache.length]
            v = kv_cache.v[:, :kv_cache.length]
        sq, sk = q.shape[1], k.shape[1]
        mask = None
        if self.causal:  # bottom-right aligned, as groupattn (SDPA's is_causal is top-left)
            i = torch.arange(sq, device=q.device)[:, None]
            j = torch.arange(sk, device=q.device)[None, :]
            mask = j <= i + (sk - sq)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
            scale=1.0 / math.sqrt(q.shape[-1]), enable_gqa=True)
        return out.transpose(1, 2)
