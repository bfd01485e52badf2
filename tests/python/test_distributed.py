"""groupattn.distributed.context_parallel_attention over torch.distributed: 2 and 3 CPU processes
with the gloo backend (the reference engine), K/V sharded unevenly across the ranks, against the
single-process groupattn.attention; every rank must return the same bits. Skips without torch or
without torch.distributed / gloo."""

import socket

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bounds(n, rank, world):
    """Rank `rank`'s shard of n keys: uneven (rank 0 gets the remainder), possibly empty."""
    edges = [0] + [n * (r + 1) // world for r in range(world)]
    edges[1:-1] = [min(e + 1, n) for e in edges[1:-1]]
    return edges[rank], edges[rank + 1]


def _check_same_on_every_rank(x, world):
    got = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(got, x.contiguous())
    for g in got[1:]:
        assert torch.equal(g.view(torch.int16) if g.dtype == torch.bfloat16 else g,
                           got[0].view(torch.int16) if g.dtype == torch.bfloat16 else got[0])


def _check_close(out, lse, ref_out, ref_lse, tol):
    o, r = out.double(), ref_out.double()
    assert ((o - r).norm() / r.norm()).item() < tol
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-4


def _worker(rank, world, port):
    import groupattn
    from groupattn.distributed import context_parallel_attention

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(1234)  # the same inputs on every rank

        def rand(*shape, dtype=torch.float32):
            return torch.randn(*shape, generator=g).to(dtype)

        # 1. Batched prefill, causal Sq != Sk, GQA, window, fp32 and bf16.
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            b, sq, sk = 2, 5, 13
            q, k, v = rand(b, sq, 8, 32, dtype=dtype), rand(b, sk, 2, 32, dtype=dtype), rand(b, sk, 2, 32, dtype=dtype)
            for kw in (dict(causal=True), dict(causal=True, window=(4, 0), softcap=5.0), dict()):
                ref_out, ref_lse = groupattn.attention(q, k, v, **kw)
                lo, hi = _bounds(sk, rank, world)
                out, lse = context_parallel_attention(q, k[:, lo:hi], v[:, lo:hi], shard_offset=lo,
                                                      total_len=sk, **kw)
                assert out.shape == ref_out.shape and out.dtype == dtype and lse.shape == ref_lse.shape
                _check_close(out, lse, ref_out, ref_lse, tol)
                _check_same_on_every_rank(out, world)
                _check_same_on_every_rank(lse, world)

        # 2. Varlen Q, per-sequence shard offsets (int32 [B] tensors).
        lens_q, lens_k = [3, 1, 4], [9, 2, 6]
        cu_q = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
        q = rand(8, 4, 32)
        ks, vs = [rand(n, 2, 32) for n in lens_k], [rand(n, 2, 32) for n in lens_k]
        ref_out, ref_lse = groupattn.attention(
            q, torch.cat(ks), torch.cat(vs), causal=True, cu_seqlens_q=cu_q,
            cu_seqlens_k=torch.tensor([0, 9, 11, 17], dtype=torch.int32))
        bounds = [_bounds(n, rank, world) for n in lens_k]
        cu_k = torch.tensor([0] + list(torch.tensor([hi - lo for lo, hi in bounds]).cumsum(0)), dtype=torch.int32)
        out, lse = context_parallel_attention(
            q, torch.cat([x[lo:hi] for x, (lo, hi) in zip(ks, bounds)]),
            torch.cat([x[lo:hi] for x, (lo, hi) in zip(vs, bounds)]), causal=True, cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k, shard_offset=torch.tensor([lo for lo, _ in bounds], dtype=torch.int32),
            total_len=torch.tensor(lens_k, dtype=torch.int32))
        _check_close(out, lse, ref_out, ref_lse, 1e-5)
        _check_same_on_every_rank(out, world)

        # 3. Decode against a KV cache shard (cache_seqlens per sequence).
        seqlens = [11, 4]
        q, kc, vc = rand(2, 1, 8, 64), rand(2, 12, 2, 64), rand(2, 12, 2, 64)
        ref_out, ref_lse = groupattn.attention_with_kvcache(
            q, kc, vc, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32))
        bounds = [_bounds(n, rank, world) for n in seqlens]
        k_shard, v_shard = torch.zeros_like(kc), torch.zeros_like(vc)
        for i, (lo, hi) in enumerate(bounds):
            k_shard[i, : hi - lo], v_shard[i, : hi - lo] = kc[i, lo:hi], vc[i, lo:hi]
        out, lse = context_parallel_attention(
            q, k_shard, v_shard, cache_seqlens=torch.tensor([hi - lo for lo, hi in bounds], dtype=torch.int32),
            shard_offset=torch.tensor([lo for lo, _ in bounds], dtype=torch.int32),
            total_len=torch.tensor(seqlens, dtype=torch.int32))
        _check_close(out, lse, ref_out, ref_lse, 1e-5)
        _check_same_on_every_rank(out, world)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_context_parallel_gloo_matches_single_process(world):
    mp.spawn(_worker, args=(world, _free_port()), nprocs=world, join=True)
