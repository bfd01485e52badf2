"""Which kernels a pinned attention engine must launch on a problem, and the problems each suite
verifies its engines on. Pure Python (no torch): suites.verify_attention_engines runs the problems
under the profiler; tests/python/test_bench_tools.py checks the expectations on CPU.

The expectations follow the engines' own selection rules (src/attention/engines/):
  sm90, sm90-split  decode only (1..16 new tokens, batched Q, head dim 64/128/256). The packed-rows
                    form -- sm90_prefill_kernel in its packed-decode mode -- when the cache is
                    contiguous or paged in pages of a multiple of 64 keys (16-bit caches: of 8 keys)
                    and group x new tokens reaches D 64 17, D 128 32, D 256 33 (f8e4m3, D 128 only:
                    64; small pages at D 128 and a K/V bound >= 192 MiB: 33) (decode_traits.h
                    packed_rows_form; DECODE_SM90.md sections 12, 15); else the swap-AB
                    sm90_decode_kernel. A split problem merges its
                    splits with the combine kernel, except the swap-AB form of `sm90` may reduce
                    inside a thread-block cluster (section 14); `sm90-split` never does.
  sm90-rows         the packed-rows form for every problem it accepts: D 64/128/256 (f8e4m3: 128),
                    pages a multiple of 64 keys (16-bit: of 8 keys); declines the rest.
  sm90-prefill      more than 16 query tokens per sequence, not paged (sm90_prefill_kernel; at D 128
                    full attention on batched Q and K/V, sm90_prefill_persistent_kernel); a decode
                    step is declined.
  cuda              the portable engine: its decode kernel while new tokens x group <= 16 packed rows
                    at D 64/128/256 (engines/cuda/launch.h use_decode_kernel), else
                    attention_tile_kernel.
"""

from __future__ import annotations

from typing import Dict, List, Optional

# One group per suite. Decode problems are configurations of the decode matrix (matrices.py), so the
# verification runs what the suite times; `splits`: the planner splits it on any GPU of >= 16 SMs
# (one (sequence, KV head) of 8192 keys: 16 splits of >= 512 keys), so the combine kernel's
# presence tells the workspace mode from the cluster mode.
VERIFY_PROBLEMS: Dict[str, List[Dict]] = {
    "decode": [
        dict(hq=8, hkv=1, d=128, batch=1, kv_len=8192, new=1, page=None, mixed=False, splits=True),
        dict(hq=64, hkv=8, d=128, batch=1, kv_len=8192, new=8, page=None, mixed=False, splits=True),
        dict(hq=8, hkv=1, d=128, batch=1, kv_len=8192, new=1, page=16, mixed=False, splits=True),
    ],
    "prefill": [
        dict(kind="batched", hq=8, hkv=2, d=128, batch=2, sq=256, sk=256, causal=True),
        dict(kind="batched", hq=8, hkv=2, d=128, batch=2, sq=256, sk=256, causal=False),  # the persistent form
    ],
}

PEER_KERNELS = ["flash_fwd", "pytorch_flash", "cudnn", "fmha"]
# "cuda_engine::decode_" names the cuda engine's decode kernels: decode_kernel, decode_list_kernel (the work
# list) and their D 256 split-V forms decode_split_v_kernel, decode_split_v_list_kernel.
CUDA_DECODE = "cuda_engine::decode_"
CUDA_KERNELS = ["cuda_engine::attention_tile_kernel", CUDA_DECODE]
SM90_DECODE = "sm90_engine::sm90_decode_kernel"
SM90_PREFILL = "sm90_engine::sm90_prefill_kernel"
SM90_PREFILL_PERSISTENT = "sm90_engine::sm90_prefill_persistent_kernel"
COMBINE = "cuda_engine::combine_kernel"

SM90_DECODE_HEAD_DIMS = (64, 128, 256)
SM90_MAX_NEW_TOKENS = 16
PACKED_FP8_HEAD_DIM = 128
PACKED_MIN_ROWS = {64: 17, 128: 32, 256: 33}  # 16-bit K/V, per head dim
PACKED_MIN_ROWS_FP8 = 33  # decode_traits.h kPackedDecodeMinRowsFp8 (64 until session 8)
SMALL_PAGES_SWAP_AB_MIN_KV_BYTES = 192 << 20  # decode_traits.h kSmallPagesSwapAbMinKvBytes
CUDA_DECODE_MAX_PACKED_ROWS = 16  # launch.h kDecodeMaxPackedRows
# decode_traits.h packed_rows_below_cut: 16-bit d 64 / 256 from 16 rows and 64 MiB of K/V (the host's
# bound), contiguous or pages of a multiple of 64 keys, where swap-AB would not run its work list
# (sm90_engine.cu plan_call; decode_work_list.h kListMinKvBytes, kListMaxBatch).
PACKED_BELOW_CUT_MIN_ROWS, PACKED_BELOW_CUT_MIN_KV_BYTES = 16, 64 << 20
LIST_MIN_KV_BYTES, LIST_MAX_BATCH = 128 << 20, 1024


