#!/usr/bin/env python3
"""groupattn benchmark: our engines (pinned by name through the groupattn package) against the peers
(torch SDPA's cuDNN and FlashAttention-2 backends; fla chunk_kda for KDA when importable), in one
process, on the same tensors, under the protocol of ../shared/BENCHMARKING.md.

  python bench/run.py --suite prefill|decode|kda|all [--quick] [--out bench/results/NAME.json]
                      [--suite-minutes M] [--engines cuda,...]

Writes one JSON file (provenance, ceilings, engine verification, one entry per configuration) and
rewrites it after every configuration, so an interrupted run keeps what it measured. Then:
  python bench/report.py bench/results/NAME.json      -> docs/PERFORMANCE.md + plots
  python bench/compare.py A.json B.json               -> regressions outside the p20-p80 bands
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")


def _decode_priority(cfg):
    # Under a time budget the first configurations run: single-token decode over every layout
    # (contiguous first: the peers' comparison), then mixed lengths, then fp8, then multi-token decode.
    # fp8 K/V (issue 7) after every bf16 single-token row and before multi-token bf16.
    fp8 = cfg.get("kv_dtype") is not None
    return (cfg["new"] != 1 and not fp8, fp8, cfg["mixed"], cfg["page"] is not None, cfg["new"])


def _kda_priority(cfg):
    # fla autotunes once per kernel key (heads, gate flags, varlen), tens of seconds each: group the
    # shapes that share a key so a time budget covers as many shapes as possible.
    order = {16: 0, 4: 1, 32: 2, 12: 3, 24: 4, 64: 5}
    return (order.get(cfg["H"], 9), cfg["N"] > 1, cfg["gate"] != "lower_bound", cfg["T"])


class Stop(BaseException):
    """Raised by the SIGTERM handler (timeout / BENCH_DEADLINE): a BaseException, so the per-config
    `except Exception` blocks do not swallow it."""


def _on_sigterm(signum, frame):
    raise Stop()


def _ordered(suite, cfgs):
    if suite == "decode":
        return sorted(cfgs, key=_decode_priority)
    if suite == "kda":
        return sorted(cfgs, key=_kda_priority)
    return cfgs


def _budgets(spec, suites):
    if spec is None:
        return {}
    if "=" not in spec:
        return {s: float(spec) for s in suites}
    out = {}
    for part in spec.split(","):
        k, v = part.split("=")
        out[k.strip()] = float(v)
    return out


def check_resumable(prior, digest, quick, path):
    """Raises ValueError (naming the file and what would be accepted) unless `prior`, a results dict,
    was measured on the source tree `digest` with the same --quick setting: its entries then measured
    this tree's code, and may stand beside the ones a resumed run adds."""
    theirs = prior.get("provenance", {}).get("tree_digest")
    if theirs != digest:
        raise ValueError(f"--resume: {path} was measured on source tree {theirs}, this tree is {digest} "
                         "(accepted: a results file of this tree; `python bench/run.py --tree-digest` prints it)")
    if bool(prior.get("quick")) != bool(quick):
        raise ValueError(f"--resume: {path} has quick={bool(prior.get('quick'))}, this run quick={bool(quick)} "
                         "(accepted: the same --quick setting)")


def resumable_entries(prior, suite):
    """The configurations of `suite` that `prior` measured (timing present, no errors), keyed by
    their config as run.py compares them; failed or unreached ones run again."""
    out = {}
    for e in prior.get("suites", {}).get(suite, {}).get("entries", []):
        if e.get("timing") and not e.get("errors"):
            out[json.dumps(e["config"], sort_keys=True)] = e
    return out


def _resume_source(prior, path):
    p = prior.get("provenance", {})
    return {"file": os.path.basename(path), "git_commit": p.get("git_commit"), "date_utc": p.get("date_utc"),
            "tree_digest": p.get("tree_digest")}


