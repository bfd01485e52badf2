#!/usr/bin/env python3
"""Where the host time of one small groupattn decode call goes (issue 11): cProfile over many
calls (no synchronize inside the loop, a synchronize every 8 calls so the launch queue never
fills), sorted by own time, so Python frames, torch allocations, DLPack export and the extension
call each show as their own row. The breakdown table names the path of each row: "generic" (the
steps of groupattn._ops.run_attention: DLPack export, torch.empty from Python, groupattn._ext)
and "fast" (groupattn._torch_fast: one crossing, outputs from at::empty in C++).

    PYTHONPATH=build/python python bench/profile_host.py [--calls 4000] [--no-cprofile] [--kda]

--kda: the KDA call of bench/host_cost.py instead (chunk_kda T=64, H=HV=4, K=V=128, the lower-bound
gate, l2norm and beta sigmoid in the kernel, initial and final state), taken apart the same way
(kda_breakdown), beside the same call at T=32 (before sm_90 the fused one-launch path, no
workspace; on sm_90+ the chunked path's cluster kernel, one launch with the workspace, as at T=64
since session 18) and T=16 (the recurrent path, one launch, no workspace): in one run on one host,
the differences give the cost of the two-kernel path's second launch and workspace, which separate
runs cannot (their host level moves by several us).
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
    names = ["unit: torch.empty (1 call)", "unit: torch.empty((0,)) (no allocator block)", "unit: _to_dlpack (1 tensor)", "unit: 1-element add",
             "unit: torch.compiler.is_compiling", "generic: alloc out", "generic: alloc lse",
             "generic: dlpack export x6", "generic: stream + workspace_alloc", "generic: ext call",
             "generic: whole public call", "generic: public call, out= and no lse"]
    if fast is not None:
        names += ["fast: _torch_fast.attention only", "fast: whole public call",
                  "fast: public call, out= and no lse",
                  # The crossing in the four output forms (session 12): what one returned tensor costs
                  # (at::empty or its direct form, THPVariable_Wrap, the dealloc and the allocator's
                  # free when the caller drops it), beside the same crossing with the dispatcher's
                  # at::empty forced (_set_direct_allocation(0)).
                  "fast: crossing, out= given, no lse", "fast: crossing, out= given, lse made",
                  "fast: crossing, out made, no lse", "fast: crossing, out and lse made",
                  "fast: crossing, out and lse made, at::empty (direct off)"]
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
        torch.empty((0,), dtype=torch.float32, device=q.device)
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
            for o_arg, lse_on in ((out_given, False), (out_given, True), (None, False), (None, True)):
                fast.attention(q, kc, vc, o_arg, None, None, seqlens, None, None, None, None, None, None, True,
                               window, 0.0, 0, None, lse_on, None, None, False, True)
                t.append(time.perf_counter_ns())
            fast._set_direct_allocation(0)
            fast.attention(q, kc, vc, None, None, None, seqlens, None, None, None, None, None, None, True, window,
                           0.0, 0, None, True, None, None, False, True)
            fast._set_direct_allocation(-1)
            t.append(time.perf_counter_ns())
        for j, k in enumerate(steps):
            steps[k].append((t[j + 1] - t[j]) / 1000.0)
        if i % 8 == 7:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    engine = groupattn.attention_engine_for(q, kc, vc, cache_seqlens=seqlens, causal=True)
    ws = groupattn.attention_workspace_bytes(q, kc, vc, cache_seqlens=seqlens, causal=True)
    print(f"host time breakdown (median us per call, no synchronize in the timed spans; engine {engine}, "
          f"workspace {ws} bytes; groupattn._torch_fast {'built' if fast is not None else 'NOT built: no fast rows'}):")
    med = {k: statistics.median(v) for k, v in steps.items()}
    for k, v in med.items():
        print(f"  {k:56s} {v:8.2f}")
    print(f"  {'derived: caching-allocator malloc + free (empty(64) - empty(0))':56s} "
          f"{med['unit: torch.empty (1 call)'] - med['unit: torch.empty((0,)) (no allocator block)']:8.2f}")
    if fast is not None:
        base = med["fast: crossing, out= given, no lse"]
        print(f"  {'derived: out made and returned (out made - out= given)':56s} "
              f"{med['fast: crossing, out made, no lse'] - base:8.2f}")
        print(f"  {'derived: lse made and returned (lse made - no lse)':56s} "
              f"{med['fast: crossing, out= given, lse made'] - base:8.2f}")
        print(f"  {'derived: both (the default call - the lean one)':56s} "
              f"{med['fast: crossing, out and lse made'] - base:8.2f}")
        print(f"  {'derived: direct allocation saves (2 tensors)':56s} "
              f"{med['fast: crossing, out and lse made, at::empty (direct off)'] - med['fast: crossing, out and lse made']:8.2f}")
        print(f"  {'derived: Python wrapper (public call - crossing)':56s} "
              f"{med['fast: whole public call'] - med['fast: _torch_fast.attention only']:8.2f}")


def kda_breakdown(torch, groupattn, calls=2000, dev="cuda"):
    """host_cost.py's KDA call taken apart: the public chunk_kda, the fast path's crossing called
    directly (the difference is the Python wrapper), the crossing without the final state (one
    at::empty and one tensor wrap fewer), the same crossing at T=32 and T=16 (one launch and no
    workspace: the cuda engine's fused and recurrent paths), beside unit costs of this host.
    Medians in microseconds, no synchronize inside the timed spans (one every 2 rounds, so the
    launch queue stays short); docs/HOST_COST.md ("Session 11: the KDA fast path's 20 us") says what
    each line should be."""
    import statistics
    import time

    import host_cost
    from groupattn import _ops

    gen = torch.Generator(device=dev).manual_seed(0)
    H, K = 4, 128
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)  # dev="cpu": a check of this script

    def problem(T):
        (kq, kk, kv, g, beta), kw = host_cost.kda_case(torch, T, H, K, dev, gen)
        state, A_log, dt_bias = kw["initial_state"], kw["A_log"], kw["dt_bias"]
        # _torch_fast.kda's positional arguments as chunk_kda passes them (groupattn/_ops.py).
        direct = [kq, kk, kv, g, beta, None, state, 1, None, None, False, _ops._GATE_LOWER_BOUND, A_log,
                  dt_bias, -5.0, True, True, False, None]
        return (kq, kk, kv, g, beta), kw, direct

    # The two-kernel path's workspace at T=64 (kda_cuda_launch.h chunk_layout): 256 B of chunk offsets
    # + 4 chunks x 4 heads x 8576 floats of prep blocks.
    workspace_bytes = 256 + 4 * 4 * 8576 * 4
    fast = _ops._fast
    args64, kw64, direct64 = problem(64)
    _, _, direct32 = problem(32)
    _, _, direct16 = problem(16)
    no_final = list(direct64)
    no_final[7] = 0
    kw64_no_final = dict(kw64, output_final_state=False)
    o_like = args64[2]
    one = torch.zeros(1, device=dev)
    steps = {
        "unit: 1-element add": lambda: one.add_(1.0),
        "unit: torch.empty like o (bf16 [1,64,4,128])": lambda: torch.empty_like(o_like),
        "unit: torch.empty of the workspace's 549120 bytes": lambda: torch.empty(workspace_bytes, dtype=torch.uint8,
                                                                                device=dev),
        "unit: kda_gate()": lambda: _ops.kda_gate(True, -5.0),
        "generic: whole public call": None,  # set below (the fast path off around it)
    }
    if fast is not None:
        steps.update({
            "fast: _torch_fast.kda only, T=64 (2 launches, workspace)": lambda: fast.kda(*direct64),
            "fast: _torch_fast.kda only, T=64, no final state": lambda: fast.kda(*no_final),
            "fast: _torch_fast.kda only, T=32 (fused: 1 launch, no workspace)": lambda: fast.kda(*direct32),
            "fast: _torch_fast.kda only, T=16 (recurrent: 1 launch, no workspace)": lambda: fast.kda(*direct16),
            "fast: whole public call, T=64": lambda: groupattn.chunk_kda(*args64, **kw64),
            "fast: public call, T=64, output_final_state=False": lambda: groupattn.chunk_kda(*args64,
                                                                                           **kw64_no_final),
        })

    def generic_call():
        _ops._fast = None
        try:
            groupattn.chunk_kda(*args64, **kw64)
        finally:
            _ops._fast = fast

    steps["generic: whole public call"] = generic_call
    for fn in steps.values():  # warm-up: code loaded, attributes set, allocator blocks cached
        for _ in range(20):
            fn()
    sync()
    times = {k: [] for k in steps}
    for i in range(calls):
        for name, fn in steps.items():
            t0 = time.perf_counter_ns()
            fn()
            times[name].append((time.perf_counter_ns() - t0) / 1000.0)
        if i % 2 == 1:
            sync()
    sync()
    engine = groupattn.kda_engine_for(*args64, **kw64)
    print(f"KDA host time breakdown (median us per call, no synchronize in the timed spans; chunk_kda T=64 H=HV=4 "
          f"K=V=128, engine {engine}; "
          f"groupattn._torch_fast {'built' if fast is not None else 'NOT built: no fast rows'}):")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"  {k:70s} {v:8.2f}")
    if fast is not None:
        d64 = med["fast: _torch_fast.kda only, T=64 (2 launches, workspace)"]
        print(f"  {'derived: Python wrapper (public call - crossing, T=64)':70s} "
              f"{med['fast: whole public call, T=64'] - d64:8.2f}")
        print(f"  {'derived: final state at::empty + wrap (crossing - no final state)':70s} "
              f"{d64 - med['fast: _torch_fast.kda only, T=64, no final state']:8.2f}")
        print(f"  {'derived: 2nd launch + workspace (T=64 - T=32 fused crossing)':70s} "
              f"{d64 - med['fast: _torch_fast.kda only, T=32 (fused: 1 launch, no workspace)']:8.2f}")
        print(f"  {'derived: 2nd launch + workspace (T=64 - T=16 recurrent crossing)':70s} "
              f"{d64 - med['fast: _torch_fast.kda only, T=16 (recurrent: 1 launch, no workspace)']:8.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--no-cprofile", action="store_true", help="print the breakdown table only")
    ap.add_argument("--kda", action="store_true",
                    help="break down host_cost.py's chunk_kda call (T=64) instead of the decode")
    args = ap.parse_args(argv)
    import torch

    import groupattn

    if not torch.cuda.is_available():
        print("profile_host.py: needs a CUDA device", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    if args.kda:
        kda_breakdown(torch, groupattn, min(args.calls, 2000))
        return 0
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
