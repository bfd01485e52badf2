"""CPU tier: the per-call path's queries and its single crossing into the extension (numpy)."""

import numpy as np
import pytest

import groupattn
from groupattn import _ext

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_attention_engine_for_names_the_engine_and_raises_as_the_call():
    q, kc, vc = rand(1, 1, 8, 64), rand(1, 16, 2, 64), rand(1, 16, 2, 64)
    assert groupattn.attention_engine_for(q, kc, vc, cache_seqlens=16) == "reference"
    assert groupattn.attention_engine_for(q, kc, vc, causal=True, engine="reference") == "reference"
    bad = np.array([16], np.int64)  # index tensors are int32: same error, same (renamed) name
    with pytest.raises(ValueError) as call_err:
        groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=bad)
    with pytest.raises(ValueError) as query_err:
        groupattn.attention_engine_for(q, kc, vc, cache_seqlens=bad)
    assert str(query_err.value) == str(call_err.value)
    assert str(call_err.value).startswith("cache_seqlens")
    with pytest.raises(ValueError, match="unknown engine 'no-such-engine'"):
        groupattn.attention_engine_for(q, kc, vc, engine="no-such-engine")


def test_kda_engine_for_names_the_engine():
    q, g, beta = rand(1, 4, 2, 32), -np.abs(rand(1, 4, 2, 32)), RNG.random((1, 4, 2)).astype(np.float32)
    assert groupattn.kda_engine_for(q, q, q, g, beta, output_final_state=True) == "reference"
    pool = np.zeros((3, 2, 32, 32), np.float32)
    idx = np.array([1], np.int32)
    assert groupattn.kda_engine_for(q, q, q, g, beta, initial_state=pool, ssm_state_indices=idx) == "reference"
    with pytest.raises(ValueError, match="initial_state: required"):
        groupattn.kda_engine_for(q, q, q, g, beta, ssm_state_indices=idx)


def test_host_calls_never_ask_for_a_workspace():
    q, k, v = rand(1, 3, 4, 32), rand(1, 5, 2, 32), rand(1, 5, 2, 32)
    out = np.empty_like(q)

    def alloc(nbytes):  # the reference engine needs no workspace: never called
        raise AssertionError("workspace requested")

    _ext.attention_call(q, k, v, out, None, None, None, None, None, None, None, 0, 0, None, True, -1,
                        -1, 0.0, 0, None, 0, alloc, 0, None, None, False)
    ref, _ = groupattn.attention(q, k, v, causal=True)
    np.testing.assert_array_equal(out, ref)
