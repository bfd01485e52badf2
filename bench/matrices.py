"""The benchmark shape matrices, exactly as ../shared/BENCHMARKING.md lists them ("Shape matrices"),
and the --quick subsets. Pure Python: tests/python/test_bench_matrices.py checks them on CPU."""

from __future__ import annotations

import random
from typing import Dict, List

# heads q/kv and head dim
PREFILL_HEADS = [(32, 8, 128), (64, 8, 128), (16, 16, 128), (32, 8, 64), (16, 2, 256), (32, 1, 128)]
PREFILL_SB = [(2048, 8), (8192, 2), (16384, 1)]
# "Plus varlen batches of mixed lengths": fixed lengths (sum 32768), same heads as the first row.
PREFILL_VARLEN_LENGTHS = [8192, 512, 4096, 1024, 6144, 256, 3072, 2048, 7424]

DECODE_HEADS = [(64, 8, 128), (32, 8, 128), (8, 1, 128), (16, 1, 64), (32, 2, 256)]
DECODE_BL = [(1, 8192), (1, 131072), (32, 4096), (32, 32768), (128, 8192)]
DECODE_NEW = [1, 2, 4, 8, 16]
DECODE_LAYOUTS = [None, 16, 64]  # page size; None = contiguous cache
# "mixed per-sequence lengths": B sequences whose fill levels are drawn (fixed seed) from [1, L].
DECODE_MIXED = [(32, 32768), (128, 8192)]
# fp8 e4m3 K/V (issue 7: bytes counted as fp8, time against our bf16 row of the same shape, which the
# bf16 matrix above holds): (hq, hkv, d, batch, kv_len, new tokens, page size or None)
DECODE_FP8 = [(64, 8, 128, 1, 131072, 1, None), (64, 8, 128, 1, 131072, 8, None), (64, 8, 128, 1, 131072, 16, None),
              (64, 8, 128, 32, 32768, 1, None), (64, 8, 128, 32, 32768, 1, 64), (64, 8, 128, 128, 8192, 1, None),
              (8, 1, 128, 1, 131072, 1, None), (64, 8, 128, 1, 8192, 1, None)]

KDA_TNH = [(1024, 4, 1), (2048, 12, 1), (4096, 16, 1), (8192, 16, 1), (8192, 24, 1), (8192, 32, 1),
           (16384, 16, 8), (16384, 64, 1), (32768, 32, 4), (4096, 64, 16)]
KDA_GATES = ["lower_bound", "softplus"]
KDA_DIM = 128


def mixed_lengths(batch: int, max_len: int, seed: int = 0) -> List[int]:
    rng = random.Random(seed * 1000003 + batch * 7919 + max_len)
    lens = [rng.randint(1, max_len) for _ in range(batch)]
    lens[0] = max_len  # the longest sequence always present: max_seqlen is L
    return lens


def prefill(quick: bool = False) -> List[Dict]:
    cfgs = []
    for hq, hkv, d in PREFILL_HEADS:
        for s, b in PREFILL_SB:
            for causal in (False, True):
                cfgs.append(dict(kind="batched", hq=hq, hkv=hkv, d=d, batch=b, sq=s, sk=s, causal=causal))
    for causal in (False, True):
        cfgs.append(dict(kind="varlen", hq=32, hkv=8, d=128, lengths=list(PREFILL_VARLEN_LENGTHS), causal=causal))
    if quick:
        keep = [
            dict(kind="batched", hq=32, hkv=8, d=128, batch=8, sq=2048, sk=2048, causal=False),
            dict(kind="batched", hq=32, hkv=8, d=128, batch=8, sq=2048, sk=2048, causal=True),
            dict(kind="batched", hq=16, hkv=2, d=256, batch=1, sq=16384, sk=16384, causal=True),
        ]
        cfgs = [c for c in cfgs if c in keep] + [cfgs[-1]]
    return cfgs


