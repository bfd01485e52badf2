"""torch glue: runs where torch is installed (skipped otherwise). CPU torch tensors exercise the
reference engine; the CUDA cases (graph capture, torch.compile) run on the GPU tier."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import groupattn  # noqa: E402
import groupattn.nn  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def rand(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


def test_cpu_torch_matches_numpy_and_returns_torch():
    q, k, v = rand(2, 5, 8, 64), rand(2, 7, 2, 64), rand(2, 7, 2, 64)
    out, lse = groupattn.attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == q.dtype and lse.shape == (2, 8, 5)
    out_np, lse_np = groupattn.attention(q.numpy(), k.numpy(), v.numpy(), causal=True)
    np.testing.assert_array_equal(out.numpy(), out_np)
    np.testing.assert_array_equal(lse.numpy(), lse_np)


def test_custom_ops_registered_with_fake_impls():
    q, k, v = rand(1, 4, 4, 32), rand(1, 6, 2, 32), rand(1, 6, 2, 32)
    args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, None)
    torch.library.opcheck(torch.ops.groupattn.attention.default, args,
                          test_utils=("test_schema", "test_faketensor"))
    seq = torch.tensor([5], dtype=torch.int32)
    torch.library.opcheck(torch.ops.groupattn.attention_with_kvcache.default,
                          (q, k, v, seq, None, None, True, -1, -1, 0.0, 0, None),
                          test_utils=("test_schema", "test_faketensor"))
    kq = rand(1, 5, 2, 32)
    g = -rand(1, 5, 4, 32).abs()
    beta = torch.rand(1, 5, 4)
    torch.library.opcheck(torch.ops.groupattn.chunk_kda.default,
                          (kq, kq, rand(1, 5, 4, 32), g, beta, None, None, True, False, 0, False, False,
                           -5.0, None, None, True, None, None),
                          test_utils=("test_schema", "test_faketensor"))
    # fused_recurrent_kda on a state pool: the op mutates initial_state (declared in its schema).
    pool = rand(3, 4, 32, 32) * 0.1
    idx = torch.tensor([2], dtype=torch.int32)
    torch.library.opcheck(torch.ops.groupattn.fused_recurrent_kda.default,
                          (kq, kq, rand(1, 5, 4, 32), g, beta, None, pool, True, idx, False, 0, False,
                           False, -5.0, None, None, True, None, None),
                          test_utils=("test_schema", "test_faketensor"))


def test_engine_for_names_the_engine_a_call_runs():
    q, k, v = rand(1, 1, 4, 32), rand(1, 6, 2, 32), rand(1, 6, 2, 32)
    assert groupattn.attention_engine_for(q, k, v, cache_seqlens=6) == "reference"
    kq, g, beta = rand(1, 5, 2, 32), -rand(1, 5, 2, 32).abs(), torch.rand(1, 5, 2)
    assert groupattn.kda_engine_for(kq, kq, kq, g, beta) == "reference"


def test_torch_compile_traces_the_custom_ops_on_cpu():
    # aot_eager: dynamo + the fake implementations, no code generation (cheap on any machine).
    q, k, v = rand(1, 4, 4, 32), rand(1, 6, 2, 32), rand(1, 6, 2, 32)
    kq, g, beta = rand(1, 5, 2, 32), -rand(1, 5, 2, 32).abs(), torch.rand(1, 5, 2)

    def f(q, k, v, kq, g, beta):
        o, lse = groupattn.attention(q, k, v, causal=True)
        d, dlse = groupattn.attention_with_kvcache(q, k, v, cache_seqlens=6, causal=True)
        ko, st = groupattn.chunk_kda(kq, kq, kq, g, beta, output_final_state=True)
        return o * 2, lse, d, dlse, ko, st

    with torch.no_grad():
        eager = f(q, k, v, kq, g, beta)
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v, kq, g, beta)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)


def test_module_raises_without_engine_or_falls_back_loudly():
    m = groupattn.nn.GroupedQueryAttention(128, 4, 2)  # head dim 32 (the library's smallest)
    x = rand(1, 3, 128)
    with pytest.raises(NotImplementedError, match="no backward"):
        m(x)  # parameters require grad
    with torch.no_grad():
        y = m(x)
    m_fb = groupattn.nn.GroupedQueryAttention(128, 4, 2, fallback="sdpa")
    m_fb.load_state_dict(m.state_dict())
    with pytest.warns(UserWarning, match="falling back to torch SDPA"):
        y_fb = m_fb(x)
    with torch.no_grad():
        torch.testing.assert_close(y_fb.detach(), y, rtol=1e-4, atol=1e-5)


def test_module_kv_cache_decode_matches_full_prefill():
    m = groupattn.nn.GroupedQueryAttention(128, 4, 2)
    x = rand(2, 6, 128)
    with torch.no_grad():
        full = m(x)
        cache = m.new_kv_cache(2, 16)
        steps = [m(x[:, :4], kv_cache=cache)] + [m(x[:, i:i + 1], kv_cache=cache) for i in (4, 5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-5)


@cuda
def test_cuda_graph_replays_with_changed_inputs():
    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    q = rand(1, 1, 64, 128, **bf16)
    kc, vc = rand(1, 4096, 8, 128, **bf16), rand(1, 4096, 8, 128, **bf16)
    seqlens = torch.full((1,), 4096, dtype=torch.int32, device="cuda")
    pq, pk, pv = rand(2, 128, 8, 64, **bf16), rand(2, 128, 2, 64, **bf16), rand(2, 128, 2, 64, **bf16)
    kq, kk, kv = rand(1, 64, 4, 128, **bf16), rand(1, 64, 4, 128, **bf16), rand(1, 64, 4, 128, **bf16)
    g = -rand(1, 64, 4, 128, device="cuda").abs() * 0.1
    beta = torch.rand(1, 64, 4, device="cuda")
    state = rand(1, 4, 128, 128, device="cuda") * 0.1
    kda_kw = dict(initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)

    def calls():
        return (groupattn.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True),
                groupattn.attention(pq, pk, pv, causal=True),
                groupattn.chunk_kda(kq, kk, kv, g, beta, **kda_kw))

    calls()  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = calls()
    for t in (q, pq, kq, g):
        t.copy_(rand(*t.shape, dtype=t.dtype, device="cuda") * (0.1 if t is g else 1.0))
    g.copy_(-g.abs())
    seqlens.fill_(1000)
    state.mul_(0.5)
    graph.replay()
    expected = calls()
    for got, ref in zip(captured, expected):
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b)


@cuda
def test_torch_compile_of_a_small_module():
    m = groupattn.nn.GroupedQueryAttention(512, 8, 2, device="cuda", dtype=torch.bfloat16).eval()
    x = rand(2, 64, 512, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        eager = m(x)
        compiled = torch.compile(m, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager)


@cuda
def test_generic_path_reraises_the_workspace_allocators_exception():
    # _ext hands the framework's allocator to the library (RunOptions::workspace_allocator): asked
    # once, for the selected engine's workspace, and what it raises arrives as it was raised.
    from groupattn import _ext
    from groupattn._frameworks import framework_of

    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    q, kc, vc = rand(1, 1, 64, 128, **bf16), rand(1, 4096, 8, 128, **bf16), rand(1, 4096, 8, 128, **bf16)
    seqlens = torch.full((1,), 4096, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    fw = framework_of(q)
    asked = []

    def alloc(nbytes):
        asked.append(nbytes)
        raise RuntimeError("allocator says no")

    args = [fw.convert(t) for t in (q, kc, vc, out)]
    # num_splits=4: split-KV partials need a workspace -- except where sm90 reduces them inside a
    # cluster (no workspace), so on sm90 the workspace mode is pinned.
    engine = "sm90-split" if torch.cuda.get_device_capability(q.device) == (9, 0) else None
    with pytest.raises(RuntimeError, match="allocator says no"):
        _ext.attention_call(*args, None, None, None, fw.convert(seqlens), None, None, None, 0, 0, None, True, -1,
                            -1, 0.0, 4, engine, fw.stream(q), alloc, 0, None, None, False)
    assert len(asked) == 1 and asked[0] > 0
