#!/usr/bin/env bash
# session 6 device call 2 (tree 63e5bd6): sm90 multi-token decode scaling + ncu; sanitizers on session-5 kernels; reliability.
B=build-gpu/groupattn
OUT=${OUT:-/tmp/out}
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
source scripts/lib/gpu_configure.sh
ga_gpu_configure build-gpu /tmp/configure.log 90a || { tail -30 /tmp/configure.log; exit 1; }
cmake --build build-gpu -j 16 > /tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head -30; exit 1; }
echo "built $(el)s"
bn() { echo "### $*"; timeout 60 "$@" 2>&1 | grep -E 'engine:|check:|GPU time per|GB/s|error|declin|FAIL' ; }
for e in sm90 cuda; do for n in 1 2 4 8 16; do bn $B bench --op decode --heads 64/8 --batch 1 --kv-len 131072 --new-tokens $n --engine $e; done; done
for n in 1 8 16; do bn $B bench --op decode --heads 64/8 --batch 1 --kv-len 131072 --new-tokens $n --kv-dtype f8e4m3 --engine sm90; done
echo "elapsed $(el)"
NCU="ncu --clock-control none -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters --print-summary none"
timeout 60 $NCU -k regex:sm90_decode $B bench --op decode --heads 64/8 --batch 1 --kv-len 131072 --new-tokens 8 --engine sm90 > /tmp/ncu-dec8-bf16.txt 2>&1
timeout 60 $NCU -k regex:sm90_decode $B bench --op decode --heads 64/8 --batch 1 --kv-len 131072 --new-tokens 1 --engine sm90 > /tmp/ncu-dec1-bf16.txt 2>&1
timeout 60 $NCU -k regex:sm90_decode $B bench --op decode --heads 64/8 --batch 1 --kv-len 131072 --new-tokens 8 --kv-dtype f8e4m3 --engine sm90 > /tmp/ncu-dec8-fp8.txt 2>&1
echo "ncu done $(el)"
tar czf $OUT/ncu.tgz -C /tmp ncu-dec8-bf16.txt ncu-dec1-bf16.txt ncu-dec8-fp8.txt
SANITIZER_FILTER="CudaAttention.HeadRatiosDecodePagedSplit:CudaAttention.VarlenWithEmptySequences:CudaAttention.StridedViews:CudaAttention.WindowSoftcapScale:CudaAttention.OneTokenDecodeWindowSoftcapVarlenStrided:CudaAttention.MultiTokenDecodeWindowSoftcapVarlenStrided:Sm90Decode.KvLengthsAroundTiles:Sm90Decode.StridedViews:Sm90Decode.DeterministicOver10Runs:Sm90Decode.Fp8KvCache:Sm90Prefill.SmallCausal:Sm90Prefill.StridedViews:Sm90Prefill.SeqlensKIgnoresStaleRows:Sm90Prefill.HeadDim256SeqlensKIgnoresStaleRows:KdaCuda.VarlenInt32Int64:KdaCuda.DecodeOnPoolInPlace:KdaCuda.RecurrentUnalignedVFirstPool:KdaCuda.ChunkedPrepUnalignedViews" \
  OUT=/tmp/rel timeout $(( 585 - $(el) )) bash scripts/gpu-reliability --build-dir build-gpu > /tmp/rel-summary.txt 2>&1
echo "reliability rc=$?"
tail -40 /tmp/rel-summary.txt
tar czf $OUT/rel.tgz -C /tmp rel rel-summary.txt 2>/dev/null
echo "total $(el)"
