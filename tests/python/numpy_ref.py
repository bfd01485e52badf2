"""Tiny fp64 numpy oracles for the Python tests, written from the definitions in
include/groupattn/attention.h and kda.h (independent of the C++ reference)."""

import numpy as np


def attention_ref(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """One sequence: q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv] -> (o [Sq, Hq, Dv], lse [Hq, Sq])."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    sq, hq, d = q.shape
    sk, hkv, dv = v.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    group = hq // hkv
    o = np.zeros((sq, hq, dv))
    lse = np.full((hq, sq), -np.inf)
    for h in range(hq):
        kh = h // group
        s = scale * q[:, h, :] @ k[:, kh, :].T  # [Sq, Sk]
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        pos = sk - sq + np.arange(sq)[:, None]  # bottom-right aligned key position of each query
        j = np.arange(sk)[None, :]
        vis = np.ones((sq, sk), bool)
        if causal:
            vis &= j <= pos
        if window[0] >= 0:
            vis &= j >= pos - window[0]
        if window[1] >= 0:
            vis &= j <= pos + window[1]
        for i in range(sq):
            if not vis[i].any():
                continue
            si = s[i][vis[i]]
            m = si.max()
            p = np.exp(si - m)
            lse[h, i] = m + np.log(p.sum())
            o[i, h] = (p / p.sum()) @ v[vis[i], kh, :]
    return o, lse


def kda_gate(g, *, A_log=None, dt_bias=None, lower_bound=None):
    """Effective log decay from the raw gate input g [T, HV, K] (use_gate_in_kernel)."""
    x = g + (0.0 if dt_bias is None else dt_bias[None])
    if lower_bound is None:
        a = np.exp(A_log)[None, :, None]
        return -a * np.logaddexp(0.0, x)  # -exp(A_log) * softplus(x)
    if A_log is not None:
        x = np.exp(A_log)[None, :, None] * x
    return lower_bound / (1.0 + np.exp(-x))


def kda_ref(q, k, v, g, beta, *, scale=None, s0=None, l2norm=False):
    """One sequence: q, k [T, H, K], v [T, HV, V], g [T, HV, K] (log decay), beta [T, HV];
    s0 [HV, V, K] (V-first) -> (o [T, HV, V], state [HV, V, K])."""
    q, k, v, g, beta = (np.asarray(x, np.float64) for x in (q, k, v, g, beta))
    t_len, h_qk, kd = q.shape
    hv_n, vd = v.shape[1], v.shape[2]
    scale = 1.0 / np.sqrt(kd) if scale is None else scale
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    state = np.zeros((hv_n, kd, vd)) if s0 is None else np.swapaxes(np.asarray(s0, np.float64), 1, 2).copy()
    o = np.zeros((t_len, hv_n, vd))
    for hv in range(hv_n):
        h = hv // (hv_n // h_qk)
        S = state[hv]  # [K, V]
        for t in range(t_len):
            S *= np.exp(g[t, hv])[:, None]
            r = v[t, hv] - S.T @ k[t, h]
            S += beta[t, hv] * np.outer(k[t, h], r)
            o[t, hv] = S.T @ (scale * q[t, h])
    return o, np.swapaxes(state, 1, 2)
