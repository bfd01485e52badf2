#!/usr/bin/env python3
# Two-level (64-token chunk of four 16-token sub-chunks) KDA chunked algorithm in numpy, against the
# fp64 per-token recurrence (issue 4; research/kda.md 3.1-3.3; docs/ENGINES.md "64-token state steps").
# No GPU. fp32 arithmetic with tf32 rounding where the planned kernels feed tensor cores.
#
# Level 1, per 16-token sub-chunk a (today's prep, unchanged): gamma = sub-chunk-local cumsum of g,
# the diagonal blocks L_aa / Aqk_aa elementwise with running products of exp(g) <= 1, Tm_a = (I + L_aa)^-1
# by forward substitution, Kt_a = k exp(gamma), Kh_a = k exp(gamma_C - gamma), Qt_a = scale q exp(gamma),
# ec_a = exp(gamma_C).
# Level 2, per 64-token chunk: B_i = sum_{m<i} gamma_C^m (the chunk-local log decay entering sub-chunk
# i; non-increasing, B_0 = 0). Off-diagonal blocks i > j anchored at the boundary entering sub-chunk i:
#   L_ij   = Diag(beta_i) Kt_i  (Kh_j . exp(B_i - B_{j+1}))^T        both factors' exponents <= 0
#   Aqk_ij =          Qt_i  (Kh_j . exp(B_i - B_{j+1}))^T
# (the same as fla's anchor at sub-chunk i's first token up to where g_{i0} sits: exp(gamma) of row r
# of sub-chunk i is exp(Gamma_r - B_i) and Kh_j exp(B_i - B_{j+1}) is k_s exp(B_i - Gamma_s), s < i0).
# T64 = (I + L64)^-1 by blockwise merging (no Neumann/doubling product):
#   T_ii = Tm_i,  T_ij = -T_ii sum_{j <= m < i} L_im T_mj   (i > j, in order of i)
# W64 = T64 Diag(beta) (Kt . exp(B)),  U64 = T64 Diag(beta) V,  Qt64 = scale q exp(Gamma64),
# Kh64 = k exp(Gamma64_C - Gamma64), ec64 = exp(Gamma64_C); the state pass per 64 tokens:
#   D = U64 - W64 S;  O = Qt64 S + Aqk64 D;  S <- Diag(ec64) S + Kh64^T D.
# Every exponent handed to exp is recorded: the largest must be <= 0 at every gate.
#
# Run: python3 scripts/kda-two-level-emulation.py   (prints one line per case; ~1-2 min on one core)
import numpy as np

f32 = np.float32
MAXEXP = [-np.inf]


def ex(x):  # exp of an exponent that must be <= 0 (fp32, as ex2.approx of x log2 e would give)
    x = np.asarray(x, f32)
    if x.size: MAXEXP[0] = max(MAXEXP[0], float(x.max()))
    return np.exp(x).astype(f32)


def tf32(x):  # cvt.rna.tf32.f32: round half away to 10 mantissa bits
    x = np.ascontiguousarray(x, f32)
    b = x.view(np.uint32).astype(np.uint64)
    return ((b + 0x1000) & 0xFFFFE000).astype(np.uint32).view(f32)


def mm1(a, b):  # plain tf32 mma (operands rounded), fp32 accumulation
    return (tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)).astype(f32)


def mm3(a, b):  # 3xTF32 (split hi/lo): about fp32
    a = np.asarray(a, f32); b = np.asarray(b, f32)
    ah, bh = tf32(a), tf32(b); al, bl = tf32(a - ah), tf32(b - bh)
    d = lambda x, y: x.astype(np.float64) @ y.astype(np.float64)
    return (d(ah, bh) + d(al, bh) + d(ah, bl)).astype(f32)


def bf16(x):
    x = np.ascontiguousarray(x, f32); b = x.view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return b.view(f32)


