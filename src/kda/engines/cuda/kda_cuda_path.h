// Which path of the KDA cuda engine serves a problem: the one place the choice is made (the engine,
// its workspace size and kda_cuda_run_path's kAuto all ask it). Pure host code, no CUDA headers:
// the CPU tier tests the boundary (tests/cpu/kda_cuda_path_test.cpp).
//
// Both paths are exact for any length (the recurrent one is the fp32 per-token recurrence, the
// chunked one keeps the 5e-3 budget with tf32 products); the choice is speed only. Cost model
// (docs/HOST_COST.md, "KDA path threshold"; H200, K = V = 128, few sequences):
//   recurrent: one launch, no workspace; serial over tokens: ~1.1-1.25 us of GPU time per token
//              (T = 1024 H = 4: 1109 us; T = 2048 H = 12: 2535 us), ~2-3 us fixed.
//   chunked:   two launches (+ a chunk map for varlen) and a workspace; ~3-7 us of GPU time per
//              16-token chunk (T = 64 H = 4: 15.0 us in all; T = 1024 H = 4: 310 us).
// So the recurrent path costs ~4-5x the chunked one's GPU time per token on a prefill, and its
// host saving (one launch, ~3.6 us, and one allocation) pays for that only on a few tokens: the
// 16-token average keeps the decode / fused_recurrent shapes (1..16 new tokens, the state streamed
// once) on it and sends prefills to the chunked path.
#pragma once

#include <cstdint>

namespace groupattn::kda_cuda {

// Tokens per sequence, on average, up to which the recurrent path serves a call.
inline constexpr int64_t kRecurrentMaxAvgTokens = 16;

// tokens: T of q [B, T, H, K] (dense: every one of the B sequences has T; varlen: B = 1 and the
// N sequences share the T tokens). sequences: N. Recurrent when the sequences average at most
// kRecurrentMaxAvgTokens tokens (integer arithmetic: no rounding at the boundary).
constexpr bool use_recurrent_path(int64_t tokens, int64_t sequences, bool varlen) {
  return varlen ? tokens <= kRecurrentMaxAvgTokens * sequences : tokens <= kRecurrentMaxAvgTokens;
}

}  // namespace groupattn::kda_cuda
