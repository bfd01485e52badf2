"""CPU tests of the benchmark's pure-Python parts: the shape matrices (as BENCHMARKING.md lists
them), compare.py's band logic, and report.py's rendering of a results file. The results data here
is synthetic test input written to a temporary folder, never to docs/."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402
import matrices  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402  (imports no torch at module level)


def test_full_matrices_match_benchmarking_md():
    pf = matrices.prefill()
    assert len([c for c in pf if c["kind"] == "batched"]) == 6 * 3 * 2 == 36
    assert any(c["kind"] == "varlen" for c in pf)
    dec = matrices.decode()
    assert len([c for c in dec if not c["mixed"]]) == 5 * 5 * 5 * 3
    assert {c["page"] for c in dec} == {None, 16, 64}
    assert {c["new"] for c in dec} == {1, 2, 4, 8, 16}
    assert any(c["mixed"] for c in dec)
    kd = matrices.kda()
    assert len(kd) == 10 * 2
    assert {(c["T"], c["H"], c["N"]) for c in kd} == set(matrices.KDA_TNH)


def test_quick_is_a_small_subset():
    for name, fn in matrices.SUITES.items():
        full, quick = fn(False), fn(True)
        assert 0 < len(quick) <= 8, name
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
