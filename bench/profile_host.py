#!/usr/bin/env python3
"""Where the host time of one small groupattn decode call goes (issue 11): cProfile over many
calls (no synchronize inside the loop, a synchronize every 8 calls so the launch queue never
fills), sorted by own time, so Python frames, torch allocations, DLPack export and the extension
call each show as their own row.

    PYTHONPATH=build/python python bench/profile_host.py [--calls 4000]
"""
import argparse
import cProfile
import pstats
import sys


def breakdown(torch, groupattn, q, kc, vc, seqlens, calls=2000):
    """The same call taken apart: each step of groupattn._ops.run_attention timed on its own (the
    extension call separately from the Python around it). Medians in microseconds."""
    import statistics
    import time

    from groupattn import _ops
    from groupattn._frameworks import framework_of

    fw = framework_of(q)
    steps = {"alloc out+lse": [], "dlpack export x6": [], "stream + workspace_alloc": [], "ext call": [],
             "whole public call": []}
    for i in range(calls):
        t0 = time.perf_counter_ns()
        out, lse_ret, lse = _ops.alloc_attention_outputs(fw, q, vc, False, True)
        t1 = time.perf_counter_ns()
        aq, ak, av, aout, mask = _ops._args(fw, q, kc, vc, out)
        lse_c, sl = fw.convert(lse), fw.convert(seqlens)
        t2 = time.perf_counter_ns()
        stream, alloc = fw.stream(q), fw.workspace_alloc(q)
        t3 = time.perf_counter_ns()
        _ops._ext.attention_call(aq, ak, av, aout, lse_c, None, None, sl, None, None, None, 0, 0, None, True,
                                 -1, -1, 0.0, 0, None, stream, alloc, mask, None, None, False)
        t4 = time.perf_counter_ns()
        groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)
        t5 = time.perf_counter_ns()
        for k, a, b in (("alloc out+lse", t0, t1), ("dlpack export x6", t1, t2),
                        ("stream + workspace_alloc", t2, t3), ("ext call", t3, t4), ("whole public call", t4, t5)):
            steps[k].append((b - a) / 1000.0)
        if i % 8 == 7:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print("host time breakdown (median us per call, no synchronize in the timed spans):")
    for k, v in steps.items():
        print(f"  {k:28s} {statistics.median(v):8.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=4000)
    args = ap.parse_args(argv)
    import torch

    import groupattn

    if not torch.cuda.is_available():
        print("profile_host.py: needs a CUDA device", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    B, HQ, HKV, D, SK = 1, 64, 8, 128, 4096
    q = torch.randn(B, 1, HQ, D, dtype=torch.bfloat16, device="cuda")
    kc = torch.randn(B, SK, HKV, D, dtype=torch.bfloat16, device="cuda")
    vc = torch.randn_like(kc)
    seqlens = torch.full((B,), SK, dtype=torch.int32, device="cuda")

    def loop(n):
        for i in range(n):
            groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)
            if i % 8 == 7:
                torch.cuda.synchronize()
        torch.cuda.synchronize()

    loop(200)
    breakdown(torch, groupattn, q, kc, vc, seqlens)
    prof = cProfile.Profile()
    prof.enable()
    loop(args.calls)
    prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
