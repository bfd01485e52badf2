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
    prof = cProfile.Profile()
    prof.enable()
    loop(args.calls)
    prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
