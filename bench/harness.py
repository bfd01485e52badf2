"""Timing, ceilings, provenance and engine verification for bench/run.py (torch + CUDA).

Protocol (../shared/BENCHMARKING.md): random normal inputs in rotating sets totalling > 1 GiB; warm-up
outside timing; each contender's calls captured into one CUDA graph that replays many calls over
the rotating sets; contenders replayed in interleaved order (A B C A' per round, A' being a second
graph of A, the A-against-A control); median of >= 5 rounds with p20-p80; per-call wall time with
a synchronize after each call beside the GPU time.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from treedigest import tree_digest

GIB = 1 << 30
ROTATION_BYTES = GIB + (64 << 20)  # strictly more than 1 GiB (>= 16x the H200's 60 MB L2)


# ---------------------------------------------------------------------------------------------
# statistics


def quantile(xs: List[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(xs: List[float]) -> Dict:
    return {"median": quantile(xs, 0.5), "p20": quantile(xs, 0.2), "p80": quantile(xs, 0.8),
            "min": min(xs), "max": max(xs), "n": len(xs)}


# ---------------------------------------------------------------------------------------------
# progress


class Progress:
    """tqdm when importable, else one line per step on stderr."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n, self.t0 = total, desc, 0, time.time()
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, dynamic_ncols=True, file=sys.stderr)
        except Exception:
            self.bar = None

    def step(self, label: str = ""):
        self.n += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label[:60])
            self.bar.update(1)
        else:
            el = time.time() - self.t0
            print(f"[{self.desc}] {self.n}/{self.total} {el:6.1f}s {label}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------------------
# rotating input sets


def num_sets(bytes_per_set: int, cap: int = 4096) -> int:
    """Enough sets that together they exceed ROTATION_BYTES (at least 2)."""
    return int(min(cap, max(2, ROTATION_BYTES // max(1, bytes_per_set) + 1)))


def tensor_bytes(*ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


# ---------------------------------------------------------------------------------------------
# timing


def _event_time_ms(fn: Callable[[], None], reps: int = 1) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


class Timed:
    """One contender's replayable unit: a CUDA graph of `calls` calls over the rotating sets, or
    (when capture fails) the same calls run eagerly between events, flagged in the results."""

    def __init__(self, name: str, fn: Callable[[int], object], nsets: int, calls: int):
        self.name, self.fn, self.nsets, self.calls = name, fn, nsets, calls
        self.graph = None
        self.mode = "graph"
        self.capture_error = None

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # side-stream warm-up, as torch's capture recipe asks
            for i in range(min(3, self.calls)):
                self.fn(i % self.nsets)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(self.calls):
                    self.fn(i % self.nsets)
            torch.cuda.synchronize()
            self.graph = g
        except Exception as e:  # capture not possible: time eagerly, say so
            self.capture_error = f"{type(e).__name__}: {str(e)[:300]}"
            self.mode = "eager-events"
            self.graph = None
            try:
                torch.cuda.synchronize()
            except Exception:
                pass

    def run_ms_per_call(self) -> float:
        if self.graph is not None:
            return _event_time_ms(self.graph.replay) / self.calls
        def body():
            for i in range(self.calls):
                self.fn(i % self.nsets)

        return _event_time_ms(body) / self.calls


def warm_up(fn: Callable[[int], object], nsets: int, min_calls: int = 3) -> float:
    """Runs every set once (module load, autotuning, plan building, first-touch) and returns an
    estimate of one call's GPU time in ms (events around a few eager calls)."""
    for i in range(max(min_calls, min(nsets, 64))):
        fn(i % nsets)
    torch.cuda.synchronize()
    reps = 3
    return _event_time_ms(lambda: [fn(i % nsets) for i in range(reps)]) / reps


def calls_for(est_ms: float, nsets: int, target_ms: float, cap: int = 4000) -> int:
    """Calls per graph: at least one pass over every set, and enough for ~target_ms per replay."""
    want = int(math.ceil(target_ms / max(est_ms, 1e-4)))
    return int(max(nsets, min(cap, want)))


def round_order(order: List[str], r: int) -> List[str]:
    """Round r's order: `order` turned by r places. Turning changes each contender's place in the
    round but not its neighbours: over the rounds every contender is always preceded by the same
    one (the last of `order` before the first). In the suite that is ours after our own control,
    the control after FlashAttention-2 and cuDNN after the cuda engine (see time_contenders)."""
    k = r % len(order)
    return order[k:] + order[:k]


# How the contenders of one configuration take turns (run.py --order; the JSON's protocol.order_mode):
#   turning   round r is the order turned by r places (round_order): each contender keeps its
#             predecessor in every round (the suite's protocol up to session 11).
#   shuffled  round r is a fixed pseudo-random permutation (shuffled_order): the predecessors vary
#             from round to round, so a predecessor's effect (the power cap's clock on long rows,
#             suspected in session 11) spreads over every contender instead of sitting on one.
#   self      the turning order, each timed replay right after an untimed replay of itself
#             (time_contenders' lead_in): each contender is timed in its own steady state; twice
#             the GPU time.
ORDER_MODES = ("turning", "shuffled", "self")


def shuffled_order(order: List[str], r: int) -> List[str]:
    """Round r's order under --order shuffled: a permutation of `order` drawn from a generator seeded
    by r alone, so a run is reproducible and the same round of two configurations has the same
    pattern."""
    import random

    out = list(order)
    random.Random(1000003 * (r + 1)).shuffle(out)
    return out


# Called after every timed replay as REPLAY_OBSERVER(name, t0, t1, ms_per_call), t0 / t1 the host's
# time.perf_counter() around the replay (events, launch and synchronize included), when set.
# bench/context_probe.py sets it to attribute clock / power samples to replays; None in the suite.
REPLAY_OBSERVER: Optional[Callable[[str, float, float, float], None]] = None


def time_contenders(fns: Dict[str, Callable[[int], object]], nsets: int, rounds: int, target_ms: float,
                    control: Optional[str], gap_s: float = 0.0, lead_in: bool = False,
                    order_mode: str = "turning") -> Dict:
    """Interleaved graph replays. Returns {name: {"ms": summary, "per_round": [...], "mode", "calls"}}
    and, for `control`, a second graph of it ("<control>#ctrl") and the per-round ratio band.

    gap_s: seconds the GPU idles (host sleep after the previous replay's synchronize) before every
    timed replay. lead_in: an untimed replay of the same graph right before each timed one, so each
    contender is timed after itself. Both default off (the suite's protocol); bench/context_probe.py
    uses them to take the predecessor out of a timing. order_mode: one of ORDER_MODES ("self" is
    lead_in)."""
    if order_mode not in ORDER_MODES:
        raise ValueError(f"order_mode: {order_mode!r} (accepted: {', '.join(ORDER_MODES)})")
    lead_in = lead_in or order_mode == "self"
    est = {n: warm_up(f, nsets) for n, f in fns.items()}
    order = list(fns)
    units = {}
    for n in order:
        units[n] = Timed(n, fns[n], nsets, calls_for(est[n], nsets, target_ms))
    if control is not None and control in fns:
        cn = control + "#ctrl"
        units[cn] = Timed(cn, fns[control], nsets, units[control].calls)
        order.append(cn)
    for u in units.values():
        u.capture()
    per = {n: [] for n in order}
    for r in range(rounds):
        # The order turns by one each round, so no contender always holds one place in it: at
        # a3de7f4 a second graph of our own engine, always run last, took 0.86-0.94x the time of
        # the first on the 7-15 ms prefill shapes. The band stayed that far off 1 with the turning
        # order (f637c02): turning keeps every contender's predecessor (round_order), and on the
        # long d128 full rows the time follows the predecessor: on S16384 ours after its own control
        # reads 1-14 % above the control after FlashAttention-2 (six runs), cuDNN after the cuda
        # engine within 2.4 % of that control, and cuDNN after our engine (integ9 / integ10, run
        # without the cuda engine) 3-12 % above it (docs/PREFILL_SM90.md, "The suite's long full
        # rows vs the CLI"; the cause, likely the power cap's clock, UNVERIFIED: context_probe.py).
        for n in (shuffled_order(order, r) if order_mode == "shuffled" else round_order(order, r)):
            if gap_s > 0:
                time.sleep(gap_s)
            if lead_in:
                units[n].run_ms_per_call()
            t0 = time.perf_counter()
            ms = units[n].run_ms_per_call()
            if REPLAY_OBSERVER is not None:
                REPLAY_OBSERVER(n, t0, time.perf_counter(), ms)
            per[n].append(ms)
    out = {}
    for n in order:
        out[n] = {"ms": summary(per[n]), "per_round_ms": per[n], "mode": units[n].mode,
                  "calls_per_replay": units[n].calls, "capture_error": units[n].capture_error}
    if control is not None and control in fns:
        ratios = [b / a for a, b in zip(per[control], per[control + "#ctrl"])]
        out["_control"] = {"of": control, "ratio": summary(ratios)}
    del units
    torch.cuda.synchronize()
    return out


def wall_times(fn: Callable[[int], object], nsets: int, est_ms: float, budget_ms: float = 300.0,
               min_calls: int = 5, max_calls: int = 50) -> Dict:
    """Per-call wall time (host dispatch included): time.perf_counter around fn + synchronize."""
    n = int(max(min_calls, min(max_calls, budget_ms / max(est_ms, 1e-3))))
    torch.cuda.synchronize()
    xs = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i % nsets)
        torch.cuda.synchronize()
        xs.append((time.perf_counter() - t0) * 1e3)
    return summary(xs)


# ---------------------------------------------------------------------------------------------
# ceilings


def gemm_ceiling(rounds: int = 5, n: int = 8192) -> Dict:
    """bf16 torch.matmul n^3 (cuBLAS) on random normal inputs, 3 rotating operand pairs, a graph of
    12 products per replay; TFLOP/s = 2 n^3 / time."""
    pairs = [(torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
              torch.randn(n, n, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    outs = [torch.empty(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(3)]

    def fn(i):
        a, b = pairs[i % 3]
        torch.matmul(a, b, out=outs[i % 3])

    for i in range(6):
        fn(i)
    res = time_contenders({"gemm": fn}, 3, rounds, target_ms=20.0, control=None)["gemm"]
    ms = res["ms"]
    flop = 2.0 * n ** 3
    r = {"what": f"torch.matmul bf16 {n}x{n}x{n}, random normal, graph replay",
         "tflops": {k: (flop / (ms[k] * 1e-3) / 1e12) for k in ("median", "p20", "p80")},
         "mode": res["mode"]}
    # p20 of time is the faster end: swap so p20 <= p80 in TFLOP/s terms
    r["tflops"]["p20"], r["tflops"]["p80"] = r["tflops"]["p80"], r["tflops"]["p20"]
    del pairs, outs
    torch.cuda.empty_cache()
    return r


_READ_KERNEL = None


def _triton_read_kernel():
    global _READ_KERNEL
    if _READ_KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def read_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, cache_modifier=".cg")
            tl.store(out_ptr + pid, tl.sum(x, axis=0))

        _READ_KERNEL = read_kernel
    return _READ_KERNEL


def hbm_ceiling(rounds: int = 5, gib: int = 4) -> Dict:
    """HBM read bandwidth on a `gib` GiB fp32 buffer, two ways, both recorded; the ceiling is the
    larger. (1) a Triton streaming-read kernel: each program loads 8192 fp32 (32 KiB) with
    non-L1-caching loads (.cg) and writes one partial sum; (2) torch's x.sum() (a reduction that
    reads the buffer once). Bytes = the buffer size (the partial sums are 1/8192 of it)."""
    n = gib * GIB // 4
    x = torch.randn(n, device="cuda", dtype=torch.float32)
    nbytes = n * 4
    res = {"buffer_bytes": nbytes, "methods": {}}
    try:
        k = _triton_read_kernel()
        block = 8192
        parts = torch.empty(n // block, device="cuda", dtype=torch.float32)

        def fn(_i):
            k[(n // block,)](x, parts, BLOCK=block, num_warps=8)

        t = time_contenders({"read": fn}, 1, rounds, target_ms=20.0, control=None)["read"]
        res["methods"]["triton_read_kernel"] = _gbps(nbytes, t)
        # sanity: the kernel really read the buffer
        ok = torch.allclose(parts.sum(dtype=torch.float64), x.sum(dtype=torch.float64), rtol=1e-3, atol=1.0)
        res["methods"]["triton_read_kernel"]["sum_check"] = bool(ok)
        del parts
    except Exception as e:
        res["methods"]["triton_read_kernel"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    try:
        out = torch.empty((), device="cuda", dtype=torch.float32)
        t = time_contenders({"sum": lambda _i: torch.sum(x, dim=0, out=out)}, 1, rounds, target_ms=20.0,
                           control=None)["sum"]
        res["methods"]["torch_sum"] = _gbps(nbytes, t)
    except Exception as e:
        res["methods"]["torch_sum"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    best = None
    for name, m in res["methods"].items():
        if "gbps" in m and m.get("sum_check", True) and (best is None or m["gbps"]["median"] > res["methods"][best]["gbps"]["median"]):
            best = name
    res["ceiling_method"] = best
    res["gbps"] = res["methods"][best]["gbps"] if best else None
    del x
    torch.cuda.empty_cache()
    return res


def _gbps(nbytes: int, t: Dict) -> Dict:
    ms = t["ms"]
    return {"gbps": {"median": nbytes / (ms["median"] * 1e-3) / 1e9, "p20": nbytes / (ms["p80"] * 1e-3) / 1e9,
                     "p80": nbytes / (ms["p20"] * 1e-3) / 1e9}, "ms": ms, "mode": t["mode"]}


# ---------------------------------------------------------------------------------------------
# provenance


def nvidia_smi() -> Dict:
    fields = ["name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "temperature.gpu", "power.draw", "power.limit", "pstate", "memory.used", "memory.total"]
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        line = r.stdout.strip().splitlines()[torch.cuda.current_device()] if r.stdout.strip() else ""
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(fields):
            return {"raw": r.stdout.strip(), "stderr": r.stderr.strip()[:300]}
        return dict(zip(fields, vals))
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _git(*args) -> Optional[str]:
    try:
        r = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
        return r.stdout.strip() if r.returncode == 0 else None
    except Exception:
        return None


def provenance(root: str, argv: List[str]) -> Dict:
    import groupattn

    prov = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python " + " ".join(argv),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime_torch": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(),
        "gpu_capability": list(torch.cuda.get_device_capability()),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        # GROUPATTN_BENCH_COMMIT wins when set: the GPU machine's copy of the tree can carry a .git
        # of an older checkout (the session's start), so its HEAD is not what was measured (the
        # run at 67d3ef3 recorded facb306, dirty). tree_digest identifies the tree either way.
        "git_commit": os.environ.get("GROUPATTN_BENCH_COMMIT") or _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": None if os.environ.get("GROUPATTN_BENCH_COMMIT") else (
            (_git("status", "--porcelain", "--untracked-files=no") or "") != "" if _git("rev-parse", "HEAD") else None),
        "commit_source": "GROUPATTN_BENCH_COMMIT env" if os.environ.get("GROUPATTN_BENCH_COMMIT") else (
            "git" if _git("rev-parse", "HEAD") else "unknown"),
        "tree_digest": tree_digest(root),
        "groupattn": {"version": groupattn.__version__, "build_info": groupattn.build_info(),
                      "file": groupattn.__file__, "engines": groupattn.engines()},
        "build_flags": os.environ.get("GROUPATTN_BENCH_BUILD_FLAGS", "not recorded (set GROUPATTN_BENCH_BUILD_FLAGS)"),
        # Every GROUPATTN_* variable: GROUPATTN_ENGINE pins engines, the GROUPATTN_SM90_* switches change
        # which kernel form runs (docs/DECODE_SM90.md, docs/PREFILL_SM90.md); a run must say which.
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith("GROUPATTN_") or k in ("FLA_DISABLE_BACKEND_DISPATCH", "CUDA_VISIBLE_DEVICES")},
        "peers": {},
    }
    try:
        import triton

        prov["peers"]["triton"] = triton.__version__
    except Exception:
        prov["peers"]["triton"] = None
    try:
        r = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=10)
        prov["nvcc"] = r.stdout.strip().splitlines()[-1] if r.returncode == 0 else None
    except Exception:
        prov["nvcc"] = None
    return prov


# ---------------------------------------------------------------------------------------------
# engine verification: which kernels a pinned call really launched


def kernel_names(fn: Callable[[], object]) -> Dict:
    """CUDA kernel names launched by fn() (torch.profiler); {"names": [...]} or {"error": ...}."""
    try:
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = []
        for e in prof.events():
            dt = getattr(e, "device_type", None)
            if dt is not None and "CUDA" in str(dt) and e.name not in names:
                names.append(e.name)
        return {"names": names[:40]}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def expect_raises(fn: Callable[[], object]) -> Dict:
    """{"raised": bool, "error": message}: a pinned backend/engine given a problem it cannot serve
    must raise, not fall back silently."""
    try:
        fn()
        torch.cuda.synchronize()
        return {"raised": False}
    except Exception as e:
        return {"raised": True, "error": f"{type(e).__name__}: {str(e)[:200]}"}
