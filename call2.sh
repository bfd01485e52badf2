#!/usr/bin/env bash
# Session 18 call 2 (tree 7139ce4, the same device code as call 1): call 1's A/B lines for the first
# four shapes fell outside the returned tail, so everything goes to $OUT/ab.txt this time. Build +
# the new test; GPU time and host enqueue of the cluster kernel against the prep + state kernels
# (GROUPATTN_KDA_CLUSTER_CHUNKED=1 / 0, alternated, separate processes); host_cost.py (default: on)
# five rounds, twice.
set -uo pipefail
mkdir -p $OUT/hc
GPU_CHECK_SKIP_CPU=1 GPU_CHECK_JOBS=14 OUT=$OUT/check timeout 200 bash scripts/gpu-check --build-dir build-gpu --filter 'ClusterChunked|DriverLaunch' > $OUT/check.txt 2>&1
echo "gpu-check rc=$?" | tee $OUT/ab.txt; tail -7 $OUT/check.txt | tee -a $OUT/ab.txt
for shape in "4/4 64 128" "4/4 128 128" "16/16 64 128" "2/4 100 128" "8/8 128 128" "4/4 48 128"; do set -- $shape
  for E in 0 1 0 1; do
    r=$(GROUPATTN_KDA_CLUSTER_CHUNKED=$E timeout 40 build-gpu/groupattn bench --op kda --heads $1 --head-dim $3 --seq-len $2 --batch 1 --k-first --gate lower-bound 2>&1 | grep -E 'GPU time per call|host time per call|check:|error|FAIL' | tr -s ' ' | tr '\n' ' ')
    echo "cluster $E heads $1 T $2 d $3: $r" | tee -a $OUT/ab.txt
  done
done
for i in 1 2; do
  echo "== host_cost.py (default: cluster kernel on), run $i" | tee -a $OUT/ab.txt
  PYTHONPATH=build-gpu/python OUT=$OUT/hc timeout 120 python3 bench/host_cost.py --rounds 5 2>&1 | tail -14 | tee -a $OUT/ab.txt
done
