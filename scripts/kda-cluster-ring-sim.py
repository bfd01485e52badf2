#!/usr/bin/env python3
"""Random-timing model of the cluster state pass's chunk ring (kda_state_multicast.cuh).

C CTAs of a cluster run nc chunk steps. At the start of step j each CTA issues its part of chunk
j + 1 (multicast: one landing per destination CTA, after a random delay) into stage (j + 1) % S; a
CTA ends step j when its compute is done and every part of chunk j + 1 has landed in it (its full
barrier). It reads stage j % S during step j. The ring needs no "empty" barriers iff every copy of
chunk c into a CTA is issued after that CTA ended step c - S (its last read of the stage), and the
barrier of a stage sees its previous phase end before the next phase's bytes come. Checks both for
S = 3 (the kernel) on many random schedules, and shows S = 2 fails (which is why the kernel has 3).
"""
import random


def run(stages, clusters=8, chunks=40, trials=3000, seed=1):
    rng = random.Random(seed)
    for _ in range(trials):
        C = rng.choice([2, 4, clusters])
        nc = rng.randint(1, chunks)
        start = [[0.0] * nc for _ in range(C)]
        end = [[0.0] * nc for _ in range(C)]
        issue = [[None] * (nc + 1) for _ in range(C)]  # issue[x][c]: when x issued its part of chunk c
        land = {}  # (c, x, y): part of chunk c from x lands in y
        for x in range(C):
            issue[x][0] = 0.0
            for y in range(C):
                land[(0, x, y)] = rng.expovariate(1.0)
        for x in range(C):
            start[x][0] = max(land[(0, p, x)] for p in range(C))
        # Steps advance in global time order; a CTA's step j end depends on peers' issues of j + 1,
        # which happen at their step j starts: iterate over j (all CTAs' step j start is known).
        for j in range(nc):
            for x in range(C):
                if j + 1 < nc:
                    issue[x][j + 1] = start[x][j]
                    for y in range(C):
                        land[(j + 1, x, y)] = start[x][j] + rng.expovariate(rng.choice([0.2, 1.0, 5.0]))
            for x in range(C):
                done = start[x][j] + rng.uniform(0.5, 2.0) * rng.choice([1, 1, 1, 4])
                if j + 1 < nc:
                    done = max(done, max(land[(j + 1, p, x)] for p in range(C)))
                end[x][j] = done
                if j + 1 < nc:
                    start[x][j + 1] = done
        for c in range(stages, nc):
            for x in range(C):
                for y in range(C):
                    # y last read stage c % S in step c - S; x's copy of chunk c into y must come later.
                    if issue[x][c] < end[y][c - stages]:
                        return False, (C, nc, c, x, y)
                    # y observed the stage's previous phase (chunk c - S) at the end of step c - S - 1.
                    if c - stages - 1 >= 0 and land[(c, x, y)] < end[y][c - stages - 1]:
                        return False, (C, nc, c, x, y, "phase")
    return True, None


if __name__ == "__main__":
    ok3, why3 = run(3)
    ok2, why2 = run(2)
    print(f"3 stages: {'PASS' if ok3 else 'FAIL ' + str(why3)}")
    print(f"2 stages: {'hazard found (expected)' if not ok2 else 'no hazard found (unexpected)'}")
    raise SystemExit(0 if ok3 and not ok2 else 1)
