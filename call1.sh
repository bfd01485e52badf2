#!/usr/bin/env bash
# session 8 device call 1: integ9 (main + pfcausal + kdafix + hostcost4). Tier, branch benches, prefill suite.
B=build-gpu/groupattn
OUT=${OUT:-/tmp/out}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
git rev-parse --short HEAD
GPU_CHECK_JOBS=8 GPU_CHECK_SKIP_CPU=1 GPU_CHECK_EXCLUDE='^(Reliability|KdaReliability)\.' OUT=$OUT/check timeout 330 bash scripts/gpu-check --build-dir build-gpu > $OUT/check-summary.txt 2>&1
echo "gpu-check rc=$?"
sed -n '/gpu-check summary/,$p' $OUT/check-summary.txt | head -30
grep -E "\(Failed\)|Exception|Timeout|\*\*\*Failed" $OUT/check/ctest-gpu.log | head -20
grep -E "^\[kda\].*(c64|chunked64|recurrent|chunked)" $OUT/check/ctest-gpu.log | head -12
echo "elapsed $(el)"
CUOBJDUMP=cuobjdump bash scripts/prefill-sass-check build-gpu/CMakeFiles/groupattn.dir/src/attention/engines/sm90/inst_*prefill*.cu.o build-gpu/CMakeFiles/groupattn.dir/src/attention/engines/sm90/inst_decode_packed*.cu.o 2>&1 | tail -4
bn() { echo "### $*"; timeout 60 "$@" 2>&1 | grep -E 'check:|GPU time per|TFLOP/s|GB/s|error|declin|FAIL' ; }
{
P="$B bench --op prefill --engine sm90-prefill"
bn $P --heads 64/8 --head-dim 128 --batch 2 --seq-len 8192 --no-causal
bn $P --heads 64/8 --head-dim 128 --batch 1 --seq-len 16384 --no-causal
bn $P --heads 32/8 --head-dim 128 --batch 2 --seq-len 8192 --no-causal
bn $P --heads 64/8 --head-dim 128 --batch 8 --seq-len 2048 --no-causal
bn $P --heads 16/16 --head-dim 128 --batch 8 --seq-len 2048 --no-causal
bn $P --heads 64/8 --head-dim 128 --batch 8 --seq-len 2048 --causal
bn $P --heads 16/16 --head-dim 128 --batch 8 --seq-len 2048 --causal
bn $P --heads 64/8 --head-dim 128 --batch 2 --seq-len 8192 --causal
bn $P --heads 16/2 --head-dim 256 --batch 2 --seq-len 8192 --no-causal
bn $P --heads 16/2 --head-dim 256 --batch 1 --seq-len 16384 --no-causal
bn $P --heads 16/2 --head-dim 256 --batch 8 --seq-len 2048 --no-causal
bn $P --heads 16/2 --head-dim 256 --batch 8 --seq-len 2048 --causal
bn $P --heads 32/8 --head-dim 64 --batch 8 --seq-len 2048 --causal
bn $P --heads 32/8 --head-dim 64 --batch 2 --seq-len 8192 --causal
bn $P --heads 32/8 --head-dim 64 --batch 8 --seq-len 2048 --no-causal
bn $P --heads 32/8 --head-dim 64 --batch 2 --seq-len 8192 --no-causal
K="$B bench --op kda --heads 16/16 --seq-len 4096 --batch 1 --gate lower-bound"
bn $K --engine cuda-c64
bn $K --engine cuda
bn $B bench --op kda --heads 4/4 --head-dim 128 --batch 1 --seq-len 64 --k-first --host-breakdown --wall-calls 400
} > $OUT/bench.txt 2>&1
cat $OUT/bench.txt
echo "elapsed $(el)"
timeout 60 build-gpu/tests/groupattn_tests_gpu --gtest_also_run_disabled_tests --gtest_filter='KdaCuda.DISABLED_Timing' 2>&1 | grep -E "kda-time|OK|FAIL" > $OUT/kda-timing.txt; cat $OUT/kda-timing.txt
echo "elapsed $(el)"
PYTHONPATH=build-gpu/python timeout 60 python3 bench/host_cost.py > $OUT/host-cost.txt 2>&1; tail -15 $OUT/host-cost.txt
echo "elapsed $(el)"
left=$(( 560 - $(el) ))
if (( left > 90 )); then
  PYTHONPATH=build-gpu/python timeout $left python3 bench/run.py --suite prefill --engines sm90-prefill --suite-minutes $(python3 -c "print(round(($left-50)/60,1))") --out $OUT/bench-prefill.json > $OUT/prefill-suite.log 2>&1
  echo "prefill suite rc=$?"; tail -3 $OUT/prefill-suite.log
fi
echo "total elapsed $(el)"
