"""Exact FLOP and byte counts for the benchmark harness. Pure Python (no torch, no numpy), so the
CPU tests in tests/python/test_bench_counts.py run in CI without a GPU.

Masking follows groupattn's semantics (include/groupattn/attention.h): query i of a sequence with
Sq queries and Sk keys sits at key position pos = Sk - Sq + i (bottom-right alignment) and sees key
j when (!causal or j <= pos) and (wl < 0 or j >= pos - wl) and (wr < 0 or j <= pos + wr).

FLOPs: per query head, 2 * D per visible (query, key) pair for Q.K^T and 2 * Dv for P.V, i.e.
4 * D per pair when D == Dv. Only visible pairs count (a masked pair is not work a correct kernel
must do); softmax and rescaling are not counted (the FlashAttention convention).

Bytes: the minimum traffic of one call -- Q, O and LSE once, and each K/V row that some query of
the sequence can see, once per KV head. Paged K/V: every page that holds a visible key is read
whole (a kernel cannot read part of a page more cheaply than the page). Index tensors
(cu_seqlens, seqlens, block tables) are not counted; they are a few bytes per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple

DTYPE_BYTES = {"bf16": 2, "f16": 2, "fp16": 2, "f32": 4, "fp32": 4, "f64": 8, "f8e4m3": 1, "fp8": 1}


def _row_range(pos: int, sk: int, causal: bool, wl: int, wr: int) -> Tuple[int, int]:
    """[lo, hi] (inclusive) of the keys a query at key position `pos` sees; empty when lo > hi."""
    lo = 0 if wl < 0 else max(0, pos - wl)
    hi = sk - 1
    if causal:
        hi = min(hi, pos)
    if wr >= 0:
        hi = min(hi, pos + wr)
    return lo, hi


def _sum_range(a: int, b: int) -> int:
    """sum of integers a..b inclusive (0 when b < a)."""
    if b < a:
        return 0
    return (a + b) * (b - a + 1) // 2


def visible_pairs(sq: int, sk: int, causal: bool = False, window: Tuple[int, int] = (-1, -1)) -> int:
    """Number of (query, key) pairs one sequence evaluates under the mask. Exact; O(1) without a
    window or with causal and no window, O(Sq) otherwise."""
    if sq <= 0 or sk <= 0:
        return 0
    wl, wr = window
    if wl < 0 and wr < 0:
        if not causal:
            return sq * sk
        # Row i sits at pos = Sk - Sq + i <= Sk - 1 and sees pos + 1 keys when pos >= 0, none
        # otherwise; rows first..Sq-1 (first = max(0, Sq - Sk)) see Sk - Sq + first + 1 .. Sk keys.
        first = max(0, sq - sk)
        return _sum_range(sk - sq + first + 1, sk)
    total = 0
    for i in range(sq):
        lo, hi = _row_range(sk - sq + i, sk, causal, wl, wr)
        if hi >= lo:
            total += hi - lo + 1
    return total


def visible_key_span(sq: int, sk: int, causal: bool = False, window: Tuple[int, int] = (-1, -1)) -> Tuple[int, int]:
    """[lo, hi) of the keys that at least one query of the sequence sees ((0, 0) when none).
    Without a window the last query sees keys 0..Sk-1 (causal or not), so the span is [0, Sk).
    With a window each row sees one interval whose ends move by one per row: the union is the
    interval from the smallest lo to the largest hi over rows that see a key."""
    if sq <= 0 or sk <= 0:
        return 0, 0
    wl, wr = window
    if wl < 0 and wr < 0:
        return 0, sk
    lo_all, hi_all = None, None
    for i in range(sq):
        lo, hi = _row_range(sk - sq + i, sk, causal, wl, wr)
        if hi < lo:
            continue
        lo_all = lo if lo_all is None else min(lo_all, lo)
        hi_all = hi if hi_all is None else max(hi_all, hi)
    if lo_all is None:
        return 0, 0
    return lo_all, hi_all + 1


@dataclass(frozen=True)
class AttnProblem:
    """One attention call. seqlens_q / seqlens_k: per-sequence lengths (batched: B copies of Sq
    and Sk; decode with a KV cache: the cache fill levels, new tokens included). page_size: None
    for contiguous K/V, else the paged cache's page size. kv_dtype: K/V's element type when it
    differs from Q/O's `dtype` (an f8e4m3 cache under bf16 queries); None: the same."""

    seqlens_q: Tuple[int, ...]
    seqlens_k: Tuple[int, ...]
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: Optional[int] = None
    causal: bool = False
    window: Tuple[int, int] = (-1, -1)
    dtype: str = "bf16"
    page_size: Optional[int] = None
    lse: bool = True
    kv_dtype: Optional[str] = None

    @property
    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


