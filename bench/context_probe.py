#!/usr/bin/env python3
"""Times sm90-prefill on one long full-attention problem in several measurement contexts, in one
process, with the SM clock and power sampled during every timed replay.

  PYTHONPATH=build-gpu/python python3 bench/context_probe.py [--configs 64/8:1:16384,16/16:1:16384]
                                                            [--contexts suite,alone,...] [--out F.json]

Why (docs/PREFILL_SM90.md, "The suite's long full rows vs the CLI"): on d128 S16384 full the suite
read ours at 0.212 / 0.227 / 0.234 ms per query head (16/16, 32/8, 64/8) and cuDNN flat at 0.205-0.207,
while the CLI read ours flat at 0.214-0.219. The suite turns its order each round, which keeps every
contender's predecessor: ours always runs after its own control, cuDNN after the cuda engine, the
control after FlashAttention-2. The contexts below change one thing each:

  suite      bench/suites.py's prefill_config, every engine and both SDPA peers: the suite's row as
             run.py measures it (fp64 check first)
  alone      prefill_config with our engine only, no peers (ours and its control, each after the other)
  cudnn      ours, cuDNN and the control on one set of tensors (everyone after a tensor-core-bound kernel)
  one-set    ours and its control reading input set 0 every call (same calls per replay: no rotation)
  gap        the suite's contenders with the GPU idle --gap-ms before every timed replay
  lead-in    the suite's contenders, each timed replay right after an untimed replay of itself
  swap       ours after FlashAttention-2 and a second graph of ours after cuDNN; cuDNN after ours

Timing is bench/harness.py's time_contenders in every context (gap / lead-in are its gap_s and
lead_in arguments); harness.REPLAY_OBSERVER gives each replay's host-time window, and the samples of
a background sampler (pynvml when importable, else `nvidia-smi -lms`) inside a contender's windows
give its mean SM clock, power and the share of samples with the software power cap active. Without a
CUDA device it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

CONTEXTS = ("suite", "alone", "cudnn", "one-set", "gap", "lead-in", "swap")
OURS = "groupattn:sm90-prefill"
# clocks_event_reasons bit of the software power cap (nvidia-smi / NVML).
SW_POWER_CAP = 0x4


# ---------------------------------------------------------------------------------------------
# pure helpers (CPU-tested in tests/python/test_bench_tools.py)


def parse_configs(spec: str) -> List[Dict]:
    """'64/8:1:16384,16/16:1:16384' -> [{"hq", "hkv", "batch", "sq"}, ...] (hq/hkv:batch:seq_len)."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            heads, batch, seq = part.split(":")
            hq, hkv = (int(x) for x in heads.split("/"))
            cfg = {"hq": hq, "hkv": hkv, "batch": int(batch), "sq": int(seq)}
        except ValueError:
            raise ValueError(f"--configs: {part!r} is not hq/hkv:batch:seq_len (e.g. 64/8:1:16384)") from None
        if min(cfg.values()) < 1 or hq % hkv:
            raise ValueError(f"--configs: {part!r}: positive sizes and hq a multiple of hkv")
        out.append(cfg)
    if not out:
        raise ValueError("--configs: no configuration given")
    return out


def parse_contexts(spec: str) -> List[str]:
    ctxs = [c.strip() for c in spec.split(",") if c.strip()]
    bad = [c for c in ctxs if c not in CONTEXTS]
    if bad or not ctxs:
        raise ValueError(f"--contexts: unknown {bad or spec!r}; known: {', '.join(CONTEXTS)}")
    return ctxs


def predecessors(order: Sequence[str]) -> Dict[str, str]:
    """Who runs right before each contender in time_contenders' turning order (harness.round_order
    keeps the cyclic order, so this holds in every round but the first one's first place)."""
    return {n: order[i - 1] for i, n in enumerate(order)}


