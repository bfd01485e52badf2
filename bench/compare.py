#!/usr/bin/env python3
"""Compare two benchmark results files: a configuration/contender is a regression only when the
p20-p80 bands of its GPU time do not overlap (B's p20 above A's p80), an improvement when B's p80
is below A's p20; anything else is within noise.

  python bench/compare.py A.json B.json [--contender groupattn:cuda] [--all]

Exit status 1 when any regression is found, 0 otherwise. Pure Python (no torch)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, Iterator, List, Tuple


def timings(data: Dict) -> Iterator[Tuple[str, str, str, Dict]]:
    """(suite, label, contender, ms summary) for every timed contender of every entry."""
    for suite, s in data.get("suites", {}).items():
        for e in s.get("entries", []):
            for name, t in e.get("timing", {}).items():
                if name.endswith("#ctrl") or "ms" not in t:
                    continue
                yield suite, e.get("label", json.dumps(e.get("config"), sort_keys=True)), name, t["ms"]


def classify(a: Dict, b: Dict) -> str:
    """'regression' | 'improvement' | 'same' from two {p20, median, p80} time summaries."""
    if b["p20"] > a["p80"]:
        return "regression"
    if b["p80"] < a["p20"]:
        return "improvement"
    return "same"


def compare(a: Dict, b: Dict, contender: str = None) -> List[Dict]:
    ia = {(s, l, n): m for s, l, n, m in timings(a)}
    rows = []
    for s, l, n, mb in timings(b):
        if contender and n != contender:
            continue
        ma = ia.get((s, l, n))
        if ma is None:
            continue
        rows.append({"suite": s, "label": l, "contender": n, "a_ms": ma, "b_ms": mb,
                     "ratio": mb["median"] / ma["median"], "verdict": classify(ma, mb)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--contender", default=None, help="only this contender (e.g. groupattn:cuda)")
    ap.add_argument("--all", action="store_true", help="print every row, not only changes")
    args = ap.parse_args(argv)
    with open(args.a) as f:
        a = json.load(f)
    with open(args.b) as f:
        b = json.load(f)
    rows = compare(a, b, args.contender)
    for k in ("gpu", "git_commit", "date_utc"):
        print(f"{k:10s} A: {a.get('provenance', {}).get(k)}   B: {b.get('provenance', {}).get(k)}")
    if not rows:
        print("no configuration/contender timed in both files")
        return 0
    shown = [r for r in rows if args.all or r["verdict"] != "same"]
    print(f"{'suite':8s} {'contender':18s} {'configuration':48s} {'A us [p20-p80]':>24s} {'B us [p20-p80]':>24s} {'B/A':>6s} verdict")
    for r in shown:
        fa = "%.1f [%.1f-%.1f]" % (r["a_ms"]["median"] * 1e3, r["a_ms"]["p20"] * 1e3, r["a_ms"]["p80"] * 1e3)
        fb = "%.1f [%.1f-%.1f]" % (r["b_ms"]["median"] * 1e3, r["b_ms"]["p20"] * 1e3, r["b_ms"]["p80"] * 1e3)
        print(f"{r['suite']:8s} {r['contender']:18s} {r['label'][:48]:48s} {fa:>24s} {fb:>24s} {r['ratio']:6.3f} {r['verdict']}")
    n = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("regression", "improvement", "same")}
    print(f"{len(rows)} compared: {n['regression']} regressions, {n['improvement']} improvements, "
          f"{n['same']} within the p20-p80 bands")
    return 1 if n["regression"] else 0


if __name__ == "__main__":
    sys.exit(main())
