#!/usr/bin/env python3
# Index-level emulation of src/kda/engines/cuda/kda_chunked64.cu (the merge kernel and the 64-token
# state pass), fp64 without tf32 rounding: every shared-memory offset, mma.sync fragment coordinate
# (m16n8k8: A a0 (g,t) a1 (g+8,t) a2 (g,t+4) a3 (g+8,t+4), B b0 (t,g) b1 (t+4,g), C (g,2t) (g,2t+1)
# (g+8,2t) (g+8,2t+1)) and thread map as the kernels write them, against sequential 16-token steps on
# the same 16-token prep blocks (fp64 here). One (sequence, value head), every V-tile; K, V, VT as
# compiled (64/128, 16/32), lengths with partial 16- and 64-token chunks. No GPU; ~2 minutes.
# Expected: "PASS" with errors ~1e-15 (any index slip shows as O(1) or a NaN from unwritten memory).
import numpy as np, sys
rng = np.random.default_rng(2)
C, C64, NSUB, THREADS, WARPS = 16, 64, 4, 256, 8
def pair(i, j): return i * (i - 1) // 2 + j

def blocks16(k, q, v, g, beta, scale, K, V):
    G = np.cumsum(g, 0)
    L = np.zeros((C, C)); A = np.zeros((C, C))
    for r in range(C):
        for s in range(r + 1):
            e = np.exp(G[r] - G[s])
            if s < r: L[r, s] = beta[r] * np.sum(k[r] * k[s] * e)
            A[r, s] = scale * np.sum(q[r] * k[s] * e)
    Tm = np.linalg.inv(np.eye(C) + L)
    W = Tm @ (beta[:, None] * k * np.exp(G)); U = Tm @ (beta[:, None] * v)
    Qt = scale * q * np.exp(G); Kh = k * np.exp(G[-1] - G); ec = np.exp(G[-1])
    # flat block as ChunkLayout: W | Qt | Kh | U | Aqk | ec
    return np.concatenate([W.ravel(), Qt.ravel(), Kh.ravel(), U.ravel(), A.ravel(), ec])

def layout16(K, V):
    w = 0; qt = w + C*K; kh = qt + C*K; u = kh + C*K; aqk = u + C*V; ec = aqk + C*C
    return dict(w=w, qt=qt, kh=kh, u=u, aqk=aqk, ec=ec, bf=ec + K)
def layout64(K, V):
    w = 0; qt = w + C64*K; kh = qt + C64*K; u = kh + C64*K; aqk = u + C64*V; ec = aqk + C64*C64
    return dict(w=w, qt=qt, kh=kh, u=u, aqk=aqk, ec=ec, bf=ec + K)