def decode(quick: bool = False) -> List[Dict]:
    cfgs = []
    for hq, hkv, d in DECODE_HEADS:
        for b, L in DECODE_BL:
            for n in DECODE_NEW:
                for page in DECODE_LAYOUTS:
                    cfgs.append(dict(hq=hq, hkv=hkv, d=d, batch=b, kv_len=L, new=n, page=page, mixed=False))
    for hq, hkv, d in DECODE_HEADS[:1] + DECODE_HEADS[2:3]:
        for b, L in DECODE_MIXED:
            for page in DECODE_LAYOUTS:
                cfgs.append(dict(hq=hq, hkv=hkv, d=d, batch=b, kv_len=L, new=1, page=page, mixed=True))
    for hq, hkv, d, b, L, n, page in DECODE_FP8:
        cfgs.append(dict(hq=hq, hkv=hkv, d=d, batch=b, kv_len=L, new=n, page=page, mixed=False, kv_dtype="f8e4m3"))
    if quick:
        keep = [
            dict(hq=64, hkv=8, d=128, batch=1, kv_len=131072, new=1, page=None, mixed=False),
            dict(hq=8, hkv=1, d=128, batch=1, kv_len=8192, new=1, page=None, mixed=False),
            dict(hq=64, hkv=8, d=128, batch=32, kv_len=32768, new=1, page=None, mixed=False),
            dict(hq=64, hkv=8, d=128, batch=1, kv_len=131072, new=4, page=None, mixed=False),
            dict(hq=64, hkv=8, d=128, batch=1, kv_len=131072, new=1, page=16, mixed=False),
            dict(hq=64, hkv=8, d=128, batch=32, kv_len=32768, new=1, page=64, mixed=True),
            dict(hq=64, hkv=8, d=128, batch=1, kv_len=131072, new=16, page=None, mixed=False),
            dict(hq=32, hkv=8, d=128, batch=32, kv_len=4096, new=4, page=64, mixed=False),
            dict(hq=64, hkv=8, d=128, batch=1, kv_len=131072, new=1, page=None, mixed=False, kv_dtype="f8e4m3"),
        ]
        cfgs = [c for c in cfgs if c in keep]
    return cfgs


def kda(quick: bool = False) -> List[Dict]:
    cfgs = [dict(T=t, H=h, N=n, K=KDA_DIM, V=KDA_DIM, gate=g) for t, h, n in KDA_TNH for g in KDA_GATES]
    if quick:
        keep = [dict(T=1024, H=4, N=1, K=128, V=128, gate="lower_bound"),
                dict(T=8192, H=16, N=1, K=128, V=128, gate="lower_bound"),
                dict(T=4096, H=16, N=1, K=128, V=128, gate="softplus")]
        cfgs = [c for c in cfgs if c in keep]
    return cfgs


def kda_seqlens(T: int, N: int) -> List[int]:
    """Equal-length sequences packed along T (T divisible by N in every listed shape)."""
    assert T % N == 0
    return [T // N] * N


def label(suite: str, cfg: Dict) -> str:
    """The configuration's name in results files, progress lines and reports."""
    if suite == "prefill":
        if cfg["kind"] == "varlen":
            return f"{cfg['hq']}/{cfg['hkv']} d{cfg['d']} varlen{len(cfg['lengths'])} {'causal' if cfg['causal'] else 'full'}"
        return f"{cfg['hq']}/{cfg['hkv']} d{cfg['d']} S{cfg['sq']} B{cfg['batch']} {'causal' if cfg['causal'] else 'full'}"
    if suite == "decode":
        lay = "contig" if cfg["page"] is None else f"page{cfg['page']}"
        return (f"{cfg['hq']}/{cfg['hkv']} d{cfg['d']} B{cfg['batch']} L{cfg['kv_len']} n{cfg['new']} {lay}"
                + (" mixed" if cfg["mixed"] else "") + (" fp8" if cfg.get("kv_dtype") else ""))
    return f"T{cfg['T']} H{cfg['H']} N{cfg['N']} {cfg['gate']}"


SUITES = {"prefill": prefill, "decode": decode, "kda": kda}
