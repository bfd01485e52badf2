"""fp64 torch references on a sample of each problem (bench correctness gate).

Attention: a sample of (sequence, query head, query rows), computed in fp64 from the very bf16
inputs the contenders read, with groupattn's bottom-right causal alignment. KDA: the per-token
recurrence of include/groupattn/kda.h in fp64 for sampled (sequence, head) pairs, over a prefix of
tokens (and the final state when the sequence is short enough to run whole)."""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch

ATTN_REL_TOL = 2e-2   # max |o - ref| / max |ref| (bf16 output rounding is ~4e-3)
LSE_ABS_TOL = 1e-2    # natural-log LSE, fp32
KDA_REL_TOL = 5e-2    # chunked bf16 algorithms vs the fp64 per-token recurrence
KDA_PREFIX = 256      # tokens of each sampled sequence checked against the recurrence
KDA_FULL_MAX = 2048   # sequences up to this length also check the final state


def sample_rows(n: int, k: int = 96) -> List[int]:
    if n <= k:
        return list(range(n))
    step = (n - 1) / (k - 1)
    return sorted(set(int(round(i * step)) for i in range(k)))


def attention_ref_rows(q_rows, k_seq, v_seq, rows, sq, sk, causal, scale):
    """q_rows [r, D], k_seq [Sk, D], v_seq [Sk, Dv] (any dtype) -> (o [r, Dv], lse [r]) in fp64 for
    query indices `rows` of a sequence of sq queries over sk keys."""
    q = q_rows.double()
    k = k_seq.double()
    v = v_seq.double()
    s = (q @ k.T) * scale
    if causal:
        pos = torch.tensor([sk - sq + i for i in rows], device=s.device).unsqueeze(1)
        j = torch.arange(sk, device=s.device).unsqueeze(0)
        s = s.masked_fill(j > pos, float("-inf"))
    lse = torch.logsumexp(s, dim=1)
    p = torch.exp(s - lse.unsqueeze(1))
    p = torch.nan_to_num(p, nan=0.0)
    return p @ v, lse


def rel_err(got, ref) -> float:
    got = got.double()
    ref = ref.double()
    if not torch.isfinite(got).all():
        return float("inf")
    denom = ref.abs().max().item()
    return (got - ref).abs().max().item() / max(denom, 1e-30)


def check_attention(outputs: Dict[str, tuple], seqs: Sequence[Dict], hq: int, hkv: int, scale: float,
                    causal: bool) -> Dict[str, Dict]:
    """outputs: contender -> (get_o(seq_idx, rows, head) -> [r, Dv], get_lse or None).
    seqs: sampled sequences, each {"idx", "q"(fn rows, head), "k"(fn kvhead), "v"(fn kvhead), "sq", "sk"}.
    Returns contender -> {"ok", "max_rel_err", "max_lse_err"}."""
    group = hq // hkv
    heads = sorted(set([0, hq - 1, hq // 2]))
    res = {n: {"max_rel_err": 0.0, "max_lse_err": 0.0} for n in outputs}
    for sd in seqs:
        rows = sample_rows(sd["sq"])
        for h in heads:
            o_ref, lse_ref = attention_ref_rows(sd["q"](rows, h), sd["k"](h // group), sd["v"](h // group),
                                                rows, sd["sq"], sd["sk"], causal, scale)
            for n, (get_o, get_lse) in outputs.items():
                e = rel_err(get_o(sd["idx"], rows, h), o_ref)
                res[n]["max_rel_err"] = max(res[n]["max_rel_err"], e)
                if get_lse is not None:
                    lse = get_lse(sd["idx"], rows, h).double()
                    fin = torch.isfinite(lse_ref)
                    le = (lse[fin] - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
                    if not torch.equal(torch.isfinite(lse), fin):
                        le = float("inf")
                    res[n]["max_lse_err"] = max(res[n]["max_lse_err"], le)
    for n in res:
        r = res[n]
        r["ok"] = bool(r["max_rel_err"] <= ATTN_REL_TOL and r["max_lse_err"] <= LSE_ABS_TOL)
        r["tol"] = {"rel": ATTN_REL_TOL, "lse_abs": LSE_ABS_TOL}
    return res


def kda_ref(q, k, v, g, beta, s0, *, gate: str, A_log, dt_bias, lower_bound: float, l2norm: bool,
            beta_sigmoid: bool, scale: float, steps: int):
    """fp64 per-token recurrence for one sequence and a set of heads.
    q, k [T, h, K]; v [T, h, V]; g [T, h, K] (raw gate input, or log decay when gate == 'log');
    beta [T, h]; s0 [h, K, V] (K-first) or None; A_log [h]; dt_bias [h, K].
    Returns (o [steps, h, V], state [h, K, V] after `steps` tokens)."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    h, K, V = q.shape[1], q.shape[2], v.shape[2]
    S = torch.zeros(h, K, V, dtype=torch.float64, device=q.device) if s0 is None else s0.double().clone()
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if beta_sigmoid:
        beta = torch.sigmoid(beta)
    if gate == "lower_bound":
        x = g + dt_bias.double().unsqueeze(0)
        if A_log is not None:
            x = torch.exp(A_log.double()).view(1, h, 1) * x
        g = lower_bound * torch.sigmoid(x)
    elif gate == "softplus":
        g = -torch.exp(A_log.double()).view(1, h, 1) * torch.nn.functional.softplus(g + dt_bias.double().unsqueeze(0))
    os_ = []
    for t in range(steps):
        S = S * torch.exp(g[t]).unsqueeze(-1)                     # decay rows (key channels)
        r = v[t] - torch.einsum("hkv,hk->hv", S, k[t])             # residual
        S = S + beta[t].view(h, 1, 1) * k[t].unsqueeze(-1) * r.unsqueeze(1)
        os_.append(torch.einsum("hkv,hk->hv", S, q[t] * scale))
    return torch.stack(os_, 0), S