def merge(blocks, first, nsub, K, V):  # one CTA of kda_chunk_merge64_kernel (hv = 0, HV = 1)
    ls, l = layout16(K, V), layout64(K, V)
    kRow = K + 4; kTile = C * kRow
    kW = 0; kQt = kW + 3*kTile; kKh = kQt + 3*kTile; kEc = kKh + 3*kTile; kM = kEc + NSUB*K
    smem = np.full(kM + 6*C*C, np.nan)
    sub = lambda a: (first + a) * ls['bf']
    out = np.full(l['bf'], np.nan)
    for i in range(C*K//4):
        r, c4 = i // (K//4), i % (K//4) * 4
        for a in range(NSUB):
            real = a < nsub
            ld = lambda off: blocks[sub(a) + off + r*K + c4: sub(a) + off + r*K + c4 + 4] if real else np.zeros(4)
            if a >= 1:
                smem[kW + (a-1)*kTile + r*kRow + c4: +kW + (a-1)*kTile + r*kRow + c4 + 4] = ld(ls['w'])
                smem[kQt + (a-1)*kTile + r*kRow + c4: kQt + (a-1)*kTile + r*kRow + c4 + 4] = ld(ls['qt'])
            if a <= 2:
                smem[kKh + a*kTile + r*kRow + c4: kKh + a*kTile + r*kRow + c4 + 4] = ld(ls['kh'])
    for i in range(NSUB*K):
        a, d = i // K, i % K
        smem[kEc + i] = blocks[sub(a) + ls['ec'] + d] if a < nsub else 1.0
    for tid in range(THREADS):
        r, s = tid // C, tid % C
        m = np.zeros(6); aq = np.zeros(6)
        w, q, kh = kW + r*kRow, kQt + r*kRow, kKh + s*kRow
        for d in range(0, K, 4):
            v4 = lambda o: smem[o + d: o + d + 4]
            e1, e2 = v4(kEc + K), v4(kEc + 2*K)
            k0, k1, k2 = v4(kh), v4(kh + kTile), v4(kh + 2*kTile)
            k0e1, k1e2 = k0*e1, k1*e2; k0e12 = k0e1*e2
            w1, w2, w3 = v4(w), v4(w + kTile), v4(w + 2*kTile)
            q1, q2, q3 = v4(q), v4(q + kTile), v4(q + 2*kTile)
            for arr, x1, x2, x3 in ((m, w1, w2, w3), (aq, q1, q2, q3)):
                arr[pair(1,0)] += x1 @ k0; arr[pair(2,0)] += x2 @ k0e1; arr[pair(2,1)] += x2 @ k1
                arr[pair(3,0)] += x3 @ k0e12; arr[pair(3,1)] += x3 @ k1e2; arr[pair(3,2)] += x3 @ k2
        for x in range(6): smem[kM + x*C*C + tid] = m[x]
        for i in range(NSUB):
            for j in range(NSUB):
                x = 0.0
                if j < i: x = aq[pair(i, j)]
                if j == i and i < nsub: x = blocks[sub(i) + ls['aqk'] + r*C + s]
                out[l['aqk'] + (C*i + r)*C64 + C*j + s] = x
    for tid in range(min(THREADS, K + V)):
        is_w = tid < K; col = tid if is_w else tid - K
        y = np.zeros(C64); eb = 1.0
        for a in range(NSUB):
            for r in range(C):
                y[C*a + r] = 0.0 if a >= nsub else (blocks[sub(a) + ls['w'] + r*K + col]*eb if is_w else blocks[sub(a) + ls['u'] + r*V + col])
            if is_w: eb *= smem[kEc + a*K + col]
        for i in range(1, NSUB):
            for r in range(C):
                acc = 0.0
                for j in range(i):
                    mrow = kM + pair(i, j)*C*C + r*C
                    acc += smem[mrow: mrow + C] @ y[C*j: C*j + C]
                y[C*i + r] -= acc
        for row in range(C64):
            if is_w: out[l['w'] + row*K + col] = y[row]
            else: out[l['u'] + row*V + col] = y[row]
    for i in range(C64*K):
        row, d = i // K, i % K; a, r = row // C, row % C
        qt = khv = 0.0
        if a < nsub:
            head = tail = 1.0
            for mm in range(NSUB):
                e = smem[kEc + mm*K + d]
                if mm < a: head *= e
                if mm > a: tail *= e
            qt = blocks[sub(a) + ls['qt'] + r*K + d]*head; khv = blocks[sub(a) + ls['kh'] + r*K + d]*tail
        out[l['qt'] + i] = qt; out[l['kh'] + i] = khv
    out[l['ec']: l['ec'] + K] = [np.prod([smem[kEc + mm*K + d] for mm in range(NSUB)]) for d in range(K)]
    assert not np.isnan(out).any()
    return out

def mma(c, a, b):  # c[32][4] += A B from per-lane fragments
    A = np.zeros((16, 8)); B = np.zeros((8, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        A[g, t], A[g+8, t], A[g, t+4], A[g+8, t+4] = a[lane]
        B[t, g], B[t+4, g] = b[lane]
    Cm = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        c[lane] += np.array([Cm[g, 2*t], Cm[g, 2*t+1], Cm[g+8, 2*t], Cm[g+8, 2*t+1]])

def state64(b64s, length, S0, K, V, VT, e0):  # one CTA of kda_chunk64_state_kernel; S0 [K][V]
    l = layout64(K, V)
    kRowWQ, kRowKh, kRowA, kRowS, kNt = K + 4, K + 8, C64 + 4, VT + 8, VT // 8
    kW = 0; kQt = kW + C64*kRowWQ; kKh = kQt + C64*kRowWQ; kU = kKh + C64*kRowKh; kA = kU + C64*VT
    kEc = kA + C64*kRowA; kS = kEc + K; kP = kS + K*kRowS; kDm = kP + 2*C64*kRowS; kF = kDm + C64*kRowS
    kOut, kST, kCols2 = NSUB*kNt // WARPS, K//16*kNt // WARPS, C64*VT // THREADS
    assert kF * 4 <= 227 * 1024
    sm = np.full(kF, np.nan)
    def load_wq(blk):
        for tid in range(THREADS):
            for it in range(C64*(K//4) // THREADS):
                i = tid + it*THREADS; r, c4 = i // (K//4), i % (K//4)*4
                sm[kW + r*kRowWQ + c4: kW + r*kRowWQ + c4 + 4] = blk[l['w'] + r*K + c4: l['w'] + r*K + c4 + 4]
                sm[kQt + r*kRowWQ + c4: kQt + r*kRowWQ + c4 + 4] = blk[l['qt'] + r*K + c4: l['qt'] + r*K + c4 + 4]
    def load_rest(blk):
        for tid in range(THREADS):
            for it in range(C64*(K//4) // THREADS):
                i = tid + it*THREADS; r, c4 = i // (K//4), i % (K//4)*4
                sm[kKh + r*kRowKh + c4: kKh + r*kRowKh + c4 + 4] = blk[l['kh'] + r*K + c4: l['kh'] + r*K + c4 + 4]
            for it in range(C64*VT//4 // THREADS):
                i = tid + it*THREADS; r, c4 = i // (VT//4), i % (VT//4)*4
                sm[kU + r*VT + c4: kU + r*VT + c4 + 4] = blk[l['u'] + r*V + e0 + c4: l['u'] + r*V + e0 + c4 + 4]
            for it in range(C64*C64//4 // THREADS):
                i = tid + it*THREADS; r, c4 = i // (C64//4), i % (C64//4)*4
                if c4 >= (r // C + 1) * C: continue  # blocks above the diagonal: not copied (stay NaN here)
                sm[kA + r*kRowA + c4: kA + r*kRowA + c4 + 4] = blk[l['aqk'] + r*C64 + c4: l['aqk'] + r*C64 + c4 + 4]
            if tid < K//4: sm[kEc + 4*tid: kEc + 4*tid + 4] = blk[l['ec'] + 4*tid: l['ec'] + 4*tid + 4]
    nc = len(b64s)
    if nc: load_wq(b64s[0]); load_rest(b64s[0])
    for d in range(K):
        for ee in range(VT): sm[kS + d*kRowS + ee] = S0[d, e0 + ee]
    s = {}
    for warp in range(WARPS):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for jj in range(kST):
                i = warp*kST + jj; d = i // kNt*16 + g; c = i % kNt*8 + 2*t
                s[warp, lane, jj] = np.array([sm[kS + d*kRowS + c], sm[kS + d*kRowS + c + 1], sm[kS + (d+8)*kRowS + c], sm[kS + (d+8)*kRowS + c + 1]])
    out = np.full((length, VT), np.nan)
    for j in range(nc):
        for warp in range(WARPS):  # phase 1
            prod, rt = warp // NSUB, warp % NSUB
            A = (kW if prod == 0 else kQt) + rt*16*kRowWQ
            acc = [np.zeros((32, 4)) for _ in range(kNt)]
            for k0 in range(0, K, 8):
                af = [[sm[A + (l_//4)*kRowWQ + k0 + l_%4], sm[A + (l_//4 + 8)*kRowWQ + k0 + l_%4], sm[A + (l_//4)*kRowWQ + k0 + l_%4 + 4], sm[A + (l_//4 + 8)*kRowWQ + k0 + l_%4 + 4]] for l_ in range(32)]
                for nt in range(kNt):
                    bf = [[sm[kS + (k0 + l_%4)*kRowS + nt*8 + l_//4], sm[kS + (k0 + l_%4 + 4)*kRowS + nt*8 + l_//4]] for l_ in range(32)]
                    mma(acc[nt], af, bf)
            for lane in range(32):
                g, t = lane // 4, lane % 4
                o = kP + (prod*C64 + rt*16)*kRowS + 2*t
                for nt in range(kNt):
                    sm[o + g*kRowS + nt*8: o + g*kRowS + nt*8 + 2] = acc[nt][lane][0:2]
                    sm[o + (g+8)*kRowS + nt*8: o + (g+8)*kRowS + nt*8 + 2] = acc[nt][lane][2:4]
        if j + 1 < nc: load_wq(b64s[j + 1])
        for tid in range(THREADS):  # phase 2
            r, cc = tid // (VT // kCols2), tid % (VT // kCols2) * kCols2
            for c4 in range(0, kCols2, 4):
                sm[kDm + r*kRowS + cc + c4: kDm + r*kRowS + cc + c4 + 4] = sm[kU + r*VT + cc + c4: kU + r*VT + cc + c4 + 4] - sm[kP + r*kRowS + cc + c4: kP + r*kRowS + cc + c4 + 4]
        newS = {}
        for warp in range(WARPS):  # phase 2b
            i0 = warp*kOut; rt = i0 // kNt; arow = kA + rt*16*kRowA
            acc = []
            for jj in range(kOut):
                a_ = np.zeros((32, 4))
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    col = (i0 + jj) % kNt*8 + 2*t; qs = kP + (C64 + rt*16)*kRowS + col
                    a_[lane] = [sm[qs + g*kRowS], sm[qs + g*kRowS + 1], sm[qs + (g+8)*kRowS], sm[qs + (g+8)*kRowS + 1]]
                acc.append(a_)
            for k0 in range(0, 16*(rt + 1), 8):
                af = [[sm[arow + (l_//4)*kRowA + k0 + l_%4], sm[arow + (l_//4 + 8)*kRowA + k0 + l_%4], sm[arow + (l_//4)*kRowA + k0 + l_%4 + 4], sm[arow + (l_//4 + 8)*kRowA + k0 + l_%4 + 4]] for l_ in range(32)]
                for jj in range(kOut):
                    nt = (i0 + jj) % kNt
                    bf = [[sm[kDm + (k0 + l_%4)*kRowS + nt*8 + l_//4], sm[kDm + (k0 + l_%4 + 4)*kRowS + nt*8 + l_//4]] for l_ in range(32)]
                    mma(acc[jj], af, bf)
            for lane in range(32):
                g, t = lane // 4, lane % 4
                tok = j*C64 + rt*16 + g
                for jj in range(kOut):
                    col = (i0 + jj) % kNt*8 + 2*t
                    if tok < length: out[tok, col: col + 2] = acc[jj][lane][0:2]
                    if tok + 8 < length: out[tok + 8, col: col + 2] = acc[jj][lane][2:4]
            # phase 3
            i0 = warp*kST; m0 = i0 // kNt*16
            acc = [np.zeros((32, 4)) for _ in range(kST)]
            for lane in range(32):
                g = lane // 4
                ea, eb = sm[kEc + m0 + g], sm[kEc + m0 + g + 8]
                for jj in range(kST):
                    acc[jj][lane] = s[warp, lane, jj] * np.array([ea, ea, eb, eb])
            for k0 in range(0, C64, 8):
                af = [[sm[kKh + (k0 + l_%4)*kRowKh + m0 + l_//4], sm[kKh + (k0 + l_%4)*kRowKh + m0 + l_//4 + 8], sm[kKh + (k0 + l_%4 + 4)*kRowKh + m0 + l_//4], sm[kKh + (k0 + l_%4 + 4)*kRowKh + m0 + l_//4 + 8]] for l_ in range(32)]
                for jj in range(kST):
                    nt = (i0 + jj) % kNt
                    bf = [[sm[kDm + (k0 + l_%4)*kRowS + nt*8 + l_//4], sm[kDm + (k0 + l_%4 + 4)*kRowS + nt*8 + l_//4]] for l_ in range(32)]
                    mma(acc[jj], af, bf)
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for jj in range(kST):
                    nt = (i0 + jj) % kNt
                    newS[warp, lane, jj] = acc[jj][lane].copy()
        # writes to the mirror happen after every warp's reads in the emulation: the kernel's warps
        # write only their own tiles, which no other warp reads in phases 2b / 3
        for (warp, lane, jj), v in newS.items():
            g, t = lane // 4, lane % 4
            i0 = warp*kST; m0 = i0 // kNt*16; nt = (i0 + jj) % kNt
            srow = kS + (m0 + g)*kRowS + nt*8 + 2*t
            sm[srow: srow + 2] = v[0:2]; sm[srow + 8*kRowS: srow + 8*kRowS + 2] = v[2:4]
            s[warp, lane, jj] = v
        if j + 1 < nc: load_rest(b64s[j + 1])
    Sout = np.full((K, VT), np.nan)
    for (warp, lane, jj), v in s.items():
        g, t = lane // 4, lane % 4
        i = warp*kST + jj; d = i // kNt*16 + g; c = i % kNt*8 + 2*t
        Sout[d, c], Sout[d, c+1], Sout[d+8, c], Sout[d+8, c+1] = v
    return out, Sout

def run(T, K, V, VT):
    nsub16 = (T + 15) // 16
    k = rng.normal(size=(nsub16*16, K)) / np.sqrt(K); q = rng.normal(size=(nsub16*16, K)); v = rng.normal(size=(nsub16*16, V))
    g = -rng.uniform(0, 1, size=(nsub16*16, K)); beta = rng.uniform(0, 1, nsub16*16)
    k[T:] = q[T:] = v[T:] = g[T:] = 0; beta[T:] = 0
    S0 = rng.normal(size=(K, V))
    blocks = np.concatenate([blocks16(k[16*a:16*a+16], q[16*a:16*a+16], v[16*a:16*a+16], g[16*a:16*a+16], beta[16*a:16*a+16], 0.3, K, V) for a in range(nsub16)])
    ls = layout16(K, V)
    # reference: 16-token steps
    S = S0.copy(); Os = []
    for a in range(nsub16):
        b = blocks[a*ls['bf']:(a+1)*ls['bf']]
        W = b[ls['w']:ls['qt']].reshape(C, K); Qt = b[ls['qt']:ls['kh']].reshape(C, K); Kh = b[ls['kh']:ls['u']].reshape(C, K)
        U = b[ls['u']:ls['aqk']].reshape(C, V); A = b[ls['aqk']:ls['ec']].reshape(C, C); ec = b[ls['ec']:]
        D = U - W @ S; Os.append(Qt @ S + A @ D); S = ec[:, None]*S + Kh.T @ D
    Oref = np.concatenate(Os)[:T]
    nc64 = (T + 63) // 64
    b64s = [merge(blocks, 4*c, min(4, nsub16 - 4*c), K, V) for c in range(nc64)]
    worst = 0
    for e0 in range(0, V, VT):
        out, Sout = state64(b64s, T, S0, K, V, VT, e0)
        eo = np.abs(out - Oref[:, e0:e0+VT]).max() / np.abs(Oref).max()
        es = np.abs(Sout - S[:, e0:e0+VT]).max() / np.abs(S).max()
        assert not np.isnan(out).any() and not np.isnan(Sout).any()
        worst = max(worst, eo, es)
    print(f"T={T} K={K} V={V} VT={VT}: worst rel max err {worst:.1e}", flush=True)
    return worst

w = 0
for T, K, V, VT in [(17, 64, 64, 16), (70, 64, 64, 32), (129, 64, 128, 16), (65, 128, 64, 16), (40, 128, 128, 32)]:
    w = max(w, run(T, K, V, VT))
print("PASS" if w < 1e-12 else "FAIL", w)