def parse_smi_line(line: str) -> Optional[Tuple[float, float, float, Optional[int]]]:
    """One `nvidia-smi --format=csv,noheader,nounits` line of clocks.sm, power, temperature[,
    reasons] -> (MHz, W, C, reasons bitmask or None); None for a line that does not parse."""
    vals = [v.strip() for v in line.split(",")]
    if len(vals) < 3:
        return None
    try:
        mhz, watts, temp = float(vals[0]), float(vals[1]), float(vals[2])
    except ValueError:
        return None
    reasons = None
    if len(vals) > 3:
        try:
            reasons = int(vals[3], 16) if vals[3].lower().startswith("0x") else int(vals[3])
        except ValueError:
            reasons = None
    return mhz, watts, temp, reasons


def window_stats(samples: Sequence[Tuple], windows: Sequence[Tuple[float, float]]) -> Dict:
    """Mean MHz / W / C and the power-cap share over the samples (t, MHz, W, C, reasons) whose time
    lies inside any window (t0, t1)."""
    ws = sorted(windows)
    picked = []
    for s in samples:
        t = s[0]
        for a, b in ws:
            if a <= t <= b:
                picked.append(s)
                break
            if a > t:
                break
    if not picked:
        return {"n": 0, "mhz": float("nan"), "watts": float("nan"), "temp": float("nan"), "pcap": float("nan")}
    n = len(picked)
    with_reasons = [s[4] for s in picked if s[4] is not None]
    pcap = (sum(1 for r in with_reasons if r & SW_POWER_CAP) / len(with_reasons)) if with_reasons else float("nan")
    return {"n": n, "mhz": sum(s[1] for s in picked) / n, "watts": sum(s[2] for s in picked) / n,
            "temp": sum(s[3] for s in picked) / n, "pcap": pcap}


def nvml_index() -> int:
    """The NVML / nvidia-smi index of CUDA device 0: the first CUDA_VISIBLE_DEVICES entry when it is a
    plain index, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


# ---------------------------------------------------------------------------------------------
# clock / power sampler


class Sampler:
    """Background samples (perf_counter time, SM MHz, W, C, reasons bitmask or None) of one GPU:
    pynvml every ~5 ms when importable, else `nvidia-smi -lms 20`; `source` says which (or why none)."""

    SMI_FIELDS = (
        ["clocks.sm", "power.draw.instant", "temperature.gpu", "clocks_event_reasons.active"],
        ["clocks.sm", "power.draw", "temperature.gpu", "clocks_throttle_reasons.active"],
        ["clocks.sm", "power.draw", "temperature.gpu"],
    )

    def __init__(self, index: int, period_ms: int = 5):
        self.index, self.period = index, period_ms / 1e3
        self.samples: List[Tuple] = []
        self.source = "none"
        self._stop = threading.Event()
        self._thread = None
        self._proc = None

    def start(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            power = self._nvml_power(pynvml, h)
            self.source = "pynvml every %d ms (power: %s)" % (self.period * 1e3, power[1])
            self._thread = threading.Thread(target=self._nvml_loop, args=(pynvml, h, reasons, power[0]), daemon=True)
            self._thread.start()
            return self
        except Exception as e:
            nvml_error = f"{type(e).__name__}: {str(e)[:80]}"
        for fields in self.SMI_FIELDS:
            cmd = ["nvidia-smi", "-i", str(self.index), "--query-gpu=" + ",".join(fields),
                   "--format=csv,noheader,nounits", "-lms", "20"]
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except Exception as e:
                self.source = f"none (pynvml: {nvml_error}; nvidia-smi: {type(e).__name__})"
                return self
            ready = select.select([proc.stdout], [], [], 10.0)[0]  # a hung nvidia-smi must not hang the probe
            first = proc.stdout.readline() if ready else ""
            if parse_smi_line(first) is not None:
                self._proc = proc
                self.source = "nvidia-smi -lms 20 (" + ", ".join(fields[1:2]) + ")"
                self._thread = threading.Thread(target=self._smi_loop, daemon=True)
                self._thread.start()
                return self
            proc.kill()
            proc.wait()
        self.source = f"none (pynvml: {nvml_error}; nvidia-smi gave no samples)"
        return self

    @staticmethod
    def _nvml_power(pynvml, h):
        """(h -> W, what it reads): the instantaneous power field where the driver has it (Hopper's
        nvmlDeviceGetPowerUsage is a one-second average, too slow for 20-100 ms replays), else that."""
        fid = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if fid is not None:
            def instant(hh):
                v = pynvml.nvmlDeviceGetFieldValues(hh, [fid])[0]
                if v.nvmlReturn != 0:
                    raise RuntimeError("NVML_FI_DEV_POWER_INSTANT unavailable")
                return v.value.uiVal / 1e3

            try:
                instant(h)
                return instant, "NVML_FI_DEV_POWER_INSTANT"
            except Exception:
                pass
        return (lambda hh: pynvml.nvmlDeviceGetPowerUsage(hh) / 1e3), "nvmlDeviceGetPowerUsage, a 1 s average"

    def _nvml_loop(self, pynvml, h, reasons, power):
        while not self._stop.is_set():
            try:
                t = time.perf_counter()
                mhz = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                watts = power(h)
                temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                r = reasons(h) if reasons is not None else None
                self.samples.append((t, float(mhz), float(watts), float(temp), r))
            except Exception:
                pass
            time.sleep(self.period)

    def _smi_loop(self):
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            p = parse_smi_line(line)
            if p is not None:
                self.samples.append((time.perf_counter(),) + p)

    def stop(self):
        self._stop.set()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=2)


# ---------------------------------------------------------------------------------------------
# contexts


class Windows:
    """harness.REPLAY_OBSERVER: each contender's replay windows, per context."""

    def __init__(self):
        self.current: Dict[str, List[Tuple[float, float]]] = {}

    def __call__(self, name, t0, t1, _ms):
        self.current.setdefault(name, []).append((t0, t1))

    def take(self):
        w, self.current = self.current, {}
        return w


