"""The three suites: inputs, contenders (our engines pinned by name, and the peers), correctness
gate, timing, metrics. One config at a time; every contender reads the same tensors."""

from __future__ import annotations

import math
import os
import sys
import types
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

import counts
import harness as H
import matrices
import pins
import refs

ROUNDS = 5
TARGET_MS = 10.0
ORDER = "turning"  # harness.ORDER_MODES; run.py --order sets it


# ---------------------------------------------------------------------------------------------
# contenders


# The cuda engine's kernels pinned one at a time (tests, and `--engines cuda-tile,cuda-decode` to
# time both at one shape): the automatic "cuda" already runs one of them, so they stay out of the
# default contenders and the suite budgets.
PINNED_KERNEL_ENGINES = ("cuda-tile", "cuda-decode")


def our_engines(op: str) -> List[str]:
    """Names of groupattn's engines for `op` that are available here and are not fp64 references
    (those are the correctness oracles, not benchmark subjects) or pinned single kernels."""
    import groupattn

    return [e["name"] for e in groupattn.engines()[op]
            if e["available"] and not e["name"].startswith("reference") and e["name"] not in PINNED_KERNEL_ENGINES]


def sdpa_backends() -> Dict[str, object]:
    from torch.nn.attention import SDPBackend

    return {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}


def sdpa_call(backend, q, k, v, causal_mode, attn_mask=None):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] passed as .transpose(1, 2) views (no copies);
    returns [B, Hq, Sq, Dv]."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              attn_mask=attn_mask, is_causal=(causal_mode == "is_causal"),
                                              enable_gqa=True)


_FLA = {"loaded": False}


def load_fla():
    """fla's chunk_kda without importing fla/__init__ (which pulls transformers): a stub package
    object named `fla` whose __path__ points at the installed source (BENCHMARKING.md's recipe).
    Returns (chunk_kda, version) or (None, reason)."""
    if _FLA["loaded"]:
        return _FLA["fn"], _FLA["version"]
    _FLA["loaded"] = True
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    try:
        import importlib.util

        spec = importlib.util.find_spec("fla")
        if spec is None or not spec.submodule_search_locations:
            _FLA["fn"], _FLA["version"] = None, "fla not importable (install fla-core)"
            return _FLA["fn"], _FLA["version"]
        path = list(spec.submodule_search_locations)[0]
        version = None
        with open(os.path.join(path, "__init__.py")) as f:
            for line in f:
                if line.startswith("__version__"):
                    version = line.split("=", 1)[1].strip().strip("\"'")
        if "fla" not in sys.modules:
            stub = types.ModuleType("fla")
            stub.__path__ = [path]
            stub.__version__ = version
            sys.modules["fla"] = stub
        from fla.ops.kda import chunk_kda

        _FLA["fn"], _FLA["version"] = chunk_kda, version
    except Exception as e:
        _FLA["fn"], _FLA["version"] = None, f"fla import failed: {type(e).__name__}: {str(e)[:300]}"
    return _FLA["fn"], _FLA["version"]


# ---------------------------------------------------------------------------------------------
# shared per-config driver


