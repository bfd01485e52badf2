"""The package imports without torch and describes its build."""

import subprocess
import sys

import groupattn


def test_import_does_not_import_torch():
    code = ("import importlib.util, sys, groupattn\n"
            "if importlib.util.find_spec('torch') is None: assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_build_info_and_engines():
    info = groupattn.build_info()
    assert info["version"] == groupattn.__version__
    for op in ("attention", "kda"):
        engines = groupattn.engines()[op]
        ref = [e for e in engines if e["name"] == "reference"]
        assert len(ref) == 1 and ref[0]["available"]
        for e in engines:
            assert set(e) == {"name", "description", "supports", "available", "unavailable_reason"}
            assert e["available"] or e["unavailable_reason"]
