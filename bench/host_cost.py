#!/usr/bin/env python3
"""Host cost of one groupattn call from Python (issue 11), beside torch SDPA's for scale.

    PYTHONPATH=build/python python bench/host_cost.py [--calls 400] [--graph-calls 50]

imports groupattn from PYTHONPATH (the package CMake stages in build/python: no pip install).
Needs torch with a CUDA device. Cases:
  decode: B=1, Hq/Hkv = 64/8, D=128, 4096 cached keys, 1 new token, bf16
          groupattn.attention_with_kvcache (engine auto) vs F.scaled_dot_product_attention under
          the cuDNN backend (enable_gqa, [B, H, S, D] views made once outside the timed call).
  kda:    chunk_kda T=64, H=HV=4, K=V=128, bf16 q/k/v, fp32 g/beta/state, the lower-bound gate in the
          kernel (A_log, dt_bias), q/k l2norm and beta sigmoid in the kernel, fp32 initial and
          final state (groupattn only: torch has no KDA).
  floor:  a 1-element torch add, timed the same way: the launch + synchronize latency any call pays.
The groupattn rows run twice: path "fast" (groupattn._torch_fast, one crossing, outputs from
torch's allocator in C++) and path "generic" (the same call with the fast path off: DLPack export,
torch.empty from Python). Without the module in the build, both say "generic". "decode groupattn
(at::empty)": the fast decode with its outputs from the dispatcher's at::empty instead of the
direct allocation (_torch_fast._set_direct_allocation(0)): an A/B of that change in one process.
--rounds R (default 1): R wall / enqueue measurements per case, the cases taken in turn each round;
wall_us / enqueue_us are then the median of the R round medians, and the table adds their range.
Per case:
  gpu_us          GPU time per call: CUDA-graph replay of --graph-calls calls, event-timed, / calls.
  wall_us         median over --calls of (call; torch.cuda.synchronize()), after warm-up.
  host_us         wall_us - gpu_us (the issue's definition; includes launch + sync latency: compare
                  with the floor row).
  enqueue_us      median time for the call to return without synchronizing (the CPU time the call
                  itself costs while the GPU runs behind it). The issue's < 10 us goal is judged on
                  this column: host_us also holds the synchronize latency (the floor row's host_us).
Prints a table; writes $OUT/host_cost.json (with torch / CUDA / cuDNN / GPU / groupattn versions
and the host: CPU model, CPUs allowed, the GPU's NUMA node and the nodes of the process's CPUs, load)
when OUT is set.
--pin-gpu-node: before torch is imported, restrict the process to the CPUs local to GPU 0's NUMA
node (sysfs local_cpulist of the GPU's PCI address from nvidia-smi), so its memory is allocated
there too: an A/B of the host's placement against a default run (docs/HOST_COST.md, session 11).
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time


def _median_us(samples_ns):
    return statistics.median(samples_ns) / 1000.0


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpu_list(text):
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus = set()
    for part in (text or "").split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


def _gpu_sysfs_from_nvidia_smi():
    """sysfs folder of the first visible GPU's PCI function, from nvidia-smi (no CUDA init)."""
    import subprocess

    index = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", index],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return None
    return f"/sys/bus/pci/devices/{bus[-12:].lower()}" if len(bus) >= 12 else None


