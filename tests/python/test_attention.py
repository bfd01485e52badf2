"""CPU tier: groupattn.attention / attention_with_kvcache on numpy arrays (the fp64 reference
engine) against a numpy fp64 oracle; strides, errors, engines."""

import numpy as np
import pytest

import groupattn
from numpy_ref import attention_ref

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-30)


def batched_ref(q, k, v, **kw):
    outs, lses = zip(*(attention_ref(q[b], k[b], v[b], **kw) for b in range(q.shape[0])))
    return np.stack(outs), np.stack(lses)  # [B, Sq, Hq, Dv], [B, Hq, Sq]


def check_close(out, lse, ref_out, ref_lse, tol=1e-5):
    assert np.all(np.isfinite(out))
    assert rel_err(out, ref_out) < tol
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-5)


@pytest.mark.parametrize("hq,hkv", [(8, 2), (12, 4), (8, 1), (4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_batched_gqa_matches_numpy(hq, hkv, causal):
    q, k, v = rand(2, 5, hq, 64), rand(2, 9, hkv, 64), rand(2, 9, hkv, 32)
    out, lse = groupattn.attention(q, k, v, causal=causal)
    assert out.shape == (2, 5, hq, 32) and out.dtype == np.float32
    assert lse.shape == (2, hq, 5) and lse.dtype == np.float32
    check_close(out, lse, *batched_ref(q, k, v, causal=causal))


def test_causal_rows_without_keys_give_zero_and_neg_inf():
    q, k, v = rand(1, 6, 2, 32), rand(1, 3, 1, 32), rand(1, 3, 1, 32)  # Sq > Sk: 3 rows see nothing
    out, lse = groupattn.attention(q, k, v, causal=True)
    ref_out, ref_lse = batched_ref(q, k, v, causal=True)
    check_close(out, lse, ref_out, ref_lse)
    assert np.all(out[0, :3] == 0) and np.all(np.isneginf(lse[0, :, :3]))


def test_window_softcap_scale():
    q, k, v = rand(1, 7, 4, 64), rand(1, 11, 2, 64), rand(1, 11, 2, 64)
    kw = dict(causal=True, window=(3, 0), softcap=5.0, scale=0.3)
    out, lse = groupattn.attention(q, k, v, **kw)
    check_close(out, lse, *batched_ref(q, k, v, **kw))


def test_varlen_with_empty_sequence():
    lens_q, lens_k = [3, 0, 5], [4, 2, 5]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = rand(cu_q[-1], 4, 32), rand(cu_k[-1], 2, 32), rand(cu_k[-1], 2, 32)
    out, lse = groupattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    assert out.shape == q.shape and lse.shape == (4, cu_q[-1])
    for b in range(3):
        sl_q, sl_k = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ro, rl = attention_ref(q[sl_q], k[sl_k], v[sl_k], causal=True)
        check_close(out[sl_q], lse[:, sl_q], ro, rl)


def test_out_argument_is_written_and_returned():
    q, k, v = rand(1, 4, 2, 32), rand(1, 4, 2, 32), rand(1, 4, 2, 32)
    out = np.full(q.shape, np.nan, np.float32)
    got, lse = groupattn.attention(q, k, v, out=out, return_lse=False)
    assert got is out and lse is None
    assert rel_err(out, batched_ref(q, k, v)[0]) < 1e-5


def test_engine_pinning_and_listing():
    names = [e["name"] for e in groupattn.engines()["attention"]]
    assert "reference" in names
    assert "reference" in [e["name"] for e in groupattn.engines()["kda"]]
    q = rand(1, 2, 2, 32)
    out, _ = groupattn.attention(q, q, q, engine="reference")
    assert np.all(np.isfinite(out))
    with pytest.raises(ValueError, match="unknown engine 'no-such-engine'.*reference"):
        groupattn.attention(q, q, q, engine="no-such-engine")


# --- strides: passed through, never made contiguous -------------------------------------------


def test_strided_views_match_contiguous_copies():
    # q as a transposed [B, H, S, D] buffer, k/v as slices of a packed [B, S, 2, Hkv, D] kv buffer.
    q_bhsd = rand(2, 4, 6, 64)
    q = q_bhsd.transpose(0, 2, 1, 3)
    kv = rand(2, 8, 2, 2, 64)
    k, v = kv[:, :, 0], kv[:, :, 1]
    assert not q.flags.c_contiguous and not k.flags.c_contiguous and q.strides[-1] == 4
    out, lse = groupattn.attention(q, k, v, causal=True)
    out_c, lse_c = groupattn.attention(*(np.ascontiguousarray(x) for x in (q, k, v)), causal=True)
    np.testing.assert_array_equal(out, out_c)
    np.testing.assert_array_equal(lse, lse_c)


def test_strided_out_is_written_in_place():
    q = rand(1, 3, 2, 32)
    big = np.full((1, 3, 2, 64), np.nan, np.float32)
    out = big[..., :32]  # a view: rows of 64, first 32 used
    groupattn.attention(q, q, q, out=out)
    assert np.all(np.isnan(big[..., 32:])), "neighbours of the output view were touched"
    assert rel_err(out, batched_ref(q, q, q)[0]) < 1e-5


def test_last_dim_strided_view_raises_with_stride():
    q = rand(1, 4, 2, 64)[..., ::2]  # last dim stride 2
    k = rand(1, 4, 2, 32)
    with pytest.raises(ValueError, match=r"q: .*stride"):
        groupattn.attention(q, k, k)


# --- decode against a KV cache ------------------------------------------------------------------


def test_kvcache_batched_and_paged_match_numpy():
    b, sq, hq, hkv, d, sk_max, page = 3, 2, 8, 2, 64, 12, 4
    lens = np.array([5, 12, 2], np.int32)
    q = rand(b, sq, hq, d)
    k_cache, v_cache = rand(b, sk_max, hkv, d), rand(b, sk_max, hkv, d)
    out, lse = groupattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True)
    assert out.shape == q.shape and lse.shape == (b, hq, sq)
    for i in range(b):
        ro, rl = attention_ref(q[i], k_cache[i, :lens[i]], v_cache[i, :lens[i]], causal=True)
        check_close(out[i], lse[i], ro, rl)

    # The same cache paged: shuffled pages and spare pages in the pool.
    pages_per_seq = sk_max // page
    num_pages = b * pages_per_seq + 3
    perm = RNG.permutation(num_pages)[: b * pages_per_seq]
    block_table = perm.reshape(b, pages_per_seq).astype(np.int32)
    k_pages, v_pages = rand(num_pages, page, hkv, d), rand(num_pages, page, hkv, d)
    for i in range(b):
        for j in range(pages_per_seq):
            k_pages[block_table[i, j]] = k_cache[i, j * page:(j + 1) * page]
            v_pages[block_table[i, j]] = v_cache[i, j * page:(j + 1) * page]
    out_p, lse_p = groupattn.attention_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens,
                                                    block_table=block_table, causal=True)
    np.testing.assert_allclose(out_p, out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse_p, lse, rtol=1e-6, atol=1e-6)


def test_kvcache_int_seqlens_and_splits():
    q, kc, vc = rand(2, 1, 4, 32), rand(2, 9, 1, 32), rand(2, 9, 1, 32)
    ref, ref_lse = groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=np.array([7, 7], np.int32))
    for splits in (1, 3, 0):
        out, lse = groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=7, num_splits=splits)
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(lse, ref_lse, rtol=1e-6, atol=1e-6)


