#!/usr/bin/env python3
"""Where the host time of one small groupattn decode call goes (issue 11): cProfile over many
calls (no synchronize inside the loop, a synchronize every 8 calls so the launch queue never
fills), sorted by own time, so Python frames, torch allocations, DLPack export and the extension
call each show as their own row. The breakdown table names the path of each row: "generic" (the
steps of groupattn._ops.run_attention: DLPack export, torch.empty from Python, groupattn._ext)
and "fast" (groupattn._torch_fast: one crossing, outputs from at::empty in C++).

    PYTHONPATH=build/python python bench/profile_host.py [--calls 4000] [--no-cprofile]
"""
import argparse
import cProfile
import pstats
import sys


def breakdown(torch, groupattn, q, kc, vc, seqlens, calls=2000):
    """The same call taken apart: each step of the generic path (groupattn._ops.run_attention)
    timed on its own (the extension call separately from the Python around it), the fast path's
    crossing called directly and through the public function, beside unit costs of this host (one
    torch.empty, one DLPack export, one 1-element add, torch.compiler.is_compiling) and the
    cheapest public call (out= given, return_lse=False). Medians in microseconds;
    docs/HOST_COST.md says what each line should be."""
    import statistics
    import time

    from groupattn import _ops
    from groupattn._frameworks import framework_of

    fw = framework_of(q)
    to_dlpack = fw._to_dlpack or torch.utils.dlpack.to_dlpack
    out_given = torch.empty_like(q)
    one = torch.zeros(1, device=q.device)
    fast = _ops._fast
    names = ["unit: torch.empty (1 call)", "unit: _to_dlpack (1 tensor)", "unit: 1-element add",
             "unit: torch.compiler.is_compiling", "generic: alloc out", "generic: alloc lse",
             "generic: dlpack export x6", "generic: stream + workspace_alloc", "generic: ext call",
             "generic: whole public call", "generic: public call, out= and no lse"]
    if fast is not None:
        names += ["fast: _torch_fast.attention only", "fast: whole public call",
                  "fast: public call, out= and no lse"]
    steps = {k: [] for k in names}
    is_compiling = torch.compiler.is_compiling
    window = (-1, -1)

    def public_calls(t):
        groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)
        t.append(time.perf_counter_ns())
        groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True, out=out_given,
                                         return_lse=False)
        t.append(time.perf_counter_ns())

    for i in range(calls):
        t = [time.perf_counter_ns()]
        torch.empty((64,), dtype=torch.float32, device=q.device)
        t.append(time.perf_counter_ns())
        to_dlpack(q)
        t.append(time.perf_counter_ns())
        one.add_(1)
        t.append(time.perf_counter_ns())
        is_compiling()
        t.append(time.perf_counter_ns())
        _ops._fast = None  # the generic path's steps and public calls
        out, _, _ = _ops.alloc_attention_outputs(fw, q, vc, False, False)
        t.append(time.perf_counter_ns())
        lse = fw.empty_lse(q, q.shape[0], q.shape[2], q.shape[1])
        t.append(time.perf_counter_ns())
        aq, ak, av, aout, mask = _ops._args(fw, q, kc, vc, out)
        lse_c, sl = fw.convert(lse), fw.convert(seqlens)
        t.append(time.perf_counter_ns())
        stream, alloc = fw.stream(q), fw.workspace_alloc(q)
        t.append(time.perf_counter_ns())
        _ops._ext.attention_call(aq, ak, av, aout, lse_c, None, None, sl, None, None, None, 0, 0, None, True,
                                 -1, -1, 0.0, 0, None, stream, alloc, mask, None, None, False)
        t.append(time.perf_counter_ns())
        public_calls(t)
        _ops._fast = fast
        if fast is not None:
            fast.attention(q, kc, vc, None, None, None, seqlens, None, None, None, None, None, None, True, window,
                           0.0, 0, None, True, None, None, False, True)
            t.append(time.perf_counter_ns())
            public_calls(t)
        for j, k in enumerate(steps):
            steps[k].append((t[j + 1] - t[j]) / 1000.0)
        if i % 8 == 7:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    engine = groupattn.attention_engine_for(q, kc, vc, cache_seqlens=seqlens, causal=True)
    ws = groupattn.attention_workspace_bytes(q, kc, vc, cache_seqlens=seqlens, causal=True)
    print(f"host time breakdown (median us per call, no synchronize in the timed spans; engine {engine}, "
          f"workspace {ws} bytes; groupattn._torch_fast {'built' if fast is not None else 'NOT built: no fast rows'}):")
    for k, v in steps.items():
        print(f"  {k:40s} {statistics.median(v):8.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--no-cprofile", action="store_true", help="print the breakdown table only")
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
    if args.no_cprofile:
        return 0
    from groupattn import _ops

    print(f"cProfile of the public call, path {'fast' if _ops._fast is not None else 'generic'}:")
    prof = cProfile.Profile()
    prof.enable()
    loop(args.calls)
    prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