def problem_label(p: Dict) -> str:
    if "new" in p:
        lay = "contig" if p.get("page") is None else f"page{p['page']}"
        return f"{p['hq']}/{p['hkv']} d{p['d']} B{p['batch']} L{p['kv_len']} n{p['new']} {lay}" + (
            " " + p["kv_dtype"] if p.get("kv_dtype") else "")
    return f"{p['hq']}/{p['hkv']} d{p['d']} S{p['sq']} B{p['batch']} {'causal' if p['causal'] else 'full'}"


def expected_kernels(engine: str, p: Dict) -> Dict:
    """{"serves": False, "why": ...} when the pinned engine must decline the problem (NotImplementedError),
    else {"serves": True, "form": ..., "all": [substrings each some kernel name must contain],
    "forbid": [substrings no kernel name may contain]}."""
    decode = "new" in p
    d, fp8 = p["d"], p.get("kv_dtype") in ("f8e4m3", "fp8")
    page = p.get("page")
    if engine in ("sm90", "sm90-split", "sm90-rows"):
        if not decode or not 1 <= p["new"] <= SM90_MAX_NEW_TOKENS:
            return {"serves": False, "why": "decode-only engine (1..16 new tokens per sequence)"}
        if d not in SM90_DECODE_HEAD_DIMS:
            return {"serves": False, "why": f"head dim {d}"}
        # Pages of a multiple of 8 but not of 64 keys: 16-bit caches only (sm90_engine.cu
        # pages_fit_packed_rows; DECODE_SM90.md section 22).
        small = page is not None and page % 64 != 0
        packable = (not fp8 or d == PACKED_FP8_HEAD_DIM) and (not small or (not fp8 and page % 8 == 0))
        if engine == "sm90-rows":
            if not packable:
                return {"serves": False, "why": "sm90-rows: fp8 at head dim 128 only, fp8 pages of a multiple of 64 "
                                                "keys, 16-bit pages of a multiple of 8"}
            packed = True
        else:
            rows = (p["hq"] // p["hkv"]) * p["new"]
            need = PACKED_MIN_ROWS_FP8 if fp8 else PACKED_MIN_ROWS[d]
            # The host's K/V bound: the longest length in whole pages, K and V, 16-bit.
            max_k = -(-p["kv_len"] // page) * page if page else p["kv_len"]
            kv_bytes = 2 * p["batch"] * max_k * p["hkv"] * d * 2
            if small and d == 128 and kv_bytes >= SMALL_PAGES_SWAP_AB_MIN_KV_BYTES:
                # decode_traits.h packed_decode_min_rows_small_pages: swap-AB keeps exactly 32 rows
                # once the bound reaches 192 MiB.
                need += 1
            packed = packable and rows >= need
            if (packable and not packed and not fp8 and not small and d in (64, 256)
                    and rows >= PACKED_BELOW_CUT_MIN_ROWS and kv_bytes >= PACKED_BELOW_CUT_MIN_KV_BYTES):
                # Below the cut (sm90_engine.cu plan_call): packed unless swap-AB's work list runs. The
                # suite always passes cache lengths, so the list can run where the K/V bound and the batch
                # allow it; its plan (the wave band) is not mirrored here: there either form is accepted.
                if kv_bytes < LIST_MIN_KV_BYTES or not 2 <= p["batch"] <= LIST_MAX_BATCH:
                    packed = True
                else:
                    return {"serves": True, "form": "swap-AB with the work list, or packed rows (below the cut)",
                            "all": ["sm90_engine::sm90_"], "forbid": PEER_KERNELS + CUDA_KERNELS}
        forbid = PEER_KERNELS + CUDA_KERNELS
        if packed:
            want = [SM90_PREFILL] + ([COMBINE] if p.get("splits") else [])
            return {"serves": True, "form": "packed rows (sm90_prefill_kernel, packed-decode mode)", "all": want,
                    "forbid": forbid + [SM90_DECODE]}
        want = [SM90_DECODE] + ([COMBINE] if p.get("splits") and engine == "sm90-split" else [])
        form = "swap-AB (sm90_decode_kernel)" + (", workspace + combine" if engine == "sm90-split" and p.get("splits")
                                                 else "")
        return {"serves": True, "form": form, "all": want, "forbid": forbid + [SM90_PREFILL]}
    if engine == "sm90-prefill":
        q = p["new"] if decode else p["sq"]
        if q <= SM90_MAX_NEW_TOKENS:
            return {"serves": False, "why": "prefill engine: <= 16 query tokens per sequence is a decode step"}
        if page is not None or fp8 or d not in (64, 128, 256):
            return {"serves": False, "why": "paged, fp8 or head dim"}
        # The persistent form (sm90_prefill_engine.cu choose_persistent): head dim 128, batched Q and K/V
        # without a window, full attention or causal with Sq - Sk < 128 (both switches on, the defaults);
        # the plain grid for the rest.
        persistent = (d == 128 and p.get("kind") == "batched" and p.get("window") is None
                      and (not p["causal"] or p["sq"] - p.get("sk", p["sq"]) < 128))
        k, other = (SM90_PREFILL_PERSISTENT, SM90_PREFILL) if persistent else (SM90_PREFILL, SM90_PREFILL_PERSISTENT)
        return {"serves": True, "form": k.split("::")[1], "all": [k],
                "forbid": PEER_KERNELS + CUDA_KERNELS + [SM90_DECODE, COMBINE, other]}
    if engine == "cuda":
        dec = (decode and 1 <= p["new"] * (p["hq"] // p["hkv"]) <= CUDA_DECODE_MAX_PACKED_ROWS
               and d in (64, 128, 256))
        k = CUDA_DECODE if dec else "cuda_engine::attention_tile_kernel"
        form = "decode_* (decode, work list, D 256 split-V)" if dec else k.split("::")[1]
        return {"serves": True, "form": form, "all": [k], "forbid": PEER_KERNELS + ["sm90_engine::"]}
    # an engine this file does not know: it must at least launch one of groupattn's kernels
    return {"serves": True, "form": "unknown engine: any groupattn kernel", "all": ["groupattn::"],
            "forbid": PEER_KERNELS}


def kernels_verdict(names: List[str], expect: Dict) -> bool:
    """Every `all` substring in some kernel name, no `forbid` substring in any (case-insensitive)."""
    low = [x.lower() for x in names]
    return bool(names) and all(any(w.lower() in x for x in low) for w in expect["all"]) and not any(
        f.lower() in x for f in expect["forbid"] for x in low)


def engine_status(verification: Optional[Dict], engine: str) -> Dict:
    """How one suite's verification (data["verification"][suite]) judged one contender:
    {"state": "verified" | "not verified" | "not applicable" | "not checked", "why": str}.
    Reads both forms: checks with "engine"/"problem" fields (one per problem), and the older one
    check per contender keyed by its name (problem not recorded)."""
    if not verification:
        return {"state": "not checked", "why": "no verification in this file"}
    if "error" in verification and len(verification) == 1:
        return {"state": "not verified", "why": "verification failed: " + str(verification["error"])[:200]}
    checks = [r for r in verification.values() if isinstance(r, dict) and r.get("engine") == engine]
    if not checks:
        r = verification.get(engine)
        if not isinstance(r, dict):
            return {"state": "not checked", "why": "no check for it"}
        if "names" in r:
            return ({"state": "verified", "why": "its kernels (older form of the check: problem not recorded)"}
                    if r.get("verified")
                    else {"state": "not verified", "why": "unexpected kernels: " + ", ".join(r["names"][:3])})
        return {"state": "not verified", "why": str(r.get("error") or r.get("skipped"))[:200]}
    ran = [r for r in checks if r.get("expect", {}).get("serves", True)]
    bad = [r for r in checks if not r.get("verified")]
    if bad:
        return {"state": "not verified",
                "why": "; ".join(f"{r.get('problem')}: {r.get('why') or r.get('error') or 'unexpected kernels'}"
                                 for r in bad)[:300]}
    if not ran:
        return {"state": "not applicable", "why": "declines every verification problem of the suite, as expected"}
    return {"state": "verified", "why": "on " + ", ".join(f"{r.get('problem')}" for r in ran)}