def test_paged_without_seqlens_names_cache_seqlens():
    q, pages = rand(1, 1, 2, 32), rand(4, 4, 2, 32)
    with pytest.raises(ValueError, match="cache_seqlens"):
        groupattn.attention_with_kvcache(q, pages, pages, block_table=np.zeros((1, 2), np.int32))


# --- errors carry the library's message ----------------------------------------------------------


def test_head_ratio_error():
    q, k = rand(1, 4, 6, 32), rand(1, 4, 4, 32)
    with pytest.raises(ValueError, match="Hq = 6 is not a multiple of Hkv = 4"):
        groupattn.attention(q, k, k)


def test_bad_shape_errors():
    with pytest.raises(ValueError, match="q: rank 2"):
        groupattn.attention(rand(4, 32), rand(1, 4, 2, 32), rand(1, 4, 2, 32))
    q, k = rand(1, 4, 2, 32), rand(1, 4, 2, 64)  # D differs between q and k
    with pytest.raises(ValueError, match="k"):
        groupattn.attention(q, k, k)


def test_bad_dtype_errors_name_accepted_values():
    q = rand(1, 4, 2, 32)
    with pytest.raises(ValueError, match=r"q: dtype f64 not supported \(accepted: bf16, f16, f32\)"):
        groupattn.attention(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64))
    with pytest.raises(ValueError, match=r"q: dtype complex64 not supported \(accepted: .*bfloat16"):
        groupattn.attention(q.astype(np.complex64), q, q)
    with pytest.raises(ValueError, match="k: dtype f16 differs from q's f32"):
        groupattn.attention(q, q.astype(np.float16), q)


