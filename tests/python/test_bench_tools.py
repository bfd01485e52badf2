"""CPU tests of the benchmark's pure-Python parts: the shape matrices (as BENCHMARKING.md lists
them), compare.py's band logic, and report.py's rendering of a results file. The results data here
is synthetic test input written to a temporary folder, never to docs/."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402
import context_probe  # noqa: E402  (imports no torch at module level)
import matrices  # noqa: E402
import pins  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402  (imports no torch at module level)


def test_full_matrices_match_benchmarking_md():
    pf = matrices.prefill()
    assert len([c for c in pf if c["kind"] == "batched"]) == 6 * 3 * 2 == 36
    assert any(c["kind"] == "varlen" for c in pf)
    dec = matrices.decode()
    bf16 = [c for c in dec if not c.get("kv_dtype")]
    assert len([c for c in bf16 if not c["mixed"]]) == 5 * 5 * 5 * 3
    fp8 = [c for c in dec if c.get("kv_dtype") == "f8e4m3"]
    assert len(fp8) == len(matrices.DECODE_FP8)
    # every fp8 row has its bf16 twin (issue 7 compares the two)
    for c in fp8:
        assert {k: v for k, v in c.items() if k != "kv_dtype"} in bf16, c
    assert {c["page"] for c in dec} == {None, 16, 64}
    assert {c["new"] for c in dec} == {1, 2, 4, 8, 16}
    assert any(c["mixed"] for c in dec)
    kd = matrices.kda()
    assert len(kd) == 10 * 2
    assert {(c["T"], c["H"], c["N"]) for c in kd} == set(matrices.KDA_TNH)


def test_quick_is_a_small_subset():
    for name, fn in matrices.SUITES.items():
        full, quick = fn(False), fn(True)
        assert 0 < len(quick) <= 10, name
        for c in quick:
            assert c in full, (name, c)


def test_mixed_lengths_deterministic_and_bounded():
    a = matrices.mixed_lengths(32, 32768)
    assert a == matrices.mixed_lengths(32, 32768)
    assert max(a) == 32768 and min(a) >= 1 and len(a) == 32


def test_budget_spec():
    assert run._budgets(None, ["prefill"]) == {}
    assert run._budgets("2", ["prefill", "kda"]) == {"prefill": 2.0, "kda": 2.0}
    assert run._budgets("prefill=1.5,kda=3", ["prefill", "kda"]) == {"prefill": 1.5, "kda": 3.0}


def test_resume_keeps_measured_entries_of_the_same_tree():
    cfg_a, cfg_b, cfg_c = ({"T": 1024, "H": 4, "N": 1, "gate": g} for g in ("lower_bound", "softplus", "x"))
    prior = {"quick": False, "provenance": {"tree_digest": "d1", "git_commit": "abc"},
             "suites": {"kda": {"entries": [
                 {"config": cfg_a, "timing": {"fla": {}}},
                 {"config": cfg_b, "timing": {"fla": {}}, "errors": {"_config": "RuntimeError"}},
                 {"config": cfg_c}]}}}
    run.check_resumable(prior, "d1", False, "prior.json")
    kept = run.resumable_entries(prior, "kda")
    assert list(kept) == [json.dumps(cfg_a, sort_keys=True)]  # failed and unmeasured ones run again
    assert run.resumable_entries(prior, "prefill") == {}
    for digest, quick, word in (("d2", False, "source tree d1"), ("d1", True, "quick=False")):
        try:
            run.check_resumable(prior, digest, quick, "prior.json")
        except ValueError as e:
            assert "prior.json" in str(e) and word in str(e) and "accepted" in str(e), str(e)
        else:
            raise AssertionError("a results file of another tree or --quick setting was accepted")


def _ms(med, lo, hi):
    return {"median": med, "p20": lo, "p80": hi, "min": lo, "max": hi, "n": 5}


def test_classify_bands():
    a = _ms(1.0, 0.98, 1.02)
    assert compare.classify(a, _ms(1.05, 1.03, 1.06)) == "regression"
    assert compare.classify(a, _ms(1.02, 1.01, 1.03)) == "same"  # overlapping bands
    assert compare.classify(a, _ms(0.9, 0.89, 0.91)) == "improvement"


def _results(t_ours, t_peer):
    entry = {
        "label": "32/8 d128 S2048 B8 full",
        "config": {"kind": "batched"},
        "flops": 10 ** 12,
        "timing": {
            "groupattn:cuda": {"ms": t_ours, "mode": "graph", "tflops": 1.0 / t_ours["median"],
                               "tflops_p20": 1.0 / t_ours["p80"], "tflops_p80": 1.0 / t_ours["p20"]},
            "groupattn:cuda#ctrl": {"ms": t_ours, "mode": "graph", "tflops": 1.0, "tflops_p20": 1.0, "tflops_p80": 1.0},
            "sdpa-cudnn": {"ms": t_peer, "mode": "graph", "tflops": 1.0 / t_peer["median"],
                           "tflops_p20": 1.0, "tflops_p80": 1.0},
        },
        "control": {"of": "groupattn:cuda", "ratio": _ms(1.0, 0.99, 1.01)},
        "correctness": {"groupattn:cuda": {"ok": True, "max_rel_err": 1e-3},
                        "sdpa-cudnn": {"ok": True, "max_rel_err": 1e-3},
                        "sdpa-flash": {"ok": False, "max_rel_err": 0.5}},
        "skipped": {"sdpa-flash": "failed the fp64 correctness check: not timed"},
        "errors": {},
    }
    return {"provenance": {"gpu": "test", "git_commit": "abc", "command": "python bench/run.py --suite prefill"},
            "ceilings": {"gemm": {"tflops": _ms(2.0, 1.9, 2.1), "what": "test"},
                         "hbm": {"gbps": _ms(100, 99, 101), "ceiling_method": "torch_sum", "buffer_bytes": 2 ** 32,
                                 "methods": {"torch_sum": {"gbps": _ms(100, 99, 101)}}}},
            "protocol": {"rounds": 5}, "verification": {},
            "suites": {"prefill": {"engines": ["cuda"], "entries": [entry], "not_run": []}}}


def test_compare_end_to_end(tmp_path):
    a = _results(_ms(1.0, 0.98, 1.02), _ms(1.2, 1.1, 1.3))
    b = _results(_ms(1.2, 1.15, 1.25), _ms(1.2, 1.1, 1.3))
    rows = compare.compare(a, b)
    verdicts = {r["contender"]: r["verdict"] for r in rows}
    assert verdicts == {"groupattn:cuda": "regression", "sdpa-cudnn": "same"}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    assert compare.main([str(pa), str(pb)]) == 1
    assert compare.main([str(pa), str(pa)]) == 0


def test_report_renders_tables_and_failures(tmp_path):
    data = _results(_ms(1.0, 0.98, 1.02), _ms(1.2, 1.1, 1.3))
    text = report.render(data, "bench/results/x.json", plots={})
    assert "## Prefill" in text
    assert "sdpa-cudnn / ours" in text
    assert "1.20" in text  # peer time / our time
    assert "failed the fp64 check" in text
    assert "FAIL" in text
    src = tmp_path / "r.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "PERFORMANCE.md"
    assert report.main([str(src), "--out", str(out), "--plots-dir", str(tmp_path / "perf")]) == 0
    assert out.read_text().startswith("# groupattn performance")


def test_ratio_inside_control_band_is_marked():
    data = _results(_ms(1.0, 0.98, 1.02), _ms(1.005, 0.99, 1.02))
    e = data["suites"]["prefill"]["entries"][0]
    assert report.ratio_cell(e, "groupattn:cuda", "sdpa-cudnn").startswith("~")


def test_tree_digest_tracks_sources(tmp_path):
    import treedigest

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.cu").write_text("x")
    (tmp_path / "src" / "__pycache__").mkdir()
    (tmp_path / "src" / "__pycache__" / "a.pyc").write_text("junk")
    d1 = treedigest.tree_digest(str(tmp_path))
    assert d1 == treedigest.tree_digest(str(tmp_path))
    (tmp_path / "src" / "__pycache__" / "b.pyc").write_text("more junk")
    assert treedigest.tree_digest(str(tmp_path)) == d1  # caches do not count
    (tmp_path / "src" / "a.cu").write_text("y")
    assert treedigest.tree_digest(str(tmp_path)) != d1


def test_run_tree_digest_needs_no_torch(capsys):
    assert run.main(["--tree-digest"]) == 0
    assert len(capsys.readouterr().out.strip()) == 16


def test_run_list_needs_no_torch(capsys):
    assert run.main(["--suite", "decode", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"decode: {len(matrices.decode())} configurations"
    # single-token decode comes first under a time budget
    assert " n1 " in out[1] + " "


# ---------------------------------------------------------------------------------------------
# report.py's goal summary and bench/pins.py's engine verification (synthetic results, CPU)


def _t(med, spread=0.01):
    return {"ms": _ms(med, med * (1 - spread), med * (1 + spread)), "mode": "graph"}


def _entry(cfg, label, times, ctrl=(0.99, 1.01), **extra):
    e = {"config": cfg, "label": label, "timing": {n: _t(m) for n, m in times.items()},
         "control": {"ratio": _ms(1.0, ctrl[0], ctrl[1])}, "skipped": {}, "errors": {}, "correctness": {}}
    e.update(extra)
    return e


def _pf(hq, causal):
    return dict(kind="batched", hq=hq, hkv=8, d=128, batch=8, sq=2048, sk=2048, causal=causal)


def test_prefill_goals_geomean_partial_and_noise():
    ours, cu = "groupattn:sm90-prefill", "groupattn:cuda"
    entries = [
        _entry(_pf(32, False), "a", {ours: 1.0, cu: 2.0, "sdpa-cudnn": 1.21, "sdpa-flash": 2.0}),
        _entry(_pf(32, True), "b", {ours: 1.0, cu: 2.0, "sdpa-cudnn": 0.8, "sdpa-flash": 2.0}),
        # 0.895: below 0.9 but inside a +-2% control band -> "~"
        _entry(_pf(64, False), "c", {ours: 1.0, cu: 2.0, "sdpa-cudnn": 0.895, "sdpa-flash": 2.0}, ctrl=(0.98, 1.02)),
    ]
    data = {"suites": {"prefill": {"engines": ["sm90-prefill", "cuda"], "entries": entries,
                                   "not_run": [{"config": _pf(64, True), "label": "d", "reason": "budget"}]}}}
    g = report.prefill_goals(data)
    gm = (1.21 * 0.8 * 0.895) ** (1 / 3)
    assert g[0]["measured"].startswith(f"{gm:.2f}") and g[0]["verdict"] == "fail"
    assert (g[0]["run"], g[0]["of"]) == (3, 4)
    assert report._coverage_cell(g[0]) == "partial: 3 of 4"
    assert report._verdict_cell(g[0]) == "**fail** on the 3 run"
    assert g[1]["verdict"] == "fail"  # b at 0.8 is a clear fail
    assert "`b` 0.80" in g[1]["details"][0] and "`c` ~0.90" in g[1]["details"][0]
    # FA2 / cuda is exactly 1.0, the threshold, inside the control band: no verdict
    assert g[2]["measured"].startswith("1.00") and g[2]["verdict"] == "~"


def test_verdict_inside_the_noise_is_no_result():
    assert report.verdict(1.0, 0.98, 1.02, 1.0) == "~"
    assert report.verdict(1.1, 1.08, 1.12, 1.0) == "pass"
    assert report.verdict(0.9, 0.88, 0.92, 1.0) == "fail"
    assert report.verdict(1.3, 1.28, 1.32, 1.25, higher=False) == "fail"
    assert report.verdict(1.2, 1.18, 1.22, 1.25, higher=False) == "pass"


def _dec(hq, hkv, b, L, n, page=None, mixed=False):
    return dict(hq=hq, hkv=hkv, d=128, batch=b, kv_len=L, new=n, page=page, mixed=mixed)


def _dec_entry(cfg, label, times, peers=None):
    kv, total = report.decode_kv_bytes(cfg)
    e = _entry(cfg, label, dict(times, **(peers or {})))
    for n, t in e["timing"].items():
        t["gbps"] = total / (t["ms"]["median"] * 1e-3) / 1e9
        t["gbps_p20"] = total / (t["ms"]["p80"] * 1e-3) / 1e9
        t["gbps_p80"] = total / (t["ms"]["p20"] * 1e-3) / 1e9
    e["kv_bytes"] = kv
    return e


def test_decode_kv_bytes_match_counts():
    # 64/8 d128 B32 x 32K: K + V = 2 x 32 x 32768 x 8 x 128 x 2 bytes = 4 GiB
    assert report.decode_kv_bytes(_dec(64, 8, 32, 32768, 1))[0] == 1 << 32
    # paged 64, one sequence of 100 keys: 2 whole pages read
    assert report.decode_kv_bytes(_dec(8, 1, 1, 100, 1, page=64))[0] == 2 * 128 * 1 * 128 * 2
    # fp8 K/V: half the bytes
    assert report.decode_kv_bytes(dict(_dec(64, 8, 32, 32768, 1), kv_dtype="f8e4m3"))[0] == 1 << 31


def test_decode_goals():
    s90, cu = "groupattn:sm90", "groupattn:cuda"
    big, small = _dec(64, 8, 32, 32768, 1), _dec(8, 1, 1, 8192, 1)
    tb = report.decode_kv_bytes(big)[1] / 4.6e9  # ms at 4600 GB/s
    entries = [
        _dec_entry(big, "big1", {s90: tb, cu: tb * 1.2}, {"sdpa-cudnn": tb}),
        _dec_entry(dict(big, new=8), "big8", {s90: tb * 1.3, cu: tb * 1.2 * 1.2}, {"sdpa-cudnn": tb * 10}),
        _dec_entry(small, "small1", {s90: 0.010, cu: 0.02}, {"sdpa-cudnn": 0.009}),
        _dec_entry(dict(small, new=4), "small4", {s90: 0.011, cu: 0.03}, {"sdpa-cudnn": 0.9}),
    ]
    data = {"ceilings": {"hbm": {"gbps": _ms(4600, 4599, 4601)}},
            "suites": {"decode": {"engines": ["sm90", "cuda"], "entries": entries,
                                  "not_run": [{"config": dict(big, new=16), "label": "big16", "reason": "budget"}]}}}
    g = {x["goal"][:40]: x for x in report.decode_goals(data)}
    gb = next(x for k, x in g.items() if k.startswith("effective GB/s >= 4500"))
    assert gb["verdict"] == "pass" and (gb["run"], gb["of"]) == (1, 1)
    same = next(x for k, x in g.items() if k.startswith("the same for 2-16"))
    assert same["verdict"] == "fail" and (same["run"], same["of"]) == (1, 2)
    cud = next(x for k, x in g.items() if k.startswith("geomean of cuDNN time / ours >= 1.5"))
    assert cud["measured"].startswith(f"{((0.009 / 0.010) * (0.9 / 0.011)) ** 0.5:.2f}") and cud["verdict"] == "pass"
    one = next(x for k, x in g.items() if k.startswith("beside it"))
    assert one["measured"].startswith("0.90") and one["verdict"] == "fail" and (one["run"], one["of"]) == (1, 1)
    tok = next(x for k, x in g.items() if k.startswith("2-16 new tokens within 1.25x"))
    assert tok["verdict"] == "fail" and (tok["run"], tok["of"]) == (2, 3)  # big8 at 1.3x; big16 not run
    assert "`big8` 1.30x" in tok["details"][0]
    hb = next(x for x in g.values() if x["issue"] == "10" and "HBM" in x["goal"])
    assert hb["verdict"] == "pass"  # 4600 / 1.2 = 83% of the ceiling
    t10 = next(x for x in g.values() if x["issue"] == "10" and "4-16" in x["goal"])
    assert t10["verdict"] == "fail" and t10["measured"].startswith("worst 1.50x")  # small4 0.03 / 0.02
    f8 = next(x for x in g.values() if x["issue"] == "7")
    assert f8["measured"] == "no fp8 configurations in this run" and f8["of"] == 0


def test_kda_goals_per_gate_and_wall():
    ours = "groupattn:cuda"
    cfg = lambda t, gate: dict(T=t, H=16, N=1, K=128, V=128, gate=gate)  # noqa: E731
    entries = [
        _entry(cfg(4096, "lower_bound"), "lb", {ours: 1.0, "fla": 2.5},
               wall_ms={ours: _ms(1.0, 0.95, 1.05), "fla": _ms(2.0, 1.9, 2.1)}),
        _entry(cfg(4096, "softplus"), "sp", {ours: 1.0, "fla": 1.5},
               wall_ms={ours: _ms(1.0, 0.95, 1.05), "fla": _ms(1.02, 0.97, 1.07)}),
    ]
    data = {"suites": {"kda": {"engines": ["cuda"], "entries": entries, "not_run": []}}}
    g = report.kda_goals(data)
    assert [x["verdict"] for x in g[:2]] == ["pass", "fail"]
    assert g[2]["verdict"] == "~"  # sp's wall times overlap: no verdict


def test_report_counts_configurations_an_unfinished_run_never_listed():
    # A run killed between checkpoints leaves entries but no stop record (no wall_seconds, no not_run):
    # the matrix's other configurations count as not run; a finished run's file is taken as it is.
    cfg = dict(T=4096, H=16, N=1, K=128, V=128, gate="lower_bound")
    e = _entry(cfg, "T4096 H16 N1 lower_bound", {"groupattn:cuda": 1.0, "fla": 0.9})
    data = {"provenance": {"clocks_after": None},
            "suites": {"kda": {"engines": ["cuda"], "entries": [e], "not_run": []}}}
    rows = report._matrix(data, "kda")
    assert len(rows) == len(matrices.kda()) == 20
    assert sum(1 for _, entry, _ in rows if entry is None) == 19
    assert matrices.label("kda", cfg) in {lab for _, _, lab in rows}
    data["provenance"]["wall_seconds"] = 10.0
    assert len(report._matrix(data, "kda")) == 1


def test_pins_expectations():
    dec1 = dict(hq=8, hkv=1, d=128, batch=1, kv_len=8192, new=1, page=None, splits=True)
    dec8 = dict(dec1, hq=64, hkv=8, new=8)
    p16 = dict(dec1, page=16)
    pf = dict(kind="batched", hq=8, hkv=2, d=128, batch=2, sq=256, sk=256, causal=True)
    e = pins.expected_kernels
    assert e("sm90", dec1)["all"] == [pins.SM90_DECODE]  # 8 rows: swap-AB; may reduce in a cluster
    assert e("sm90-split", dec1)["all"] == [pins.SM90_DECODE, pins.COMBINE]
    assert e("sm90-rows", dec1)["all"] == [pins.SM90_PREFILL, pins.COMBINE]  # packed at any group
    assert e("sm90", dec8)["all"][0] == pins.SM90_PREFILL  # 64 packed rows
    assert e("sm90", dict(dec8, new=4, hq=64))["all"][0] == pins.SM90_PREFILL  # 32 rows
    assert e("sm90", dict(dec8, new=4, kv_dtype="f8e4m3"))["all"][0] == pins.SM90_DECODE  # fp8 needs 33
    assert e("sm90", dict(dec8, new=5, kv_dtype="f8e4m3"))["all"][0] == pins.SM90_PREFILL  # 40 rows
    assert e("sm90", dict(dec8, page=16))["all"][0] == pins.SM90_PREFILL  # 16-bit small pages: 64 rows packed
    big = dict(dec8, page=16, new=4, batch=32, kv_len=32768)  # 32 rows, K/V bound 4 GiB >= 192 MiB
    assert e("sm90", big)["all"][0] == pins.SM90_DECODE and e("sm90", dict(big, batch=1))["all"][0] == pins.SM90_PREFILL
    assert e("sm90", dict(dec8, page=16, kv_dtype="f8e4m3"))["all"][0] == pins.SM90_DECODE  # fp8: pages of 64
    assert e("sm90-rows", p16)["all"] == [pins.SM90_PREFILL, pins.COMBINE] and e("sm90-rows", dict(dec1, d=64))["serves"]
    assert not e("sm90-rows", dict(p16, kv_dtype="f8e4m3"))["serves"] and not e("sm90-rows", dict(dec1, page=12))["serves"]
    assert not e("sm90-rows", dict(dec1, d=64, kv_dtype="f8e4m3"))["serves"]  # fp8: head dim 128 only
    d64, d256 = dict(dec1, hq=16, d=64), dict(dec1, hq=32, hkv=2, d=256)  # groups 16
    assert e("sm90", dict(d64, new=2))["all"][0] == pins.SM90_PREFILL  # 32 rows >= 17
    assert e("sm90", d64)["all"][0] == pins.SM90_DECODE  # one token: 16 rows
    assert e("sm90", dict(d256, new=2))["all"][0] == pins.SM90_DECODE  # 32 rows < 33
    assert e("sm90", dict(d256, new=3))["all"][0] == pins.SM90_PREFILL  # 48 rows
    # Below the cut from 64 MiB of K/V: packed where swap-AB's work list cannot run (K/V bound < 128 MiB,
    # or one sequence), either form where it can.
    assert e("sm90", dict(d64, batch=8, kv_len=32768))["all"][0] == pins.SM90_PREFILL  # 64 MiB
    assert e("sm90", dict(d256, kv_len=131072))["all"][0] == pins.SM90_PREFILL  # B1: no list
    assert e("sm90", dict(d256, kv_len=131072, page=64))["all"][0] == pins.SM90_PREFILL
    assert e("sm90", dict(d256, kv_len=131072, page=16))["all"][0] == pins.SM90_DECODE  # small pages: swap-AB
    assert e("sm90", dict(d256, new=2, batch=8, kv_len=4096))["all"][0] == pins.SM90_PREFILL  # 32 rows, 64 MiB
    assert e("sm90", dict(d64, batch=32, kv_len=4096))["all"][0] == pins.SM90_DECODE  # 32 MiB
    assert e("sm90", dict(d64, batch=128, kv_len=8192))["all"] == ["sm90_engine::sm90_"]  # 256 MiB: the list may run
    assert e("sm90", dict(dec1, batch=32, kv_len=32768))["all"][0] == pins.SM90_DECODE  # d 128 keeps swap-AB
    assert not e("sm90-prefill", dec8)["serves"] and e("sm90-prefill", pf)["all"] == [pins.SM90_PREFILL_PERSISTENT]
    assert e("sm90-prefill", dict(pf, sq=384))["all"] == [pins.SM90_PREFILL]  # causal, Sq - Sk = 128: the plain grid
    full = dict(pf, causal=False)  # D 128 batched: the persistent form; D 256 and varlen: the plain grid
    assert e("sm90-prefill", full)["all"] == [pins.SM90_PREFILL_PERSISTENT] and pins.SM90_PREFILL in e("sm90-prefill", full)["forbid"]
    assert e("sm90-prefill", dict(full, d=256))["all"] == [pins.SM90_PREFILL]
    assert e("sm90-prefill", dict(full, kind="varlen"))["all"] == [pins.SM90_PREFILL]
    names = ["void groupattn::sm90_engine::sm90_prefill_persistent_kernel<groupattn::sm90_engine::PrefillTraits<>>(...)"]
    assert pins.kernels_verdict(names, e("sm90-prefill", full)) and not pins.kernels_verdict(names, e("sm90-prefill", dict(pf, d=256)))
    for x in ("sm90", "sm90-rows", "sm90-split"):
        assert not e(x, pf)["serves"]
    assert e("cuda", dec1)["all"] == [pins.CUDA_DECODE]
    for name in ("decode_kernel", "decode_list_kernel", "decode_split_v_kernel", "decode_split_v_list_kernel"):
        assert pins.kernels_verdict(["void groupattn::cuda_engine::%s<T>(p)" % name], e("cuda", dec1))
    assert e("cuda", dec8)["all"] == ["cuda_engine::attention_tile_kernel"]
    names = ["void groupattn::sm90_engine::sm90_decode_kernel<T>(p)",
             "void groupattn::cuda_engine::combine_kernel<C>(p)"]
    assert pins.kernels_verdict(names, e("sm90-split", dec1))
    assert pins.kernels_verdict(names, e("sm90", dec1))  # the cluster mode fell back to the workspace: allowed
    assert not pins.kernels_verdict(names[:1], e("sm90-split", dec1))  # no combine: not the workspace mode
    assert not pins.kernels_verdict(names, e("sm90-rows", dec1))  # swap-AB where packed rows were pinned
    assert not pins.kernels_verdict(names + ["cudnn_generated_fort_native_sdpa"], e("sm90-split", dec1))
    assert not pins.kernels_verdict([], e("cuda", dec1))


def test_engine_status_and_report_flags_timed_unverified():
    new = {"groupattn:sm90-rows [a]": {"engine": "groupattn:sm90-rows", "problem": "a", "names": ["x"],
                                       "verified": True, "expect": {"serves": True}},
           "groupattn:sm90-rows [b]": {"engine": "groupattn:sm90-rows", "problem": "b", "verified": True,
                                       "not_applicable": "pages", "expect": {"serves": False}},
           "groupattn:sm90-prefill [a]": {"engine": "groupattn:sm90-prefill", "problem": "a", "verified": True,
                                          "not_applicable": "decode", "expect": {"serves": False}},
           "groupattn:cuda [a]": {"engine": "groupattn:cuda", "problem": "a", "names": ["y"], "verified": False,
                                  "why": "unexpected", "expect": {"serves": True}}}
    assert pins.engine_status(new, "groupattn:sm90-rows") == {"state": "verified", "why": "on a"}
    assert pins.engine_status(new, "groupattn:sm90-prefill")["state"] == "not applicable"
    assert pins.engine_status(new, "groupattn:cuda")["state"] == "not verified"
    old = {"groupattn:sm90-rows": {"error": "NotImplementedError: decode only (got 256)"},
           "groupattn:sm90": {"names": ["k"], "verified": True}}
    assert pins.engine_status(old, "groupattn:sm90-rows")["state"] == "not verified"
    assert pins.engine_status(old, "groupattn:sm90")["state"] == "verified"
    e = _dec_entry(_dec(8, 1, 1, 8192, 1), "x", {"groupattn:sm90": 0.01, "groupattn:sm90-rows": 0.01})
    data = {"verification": {"decode": old},
            "suites": {"decode": {"engines": ["sm90", "sm90-rows"], "entries": [e], "not_run": []}}}
    text = "\n".join(report.engines_verified_section(data))
    assert "| decode | groupattn:sm90-rows | 1 of 1 | **timed but not verified** |" in text


# ---------------------------------------------------------------------------------------------
# context_probe.py's pure parts, and the harness's round order (needs torch to import)


def test_context_probe_parsing_and_predecessors(capsys):
    assert context_probe.parse_configs("64/8:1:16384, 16/16:4:2048") == [
        {"hq": 64, "hkv": 8, "batch": 1, "sq": 16384}, {"hq": 16, "hkv": 16, "batch": 4, "sq": 2048}]
    for bad in ("64/8:1", "64/7:1:16", "a/b:1:2", ""):
        try:
            context_probe.parse_configs(bad)
            raise AssertionError(bad)
        except ValueError:
            pass
    assert context_probe.parse_contexts("suite, gap") == ["suite", "gap"]
    import pytest

    with pytest.raises(SystemExit) as e:  # argument errors stop before torch is imported
        context_probe.main(["--contexts", "nope"])
    assert e.value.code == 2
    order = ["ours", "cuda", "cudnn", "flash", "ours#ctrl"]
    assert context_probe.predecessors(order) == {"ours": "ours#ctrl", "cuda": "ours", "cudnn": "cuda",
                                                 "flash": "cudnn", "ours#ctrl": "flash"}


def test_context_probe_samples_and_windows():
    p = context_probe.parse_smi_line
    assert p("1755, 612.40, 61, 0x0000000000000004") == (1755.0, 612.4, 61.0, 4)
    assert p("1980, 85.1, 40") == (1980.0, 85.1, 40.0, None)
    assert p("[N/A], 85.1, 40") is None and p("") is None
    samples = [(0.5, 1900.0, 400.0, 50.0, 0), (1.5, 1700.0, 700.0, 60.0, 4), (2.5, 1600.0, 700.0, 62.0, 4),
               (3.5, 1980.0, 100.0, 45.0, None)]
    st = context_probe.window_stats(samples, [(2.0, 3.0), (1.0, 2.0)])
    assert st["n"] == 2 and st["mhz"] == 1650.0 and st["watts"] == 700.0 and st["pcap"] == 1.0
    st = context_probe.window_stats(samples, [(0.0, 1.0), (3.0, 4.0)])
    assert st["n"] == 2 and st["pcap"] == 0.0  # the sample without reasons does not count for pcap
    assert context_probe.window_stats(samples, [(5.0, 6.0)])["n"] == 0


def test_round_order_turns_but_keeps_predecessors():
    import pytest

    pytest.importorskip("torch")
    import harness

    order = ["ours", "cuda", "cudnn", "flash", "ours#ctrl"]
    firsts = set()
    for r in range(10):
        ro = harness.round_order(order, r)
        assert sorted(ro) == sorted(order)
        firsts.add(ro[0])
        # inside a round each contender follows the one it follows in `order` (cyclically)
        pred = context_probe.predecessors(order)
        for i in range(1, len(ro)):
            assert pred[ro[i]] == ro[i - 1]
    assert firsts == set(order)


def test_shuffled_order_varies_predecessors_and_is_reproducible():
    import pytest

    pytest.importorskip("torch")
    import harness

    order = ["ours", "cuda", "cudnn", "flash", "ours#ctrl"]
    preds = set()
    for r in range(5):
        ro = harness.shuffled_order(order, r)
        assert sorted(ro) == sorted(order) and ro == harness.shuffled_order(order, r)
        preds.add(ro[ro.index("ours") - 1] if ro.index("ours") > 0 else None)
    assert len(preds) >= 3  # ours follows different contenders (or opens the round) across the rounds
    assert set(harness.ORDER_MODES) == {"turning", "shuffled", "self"}
    with pytest.raises(ValueError, match="order_mode"):
        harness.time_contenders({}, 1, 1, 1.0, None, order_mode="random")