def run_probe(args, torch, H, S) -> List[Dict]:
    import groupattn as ga

    ctxs = parse_contexts(args.contexts)
    windows = Windows()
    H.REPLAY_OBSERVER = windows
    sampler = Sampler(nvml_index()).start()
    print(f"clock / power samples: {sampler.source}", flush=True)
    backends = S.sdpa_backends()
    rows = []
    t_start = time.time()
    try:
        for c in parse_configs(args.configs):
            hq, hkv, B, Sq, d = c["hq"], c["hkv"], c["batch"], c["sq"], args.head_dim
            label = f"{hq}/{hkv} d{d} S{Sq} B{B} {'causal' if args.causal else 'full'}"
            cfg = {"kind": "batched", "hq": hq, "hkv": hkv, "d": d, "sq": Sq, "batch": B, "causal": args.causal}
            set_bytes = (B * Sq * hq * d + 2 * B * Sq * hkv * d) * 2
            nsets = H.num_sets(set_bytes)
            sets = [(S._bf16(B, Sq, hq, d), S._bf16(B, Sq, hkv, d), S._bf16(B, Sq, hkv, d)) for _ in range(nsets)]
            mode = "is_causal" if args.causal else None

            def ours(i):
                return ga.attention(*sets[i], causal=args.causal, engine="sm90-prefill")

            def cuda_engine(i):
                return ga.attention(*sets[i], causal=args.causal, engine="cuda")

            def cudnn(i):
                return S.sdpa_call(backends["sdpa-cudnn"], *sets[i], mode)

            def flash(i):
                return S.sdpa_call(backends["sdpa-flash"], *sets[i], mode)

            kn = H.kernel_names(lambda: ours(0))
            print(f"\n{label}: {nsets} input sets x {set_bytes / 2**20:.0f} MiB; our kernels: "
                  f"{', '.join(kn.get('names', [])) or kn.get('error')}", flush=True)
            suite_set = {OURS: ours, "groupattn:cuda": cuda_engine, "sdpa-cudnn": cudnn, "sdpa-flash": flash}
            for ctx in ctxs:
                time.sleep(args.settle_ms / 1e3)
                windows.take()
                t0 = time.time()
                try:
                    timing, order = _time_context(ctx, args, cfg, nsets, H, S, ours, cudnn, flash, suite_set)
                except Exception as ex:  # one context failing must not lose the others
                    print(f"  {ctx}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
                    continue
                torch.cuda.synchronize()
                torch.cuda.empty_cache()  # the context's graphs and their pools are gone
                after = predecessors(order)
                if ctx in ("gap", "lead-in"):
                    after = {n: "(idle)" if ctx == "gap" else "(itself)" for n in order}
                w = windows.take()
                for n in order:
                    t = timing[n]
                    st = window_stats(sampler.samples, w.get(n, []))
                    rows.append({"config": label, "hq": hq, "context": ctx, "contender": n.replace("groupattn:", ""),
                                 "after": after[n].replace("groupattn:", ""), "ms": t["ms"],
                                 "calls_per_replay": t["calls_per_replay"], "mode": t["mode"], "clock": st,
                                 "seconds": round(time.time() - t0, 2)})
                print(f"  {ctx}: {time.time() - t0:.1f} s (total {time.time() - t_start:.0f} s)", flush=True)
            del sets
            torch.cuda.empty_cache()
    finally:
        H.REPLAY_OBSERVER = None
        sampler.stop()
    return rows


def _time_context(ctx, args, cfg, nsets, H, S, ours, cudnn, flash, suite_set):
    """One context's timings ({contender: time_contenders' result}) and its contenders in order."""
    if ctx in ("suite", "alone"):
        engines = S.our_engines("attention") if ctx == "suite" else ["sm90-prefill"]
        e = S.prefill_config(cfg, engines, peers=(ctx == "suite"))
        if e.get("errors") or not e.get("timing"):
            print(f"  {ctx}: errors {e.get('errors')}", flush=True)
        bad = [n for n, r in e.get("correctness", {}).items() if not r.get("ok")]
        if bad:
            print(f"  {ctx}: FAILED the fp64 check: {bad}", flush=True)
        timing = e.get("timing", {})
        return timing, list(timing)
    gap, lead, control = 0.0, False, OURS
    if ctx == "cudnn":
        fns = {OURS: ours, "sdpa-cudnn": cudnn}
    elif ctx == "one-set":
        # every call reads set 0; nsets is kept so the replay holds as many calls
        fns = {OURS: lambda _i: ours(0)}
    elif ctx == "swap":
        fns = {OURS: ours, "sdpa-cudnn": cudnn, OURS + "@2": ours, "sdpa-flash": flash}
        control = None
    else:  # gap, lead-in: the suite's contenders
        fns = dict(suite_set)
        gap = args.gap_ms / 1e3 if ctx == "gap" else 0.0
        lead = ctx == "lead-in"
    timing = H.time_contenders(fns, nsets, args.rounds, S.TARGET_MS, control, gap_s=gap, lead_in=lead)
    timing.pop("_control", None)
    return timing, list(timing)


def print_table(rows: List[Dict]):
    print("\ncontext probe: median of the rounds' ms per call (graph replay, events); clocks over the samples "
          "inside that contender's timed replays\n")
    hdr = (f"{'config':<26} {'context':<8} {'contender':<20} {'after':<20} {'median':>8} {'p20-p80':>15} "
           f"{'/head':>6} {'SM MHz':>6} {'W':>5} {'pcap':>5} {'n':>4}")
    print(hdr)
    print("-" * len(hdr))
    last = None
    for r in rows:
        if last is not None and r["config"] != last:
            print()
        last = r["config"]
        ms, ck = r["ms"], r["clock"]
        pc = "" if math.isnan(ck["pcap"]) else f"{100 * ck['pcap']:.0f}%"
        mhz = "" if math.isnan(ck["mhz"]) else f"{ck['mhz']:.0f}"
        watts = "" if math.isnan(ck["watts"]) else f"{ck['watts']:.0f}"
        print(f"{r['config']:<26} {r['context']:<8} {r['contender'][:20]:<20} {r['after'][:20]:<20} "
              f"{ms['median']:8.3f} {ms['p20']:7.3f}-{ms['p80']:<7.3f} {ms['median'] / r['hq']:6.3f} "
              f"{mhz:>6} {watts:>5} {pc:>5} {ck['n']:>4}")


def ratio_rows(rows: List[Dict]) -> List[Tuple[str, str, float, float]]:
    """Per (config, context): cuDNN time / ours (> 1: ours faster; nan without cuDNN) and ours /
    its second graph (the control, or ours@2 in 'swap'; nan without one), from the medians."""
    out = []
    seen = []
    for r in rows:
        if (r["config"], r["context"]) not in seen:
            seen.append((r["config"], r["context"]))
    ours = OURS.replace("groupattn:", "")
    for cfg, ctx in seen:
        med = {r["contender"]: r["ms"]["median"] for r in rows if r["config"] == cfg and r["context"] == ctx}
        o = med.get(ours, float("nan"))
        second = med.get(ours + "#ctrl", med.get(ours + "@2", float("nan")))
        out.append((cfg, ctx, med.get("sdpa-cudnn", float("nan")) / o, o / second))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="64/8:1:16384,16/16:1:16384", help="hq/hkv:batch:seq_len, comma-separated")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true", help="causal instead of full attention")
    ap.add_argument("--contexts", default=",".join(CONTEXTS), help="comma-separated, of: " + ", ".join(CONTEXTS))
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per context (>= 5)")
    ap.add_argument("--gap-ms", type=float, default=200.0, help="idle before every timed replay in context 'gap'")
    ap.add_argument("--settle-ms", type=float, default=500.0, help="idle before each context")
    ap.add_argument("--out", default=None, help="also write the rows (and the provenance) as JSON here")
    args = ap.parse_args(argv)
    try:
        parse_configs(args.configs)
        parse_contexts(args.contexts)
    except ValueError as e:
        ap.error(str(e))
    if args.rounds < 5:
        ap.error("--rounds: at least 5 (the median and p20-p80 need them)")

    import torch

    if not torch.cuda.is_available():
        print("context_probe.py: needs a CUDA device", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    import harness as H
    import suites as S

    before = H.nvidia_smi()
    switches = ", ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("GROUPATTN_SM90_"))
    print(f"GPU: {torch.cuda.get_device_name()}; before: SM {before.get('clocks.sm')}, {before.get('power.draw')}, "
          f"{before.get('temperature.gpu')} C, limit {before.get('power.limit')}; switches: {switches or 'defaults'}",
          flush=True)
    t0 = time.time()
    rows = run_probe(args, torch, H, S)
    after = H.nvidia_smi()
    print_table(rows)
    print(f"\n{'config':<26} {'context':<8} {'cuDNN/ours':>10} {'ours/2nd graph of ours':>23}")
    for cfg, ctx, rc, ro in ratio_rows(rows):
        rc_s, ro_s = ("" if math.isnan(x) else f"{x:.3f}" for x in (rc, ro))
        print(f"{cfg:<26} {ctx:<8} {rc_s:>10} {ro_s:>23}")
    print(f"\nafter: SM {after.get('clocks.sm')}, {after.get('power.draw')}, {after.get('temperature.gpu')} C; "
          f"{time.time() - t0:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"argv": sys.argv, "before": before, "after": after, "rows": rows}, f, indent=1, default=str)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