def run_config(cfg: Dict, sets_bytes: int, nsets: int, fns: Dict[str, Callable[[int], object]],
               check: Callable[[Dict[str, object]], Dict[str, Dict]], control: Optional[str],
               want_wall: bool, skipped: Dict[str, str]) -> Dict:
    entry = {"config": cfg, "nsets": nsets, "set_bytes": sets_bytes, "rotation_bytes": nsets * sets_bytes,
             "skipped": dict(skipped), "correctness": {}, "timing": {}, "wall_ms": {}, "errors": {}}
    # correctness on set 0, before any timing; a failing contender is reported, not timed
    outs = {}
    for n, fn in list(fns.items()):
        try:
            outs[n] = fn(0)
            torch.cuda.synchronize()
        except NotImplementedError as e:  # an engine declining a problem it does not serve
            entry["skipped"][n] = f"declined: {str(e)[:300]}"
            fns.pop(n)
        except Exception as e:
            entry["errors"][n] = f"{type(e).__name__}: {str(e)[:400]}"
            fns.pop(n)
    try:
        entry["correctness"] = check(outs)
    except Exception as e:
        import traceback

        entry["errors"]["_check"] = f"{type(e).__name__}: {str(e)[:400]} | {traceback.format_exc()[-800:]}"
        entry["correctness"] = {n: {"ok": False, "error": "check failed"} for n in outs}
    del outs
    for n in list(fns):
        if not entry["correctness"].get(n, {}).get("ok", False):
            entry["skipped"][n] = "failed the fp64 correctness check: not timed"
            fns.pop(n)
    if not fns:
        return entry
    if control not in fns:
        control = next(iter(fns))
    try:
        t = H.time_contenders(fns, nsets, ROUNDS, TARGET_MS, control, order_mode=ORDER)
        entry["control"] = t.pop("_control", None)
        entry["timing"] = t
    except Exception as e:
        import traceback

        entry["errors"]["_timing"] = f"{type(e).__name__}: {str(e)[:400]} | {traceback.format_exc()[-800:]}"
        return entry
    if want_wall:
        for n, fn in fns.items():
            try:
                entry["wall_ms"][n] = H.wall_times(fn, nsets, t[n]["ms"]["median"])
            except Exception as e:
                entry["errors"][n + ":wall"] = f"{type(e).__name__}: {str(e)[:200]}"
    return entry