def sub_prep(k, q, v, g, beta, sc):
    """Level 1 on one 16-row sub-chunk (zero-padded rows have k = q = v = beta = g = 0)."""
    C = 16
    gam = np.cumsum(g, 0, dtype=f32)
    dec1 = ex(g)  # per-token decay <= 1
    L = np.zeros((C, C), f32); A = np.zeros((C, C), f32)
    for r in range(C):
        decay = np.ones(k.shape[1], f32)  # exp(gamma_r - gamma_s) as a running product, s = r, r-1, ..
        for s in range(r, -1, -1):
            kd = k[s] * decay
            if s < r: L[r, s] = beta[r] * np.dot(k[r], kd)
            A[r, s] = sc * np.dot(q[r], kd)
            if s > 0: decay = (decay * dec1[s]).astype(f32)
    Tm = np.eye(C, dtype=f32)
    for r in range(C):  # forward substitution, fp32
        for s in range(r):
            Tm[r, s] = -np.dot(L[r, s:r], Tm[s:r, s])
    Kt = (k * ex(gam)).astype(f32)
    Kh = (k * ex(gam[-1] - gam)).astype(f32)
    Qt = (sc * q * ex(gam)).astype(f32)
    W = mm3(Tm, beta[:, None] * Kt); U = mm3(Tm, beta[:, None] * v)
    return dict(gam=gam, L=L, A=A, Tm=Tm, Kt=Kt, Kh=Kh, Qt=Qt, W=W, U=U, ec=ex(gam[-1]))


def merge64(subs, beta, sc, inv_mode):
    """Level 2: the 64-token operands from four level-1 sub-chunks."""
    n = len(subs); C = 16 * n
    gC = np.stack([s['gam'][-1] for s in subs])             # [n, K]
    B = np.concatenate([np.zeros((1, gC.shape[1]), f32), np.cumsum(gC, 0, dtype=f32)])  # B_0..B_n
    L = np.zeros((C, C), f32); A = np.zeros((C, C), f32)
    blk = lambda i: slice(16 * i, 16 * i + 16)
    for i in range(n):
        L[blk(i), blk(i)] = subs[i]['L']; A[blk(i), blk(i)] = subs[i]['A']
        bKt = beta[blk(i), None] * subs[i]['Kt']
        for j in range(i):
            khd = subs[j]['Kh'] * ex(B[i] - B[j + 1])        # k_s exp(B_i - Gamma_s), <= |k_s|
            L[blk(i), blk(j)] = mm1(bKt, khd.T)
            A[blk(i), blk(j)] = mm1(subs[i]['Qt'], khd.T)
    mm = mm1 if inv_mode == '1x' else mm3
    T = np.zeros((C, C), f32)
    for i in range(n):
        T[blk(i), blk(i)] = subs[i]['Tm']
        for j in range(i):
            acc = np.zeros((16, 16), f32)
            for m in range(j, i):
                acc += mm(L[blk(i), blk(m)], T[blk(m), blk(j)])
            T[blk(i), blk(j)] = -mm(subs[i]['Tm'], acc)
    Kt64 = np.concatenate([subs[i]['Kt'] * ex(B[i]) for i in range(n)])
    Qt64 = np.concatenate([subs[i]['Qt'] * ex(B[i]) for i in range(n)])      # scale q exp(Gamma64)
    Kh64 = np.concatenate([subs[i]['Kh'] * ex(B[n] - B[i + 1]) for i in range(n)])  # k exp(Gamma64_C - Gamma64)
    vb = np.concatenate([s['vb'] for s in subs])
    W = mm3(T, beta[:, None] * Kt64); U = mm3(T, vb)
    return dict(W=W, U=U, Qt=Qt64, Kh=Kh64, A=A, ec=ex(B[n]))


def state_step(op, S, aqk_mode):
    D = op['U'] - mm1(op['W'], S)
    O = mm1(op['Qt'], S) + (mm1(op['A'], D) if aqk_mode == 'tf32' else (op['A'] @ D).astype(f32))
    S = (op['ec'][:, None] * S + mm1(op['Kh'].T, D)).astype(f32)
    return O, S