def _host_info(torch):
    """Where this process ran: CPU model, CPUs allowed, the GPU's NUMA node, the nodes of those CPUs."""
    info = {"cpus_online": os.cpu_count(), "loadavg": list(os.getloadavg())}
    cpuinfo = _read("/proc/cpuinfo") or ""
    model = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    info["cpu_model"] = model[0] if model else None
    info["cpu_governor"] = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    allowed = os.sched_getaffinity(0)
    info["cpus_allowed"] = len(allowed)
    nodes = {}
    node_dir = "/sys/devices/system/node"
    if os.path.isdir(node_dir):
        for name in sorted(os.listdir(node_dir)):
            if name.startswith("node") and name[4:].isdigit():
                nodes[int(name[4:])] = _cpu_list(_read(f"{node_dir}/{name}/cpulist"))
    info["process_cpu_nodes"] = sorted(n for n, cpus in nodes.items() if cpus & allowed)
    try:
        prop = torch.cuda.get_device_properties(torch.cuda.current_device())
        sysfs = f"/sys/bus/pci/devices/{prop.pci_domain_id:04x}:{prop.pci_bus_id:02x}:{prop.pci_device_id:02x}.0"
        node = _read(f"{sysfs}/numa_node")
        info["gpu_numa_node"] = int(node) if node is not None else None
    except Exception:
        info["gpu_numa_node"] = None
    return info


def kda_case(torch, T, H, K, dev, gen):
    """The kda case's chunk_kda problem (module docstring): ((q, k, v, g, beta), kwargs), drawn from
    `gen` in a fixed order. bench/profile_host.py --kda takes the same call apart."""
    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, dtype=dtype, device=dev, generator=gen)

    kq, kk, kv = randn(1, T, H, K), randn(1, T, H, K), randn(1, T, H, K)
    g = randn(1, T, H, K, dtype=torch.float32)
    beta = randn(1, T, H, dtype=torch.float32)
    A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16, generator=gen))
    dt_bias = torch.empty(H, K, device=dev).uniform_(-6, -2, generator=gen)
    state = randn(1, H, K, K, dtype=torch.float32) * 0.1
    kw = dict(initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
              A_log=A_log, dt_bias=dt_bias)
    return (kq, kk, kv, g, beta), kw