def _bf16(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# prefill


def prefill_config(cfg: Dict, engines: List[str], peers: bool = True) -> Dict:
    import groupattn as ga

    hq, hkv, d, causal = cfg["hq"], cfg["hkv"], cfg["d"], cfg["causal"]
    scale = 1.0 / math.sqrt(d)
    skipped = {}
    if cfg["kind"] == "batched":
        B, S = cfg["batch"], cfg["sq"]
        prob = counts.batched(B, S, S, hq, hkv, d, causal=causal)
        set_bytes = (B * S * hq * d + 2 * B * S * hkv * d) * 2
        nsets = H.num_sets(set_bytes)
        sets = [(_bf16(B, S, hq, d), _bf16(B, S, hkv, d), _bf16(B, S, hkv, d)) for _ in range(nsets)]
        fns = {}
        for e in engines:
            fns["groupattn:" + e] = (lambda e: lambda i: ga.attention(*sets[i], causal=causal, engine=e))(e)
        if peers:
            for name, be in sdpa_backends().items():
                fns[name] = (lambda be: lambda i: sdpa_call(be, *sets[i], "is_causal" if causal else None))(be)
        seqs = []
        for b in sorted(set([0, B - 1])):
            q0, k0, v0 = sets[0]
            seqs.append({"idx": b, "sq": S, "sk": S,
                         "q": (lambda b: lambda rows, h: q0[b, rows, h])(b),
                         "k": (lambda b: lambda kh: k0[b, :, kh])(b),
                         "v": (lambda b: lambda kh: v0[b, :, kh])(b)})

        def check(outs):
            getters = {}
            for n, o in outs.items():
                if n.startswith("groupattn:"):
                    out, lse = o
                    getters[n] = ((lambda out: lambda b, rows, h: out[b, rows, h])(out),
                                  (lambda lse: lambda b, rows, h: lse[b, h, rows])(lse))
                else:
                    getters[n] = ((lambda o: lambda b, rows, h: o[b, h, rows])(o), None)
            return refs.check_attention(getters, seqs, hq, hkv, scale, causal)
    else:
        lens = cfg["lengths"]
        total = sum(lens)
        prob = counts.varlen(lens, lens, hq, hkv, d, causal=causal)
        cu = torch.tensor([0] + list(_cumsum(lens)), device="cuda", dtype=torch.int32)
        mx = max(lens)
        set_bytes = (total * hq * d + 2 * total * hkv * d) * 2
        nsets = H.num_sets(set_bytes)
        sets = [(_bf16(total, hq, d), _bf16(total, hkv, d), _bf16(total, hkv, d)) for _ in range(nsets)]
        fns = {}
        for e in engines:
            fns["groupattn:" + e] = (lambda e: lambda i: ga.attention(
                *sets[i], causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx,
                engine=e))(e)
        for name in sdpa_backends():
            skipped[name] = "not applicable: SDPA takes no varlen (packed) batch"
        offs = [0] + list(_cumsum(lens))
        q0, k0, v0 = sets[0]
        seqs = []
        for j in sorted(set([0, len(lens) - 1, 1])):
            a, L = offs[j], lens[j]
            seqs.append({"idx": j, "sq": L, "sk": L,
                         "q": (lambda a: lambda rows, h: q0[[a + r for r in rows], h])(a),
                         "k": (lambda a, L: lambda kh: k0[a:a + L, kh])(a, L),
                         "v": (lambda a, L: lambda kh: v0[a:a + L, kh])(a, L)})

        def check(outs):
            getters = {}
            for n, (out, lse) in outs.items():
                getters[n] = ((lambda out: lambda j, rows, h: out[[offs[j] + r for r in rows], h])(out),
                              (lambda lse: lambda j, rows, h: lse[h, [offs[j] + r for r in rows]])(lse))
            return refs.check_attention(getters, seqs, hq, hkv, scale, causal)

    control = "groupattn:" + engines[0] if engines else None
    entry = run_config(cfg, set_bytes, nsets, fns, check, control, want_wall=False, skipped=skipped)
    entry["flops"] = counts.attention_flops(prob)
    entry["bytes"] = counts.attention_bytes(prob)["total"]
    for n, t in entry["timing"].items():
        s = t["ms"]["median"] * 1e-3
        t["tflops"] = entry["flops"] / s / 1e12
        t["tflops_p20"] = entry["flops"] / (t["ms"]["p80"] * 1e-3) / 1e12
        t["tflops_p80"] = entry["flops"] / (t["ms"]["p20"] * 1e-3) / 1e12
    del sets, fns
    return entry


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


# ---------------------------------------------------------------------------------------------
# decode


def decode_config(cfg: Dict, engines: List[str]) -> Dict:
    import groupattn as ga

    hq, hkv, d, B, L, n, page = cfg["hq"], cfg["hkv"], cfg["d"], cfg["batch"], cfg["kv_len"], cfg["new"], cfg["page"]
    scale = 1.0 / math.sqrt(d)
    lens = [max(n, x) for x in matrices.mixed_lengths(B, L)] if cfg["mixed"] else [L] * B
    prob = counts.varlen([n] * B, lens, hq, hkv, d, causal=True, page_size=page, kv_dtype=cfg.get("kv_dtype"))
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    skipped = {}
    if page is None:
        kv_shape = (B, L, hkv, d)
        bt = None
    else:
        npages = [matrices_pages(x, page) for x in lens]
        total_pages = sum(npages)
        perm = torch.randperm(total_pages, device="cpu").tolist()  # pages shuffled
        maxp = max(npages)
        rows, c = [], 0
        for p in npages:
            rows.append(perm[c:c + p] + [0] * (maxp - p))
            c += p
        bt = torch.tensor(rows, device="cuda", dtype=torch.int32)
        kv_shape = (total_pages, page, hkv, d)
    fp8 = cfg.get("kv_dtype") == "f8e4m3"
    kv_elem = 1 if fp8 else 2
    set_bytes = B * n * hq * d * 2 + 2 * math.prod(kv_shape) * kv_elem
    nsets = H.num_sets(set_bytes)
    if fp8:
        # e4m3 caches (normal values, well inside e4m3's range) with fp32 [B, Hkv] descales,
        # FlashAttention-3's convention: key = k_cache * k_descale. One descale pair for every set.
        f8 = torch.float8_e4m3fn
        sets = [(_bf16(B, n, hq, d), torch.randn(*kv_shape, device="cuda").to(f8),
                 torch.randn(*kv_shape, device="cuda").to(f8)) for _ in range(nsets)]
        kds = torch.rand(B, hkv, device="cuda", dtype=torch.float32) * 0.5 + 0.75
        vds = torch.rand(B, hkv, device="cuda", dtype=torch.float32) * 0.5 + 0.75
        extra = dict(k_descale=kds, v_descale=vds)
    else:
        sets = [(_bf16(B, n, hq, d), _bf16(*kv_shape), _bf16(*kv_shape)) for _ in range(nsets)]
        extra = {}
    fns = {}
    for e in engines:
        fns["groupattn:" + e] = (lambda e: lambda i: ga.attention_with_kvcache(
            *sets[i], cache_seqlens=seqlens, block_table=bt, causal=True, engine=e, **extra))(e)
    if fp8:
        for name in sdpa_backends():
            skipped[name] = "not applicable: SDPA has no fp8 KV cache"
    elif page is None and not cfg["mixed"]:
        if n == 1:
            mode, mask = None, None
        else:
            from torch.nn.attention.bias import causal_lower_right

            mode, mask = "mask", causal_lower_right(n, L)
        for name, be in sdpa_backends().items():
            fns[name] = (lambda be: lambda i: sdpa_call(be, *sets[i], mode, mask))(be)
    else:
        for name in sdpa_backends():
            skipped[name] = ("not applicable: SDPA reads no paged cache" if page is not None
                             else "not applicable: SDPA takes no per-sequence cache lengths")
    q0, k0, v0 = sets[0]

    def kv_seq(t, b, kh, ds=None):
        if bt is None:
            x = t[b, :lens[b], kh]
        else:
            p = npages_of(b)
            x = t[bt[b, :p].long()].reshape(-1, hkv, d)[:lens[b], kh]
        # fp8: the reference reads the dequantized cache (the semantics the engines implement)
        return x if ds is None else x.double() * ds[b, kh].double()

    def npages_of(b):
        return matrices_pages(lens[b], page)

    seqs = []
    for b in sorted(set([0, B - 1])):
        seqs.append({"idx": b, "sq": n, "sk": lens[b],
                     "q": (lambda b: lambda rows, h: q0[b, rows, h])(b),
                     "k": (lambda b: lambda kh: kv_seq(k0, b, kh, extra.get("k_descale")))(b),
                     "v": (lambda b: lambda kh: kv_seq(v0, b, kh, extra.get("v_descale")))(b)})

    def check(outs):
        getters = {}
        for nm, o in outs.items():
            if nm.startswith("groupattn:"):
                out, lse = o
                getters[nm] = ((lambda out: lambda b, rows, h: out[b, rows, h])(out),
                               (lambda lse: lambda b, rows, h: lse[b, h, rows])(lse))
            else:
                getters[nm] = ((lambda o: lambda b, rows, h: o[b, h, rows])(o), None)
        return refs.check_attention(getters, seqs, hq, hkv, scale, True)

    control = "groupattn:" + engines[0] if engines else None
    entry = run_config(cfg, set_bytes, nsets, fns, check, control, want_wall=True, skipped=skipped)
    entry["flops"] = counts.attention_flops(prob)
    nb = counts.attention_bytes(prob)  # fp8: K/V at one byte per element (prob's kv_dtype)
    entry["bytes"] = nb["total"]
    entry["kv_bytes"] = nb["k"] + nb["v"]
    if fp8:
        entry["kv_dtype"] = "f8e4m3"
    entry["seqlens"] = lens if cfg["mixed"] else None
    for nm, t in entry["timing"].items():
        t["gbps"] = entry["bytes"] / (t["ms"]["median"] * 1e-3) / 1e9
        t["gbps_p20"] = entry["bytes"] / (t["ms"]["p80"] * 1e-3) / 1e9
        t["gbps_p80"] = entry["bytes"] / (t["ms"]["p20"] * 1e-3) / 1e9
    del sets, fns
    return entry


def matrices_pages(x: int, page: int) -> int:
    return counts.pages_needed(x, page)


# ---------------------------------------------------------------------------------------------
# KDA


def kda_config(cfg: Dict, engines: List[str]) -> Dict:
    import groupattn as ga

    T, Hh, N, K, V, gate = cfg["T"], cfg["H"], cfg["N"], cfg["K"], cfg["V"], cfg["gate"]
    lb = gate == "lower_bound"
    scale = 1.0 / math.sqrt(K)
    lens = matrices.kda_seqlens(T, N)
    offs = [0] + list(_cumsum(lens))
    cu = torch.tensor(offs, device="cuda", dtype=torch.int64) if N > 1 else None
    cu_cpu = torch.tensor(offs, dtype=torch.int64) if N > 1 else None
    # gate parameters shared by every set (Kimi-Linear's initialisation ranges)
    A_log = torch.log(torch.empty(Hh, device="cuda").uniform_(1.0, 16.0))
    dt = torch.empty(Hh, K, device="cuda").uniform_(1e-3, 1e-1)
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    state_bytes = N * Hh * K * V * 4

    def make_set():
        q, k, v = _bf16(1, T, Hh, K), _bf16(1, T, Hh, K), _bf16(1, T, Hh, V)
        g = torch.randn(1, T, Hh, K, device="cuda", dtype=torch.float32)
        beta = torch.randn(1, T, Hh, device="cuda", dtype=torch.float32)
        if not lb:  # Kimi-Linear: gate and beta precomputed outside the kernel
            g = -torch.exp(A_log).view(1, 1, Hh, 1) * F.softplus(g + dt_bias.view(1, 1, Hh, K))
            beta = torch.sigmoid(beta)
        s0 = torch.randn(N, Hh, K, V, device="cuda", dtype=torch.float32)  # K-first, both sides read it
        return q, k, v, g, beta, s0

    set_bytes = (3 * T * Hh * K) * 2 + T * Hh * K * 4 + T * Hh * 4 + state_bytes
    nsets = H.num_sets(set_bytes)
    sets = [make_set() for _ in range(nsets)]
    gate_kw = dict(use_gate_in_kernel=lb, use_beta_sigmoid_in_kernel=lb, lower_bound=-5.0 if lb else None,
                   A_log=A_log if lb else None)
    fns = {}
    for e in engines:
        fns["groupattn:" + e] = (lambda e: lambda i: ga.chunk_kda(
            *sets[i][:5], initial_state=sets[i][5], output_final_state=True, use_qk_l2norm_in_kernel=True,
            dt_bias=dt_bias if lb else None, cu_seqlens=cu, state_v_first=False, engine=e, **gate_kw))(e)
    skipped = {}
    fla_fn, fla_ver = load_fla()
    if fla_fn is not None:
        fns["fla"] = lambda i: fla_fn(
            *sets[i][:5], initial_state=sets[i][5], output_final_state=True, use_qk_l2norm_in_kernel=True,
            safe_gate=lb, dt_bias=dt_bias.view(-1) if lb else None, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu,
            state_v_first=False, **gate_kw)
    else:
        skipped["fla"] = fla_ver

    def check(outs):
        q0, k0, v0, g0, b0, s0k = sets[0]
        res = {nm: {"max_rel_err": 0.0, "max_state_rel_err": None} for nm in outs}
        heads = sorted(set([0, Hh - 1]))
        for j in sorted(set([0, N - 1])):
            a, Lj = offs[j], lens[j]
            full = Lj <= refs.KDA_FULL_MAX
            steps = Lj if full else min(refs.KDA_PREFIX, Lj)
            sl = slice(a, a + steps)
            o_ref, S_ref = refs.kda_ref(
                q0[0, sl][:, heads], k0[0, sl][:, heads], v0[0, sl][:, heads], g0[0, sl][:, heads],
                b0[0, sl][:, heads], s0k[j, heads], gate=gate if lb else "log", A_log=A_log[heads] if lb else None,
                dt_bias=dt_bias[heads] if lb else None, lower_bound=-5.0, l2norm=True, beta_sigmoid=lb,
                scale=scale, steps=steps)
            for nm, (o, fin) in outs.items():
                r = res[nm]
                r["max_rel_err"] = max(r["max_rel_err"], refs.rel_err(o[0, sl][:, heads], o_ref))
                if full:
                    e = refs.rel_err(fin[j, heads], S_ref)  # both K-first [N, HV, K, V]
                    r["max_state_rel_err"] = e if r["max_state_rel_err"] is None else max(r["max_state_rel_err"], e)
        for nm, r in res.items():
            r["checked"] = "outputs of the first %d tokens%s" % (
                refs.KDA_PREFIX, "; whole sequences and final states" if max(lens) <= refs.KDA_FULL_MAX else "")
            r["ok"] = bool(r["max_rel_err"] <= refs.KDA_REL_TOL and
                           (r["max_state_rel_err"] is None or r["max_state_rel_err"] <= refs.KDA_REL_TOL))
            r["tol"] = {"rel": refs.KDA_REL_TOL}
        return res

    control = "groupattn:" + engines[0] if engines else ("fla" if "fla" in fns else None)
    entry = run_config(cfg, set_bytes, nsets, fns, check, control, want_wall=True, skipped=skipped)
    entry["bytes"] = counts.kda_bytes(T, Hh, Hh, K, V, N, in_kernel_gate_params=lb)["total"]
    entry["recurrence_flops"] = counts.kda_flops(T, Hh, K, V)
    entry["fla_version"] = fla_ver if fla_fn is not None else None
    del sets, fns
    return entry


# ---------------------------------------------------------------------------------------------
# engine verification (once per suite)


def _names_verdict(names: List[str], want: List[str], forbid: List[str]) -> bool:
    low = [x.lower() for x in names]
    return bool(names) and any(any(w in x for w in want) for x in low) and not any(
        any(f in x for f in forbid) for x in low)


def _verify_problem(prob: Dict):
    """Inputs of one verification problem (pins.VERIFY_PROBLEMS) and the calls the suite times on it:
    (ours(engine), sdpa(backend, dtype) or None where SDPA has no equivalent)."""
    import groupattn as ga

    hq, hkv, d = prob["hq"], prob["hkv"], prob["d"]
    if "new" in prob:  # decode: attention_with_kvcache, as decode_config calls it
        B, L, n, page = prob["batch"], prob["kv_len"], prob["new"], prob["page"]
        q = _bf16(B, n, hq, d)
        seqlens = torch.full((B,), L, device="cuda", dtype=torch.int32)
        if page is None:
            k, v, bt = _bf16(B, L, hkv, d), _bf16(B, L, hkv, d), None
        else:
            npg = counts.pages_needed(L, page)
            k, v = _bf16(B * npg, page, hkv, d), _bf16(B * npg, page, hkv, d)
            bt = torch.randperm(B * npg, device="cpu").view(B, npg).to(device="cuda", dtype=torch.int32)

        def ours(e):
            return ga.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, block_table=bt, causal=True, engine=e)

        if page is not None:
            return ours, None
        if n == 1:
            mode, mask = None, None
        else:
            from torch.nn.attention.bias import causal_lower_right

            mode, mask = "mask", causal_lower_right(n, L)
        return ours, lambda be, dt=torch.bfloat16: sdpa_call(be, q.to(dt), k.to(dt), v.to(dt), mode, mask)
    B, S, causal = prob["batch"], prob["sq"], prob["causal"]
    q, k, v = _bf16(B, S, hq, d), _bf16(B, S, hkv, d), _bf16(B, S, hkv, d)

    def ours(e):
        return ga.attention(q, k, v, causal=causal, engine=e)

    return ours, lambda be, dt=torch.bfloat16: sdpa_call(be, q.to(dt), k.to(dt), v.to(dt),
                                                          "is_causal" if causal else None)