def _write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="all", choices=["prefill", "decode", "kda", "all"])
    ap.add_argument("--quick", action="store_true", help="a small subset of each matrix (~2 minutes in all)")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/<suite>[-quick]-<date>.json)")
    ap.add_argument("--suite-minutes", default=None,
                    help="stop starting new configurations of a suite after this many minutes; the rest are "
                         "listed in the JSON as not run. One number for every suite, or e.g. "
                         "prefill=1.5,decode=2.5,kda=2")
    ap.add_argument("--engines", default=None, help="comma-separated groupattn engine names (default: every "
                                                    "available non-reference engine of each op)")
    ap.add_argument("--no-peers", action="store_true", help="our engines only")
    ap.add_argument("--order", default="turning", choices=["turning", "shuffled", "self"],
                    help="how a configuration's contenders take turns (bench/harness.py ORDER_MODES): turning "
                         "(each keeps its predecessor; the protocol up to session 11), shuffled (a seeded "
                         "permutation a round), self (each timed right after an untimed replay of itself)")
    ap.add_argument("--tree-digest", action="store_true",
                    help="print the source-tree digest a results file would record, and exit (no torch needed)")
    ap.add_argument("--list", action="store_true",
                    help="print the configurations in the order they would run, and exit (no torch needed)")
    ap.add_argument("--resume", default=None, metavar="JSON",
                    help="a results file of an earlier call on this same source tree (its tree digest) and "
                         "--quick setting: its measured configurations are kept as they are (each marked "
                         "resumed_from) and only the rest run, so a suite longer than one device call "
                         "completes over several")
    args = ap.parse_args(argv)
    if args.list:
        import matrices

        for suite in (["decode", "prefill", "kda"] if args.suite == "all" else [args.suite]):
            cfgs = _ordered(suite, matrices.SUITES[suite](args.quick))
            print(f"{suite}: {len(cfgs)} configurations")
            for c in cfgs:
                print("  " + matrices.label(suite, c))
        return 0
    if args.tree_digest:
        from treedigest import tree_digest

        print(tree_digest(ROOT))
        return 0

    prior = None
    if args.resume:
        from treedigest import tree_digest

        try:
            with open(args.resume) as f:
                prior = json.load(f)
            check_resumable(prior, tree_digest(ROOT), args.quick, args.resume)
        except (OSError, ValueError) as e:
            print(f"bench/run.py: {e}", file=sys.stderr)
            return 2

    import torch

    if not torch.cuda.is_available():
        print("bench/run.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    import harness as H
    import matrices
    import suites as S

    assert tuple(sorted(H.ORDER_MODES)) == tuple(sorted(["turning", "shuffled", "self"])), "--order choices"
    S.ORDER = args.order
    suites = ["decode", "prefill", "kda"] if args.suite == "all" else [args.suite]
    budgets = _budgets(args.suite_minutes, suites)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = args.out or os.path.join(HERE, "results", f"{args.suite}{'-quick' if args.quick else ''}-{stamp}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    data = {"schema": 1, "suites_requested": suites, "quick": args.quick,
            "protocol": {"rounds": S.ROUNDS, "target_ms_per_replay": S.TARGET_MS,
                         "rotation_bytes_min": H.ROTATION_BYTES,
                         "order": "per round: each contender's graph once, in a fixed interleaved order, then the "
                                  "control (a second graph of the first of our engines)",
                         "order_mode": args.order,
                         "attention_rel_tol": S.refs.ATTN_REL_TOL, "kda_rel_tol": S.refs.KDA_REL_TOL}}
    data["provenance"] = H.provenance(ROOT, ["bench/run.py"] + (argv if argv is not None else sys.argv[1:]))
    data["provenance"]["clocks_before"] = H.nvidia_smi()
    if prior is not None:
        data["provenance"]["resumed_from"] = _resume_source(prior, args.resume)
    fla_fn, fla_ver = S.load_fla()
    data["provenance"]["peers"]["fla"] = fla_ver if fla_fn is not None else None
    data["provenance"]["peers"]["fla_status"] = "loaded" if fla_fn is not None else fla_ver
    data["provenance"]["peers"]["torch_sdpa"] = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    _write(out, data)

    t0 = time.time()
    print("measuring ceilings (GEMM, HBM read) ...", file=sys.stderr, flush=True)
    data["ceilings"] = {"gemm": H.gemm_ceiling(), "hbm": H.hbm_ceiling()}
    g = data["ceilings"]["gemm"]["tflops"]["median"]
    hb = data["ceilings"]["hbm"]["gbps"]
    print(f"  GEMM {g:.0f} TFLOP/s; HBM read {hb['median']:.0f} GB/s ({data['ceilings']['hbm']['ceiling_method']})"
          if hb else f"  GEMM {g:.0f} TFLOP/s; HBM read: failed", file=sys.stderr, flush=True)
    _write(out, data)

    data["verification"] = {}
    data["suites"] = {}
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _run_suites(args, suites, budgets, data, out, torch, H, matrices, S, prior)
    except Stop:
        data["stopped"] = "SIGTERM (timeout or BENCH_DEADLINE) during the run; configurations not reached are listed as not run"
        for suite in suites:
            s = data["suites"].setdefault(suite, {"engines": [], "entries": [], "not_run": []})
            done = {json.dumps(e["config"], sort_keys=True) for e in s["entries"]}
            done |= {json.dumps(x["config"], sort_keys=True) for x in s["not_run"]}
            for cfg in matrices.SUITES[suite](args.quick):
                if json.dumps(cfg, sort_keys=True) not in done:
                    s["not_run"].append({"config": cfg, "label": matrices.label(suite, cfg), "reason": "stopped (SIGTERM/deadline)"})
        print("stopped by SIGTERM: writing what was measured", file=sys.stderr, flush=True)

    data["provenance"]["clocks_after"] = H.nvidia_smi()
    data["provenance"]["wall_seconds"] = round(time.time() - t0, 1)
    _write(out, data)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _run_suites(args, suites, budgets, data, out, torch, H, matrices, S, prior=None):
    for suite in suites:
        kept = resumable_entries(prior, suite) if prior is not None else {}
        op = "kda" if suite == "kda" else "attention"
        engines = args.engines.split(",") if args.engines else S.our_engines(op)
        cfgs = _ordered(suite, matrices.SUITES[suite](args.quick))
        try:
            data["verification"][suite] = (S.verify_kda_engines(engines) if suite == "kda"
                                           else S.verify_attention_engines(engines, suite))
        except Exception as e:
            data["verification"][suite] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        entries = []
        data["suites"][suite] = {"engines": engines, "entries": entries, "not_run": []}
        bar = H.Progress(len(cfgs), suite)
        ts = time.time()
        for cfg in cfgs:
            label = matrices.label(suite, cfg)
            prior_entry = kept.get(json.dumps(cfg, sort_keys=True))
            if prior_entry is not None:
                e = dict(prior_entry)
                e["resumed_from"] = data["provenance"]["resumed_from"]
                entries.append(e)
                _write(out, data)
                bar.step("resumed " + label)
                continue
            if budgets.get(suite) is not None and time.time() - ts > budgets[suite] * 60:
                data["suites"][suite]["not_run"].append({"config": cfg, "label": label,
                                                         "reason": f"suite time budget ({budgets[suite]} min) spent"})
                bar.step("skipped (budget) " + label)
                continue
            c0 = time.time()
            try:
                if suite == "prefill":
                    e = S.prefill_config(cfg, engines, peers=not args.no_peers)
                elif suite == "decode":
                    e = S.decode_config(cfg, engines)
                else:
                    e = S.kda_config(cfg, engines)
            except Exception as ex:
                import traceback

                e = {"config": cfg, "errors": {"_config": f"{type(ex).__name__}: {str(ex)[:400]}",
                                               "_traceback": traceback.format_exc()[-1500:]}}
            e["label"] = label
            e["seconds"] = round(time.time() - c0, 2)
            entries.append(e)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            _write(out, data)
            bar.step(label + " " + _brief(e))
        bar.close()


def _brief(e):
    t = e.get("timing", {})
    parts = []
    for n, r in t.items():
        if n.endswith("#ctrl"):
            continue
        v = r.get("tflops") or r.get("gbps")
        unit = "TF" if "tflops" in r else ("GB/s" if "gbps" in r else "")
        parts.append(f"{n.split(':')[-1]}={r['ms']['median']*1e3:.0f}us" + (f"/{v:.0f}{unit}" if v else ""))
    bad = [n for n, c in e.get("correctness", {}).items() if not c.get("ok")]
    if bad:
        parts.append("FAIL:" + ",".join(bad))
    if e.get("errors"):
        parts.append("ERR:" + ",".join(k for k in e["errors"] if k != "_traceback"))
    return " ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
