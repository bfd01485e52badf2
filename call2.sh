#!/usr/bin/env bash
# Session 14 call 2: whole GPU tier with the column-owning KDA state kernel on by default (+ StateKernelsAgree);
# DISABLED_Timing's stage and state-kernel A/B lines; CLI A/B on three shapes; ncu of the new kernel.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GPU_CHECK_SKIP_CPU=1 GPU_CHECK_JOBS=14 OUT=$OUT/check timeout 300 bash scripts/gpu-check --build-dir build-gpu 2>&1 | tail -12
grep -E "^\[kda\] cols|FAILED|Failure|rel RMS" $OUT/check/ctest-gpu.log | head -30
T=build-gpu/tests/groupattn_tests_gpu
timeout 40 $T --gtest_filter='KdaCuda.StateKernelsAgree' 2>&1 | grep -E "^\[kda\]|OK|FAILED|Failure|Expected|Which|actual" | head -40
echo "=== KDA timing"
timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='KdaCuda.DISABLED_Timing' 2>&1 | grep -E 'kda-time\] (stages|state kernel|prefill)'
echo "=== KDA CLI"
for a in '--heads 16/16 --seq-len 4096 --batch 1' '--heads 24/24 --seq-len 8192 --batch 1' '--heads 16/16 --seq-len 2048 --batch 8' '--heads 4/4 --seq-len 1024 --batch 1'; do
  for C in 0 1 0 1; do GROUPATTN_KDA_STATE_COLS=$C timeout 40 build-gpu/groupattn bench --op kda $a --gate lower-bound --engine cuda | grep -E 'GPU time per|check' | tr '\n' ' ' | sed "s/^/C=$C $a: /"; echo; done
done
echo "=== ncu"
timeout 90 bash scripts/ncu-kernel build-gpu 'kda_chunk_state_cols' bench --op kda --heads 16/16 --seq-len 4096 --batch 1 --gate lower-bound --engine cuda > $OUT/ncu-kda-cols.txt 2>&1
grep -E "Duration|L1/TEX Cache|L2 Cache Thr|Issue Slots|Warp Cycles Per Issued|Registers|excessive" $OUT/ncu-kda-cols.txt | head
timeout 90 ncu --clock-control none -k 'regex:kda_chunk_state_cols' -c 1 --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum build-gpu/groupattn bench --op kda --heads 16/16 --seq-len 4096 --batch 1 --gate lower-bound --engine cuda 2>&1 | grep -E "stalled|wavefronts|inst_executed" 