def verify_attention_engines(engines: List[str], suite: str = "prefill") -> Dict:
    """Pinning really runs the pinned engine, on problems of `suite` (pins.VERIFY_PROBLEMS): the
    kernels each pinned call launched (profiler) against what the engine must launch there
    (pins.expected_kernels); an engine that does not serve the suite's problems (decode-only
    engines in the prefill suite, sm90-prefill in the decode suite) must decline them -- "not
    applicable", verified by the NotImplementedError. Pinned engines/backends given a problem they
    cannot serve raise instead of falling back."""
    out = {"GROUPATTN_ENGINE_env": os.environ.get("GROUPATTN_ENGINE")}
    first = None
    for prob in pins.VERIFY_PROBLEMS[suite]:
        label = pins.problem_label(prob)
        ours, sdpa = _verify_problem(prob)
        first = first or ours
        for e in engines:
            exp = pins.expected_kernels(e, prob)
            kn = H.kernel_names(lambda: ours(e))
            kn.update(engine="groupattn:" + e, problem=label, expect=exp)
            if not exp["serves"]:
                kn["not_applicable"] = exp["why"]
                kn["verified"] = str(kn.get("error", "")).startswith("NotImplementedError")
                if not kn["verified"]:
                    kn["why"] = f"expected to decline ({exp['why']}) but " + (
                        "it ran" if "names" in kn else str(kn.get("error")))
            elif "names" in kn:
                kn["verified"] = pins.kernels_verdict(kn["names"], exp)
                if not kn["verified"]:
                    kn["why"] = f"expected {exp['form']}: each of {exp['all']}, none of {exp['forbid']}"
            else:
                kn["verified"] = False
                kn["why"] = str(kn.get("error"))
            out[f"groupattn:{e} [{label}]"] = kn
        if sdpa is None:
            continue
        for name, be in sdpa_backends().items():
            kn = H.kernel_names(lambda: sdpa(be))
            if name == "sdpa-flash":
                kn["verified"] = _names_verdict(kn.get("names", []), ["flash"], ["cudnn", "fmha_cutlass", "efficient"])
            else:
                kn["verified"] = _names_verdict(kn.get("names", []), ["cudnn", "sdpa", "fmha", "fprop"],
                                                ["flash_fwd", "fmha_cutlass", "efficient", "softmax_warp"])
            kn.update(engine=name, problem=label)
            out[f"{name} [{label}]"] = kn
            if name + ":fp32-raises" not in out:  # neither backend takes fp32: must raise
                out[name + ":fp32-raises"] = H.expect_raises(lambda: sdpa(be, torch.float32))
    out["groupattn:pin-unknown-raises"] = H.expect_raises(lambda: first("no-such-engine"))
    out["groupattn:pin-reference-on-cuda-raises"] = H.expect_raises(lambda: first("reference"))
    return out


