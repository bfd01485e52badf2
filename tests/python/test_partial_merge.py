"""CPU tier: partial-output attention (kv_shard_offset / kv_total_len) over 1, 2 and 3 KV shards,
merged with groupattn.attention_merge, equals the whole attention (numpy fp32 inputs through the
fp64 reference engine); and the errors for bad shard tensors and bad merge shapes."""

import numpy as np
import pytest

import groupattn

RNG = np.random.default_rng(8)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-30)


def i32(*values):
    return np.array(values, np.int32)


def flat_lse(lse):
    """[B, Hq, Sq] (batched attention's lse) -> the library's [Hq, B * Sq]."""
    return lse.transpose(1, 0, 2).reshape(lse.shape[1], -1) if lse.ndim == 3 else lse


def merge_and_compare(partials, whole_out, whole_lse):
    """partials: [(out, lse)] as attention() returns them; checks the merge == the whole."""
    hq, dv = whole_out.shape[-2], whole_out.shape[-1]
    o_parts = np.stack([o.reshape(-1, hq, dv) for o, _ in partials])
    lse_parts = np.stack([flat_lse(lse) for _, lse in partials])
    out, lse = groupattn.attention_merge(o_parts, lse_parts)
    assert out.shape == o_parts.shape[1:] and out.dtype == np.float32
    assert lse.shape == lse_parts.shape[1:] and lse.dtype == np.float32
    ref_out, ref_lse = whole_out.reshape(-1, hq, dv), flat_lse(whole_lse)
    assert rel_err(out, ref_out) < 1e-6
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-5)
    assert np.all(out.reshape(-1, hq, dv)[~finite.T] == 0)  # rows without any key: O = 0
    return lse_parts


def cuts(total, shards):
    """Uneven boundaries of `shards` contiguous shards of `total` keys (first shard the largest)."""
    edges = [0] + [total * (r + 1) // shards + (1 if r + 1 < shards else 0) for r in range(shards)]
    edges[-1] = total
    return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (4, 0))])
def test_batched_prefill_shards_merge_to_whole(shards, causal, window):
    b, sq, sk, hq, hkv = 2, 6, 11, 8, 2  # causal Sq != Sk (bottom-right aligned)
    q, k, v = rand(b, sq, hq, 32), rand(b, sk, hkv, 32), rand(b, sk, hkv, 32)
    kw = dict(causal=causal, window=window, softcap=3.0)
    whole = groupattn.attention(q, k, v, **kw)
    partials = [
        groupattn.attention(q, k[:, lo:hi], v[:, lo:hi], kv_shard_offset=i32(lo, lo),
                            kv_total_len=i32(sk, sk), **kw)
        for lo, hi in cuts(sk, shards)
    ]
    lse_parts = merge_and_compare(partials, *whole)
    if causal and shards == 3:  # the last shard is masked for the first query rows
        assert np.isneginf(lse_parts[-1]).any() and np.isfinite(lse_parts[-1]).any()


def test_rows_without_any_key_merge_to_zero_and_neg_inf():
    # Sq > Sk with causal: the first Sq - Sk rows see no key in any shard.
    q, k, v = rand(1, 7, 4, 32), rand(1, 4, 2, 32), rand(1, 4, 2, 32)
    whole = groupattn.attention(q, k, v, causal=True)
    partials = [groupattn.attention(q, k[:, lo:hi], v[:, lo:hi], causal=True, kv_shard_offset=i32(lo),
                                    kv_total_len=i32(4)) for lo, hi in [(0, 2), (2, 3), (3, 4)]]
    merge_and_compare(partials, *whole)


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_varlen_prefill_shards_with_per_sequence_offsets(shards):
    lens_q, lens_k, hq, hkv = [3, 5, 1], [7, 9, 4], 6, 3
    cu_q = i32(0, *np.cumsum(lens_q))
    q = rand(int(cu_q[-1]), hq, 32)
    ks = [rand(n, hkv, 32) for n in lens_k]
    vs = [rand(n, hkv, 32) for n in lens_k]
    whole = groupattn.attention(q, np.concatenate(ks), np.concatenate(vs), causal=True,
                                cu_seqlens_q=cu_q, cu_seqlens_k=i32(0, *np.cumsum(lens_k)))
    partials = []
    for r in range(shards):
        bounds = [cuts(n, shards)[r] for n in lens_k]
        k = np.concatenate([kk[lo:hi] for kk, (lo, hi) in zip(ks, bounds)])
        v = np.concatenate([vv[lo:hi] for vv, (lo, hi) in zip(vs, bounds)])
        cu_k = i32(0, *np.cumsum([hi - lo for lo, hi in bounds]))
        partials.append(groupattn.attention(
            q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
            kv_shard_offset=i32(*[lo for lo, _ in bounds]), kv_total_len=i32(*lens_k)))
    merge_and_compare(partials, *whole)


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_batched_decode_kvcache_shards(shards):
    b, sq, hq, hkv, cap = 3, 2, 8, 2, 16
    seqlens = [13, 5, 16]
    q, kc, vc = rand(b, sq, hq, 64), rand(b, cap, hkv, 64), rand(b, cap, hkv, 64)
    whole = groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=i32(*seqlens), causal=True)
    partials = []
    for r in range(shards):
        bounds = [cuts(n, shards)[r] for n in seqlens]
        k_shard, v_shard = np.zeros_like(kc), np.zeros_like(vc)  # each sequence's shard at row 0
        for i, (lo, hi) in enumerate(bounds):
            k_shard[i, : hi - lo], v_shard[i, : hi - lo] = kc[i, lo:hi], vc[i, lo:hi]
        partials.append(groupattn.attention_with_kvcache(
            q, k_shard, v_shard, cache_seqlens=i32(*[hi - lo for lo, hi in bounds]), causal=True,
            kv_shard_offset=i32(*[lo for lo, _ in bounds]), kv_total_len=i32(*seqlens)))
    merge_and_compare(partials, *whole)


