"""A digest of the sources that decide performance, so a results file names its tree even where the
GPU machine's copy has no .git. Pure Python: `python bench/run.py --tree-digest` prints it here
without torch, to compare with a results file's provenance.tree_digest."""

import hashlib
import os


def tree_digest(root: str) -> str:
    """sha256 over the sources that decide performance (include/, src/, python/, bench/, CMakeLists,
    pyproject): identifies the tree when the GPU machine's copy has no .git."""
    h = hashlib.sha256()
    paths = []
    for top in ("include", "src", "python", "bench", "CMakeLists.txt", "pyproject.toml"):
        p = os.path.join(root, top)
        if os.path.isfile(p):
            paths.append(p)
        for d, dirs, files in os.walk(p):
            dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", "results"))
            for f in sorted(files):
                if f.endswith((".pyc",)):
                    continue
                paths.append(os.path.join(d, f))
    for p in sorted(paths):
        h.update(os.path.relpath(p, root).encode())
        with open(p, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]