def run(name, T, g, k, q, v, beta, S0, sc, inv_mode='1x', aqk_mode='tf32'):
    K = k.shape[1]
    # fp64 recurrence on the same (bf16-rounded) inputs
    S = S0.astype(np.float64).copy(); Oref = np.zeros((T, v.shape[1]))
    for t in range(T):
        S = np.exp(g[t].astype(np.float64))[:, None] * S
        S = S + beta[t] * np.outer(k[t], v[t] - S.T @ k[t]); Oref[t] = sc * S.T @ q[t]
    Sref = S
    res = {}
    for chunk in (16, 64):
        MAXEXP[0] = -np.inf
        S = S0.astype(f32); O = np.zeros((T, v.shape[1]), f32)
        for c0 in range(0, T, chunk):
            C = min(chunk, T - c0); pad = -C % 16; n = (C + pad) // 16
            P = lambda x: np.concatenate([x[c0:c0 + C], np.zeros((pad,) + x.shape[1:], f32)])
            kk, qq, vv, gg, bb = P(k), P(q), P(v), P(g), P(beta)
            subs = []
            for a in range(n):
                s = slice(16 * a, 16 * a + 16)
                d = sub_prep(kk[s], qq[s], vv[s], gg[s], bb[s], sc); d['vb'] = bb[s, None] * vv[s]
                subs.append(d)
            if chunk == 16:
                op = dict(W=subs[0]['W'], U=subs[0]['U'], Qt=subs[0]['Qt'], Kh=subs[0]['Kh'], A=subs[0]['A'],
                          ec=subs[0]['ec'])
                o, S = state_step(op, S, 'fp32')
            else:
                o, S = state_step(merge64(subs, bb, sc, inv_mode), S, aqk_mode)
            O[c0:c0 + C] = o[:C]
        rel = lambda a, b: np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2))
        res[chunk] = (rel(O, Oref), rel(bf16(O), Oref), rel(S, Sref), MAXEXP[0])
    print(f"{name:34s} T={T:5d} | " + " | ".join(
        f"C{c}: out {o:.1e} (bf16 {ob:.1e}) state {s:.1e} maxexp {m:+.2g}" for c, (o, ob, s, m) in res.items()),
        flush=True)
    return res


def inputs(T, K, V, seed, period=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((T, K)); q = rng.standard_normal((T, K)); v = rng.standard_normal((T, V))
    if period:
        k = np.tile(k[:period], (T // period + 1, 1))[:T]; v = np.tile(v[:period], (T // period + 1, 1))[:T]
    k /= np.linalg.norm(k, axis=1, keepdims=True); q /= np.linalg.norm(q, axis=1, keepdims=True)
    k, q, v = bf16(k), bf16(q), bf16(v)
    beta = (1 / (1 + np.exp(-rng.standard_normal(T)))).astype(f32)
    S0 = (rng.standard_normal((K, V)) * 0.5).astype(f32)
    return rng, k, q, v, beta, S0


def main():
    K = V = 128; sc = f32(K ** -0.5)
    worst = {}
    for T in (63, 129, 200, 1000):
        for gate in ('lb-1', 'lb-5', 'lb-8', 'softplus'):
            rng, k, q, v, beta, S0 = inputs(T, K, V, 7 + T)
            z = rng.standard_normal((T, K)) * 3
            if gate == 'softplus':  # -exp(A_log) softplus(z + dt_bias), A_log = log 8: per-token g down to ~ -100
                g = -8.0 * np.logaddexp(0, z + 0.5)
            else:
                g = float(gate[2:]) * (1 / (1 + np.exp(-z)))  # lower_bound * sigmoid: saturates at lb
            r = run(f"{gate}", T, g.astype(f32), k, q, v, beta, S0, sc)
            for c, x in r.items():
                w = worst.setdefault(c, [0, 0, -np.inf]); w[0] = max(w[0], x[0]); w[1] = max(w[1], x[2]); w[2] = max(w[2], x[3])
    # Weak decay, long: the state keeps everything (largest |S|); and a learned state (D = U - W S small).
    for name, T, glo, period in (("weak U(-1e-3,0)", 1000, -1e-3, 0), ("learned state, period 48", 1000, -0.05, 48)):
        rng, k, q, v, beta, S0 = inputs(T, K, V, 11, period)
        g = rng.uniform(glo, 0, (T, K)).astype(f32)
        r = run(name, T, g, k, q, v, beta, S0, sc)
        for c, x in r.items():
            w = worst.setdefault(c, [0, 0, -np.inf]); w[0] = max(w[0], x[0]); w[1] = max(w[1], x[2]); w[2] = max(w[2], x[3])
    # Precision ablation of level 2 at lb -5: the block merge in 3xTF32 instead of tf32, Aqk D in fp32.
    rng, k, q, v, beta, S0 = inputs(200, K, V, 3)
    g = (-5 / (1 + np.exp(-rng.standard_normal((200, K)) * 3))).astype(f32)
    run("lb-5, merge 3xTF32", 200, g, k, q, v, beta, S0, sc, inv_mode='3x')
    run("lb-5, Aqk D fp32", 200, g, k, q, v, beta, S0, sc, aqk_mode='fp32')
    for c, (o, s, m) in worst.items():
        print(f"worst C{c}: out {o:.2e} state {s:.2e} max exponent {m:+.3g}")


if __name__ == '__main__':
    main()