def time_wall(torch, fn, calls, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    wall = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        wall.append(time.perf_counter_ns() - t0)
    # Enqueue time: calls back to back with a sync every 8 so the launch queue never fills.
    enq = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        enq.append(time.perf_counter_ns() - t0)
        if i % 8 == 7:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return _median_us(wall), _median_us(enq)


def time_gpu(torch, fn, graph_calls, replays=20):
    """GPU time per call: one CUDA graph holding graph_calls calls, replayed; median per call."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(graph_calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        per_call.append(a.elapsed_time(b) * 1000.0 / graph_calls)
    del graph
    return statistics.median(per_call)


def measure(torch, name, fn, args, extra=None, context=None, again=None):
    """One case: GPU time, then wall and enqueue time. `context` (a callable returning a context
    manager) is entered around both; `again`, a list, collects the case for the later --rounds."""
    row = {"case": name, "path": "-"}
    row.update(extra or {})
    try:
        with context() if context else contextlib.nullcontext():
            row["gpu_us"] = time_gpu(torch, fn, args.graph_calls)
            row["wall_us"], row["enqueue_us"] = time_wall(torch, fn, args.calls)
        row["host_us"] = row["wall_us"] - row["gpu_us"]
        if again is not None:
            again.append((row, fn, context))
    except Exception as e:  # a contender that cannot run here is reported, not fatal
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def more_rounds(torch, cases, args):
    """--rounds R > 1: R - 1 more wall / enqueue measurements of every case, the cases taken in turn
    each round (so a transient load on the host falls on one round of each case, not on all rounds
    of one case). Each row's wall_us / enqueue_us become the median of its R round medians, with
    the rounds and their range kept in the row."""
    for row, _, _ in cases:
        row["wall_rounds"], row["enqueue_rounds"] = [row["wall_us"]], [row["enqueue_us"]]
    for _ in range(args.rounds - 1):
        for row, fn, context in cases:
            with context() if context else contextlib.nullcontext():
                wall, enq = time_wall(torch, fn, args.calls)
            row["wall_rounds"].append(wall)
            row["enqueue_rounds"].append(enq)
    for row, _, _ in cases:
        row["wall_us"] = statistics.median(row["wall_rounds"])
        row["enqueue_us"] = statistics.median(row["enqueue_rounds"])
        row["enqueue_min"], row["enqueue_max"] = min(row["enqueue_rounds"]), max(row["enqueue_rounds"])
        row["host_us"] = row["wall_us"] - row["gpu_us"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=400, help="timed calls per case (>= 200)")
    ap.add_argument("--graph-calls", type=int, default=50, help="calls captured in the timing graph")
    ap.add_argument("--rounds", type=int, default=1,
                    help="wall / enqueue measurements per case, the cases in turn; the row reports the median "
                         "and range of the rounds (default 1: one measurement, as before)")
    ap.add_argument("--pin-gpu-node", action="store_true",
                    help="run on the CPUs of GPU 0's NUMA node only (set before torch is imported)")
    args = ap.parse_args(argv)
    if args.calls < 200:
        ap.error("--calls must be >= 200")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    pinned = None
    if args.pin_gpu_node:
        sysfs = _gpu_sysfs_from_nvidia_smi()
        local = _cpu_list(_read(f"{sysfs}/local_cpulist")) if sysfs else set()
        if not local:
            print("host_cost.py: --pin-gpu-node: the GPU's local CPUs are not known here", file=sys.stderr)
            return 2
        os.sched_setaffinity(0, local)
        pinned = sorted(local)

    import torch
    import torch.nn.functional as F

    import groupattn
    from groupattn import _ops

    if not torch.cuda.is_available():
        print("host_cost.py: needs a CUDA device", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, dtype=dtype, device=dev, generator=gen)

    rows = []
    cases = []  # (row, fn, context) of every case that ran, for --rounds

    # --- decode -----------------------------------------------------------------------------
    B, HQ, HKV, D, SK = 1, 64, 8, 128, 4096
    q, kc, vc = randn(B, 1, HQ, D), randn(B, SK, HKV, D), randn(B, SK, HKV, D)
    seqlens = torch.full((B,), SK, dtype=torch.int32, device=dev)
    engine = groupattn.attention_engine_for(q, kc, vc, cache_seqlens=seqlens, causal=True)

    def ga_decode():
        return groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)

    fast = _ops._fast

    @contextlib.contextmanager
    def on_path(module):
        _ops._fast = module
        try:
            yield
        finally:
            _ops._fast = fast

    def both_paths(name, fn, extra):
        """The call on the fast path (when built), then with it off (the generic path)."""
        for path, module in (("fast", fast), ("generic", None)):
            if path == "fast" and module is None:
                continue
            rows.append(measure(torch, name, fn, args, dict(extra, path=path),
                                context=lambda m=module: on_path(m), again=cases))

    both_paths("decode groupattn", ga_decode, {"engine": engine})

    # The same fast call with out and lse from the dispatcher's at::empty (groupattn._torch_fast's
    # direct allocation off, session 12): the A/B of that change in this process.
    set_direct = getattr(fast, "_set_direct_allocation", None)
    if set_direct is not None:
        @contextlib.contextmanager
        def dispatcher_alloc():
            set_direct(0)
            try:
                yield
            finally:
                set_direct(-1)

        rows.append(measure(torch, "decode groupattn (at::empty)", ga_decode, args,
                            {"engine": engine, "path": "fast"}, context=dispatcher_alloc, again=cases))

    # The cheapest call: the caller's out, no LSE (only a split-KV workspace is allocated).
    out_buf = torch.empty_like(q)

    def ga_decode_lean():
        return groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True, out=out_buf,
                                                return_lse=False)

    both_paths("decode groupattn (out=, no lse)", ga_decode_lean, {"engine": engine})

    from torch.nn.attention import SDPBackend, sdpa_kernel

    qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)

    def sdpa_decode():
        return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    ref = ga_decode()[0].float()
    for backend, label in ((SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "flash")):
        with sdpa_kernel(backend):
            try:
                got = sdpa_decode().transpose(1, 2).float()
                err = (got - ref).abs().max().item()
            except RuntimeError as e:
                rows.append({"case": f"decode torch SDPA ({label})", "error": str(e).splitlines()[0]})
                continue
            rows.append(measure(torch, f"decode torch SDPA ({label})", sdpa_decode, args,
                                {"engine": f"sdpa-{label}", "max_abs_diff_vs_groupattn": err},
                                context=lambda b=backend: sdpa_kernel(b), again=cases))
            break  # cuDNN is the comparison; FLASH only where cuDNN refuses the problem

    # --- kda ----------------------------------------------------------------------------------
    (kq, kk, kv, g, beta), kw = kda_case(torch, 64, 4, 128, dev, gen)
    try:
        engine = groupattn.kda_engine_for(kq, kk, kv, g, beta, **kw)
    except (ValueError, NotImplementedError) as e:
        engine = f"none ({e})"

    def ga_kda():
        return groupattn.chunk_kda(kq, kk, kv, g, beta, **kw)

    both_paths("kda groupattn", ga_kda, {"engine": engine})

    # --- floor --------------------------------------------------------------------------------
    one = torch.zeros(1, device=dev)
    rows.append(measure(torch, "floor: 1-element torch add", lambda: one.add_(1.0), args, {"engine": "torch"},
                        again=cases))
    if args.rounds > 1:
        more_rounds(torch, cases, args)

    # --- report -------------------------------------------------------------------------------
    prov = {
        "torch": torch.__version__, "cuda_runtime_torch": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "driver": _driver_version(), "python": sys.version.split()[0],
        "groupattn": groupattn.build_info(), "groupattn_path": os.path.dirname(groupattn.__file__),
        "calls": args.calls, "graph_calls": args.graph_calls, "rounds": args.rounds,
        "torch_fast_built": fast is not None,
        "host": _host_info(torch), "pinned_cpus": pinned,
    }
    print(f"# {prov['gpu']}, torch {prov['torch']} (CUDA {prov['cuda_runtime_torch']}), cuDNN {prov['cudnn']}, "
          f"groupattn {prov['groupattn']['version']} from {prov['groupattn_path']}")
    host = prov["host"]
    print(f"# host: {host['cpu_model']}, {host['cpus_allowed']} of {host['cpus_online']} CPUs allowed"
          f"{' (--pin-gpu-node)' if pinned else ''} on NUMA node(s) {host['process_cpu_nodes']}, GPU on node "
          f"{host['gpu_numa_node']}, governor {host['cpu_governor']}, load {host['loadavg'][0]:.2f}")
    ranged = args.rounds > 1
    print(f"{'case':32s} {'path':8s} {'engine':14s} {'gpu_us':>8s} {'wall_us':>8s} {'host_us':>8s} "
          f"{'enqueue_us':>10s}" + (f"  enqueue range over {args.rounds} rounds" if ranged else ""))
    for r in rows:
        if "error" in r:
            print(f"{r['case']:32s} {r.get('path', '-'):8s} {r.get('engine', ''):14s} error: {r['error'][:120]}")
            continue
        print(f"{r['case']:32s} {r.get('path', '-'):8s} {str(r['engine'])[:14]:14s} {r['gpu_us']:8.2f} {r['wall_us']:8.2f} "
              f"{r['host_us']:8.2f} {r['enqueue_us']:10.2f}"
              + (f"  {r['enqueue_min']:.2f}-{r['enqueue_max']:.2f}" if ranged and "enqueue_min" in r else ""))
    print("enqueue_us = the CPU time of one call while the GPU runs behind it: the issue's goal is < 10 us "
          "for the groupattn rows on path fast. host_us = wall_us - gpu_us also holds the launch + "
          "synchronize latency (the floor row's host_us).")
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = os.path.join(out_dir, "host_cost.json")
        with open(path, "w") as f:
            json.dump({"provenance": prov, "rows": rows}, f, indent=1)
        print(f"wrote {path}")
    return 0


def _driver_version():
    try:
        import subprocess

        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