def test_merge_out_argument_batched_and_lse_optional():
    q, k, v = rand(2, 3, 4, 32), rand(2, 8, 4, 32), rand(2, 8, 4, 32)
    whole_out, _ = groupattn.attention(q, k, v)
    parts = [groupattn.attention(q, k[:, lo:hi], v[:, lo:hi], kv_shard_offset=i32(lo, lo),
                                 kv_total_len=i32(8, 8)) for lo, hi in [(0, 5), (5, 8)]]
    o_parts = np.stack([o.reshape(6, 4, 32) for o, _ in parts])
    lse_parts = np.stack([flat_lse(lse) for _, lse in parts])
    out = np.empty((2, 3, 4, 32), np.float32)
    got, lse = groupattn.attention_merge(o_parts, lse_parts, out=out, return_lse=False)
    assert got is out and lse is None
    assert rel_err(out, whole_out) < 1e-6


def test_shard_tensor_errors():
    q, k, v = rand(2, 3, 4, 32), rand(2, 5, 2, 32), rand(2, 5, 2, 32)
    with pytest.raises(ValueError, match="kv_total_len: required"):
        groupattn.attention(q, k, v, kv_shard_offset=i32(0, 0))
    with pytest.raises(ValueError, match="kv_shard_offset: required"):
        groupattn.attention(q, k, v, kv_total_len=i32(5, 5))
    with pytest.raises(ValueError, match="kv_shard_offset"):
        groupattn.attention(q, k, v, kv_shard_offset=np.zeros(2, np.int64), kv_total_len=i32(5, 5))
    with pytest.raises(ValueError, match="kv_total_len"):
        groupattn.attention(q, k, v, kv_shard_offset=i32(0, 0), kv_total_len=i32(5, 5, 5))
    with pytest.raises(ValueError, match="kv_total_len"):  # offset + Sk > total
        groupattn.attention(q, k, v, kv_shard_offset=i32(0, 3), kv_total_len=i32(5, 7))
    with pytest.raises(ValueError, match="kv_shard_offset"):  # negative offset
        groupattn.attention(q, k, v, kv_shard_offset=i32(-1, 0), kv_total_len=i32(5, 5))
    with pytest.raises(ValueError, match="kv_shard_offset"):  # the query calls validate the same
        groupattn.attention_engine_for(q, k, v, kv_shard_offset=i32(-1, 0), kv_total_len=i32(5, 5))
    assert groupattn.attention_engine_for(q, k, v, kv_shard_offset=i32(0, 0), kv_total_len=i32(5, 5))
    assert groupattn.attention_workspace_bytes(q, k, v, kv_shard_offset=i32(0, 0),
                                               kv_total_len=i32(5, 5)) == 0


def test_merge_errors():
    o, lse = rand(2, 6, 4, 16), np.zeros((2, 4, 6), np.float32)
    with pytest.raises(ValueError, match="lse_partials"):  # R mismatch
        groupattn.attention_merge(o, np.zeros((3, 4, 6), np.float32))
    with pytest.raises(ValueError, match="lse_partials"):  # total_q mismatch
        groupattn.attention_merge(o, np.zeros((2, 4, 5), np.float32))
    with pytest.raises(ValueError, match="lse_partials"):  # dtype
        groupattn.attention_merge(o, lse.astype(np.float64))
    with pytest.raises(ValueError, match="o_partials: rank 3"):
        groupattn.attention_merge(o[0], lse)
    with pytest.raises(ValueError, match="out"):  # wrong row count
        groupattn.attention_merge(o, lse, out=np.empty((5, 4, 16), np.float32))
    with pytest.raises(ValueError, match="o_partials: dtype"):  # f16 partials into an fp32 out
        groupattn.attention_merge(o.astype(np.float16), lse, out=np.empty((6, 4, 16), np.float32))