def batched(batch: int, sq: int, sk: int, heads_q: int, heads_kv: int, head_dim: int, **kw) -> AttnProblem:
    return AttnProblem((sq,) * batch, (sk,) * batch, heads_q, heads_kv, head_dim, **kw)


def varlen(seqlens_q: Sequence[int], seqlens_k: Sequence[int], heads_q: int, heads_kv: int, head_dim: int,
           **kw) -> AttnProblem:
    if len(seqlens_q) != len(seqlens_k):
        raise ValueError("seqlens_q and seqlens_k need one entry per sequence")
    return AttnProblem(tuple(seqlens_q), tuple(seqlens_k), heads_q, heads_kv, head_dim, **kw)


def _per_sequence(p: AttnProblem) -> Iterable[Tuple[Tuple[int, int], int]]:
    """((sq, sk), multiplicity) over the distinct sequences of p."""
    counts = {}
    for sq, sk in zip(p.seqlens_q, p.seqlens_k):
        counts[(sq, sk)] = counts.get((sq, sk), 0) + 1
    return counts.items()


def attention_flops(p: AttnProblem) -> int:
    pairs = sum(m * visible_pairs(sq, sk, p.causal, p.window) for (sq, sk), m in _per_sequence(p))
    return 2 * (p.head_dim + p.dv) * p.heads_q * pairs


def keys_read(p: AttnProblem) -> int:
    """K rows read per KV head, summed over sequences (pages read whole when paged)."""
    total = 0
    for (sq, sk), m in _per_sequence(p):
        lo, hi = visible_key_span(sq, sk, p.causal, p.window)
        if hi <= lo:
            continue
        if p.page_size:
            first_page, last_page = lo // p.page_size, (hi - 1) // p.page_size
            total += m * (last_page - first_page + 1) * p.page_size
        else:
            total += m * (hi - lo)
    return total


def attention_bytes(p: AttnProblem) -> dict:
    """Bytes by tensor and their total: {"q", "k", "v", "o", "lse", "total"}."""
    e = DTYPE_BYTES[p.dtype]
    ekv = DTYPE_BYTES[p.kv_dtype or p.dtype]
    total_q = sum(p.seqlens_q)
    kr = keys_read(p)
    b = {
        "q": total_q * p.heads_q * p.head_dim * e,
        "k": kr * p.heads_kv * p.head_dim * ekv,
        "v": kr * p.heads_kv * p.dv * ekv,
        "o": total_q * p.heads_q * p.dv * e,
        "lse": total_q * p.heads_q * 4 if p.lse else 0,
    }
    b["total"] = sum(b.values())
    return b


def pages_needed(seqlen: int, page_size: int) -> int:
    return (seqlen + page_size - 1) // page_size


def kda_bytes(total_t: int, heads: int, heads_v: int, k: int, v: int, num_seqs: int, dtype: str = "bf16",
              initial_state: bool = True, final_state: bool = True, in_kernel_gate_params: bool = False) -> dict:
    """Minimum traffic of one chunk_kda call: q, k [T, H, K] and v, o [T, HV, V] in `dtype`; g fp32
    [T, HV, K]; beta fp32 [T, HV]; fp32 states [N, HV, K, V] read and/or written once; A_log [HV]
    and dt_bias [HV, K] (fp32) when the gate is computed in the kernel."""
    e = DTYPE_BYTES[dtype]
    b = {
        "q": total_t * heads * k * e,
        "k": total_t * heads * k * e,
        "v": total_t * heads_v * v * e,
        "o": total_t * heads_v * v * e,
        "g": total_t * heads_v * k * 4,
        "beta": total_t * heads_v * 4,
        "state_in": num_seqs * heads_v * k * v * 4 if initial_state else 0,
        "state_out": num_seqs * heads_v * k * v * 4 if final_state else 0,
        "gate_params": (heads_v + heads_v * k) * 4 if in_kernel_gate_params else 0,
    }
    b["total"] = sum(b.values())
    return b


def kda_flops(total_t: int, heads_v: int, k: int, v: int) -> int:
    """FLOPs of the per-token recurrence (not the chunked algorithm's): per token and value head,
    decay K*V, read S^T k 2*K*V, write k r^T 2*K*V, output S^T q 2*K*V -> 7*K*V. A reference scale
    for comparing shapes, not a ceiling (the chunked form does more, in matrix products)."""
    return 7 * total_t * heads_v * k * v