def verify_kda_engines(engines: List[str]) -> Dict:
    import groupattn as ga

    T, Hh, K = 256, 2, 128
    q, k, v = _bf16(1, T, Hh, K), _bf16(1, T, Hh, K), _bf16(1, T, Hh, K)
    g = -torch.rand(1, T, Hh, K, device="cuda")
    beta = torch.rand(1, T, Hh, device="cuda")
    out = {}
    for e in engines:
        kn = H.kernel_names(lambda: ga.chunk_kda(q, k, v, g, beta, state_v_first=False, engine=e))
        # our KDA engine's kernel names are its own; what must not appear is fla's Triton kernels
        kn["verified"] = bool(kn.get("names")) and not any("fla" in x.lower() for x in kn.get("names", []))
        kn.update(engine="groupattn:" + e, problem=f"T{T} H{Hh} N1")
        out["groupattn:" + e] = kn
    out["groupattn:pin-unknown-raises"] = H.expect_raises(lambda: ga.chunk_kda(q, k, v, g, beta, engine="no-such-engine"))
    out["groupattn:pin-reference-on-cuda-raises"] = H.expect_raises(
        lambda: ga.chunk_kda(q, k, v, g, beta, engine="reference"))
    fla_fn, ver = load_fla()
    if fla_fn is not None:
        kn = H.kernel_names(lambda: fla_fn(q, k, v, g, beta))
        kn["verified"] = _names_verdict(kn.get("names", []), ["kda", "chunk", "wy", "gated_delta"], [])
        kn.update(engine="fla", problem=f"T{T} H{Hh} N1")
        out["fla"] = kn
    else:
        out["fla"] = {"skipped": ver}
    return out
