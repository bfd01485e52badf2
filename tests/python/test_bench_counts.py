"""CPU tests of bench/counts.py against hand-computed values (no torch, no GPU): the FLOP and byte
counts behind every TFLOP/s and GB/s figure the benchmark prints."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import counts as c  # noqa: E402


def test_non_causal_pairs():
    assert c.visible_pairs(3, 5) == 15


def test_causal_square():
    # rows see 1, 2, 3 keys
    assert c.visible_pairs(3, 3, causal=True) == 6


def test_causal_fewer_queries_than_keys_is_bottom_right():
    # Sq=2, Sk=4: queries sit at key positions 2 and 3 -> 3 + 4 keys
    assert c.visible_pairs(2, 4, causal=True) == 7
    # top-left alignment would give 1 + 2 = 3: make sure we do not count that
    assert c.visible_pairs(2, 4, causal=True) != 3


def test_causal_more_queries_than_keys():
    # Sq=4, Sk=2: positions -2, -1, 0, 1 -> 0 + 0 + 1 + 2 keys
    assert c.visible_pairs(4, 2, causal=True) == 3


def test_causal_window():
    # Sq=Sk=5, window left 2: rows see 1, 2, 3, 3, 3 keys
    assert c.visible_pairs(5, 5, causal=True, window=(2, -1)) == 12
    # Sq=4, Sk=6, causal, window left 1: rows at 2..5 see 2 keys each
    assert c.visible_pairs(4, 6, causal=True, window=(1, -1)) == 8


def test_window_right_non_causal():
    # Sq=Sk=4, window (0, 1): row i sees i, i+1 (clipped at Sk-1): 2 + 2 + 2 + 1
    assert c.visible_pairs(4, 4, causal=False, window=(0, 1)) == 7


def test_causal_closed_form_matches_row_loop():
    for sq in range(1, 9):
        for sk in range(1, 9):
            loop = sum(max(0, min(sk - 1, sk - sq + i) + 1) for i in range(sq))
            assert c.visible_pairs(sq, sk, causal=True) == loop


def test_flops_causal_sq_ne_sk():
    # B=1, Sq=2, Sk=4, causal, Hq=2, D=8: 7 pairs * 4 * D * Hq
    p = c.batched(1, 2, 4, heads_q=2, heads_kv=1, head_dim=8, causal=True)
    assert c.attention_flops(p) == 4 * 7 * 8 * 2 == 448
    # batch scales linearly
    p3 = c.batched(3, 2, 4, heads_q=2, heads_kv=1, head_dim=8, causal=True)
    assert c.attention_flops(p3) == 3 * 448
    # D != Dv: 2*D + 2*Dv per pair
    pv = c.batched(1, 2, 4, heads_q=1, heads_kv=1, head_dim=8, head_dim_v=16, causal=True)
    assert c.attention_flops(pv) == 7 * (2 * 8 + 2 * 16)


def test_prefill_bytes_batched():
    # B=2, Sq=Sk=4, Hq=4, Hkv=2, D=8, bf16, causal: every key is seen by the last query
    p = c.batched(2, 4, 4, heads_q=4, heads_kv=2, head_dim=8, causal=True)
    b = c.attention_bytes(p)
    assert b["q"] == 2 * 4 * 4 * 8 * 2 == 512
    assert b["k"] == 2 * 4 * 2 * 8 * 2 == 256
    assert b["v"] == 256
    assert b["o"] == 512
    assert b["lse"] == 2 * 4 * 4 * 4 == 128
    assert b["total"] == 512 + 256 + 256 + 512 + 128


def test_paged_decode_bytes_count_whole_pages():
    # one new token, 100 keys in the cache, page 16 -> 7 pages = 112 key rows read
    p = c.varlen([1], [100], heads_q=8, heads_kv=2, head_dim=128, page_size=16)
    assert c.keys_read(p) == 112
    b = c.attention_bytes(p)
    assert b["k"] == 112 * 2 * 128 * 2 == 57344
    assert b["v"] == 57344
    assert b["q"] == 1 * 8 * 128 * 2 == 2048
    assert b["o"] == 2048
    assert b["lse"] == 8 * 4 == 32
    assert b["total"] == 118816
    # contiguous: exactly the 100 rows
    pc = c.varlen([1], [100], heads_q=8, heads_kv=2, head_dim=128)
    assert c.keys_read(pc) == 100
    # page 64 -> 2 pages = 128 rows
    assert c.keys_read(c.varlen([1], [100], 8, 2, 128, page_size=64)) == 128
    # exactly full pages: 64 keys, page 16 -> 4 pages, no extra
    assert c.keys_read(c.varlen([1], [64], 8, 2, 128, page_size=16)) == 64


def test_paged_window_reads_only_pages_in_the_window():
    # one query at position 99, window left 20 -> keys 79..99 -> pages 4, 5, 6 of 16 -> 48 rows
    p = c.varlen([1], [100], heads_q=8, heads_kv=2, head_dim=128, page_size=16, window=(20, -1), causal=True)
    assert c.visible_key_span(1, 100, True, (20, -1)) == (79, 100)
    assert c.keys_read(p) == 48


def test_paged_mixed_lengths():
    # two sequences of 17 and 33 keys, page 16 -> 2 + 3 pages
    p = c.varlen([1, 1], [17, 33], heads_q=4, heads_kv=1, head_dim=64, page_size=16)
    assert c.keys_read(p) == (2 + 3) * 16


def test_varlen_causal():
    # seq 0: Sq=3, Sk=5 -> positions 2, 3, 4 -> 3 + 4 + 5 = 12; seq 1: Sq=1, Sk=4 -> 4
    p = c.varlen([3, 1], [5, 4], heads_q=4, heads_kv=2, head_dim=64, causal=True)
    assert c.attention_flops(p) == 4 * (12 + 4) * 64 * 4 == 16384
    b = c.attention_bytes(p)
    assert b["q"] == 4 * 4 * 64 * 2 == 2048
    assert b["k"] == (5 + 4) * 2 * 64 * 2 == 2304
    assert b["v"] == 2304
    assert b["o"] == 2048
    assert b["lse"] == 4 * 4 * 4 == 64
    assert b["total"] == 8768


def test_multi_token_decode_bytes_equal_one_token_kv():
    # 4 new tokens vs 1 against a 1024-key cache: K/V bytes the same (the floor of speculative decode)
    one = c.attention_bytes(c.varlen([1], [1024], 64, 8, 128, causal=True))
    four = c.attention_bytes(c.varlen([4], [1024], 64, 8, 128, causal=True))
    assert one["k"] == four["k"] and one["v"] == four["v"]
    assert four["q"] == 4 * one["q"]


def test_empty_and_fully_masked():
    assert c.visible_pairs(0, 5) == 0
    assert c.visible_pairs(3, 0) == 0
    assert c.visible_key_span(2, 4, True, (-1, -1)) == (0, 4)
    # window (0, 0) on Sq=1 > ... still sees itself
    assert c.visible_pairs(1, 1, causal=True, window=(0, 0)) == 1


def test_kda_bytes():
    b = c.kda_bytes(total_t=10, heads=2, heads_v=4, k=8, v=16, num_seqs=1, dtype="bf16")
    assert b["q"] == 10 * 2 * 8 * 2
    assert b["v"] == 10 * 4 * 16 * 2
    assert b["g"] == 10 * 4 * 8 * 4
    assert b["beta"] == 10 * 4 * 4
    assert b["state_in"] == b["state_out"] == 4 * 8 * 16 * 4
    assert b["total"] == sum(v for k, v in b.items() if k != "total")


def test_unknown_dtype_raises():
    with pytest.raises(KeyError):
        c.attention_bytes(c.batched(1, 1, 1, 1, 1, 8, dtype="int3"))


def test_fp8_kv_bytes_count_one_byte_per_element():
    # an f8e4m3 cache under bf16 queries: K/V at 1 byte, Q/O at 2, LSE fp32
    bf = c.attention_bytes(c.varlen([1], [1024], 64, 8, 128, causal=True))
    f8 = c.attention_bytes(c.varlen([1], [1024], 64, 8, 128, causal=True, kv_dtype="f8e4m3"))
    assert f8["k"] == 1024 * 8 * 128 == bf["k"] // 2
    assert f8["v"] == bf["v"] // 2
    assert (f8["q"], f8["o"], f8["lse"]) == (bf["q"], bf["o"], bf["lse"])