def test_non_tensor_input_raises_type_error():
    with pytest.raises(TypeError, match="numpy.ndarray, torch.Tensor"):
        groupattn.attention([[1.0]], None, None)


def test_float16_and_bfloat16():
    q, k, v = rand(1, 5, 4, 64), rand(1, 6, 2, 64), rand(1, 6, 2, 64)
    ref_out, ref_lse = batched_ref(q, k, v, causal=True)
    out, lse = groupattn.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), causal=True)
    assert out.dtype == np.float16 and rel_err(out, ref_out) < 2e-3
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    out, lse = groupattn.attention(*bf, causal=True)
    assert out.dtype == ml_dtypes.bfloat16 and rel_err(out.astype(np.float32), ref_out) < 1e-2


# --- fp8 KV cache (issue 7): float8_e4m3fn caches with k_descale / v_descale -------------------


def test_fp8_kvcache_matches_numpy_on_dequantized_values():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b, sq, hq, hkv, d, sk = 2, 3, 8, 2, 32, 11
    q = rand(b, sq, hq, d).astype(ml_dtypes.bfloat16)
    k8 = (2 * rand(b, sk, hkv, d)).astype(ml_dtypes.float8_e4m3fn)
    v8 = (2 * rand(b, sk, hkv, d)).astype(ml_dtypes.float8_e4m3fn)
    k_descale = RNG.uniform(0.25, 1.0, (b, hkv)).astype(np.float32)
    v_descale = RNG.uniform(0.25, 1.0, (b, hkv)).astype(np.float32)
    out, lse = groupattn.attention_with_kvcache(q, k8, v8, cache_seqlens=sk, causal=True,
                                                k_descale=k_descale, v_descale=v_descale)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == q.shape
    qf = q.astype(np.float64)
    kf = k8.astype(np.float64) * k_descale[:, None, :, None]
    vf = v8.astype(np.float64) * v_descale[:, None, :, None]
    for i in range(b):
        ro, rl = attention_ref(qf[i], kf[i], vf[i], causal=True)
        assert rel_err(out[i].astype(np.float32), ro) < 1e-2
        np.testing.assert_allclose(lse[i], rl, atol=1e-5)


def test_fp8_kvcache_errors_name_the_argument():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = rand(1, 1, 4, 32).astype(ml_dtypes.bfloat16)
    k8 = rand(1, 6, 2, 32).astype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match="k_scale: required with f8e4m3 k/v"):
        groupattn.attention_with_kvcache(q, k8, k8, cache_seqlens=6)
    s = np.ones((1, 2), np.float32)
    with pytest.raises(ValueError, match="q: dtype f32 with an f8e4m3 KV cache"):
        groupattn.attention_with_kvcache(q.astype(np.float32), k8, k8, cache_seqlens=6, k_descale=s,
                                         v_descale=s)
    with pytest.raises(ValueError, match="kv_scale_per_page: set on a K/V cache that is not paged"):
        groupattn.attention_with_kvcache(q, k8, k8, cache_seqlens=6, k_descale=s, v_descale=s,
                                         descale_per_page=True)


def test_kvcache_without_lse_and_with_out_allocates_nothing_else():
    q, kc, vc = rand(2, 1, 4, 32), rand(2, 9, 1, 32), rand(2, 9, 1, 32)
    ref, _ = groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=7)
    out = np.full_like(q, np.nan)
    got, lse = groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=7, out=out, return_lse=False)
    assert lse is None and got is out
    np.testing.assert_array_equal(out, ref)
