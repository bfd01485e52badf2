"""CPU tier: groupattn.chunk_kda / fused_recurrent_kda on numpy arrays against a numpy fp64
per-token recurrence."""

import numpy as np
import pytest

import groupattn
from numpy_ref import kda_gate, kda_ref

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def rel_rms(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return np.sqrt(np.mean((x - ref) ** 2) / max(np.mean(ref ** 2), 1e-60))


def problem(b=2, t=7, h=2, hv=4, kd=32, vd=32):
    q, k = rand(b, t, h, kd), rand(b, t, h, kd)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # a stable delta rule for the raw-g cases
    v = rand(b, t, hv, vd)
    g = (-np.abs(rand(b, t, hv, kd)) * 0.3).astype(np.float32)  # log decay <= 0
    beta = RNG.uniform(0.1, 0.9, (b, t, hv)).astype(np.float32)
    return q, k, v, g, beta


@pytest.mark.parametrize("fn", [groupattn.chunk_kda, groupattn.fused_recurrent_kda])
def test_log_decay_with_initial_state(fn):
    q, k, v, g, beta = problem()
    s0 = rand(2, 4, 32, 32) * 0.1  # [N, HV, V, K]
    o, final = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, state_v_first=True)
    assert o.shape == v.shape and o.dtype == np.float32 and final.shape == (2, 4, 32, 32)
    for b in range(2):
        ro, rs = kda_ref(q[b], k[b], v[b], g[b], beta[b], s0=s0[b])
        assert rel_rms(o[b], ro) < 1e-5 and rel_rms(final[b], rs) < 1e-5


def test_no_final_state_unless_asked():
    q, k, v, g, beta = problem(b=1)
    o, final = groupattn.chunk_kda(q, k, v, g, beta)
    assert final is None
    assert rel_rms(o[0], kda_ref(q[0], k[0], v[0], g[0], beta[0])[0]) < 1e-5


def test_default_state_layout_is_fla_k_first():
    # fla's default (state_v_first=False): [N, HV, K, V]; visible when K != V.
    q, k, v, g, beta = problem(b=1, kd=32, vd=64)
    _, final = groupattn.chunk_kda(q, k, v, g, beta, output_final_state=True)
    assert final.shape == (1, 4, 32, 64)
    _, final = groupattn.fused_recurrent_kda(q, k, v, g, beta, output_final_state=True)
    assert final.shape == (1, 4, 32, 64)


def test_state_k_first_is_the_transpose():
    q, k, v, g, beta = problem(b=1, kd=32, vd=64)
    s0 = rand(1, 4, 64, 32) * 0.1
    o_v, s_v = groupattn.chunk_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True, state_v_first=True)
    o_k, s_k = groupattn.chunk_kda(q, k, v, g, beta, initial_state=np.ascontiguousarray(s0.swapaxes(2, 3)),
                                   output_final_state=True, state_v_first=False)
    assert s_k.shape == (1, 4, 32, 64)
    np.testing.assert_allclose(o_k, o_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s_k, s_v.swapaxes(2, 3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_gate_in_kernel_l2norm_beta_sigmoid(lower_bound):
    q, k, v, g, beta = problem(b=1)
    graw = rand(1, 7, 4, 32)
    A_log = rand(4) * 0.5
    dt_bias = rand(4, 32) * 0.5
    blogit = rand(1, 7, 4)
    o, final = groupattn.chunk_kda(q, k, v, graw, blogit, initial_state=None, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                   use_beta_sigmoid_in_kernel=True, lower_bound=lower_bound,
                                   A_log=A_log, dt_bias=dt_bias, scale=0.25, state_v_first=True)
    geff = kda_gate(graw[0].astype(np.float64), A_log=A_log.astype(np.float64),
                    dt_bias=dt_bias.astype(np.float64), lower_bound=lower_bound)
    ro, rs = kda_ref(q[0], k[0], v[0], geff, 1 / (1 + np.exp(-blogit[0].astype(np.float64))), scale=0.25,
                     l2norm=True)
    assert rel_rms(o[0], ro) < 1e-5 and rel_rms(final[0], rs) < 1e-5


def test_varlen_cu_seqlens():
    q, k, v, g, beta = problem(b=1, t=11)
    cu = np.array([0, 4, 4, 11], np.int32)  # includes an empty sequence
    s0 = rand(3, 4, 32, 32) * 0.1
    o, final = groupattn.chunk_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, state_v_first=True)
    assert final.shape == (3, 4, 32, 32)
    for n in range(3):
        sl = slice(cu[n], cu[n + 1])
        ro, rs = kda_ref(q[0, sl], k[0, sl], v[0, sl], g[0, sl], beta[0, sl], s0=s0[n])
        if cu[n + 1] > cu[n]:
            assert rel_rms(o[0, sl], ro) < 1e-5
        assert rel_rms(final[n], rs) < 1e-5


def test_state_pool_updated_in_place():
    q, k, v, g, beta = problem(b=3, t=1)  # one decode step for 3 sequences
    pool = rand(6, 4, 32, 32) * 0.1
    before = pool.copy()
    idx = np.array([4, 0, 2], np.int32)
    o, final = groupattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx, state_v_first=True)
    assert final is pool
    for n in range(3):
        ro, rs = kda_ref(q[n], k[n], v[n], g[n], beta[n], s0=before[idx[n]])
        assert rel_rms(o[n], ro) < 1e-5 and rel_rms(pool[idx[n]], rs) < 1e-5
    for untouched in (1, 3, 5):
        np.testing.assert_array_equal(pool[untouched], before[untouched])


def test_strided_inputs_match_contiguous():
    q, k, v, g, beta = problem(b=1)
    qk = np.stack([q, k], axis=3)  # [B, T, H, 2, K]: q and k interleaved per head
    qs, ks = qk[:, :, :, 0], qk[:, :, :, 1]
    assert not qs.flags.c_contiguous
    o_s, _ = groupattn.chunk_kda(qs, ks, v, g, beta)
    o_c, _ = groupattn.chunk_kda(q, k, v, g, beta)
    np.testing.assert_array_equal(o_s, o_c)
    with pytest.raises(ValueError, match="stride"):
        groupattn.chunk_kda(rand(1, 7, 2, 64)[..., ::2], k, v, g, beta)


def test_kda_errors():
    q, k, v, g, beta = problem(b=1, h=3, hv=4)
    with pytest.raises(ValueError, match="HV = 4 is not a multiple of H = 3"):
        groupattn.chunk_kda(q, k, v, g, beta)
    q, k, v, g, beta = problem(b=1)
    with pytest.raises(ValueError, match="g"):
        groupattn.chunk_kda(q, k, v, g.astype(np.float16), beta)
    with pytest.raises(ValueError, match="A_log"):
        groupattn.chunk_kda(q, k, v, g, beta, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="ssm_state_indices"):
        groupattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=rand(1, 4, 32, 32),
                                      ssm_state_indices=np.array([5], np.int32))
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        groupattn.chunk_kda(q, k, v, g, beta, engine="nope")
