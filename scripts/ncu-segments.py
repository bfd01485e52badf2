#!/usr/bin/env python3
"""Warp samples of one kernel split at its CTA barriers: where a latency-bound kernel's time goes.

Input: Nsight Compute's SASS source page as CSV (gzip or plain), e.g. on the device
    ncu --clock-control none -k regex:kda_chunk_prep -c 1 --section SourceCounters -o prep <app ...>
    ncu --import prep.ncu-rep --page source --print-source sass --csv | gzip > prep-source.csv.gz
Output: one line per barrier-delimited segment of the SASS (in address order): its warp samples and
share, the instructions each warp issues there, and the segment's top stall reasons. Samples of a
warp waiting at a barrier land on the instruction after it, i.e. at the start of the next segment.

    python3 scripts/ncu-segments.py prep-source.csv.gz
"""
import csv
import gzip
import sys


def main(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    count = lambda r, h: int(r[ix[h]] or 0)
    warps = max(count(r, "Instructions Executed") for r in data[:4])  # the entry runs once a warp
    total = sum(count(r, "# Samples") for r in data)
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    print(f"{total} samples, {len(data)} instructions, "
          f"{sum(count(r, 'Instructions Executed') for r in data) / warps:.1f} issued a warp ({warps} warps)")
    segs, cur, start = [], [], 0
    for i, r in enumerate(data):
        cur.append(r)
        if "BAR" in r[1] and "BAR.ARV" not in r[1]:
            segs.append((start, cur))
            cur, start = [], i + 1
    segs.append((start, cur))
    for n, (start, seg) in enumerate(segs):
        samples = sum(count(r, "# Samples") for r in seg)
        issued = sum(count(r, "Instructions Executed") for r in seg) / warps
        top = sorted(((h[6:], sum(count(r, h) for r in seg)) for h in stalls), key=lambda x: -x[1])[:4]
        print(f"seg {n:2d} @{start:5d}: {samples:6d} samples ({100 * samples / total:4.1f} %), "
              f"{issued:6.1f} issued a warp, ends {seg[-1][1].strip()[:24]:24s} | "
              + " ".join(f"{k}={v}" for k, v in top))


if __name__ == "__main__":
    main(sys.argv[1])
