#!/usr/bin/env bash
# The full benchmark on the GPU machine, from the repository root: build and install the groupattn
# package (pip, Release, sm_90a), install fla from .whl/ when present, run the suites, write the
# results JSON, the report and its plots. Everything goes to $OUT (else bench/results/gpu-bench).
#
#   GROUPATTN_BENCH_COMMIT=<commit> bash bench/gpu-bench.sh [--quick] [--suite S]
#       [--suite-minutes prefill=1.5,decode=2.5,kda=2] [--order turning|shuffled|self]
#
# <commit>: the hash of the tree being run, typed in from the machine that holds the repository.
# Not `git rev-parse HEAD` on the GPU machine: its copy of .git can be stale (session 8: it reported
# the session's first HEAD for three later trees); the results' tree digest is the cross-check.
#
# Output (<= 8 files, as the device tool returns): build.log, run.log, bench.json, PERFORMANCE.md,
# perf/prefill_tflops.png, perf/decode_gbps.png, perf/kda_time.png.
# Then, here: cp $OUT/bench.json bench/results/NAME.json; python bench/report.py bench/results/NAME.json
set -uo pipefail

SUITE=all
QUICK=""
MINUTES="prefill=1.2,decode=2.5,kda=4"
ORDER=turning
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=--quick; MINUTES="prefill=1,decode=1,kda=1.5"; shift ;;
    --suite) SUITE="$2"; shift 2 ;;
    --suite-minutes) MINUTES="$2"; shift 2 ;;
    --order) ORDER="$2"; shift 2 ;;
    *) echo "gpu-bench: unknown argument $1 (accepted: --quick, --suite S, --suite-minutes SPEC, --order O)" >&2; exit 2 ;;
  esac
done
DEST="${OUT:-bench/results/gpu-bench}"
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-16}"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

# fla (peer for KDA) travels as a wheel in .whl/ (git-ignored); never built into the library.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || echo "gpu-bench: installing .whl/ failed; fla will be missing"
fi

FLAGS=(-Ccmake.define.GROUPATTN_CUDA_ARCHS=90a)
echo "gpu-bench: building the package (pip install . --no-build-isolation ${FLAGS[*]}, CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL)"
if ! python3 -m pip install --no-index --no-build-isolation --no-deps -v "${FLAGS[@]}" . >"$DEST/build.log" 2>&1; then
  echo "gpu-bench: BUILD FAILED after $(( $(date +%s) - t0 ))s; last lines of build.log:"
  tail -40 "$DEST/build.log"
  exit 1
fi
echo "gpu-bench: built in $(( $(date +%s) - t0 ))s"
export GROUPATTN_BENCH_BUILD_FLAGS="pip install . --no-build-isolation ${FLAGS[*]} (scikit-build-core, CMake Release per pyproject.toml)"

# BENCH_TIMEOUT_S (default 0 = none) stops run.py so that the report is still written from what it
# measured; BENCH_DEADLINE (epoch seconds; default: 550 s after this script started, to fit one
# 600 s device call) sets it to what is left before that time, less 25 s. On SIGTERM run.py writes
# what it measured and lists the configurations it did not reach.
BENCH_DEADLINE="${BENCH_DEADLINE:-$(( t0 + 550 ))}"
if [[ -n "${BENCH_DEADLINE:-}" ]]; then
  BENCH_TIMEOUT_S=$(( BENCH_DEADLINE - $(date +%s) - 25 ))
  (( BENCH_TIMEOUT_S < 10 )) && BENCH_TIMEOUT_S=10
  echo "gpu-bench: run.py gets ${BENCH_TIMEOUT_S}s (BENCH_DEADLINE)"
fi
timeout "${BENCH_TIMEOUT_S:-0}" python3 bench/run.py --suite "$SUITE" $QUICK --suite-minutes "$MINUTES" --order "$ORDER" --out "$DEST/bench.json" 2>&1 | tee "$DEST/run.log"
rc=${PIPESTATUS[0]}
echo "gpu-bench: run.py exit $rc after $(( $(date +%s) - t0 ))s"
if [[ -f "$DEST/bench.json" ]]; then
  python3 bench/report.py "$DEST/bench.json" --out "$DEST/PERFORMANCE.md" --plots-dir "$DEST/perf" || echo "gpu-bench: report failed"
fi
echo "gpu-bench: done after $(( $(date +%s) - t0 ))s"
exit $rc
