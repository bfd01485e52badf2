#!/usr/bin/env python3
"""Model of the sm90 prefill kernel's barrier protocol with combined K/V stages (D 64: three consumer
warpgroups; D 128: two; src/attention/engines/sm90/prefill_kernel.cuh: consume() and produce()), run over random
interleavings of the producer and the consumer warpgroups, for many query / key lengths and masks.

It models what can deadlock or miscount: the GEMM turns (named barriers, bar.sync / bar.arrive with
count-based generations, the last warpgroup's pre-arrive and skipped last arrive), the stale-V barrier
all consumer warpgroups meet (zero_stale_v), and the stage mbarriers (full: the producer's load;
empty: one arrival per warpgroup, in the phase of the tile). Each warpgroup's op sequence is written
by hand after consume(): keep the two in step when the loop's barrier order changes.

Modes: `code` (the D 64 kernel: warpgroups pass the tiles none of their rows sees,
Traits::kSkipUnseenTiles, and the next tile's K is waited for between the softmax and wgmma_wait<0>,
Traits::kPinnedOverlap), `noskip` (pinned, every warpgroup computes the CTA's tiles), `unpinned` (the
skip with the wait at the top of the next iteration), `d128` (128-row tiles, two warpgroups, pinned),
`late-wait` (a planted bug: a passed tile's wait one turn later -- the first version of the skip, which
deadlocks); `early-code` / `early-d128` (PrefillLaunch::early_first_loads: tile 0's K on a barrier of
its own, landing apart from its V, which with its stale-V barrier is waited for after the first turn). Exit status 0 when every mode but `late-wait` passes every run and `late-wait` is caught.
`persistent-wg` (the persistent form, prefill_persistent.cuh; below) with its planted bugs.
Usage: python3 scripts/prefill-barrier-sim.py [--mode persistent-wg]
"""
import random
import sys
BN, S = 128, 3
BM, NWG = 192, 3  # set per mode in check()

# visible_keys of seq_and_mask.cuh (bottom-right alignment).
def visible(i, q_len, k_len, causal, wl, wr):
    pos = k_len - q_len + i
    lo, hi = 0, k_len - 1
    if causal: hi = min(hi, pos)
    if wr >= 0: hi = min(hi, pos + wr)
    if wl >= 0: lo = max(pos - wl, 0)
    if hi < lo: hi = lo - 1
    return lo, hi

# One CTA of m0: its tiles [b0, b1) and each warpgroup's op sequence, after consume().
def cta(m0, q_len, k_len, causal, wl, wr, skip, version, pinned=False, early=False):
    rows = min(BM, q_len - m0)
    flo, _ = visible(m0, q_len, k_len, causal, wl, wr)
    _, lhi = visible(m0 + rows - 1, q_len, k_len, causal, wl, wr)
    if flo > lhi: return None
    b0, b1 = flo // BN, lhi // BN + 1
    stale = (k_len - 1) // BN if k_len % BN else None
    progs = []
    for wg in range(NWG):
        f = m0 + 64 * wg; l = min(f + 64, q_len) - 1
        own = b1
        if skip:
            hi = visible(l, q_len, k_len, causal, wl, wr)[1] if f <= l else -1
            own = max(b0 + 1, min(b1, 0 if hi < 0 else hi // BN + 1))
        ops = []
        nxt = 0 if wg == NWG - 1 else wg + 1
        def wait_k(t):
            ops.append(('full', t - b0))
            if t == stale: ops.append(('zeroV',))
        def turn(last):
            ops.append(('sync', wg))
            if not (last and wg == NWG - 1): ops.append(('arrive', nxt))
        def passed_tiles():  # the warpgroup's last own tile, then the tiles it passes (turns only)
            if own < b1: wait_k(own)
            turn(own == b1); ops.append(('release', own - 1 - b0))
            for blk in range(own, b1):
                ops.append(('release', blk - b0))
                if blk + 1 < b1: wait_k(blk + 1)
                turn(blk + 1 == b1)
        if wg == NWG - 1: ops.append(('arrive', 0))
        if early:  # issue_first_loads: tile 0's K on first_k_full; its V (full, stale rows) after the first turn
            ops.append(('kfirst',)); turn(False); wait_k(b0)
        else:
            wait_k(b0); turn(False)
        if pinned:  # Traits::kPinnedOverlap: the next K waited for before wgmma_wait<0> and the release
            if b0 + 1 < own: wait_k(b0 + 1)
            for blk in range(b0 + 1, own):
                turn(False)
                if blk + 1 < own: wait_k(blk + 1)
                ops.append(('release', blk - 1 - b0))
            passed_tiles()
            progs.append(ops)
            continue
        for blk in range(b0 + 1, own):
            wait_k(blk); turn(False); ops.append(('release', blk - 1 - b0))
        if version == 'code':
            passed_tiles()
        else:  # late-wait: the first version of the skip, a passed tile's wait one turn later
            turn(own == b1); ops.append(('release', own - 1 - b0))
            for blk in range(own, b1):
                wait_k(blk); turn(blk + 1 == b1); ops.append(('release', blk - b0))
        progs.append(ops)
    return b1 - b0, progs

# One random interleaving: "ok", or what deadlocked or miscounted.
def run(tiles, progs, rng, early=False):
    pc = [0] * NWG
    kfirst_done = not early  # early first loads: tile 0's K lands on its own barrier, apart from its V
    full_done = [0] * S; empty_arr = [0] * S; empty_done = [0] * S
    bar_cnt = {g: 0 for g in range(NWG)}; bar_gen = {g: 0 for g in range(NWG)}; waiting = {}  # wg -> (g, gen)
    zv_cnt, zv_gen = 0, 0
    prod = 0
    while True:
        moves = []
        if prod < tiles and empty_done[prod % S] >= prod // S: moves.append(('P',))
        if not kfirst_done: moves.append(('K',))
        for w in range(NWG):
            if pc[w] >= len(progs[w]): continue
            if w in waiting:
                kind, g, gen = waiting[w]
                if (kind == 'bar' and bar_gen[g] > gen) or (kind == 'zv' and zv_gen > gen): moves.append(('W', w))
                continue
            op = progs[w][pc[w]]
            if op[0] == 'full':
                it = op[1]
                if full_done[it % S] >= it // S + 1: moves.append(('W', w))
            elif op[0] == 'kfirst':
                if kfirst_done: moves.append(('W', w))
            else: moves.append(('W', w))
        if not moves:
            done = all(pc[w] >= len(progs[w]) for w in range(NWG)) and prod == tiles
            if done and (any(bar_cnt.values()) or zv_cnt or any(empty_arr)): return 'LEFTOVER %s %s %s' % (bar_cnt, zv_cnt, empty_arr)
            return 'ok' if done else 'DEADLOCK pcs=%s ops=%s' % (pc, [progs[w][pc[w]] if pc[w] < len(progs[w]) else None for w in range(NWG)])
        m = rng.choice(moves)
        if m[0] == 'P':
            full_done[prod % S] += 1; prod += 1; continue
        if m[0] == 'K':
            kfirst_done = True; continue
        w = m[1]
        if w in waiting: del waiting[w]; pc[w] += 1; continue
        op = progs[w][pc[w]]
        if op[0] in ('full', 'kfirst'): pc[w] += 1
        elif op[0] == 'release':
            it = op[1]; s = it % S
            if empty_done[s] != it // S: return 'PHASE ERROR wg%d release %d' % (w, it)
            empty_arr[s] += 1
            if empty_arr[s] == NWG: empty_arr[s] = 0; empty_done[s] += 1
            pc[w] += 1
        elif op[0] == 'arrive':
            g = op[1]; bar_cnt[g] += 1
            if bar_cnt[g] == 2: bar_cnt[g] = 0; bar_gen[g] += 1
            pc[w] += 1
        elif op[0] == 'sync':
            g = op[1]; gen = bar_gen[g]; bar_cnt[g] += 1
            if bar_cnt[g] == 2: bar_cnt[g] = 0; bar_gen[g] += 1; pc[w] += 1
            else: waiting[w] = ('bar', g, gen)
        elif op[0] == 'zeroV':
            gen = zv_gen; zv_cnt += 1
            if zv_cnt == NWG: zv_cnt = 0; zv_gen += 1; pc[w] += 1
            else: waiting[w] = ('zv', None, gen)
    # leftover barrier counts are checked by the caller

def check(version, rng):
    global BM, NWG
    early = version.startswith('early-')
    base = version[len('early-'):] if early else version
    BM, NWG = (128, 2) if base == 'd128' else (192, 3)
    skip = base in ('code', 'unpinned', 'late-wait')
    pinned = base in ('code', 'noskip', 'd128')
    runs = bad = 0
    for q_len in [1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 200, 300, 385, 500, 640]:
        for k_len in [1, 5, 63, 127, 128, 129, 191, 192, 193, 200, 300, 385, 500, 640, 1000]:
            for causal, wl, wr in [(False, -1, -1), (True, -1, -1), (False, 60, 10), (True, 100, -1), (False, -1, 0)]:
                for m0 in range(0, q_len, BM):
                    c = cta(m0, q_len, k_len, causal, wl, wr, skip, 'late-wait' if version == 'late-wait' else 'code',
                            pinned, early)
                    if c is None: continue
                    tiles, progs = c
                    for _ in range(20):
                        r = run(tiles, progs, rng, early)
                        runs += 1
                        if r != 'ok':
                            bad += 1
                            if bad <= 3: print(f'  {version}: q_len {q_len} k_len {k_len} causal {causal} window ({wl}, {wr}) m0 {m0}: {r}')
                            break
    print(f'{version}: {runs} runs, {bad} failing cases')
    return bad


# ---- persistent-wg: the persistent form (prefill_persistent.cuh; produce_persistent / consume_persistent),
# one CTA's works of ns[k] tiles each (full attention: all n; causal, step C: 1 to m, pairs of m + 1 back
# to back), two consumer warpgroups. Beyond the barriers it tracks the shared
# memory's contents: every buffer (K halves, V, Q halves, the O staging in a K half) carries a tag, a
# product checks its operands when issued and when waited for (wgmma is asynchronous), and a write (a
# TMA load landing, stmatrix of staged O) fails while a read of the buffer is in flight. mbarrier waits
# follow the hardware's parity rule (a wait for parity P passes iff the completed-phase count's parity
# differs from P), so a phase that runs two ahead shows as a hang or a wrong operand. Planted bugs
# (each must be caught): 'q-early' (Q half released after the S of the work's second-to-last tile),
# 'no-ofree' (the producer refills a staged stage without o_free), 'no-empty-wait' (the epilogue writes
# the K half without waiting for the stage's empty phase), 'no-skip-last' (warpgroup 1 arrives after its
# last turn too), 'o-in-q' (O staged in the warpgroup's Q half, as the plain kernel does, which by then
# holds the next work's Q), 'n-first' (step C: the Q half released by the first work's tile count in
# every work, as a kernel that kept step B's one n would). (One o_free barrier for all stages instead of
# one per stage would also pass: a warpgroup's epilogue of work k + 1 comes after its wait for the tile following work k + 1's
# last, which the producer issues only after its o_free wait for work k, so o_free never runs two
# phases ahead. The per-stage barriers do not rely on where that wait sits.)
def persistent_programs(ns, bug):
    W, total = len(ns), sum(ns)
    start = [sum(ns[:k]) for k in range(W)]
    work = [k for k in range(W) for _ in range(ns[k])]  # tile g -> its work
    def producer():
        staged = [False] * S; ophase = [0] * S; it = 0
        for k in range(W):
            n = ns[k]
            for blk in range(n):
                s = it % S
                yield ('wait', ('empty', s), ((it // S) & 1) ^ 1)
                if staged[s] and bug != 'no-ofree':
                    yield ('wait', ('ofree', s), ophase[s]); ophase[s] ^= 1
                staged[s] = blk == n - 1
                yield ('load', ('full', s), [(('K', s, 0), ('tile', it)), (('K', s, 1), ('tile', it)), (('V', s), ('tile', it))])
                if blk == 0:
                    for w in range(2):
                        if k > 0: yield ('wait', ('qempty', w), (k - 1) & 1)
                        yield ('load', ('qfull', w), [(('Q', w), ('q', k))])
                it += 1
    def consumer(w):
        def epilogue(k, L):
            s = L % S
            if bug != 'no-empty-wait': yield ('wait', ('empty', s), (L // S) & 1)
            buf = ('Q', w) if bug == 'o-in-q' else ('K', s, w)
            yield ('write', buf, ('O', k, w))
            yield ('issue', 'st', [(buf, ('O', k, w))])
            yield ('complete', 'st')
            yield ('arrive', ('ofree', s))
        def s_reads(g):
            s = g % S
            return [(('Q', w), ('q', work[g])), (('K', s, 0), ('tile', g)), (('K', s, 1), ('tile', g))]
        def releases_q(t, n):
            return t == (n - 2 if bug == 'q-early' and n >= 2 else n - 1)
        if w == 1: yield ('arrive_nb', 0)
        yield ('wait', ('qfull', w), 0)
        yield ('wait', ('full', 0), 0)
        yield ('sync', w)
        yield ('issue', 'S', s_reads(0))
        yield ('arrive_nb', 0 if w == 1 else 1)
        yield ('complete', 'S')
        if releases_q(0, ns[0]): yield ('arrive', ('qempty', w))
        if total > 1: yield ('wait', ('full', 1 % S), (1 // S) & 1)
        for g in range(1, total):
            k = work[g]; t = g - start[k]
            if t == 0: yield ('wait', ('qfull', w), k & 1)
            yield ('sync', w)
            yield ('issue', 'S', s_reads(g))
            yield ('issue', 'O', [(('V', (g - 1) % S), ('tile', g - 1))])
            yield ('arrive_nb', 0 if w == 1 else 1)
            yield ('complete', 'S')
            if releases_q(t, ns[0] if bug == 'n-first' else ns[k]): yield ('arrive', ('qempty', w))
            if g + 1 < total: yield ('wait', ('full', (g + 1) % S), ((g + 1) // S) & 1)
            yield ('complete', 'O')
            yield ('arrive', ('empty', (g - 1) % S))
            if t == 0: yield from epilogue(k - 1, g - 1)
        L = total - 1
        yield ('sync', w)
        yield ('issue', 'O', [(('V', L % S), ('tile', L))])
        yield from (() if (w == 1 and bug != 'no-skip-last') else [('arrive_nb', 0 if w == 1 else 1)])
        yield ('complete', 'O')
        yield ('arrive', ('empty', L % S))
        yield from epilogue(W - 1, L)
    return [producer(), consumer(0), consumer(1)]

def run_persistent(ns, bug, rng):
    counts = {'full': 1, 'empty': 2, 'qfull': 1, 'qempty': 1, 'ofree': 2}
    arr = {}; done = {}  # mbarrier: arrivals in the current phase, completed phases
    nb_cnt = [0, 0]; nb_gen = [0, 0]
    mem = {}; inflight = {}  # buffer -> tag; buffer -> number of reads in flight
    progs = persistent_programs(ns, bug)
    cur = [next(p, None) for p in progs]
    nbwait = [None] * 3; issued = [dict() for _ in range(3)]  # per agent: kind -> reads in flight
    pending = []  # TMA loads in flight: (bar, writes)
    def arrive(bar):
        arr[bar] = arr.get(bar, 0) + 1
        if arr[bar] == counts[bar[0]]: arr[bar] = 0; done[bar] = done.get(bar, 0) + 1
    def write(buf, tag):
        if inflight.get(buf, 0): return 'RACE: %s written while read' % (buf,)
        mem[buf] = tag
    def check(reads):
        for buf, tag in reads:
            if mem.get(buf) != tag: return 'WRONG OPERAND %s holds %s, wants %s' % (buf, mem.get(buf), tag)
    while True:
        moves = [('L', i) for i in range(len(pending))]
        for a in range(3):
            op = cur[a]
            if op is None: continue
            if nbwait[a] is not None:
                if nb_gen[op[1]] > nbwait[a]: moves.append(('A', a))
                continue
            if op[0] == 'wait':
                if (done.get(op[1], 0) & 1) != op[2]: moves.append(('A', a))
            else: moves.append(('A', a))
        if not moves:
            if all(c is None for c in cur):
                if any(nb_cnt) or any(arr.get(b, 0) for b in arr if b[0] != 'ofree'): return 'LEFTOVER %s %s' % (nb_cnt, arr)
                return 'ok'
            return 'DEADLOCK %s' % (cur,)
        m = rng.choice(moves)
        if m[0] == 'L':
            bar, writes = pending.pop(m[1])
            for buf, tag in writes:
                e = write(buf, tag)
                if e: return e
            arrive(bar); continue
        a = m[1]; op = cur[a]
        if nbwait[a] is not None:
            nbwait[a] = None; cur[a] = next(progs[a], None); continue
        kind = op[0]
        if kind == 'wait': pass
        elif kind == 'load': pending.append((op[1], op[2]))
        elif kind == 'arrive': arrive(op[1])
        elif kind == 'write':
            e = write(op[1], op[2])
            if e: return e
        elif kind == 'issue':
            e = check(op[2])
            if e: return e
            issued[a][op[1]] = op[2]
            for buf, _ in op[2]: inflight[buf] = inflight.get(buf, 0) + 1
        elif kind == 'complete':
            reads = issued[a].pop(op[1])
            e = check(reads)
            if e: return e
            for buf, _ in reads: inflight[buf] -= 1
        elif kind == 'arrive_nb':
            g = op[1]; nb_cnt[g] += 1
            if nb_cnt[g] == 2: nb_cnt[g] = 0; nb_gen[g] += 1
        elif kind == 'sync':
            g = op[1]; gen = nb_gen[g]; nb_cnt[g] += 1
            if nb_cnt[g] == 2: nb_cnt[g] = 0; nb_gen[g] += 1
            else: nbwait[a] = gen; continue
        cur[a] = next(progs[a], None)

# The lists of works' tile counts: full attention's W works of n tiles, then causal ones (step C):
# pairs (m - 1 - i, i) of m + 1 tiles (the middle block alone when m is odd), works of 1 next to 16,
# runs of one-tile works (Sq > Sk: every tile ends a work) and random lengths 1..6.
def persistent_lists(rng):
    lists = [[n] * W for n in [1, 2, 3, 4, 5, 7, 16] for W in [1, 2, 3, 4, 5, 8, 13]]
    for m in [2, 3, 4, 5, 16]:
        pairs = [x for i in range(m // 2) for x in (m - i, i + 1)] + ([m // 2 + 1] if m % 2 else [])
        lists += [pairs, pairs * 2, pairs[:3]]
    lists += [[16, 1, 16, 1, 1, 16], [1, 1, 1, 2, 1, 1, 3, 1], [1, 16], [16, 1], [2, 1, 2, 1, 1, 2]]
    lists += [[rng.randint(1, 6) for _ in range(rng.randint(1, 9))] for _ in range(12)]
    return lists

def check_persistent(bug, rng):
    runs = bad = 0
    for ns in persistent_lists(random.Random(7)):
        for _ in range(20 if sum(ns) < 60 else 5):
            r = run_persistent(ns, bug, rng)
            runs += 1
            if r != 'ok':
                bad += 1
                if bad <= 2 and bug is None: print(f'  persistent-wg: works of {ns} tiles: {r}')
                if bad <= 1 and bug is not None: print(f'  persistent-wg planted {bug}: works of {ns} tiles: {r[:160]}')
                break
    print(f'persistent-wg{" (planted " + bug + ")" if bug else ""}: {runs} runs, {bad} failing cases')
    return bad


if __name__ == '__main__':
    rng = random.Random(1)
    ok = True
    only_persistent = sys.argv[1:] == ['--mode', 'persistent-wg']
    if not only_persistent:
        for mode in ('code', 'noskip', 'unpinned', 'd128', 'early-code', 'early-d128'):
            ok = check(mode, rng) == 0 and ok
        ok = check('late-wait', rng) > 0 and ok
    ok = check_persistent(None, rng) == 0 and ok
    for bug in ('q-early', 'no-ofree', 'no-empty-wait', 'no-skip-last', 'o-in-q', 'n-first'):
        ok = check_persistent(bug, rng) > 0 and ok
    print('barrier model: ' + ('pass' if ok else 'FAIL'))
    sys.exit(0 if ok else 1)
