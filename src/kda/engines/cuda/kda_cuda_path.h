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
//
// Among chunked problems, small ones run the fused kernel (kda_chunked_fused.cu): one launch, no
// workspace, each CTA (sequence, value head, V-tile of 16) doing its own chunks' prep before each
// state step. Host: one launch (~3.6 us on the H200 host) and the workspace allocation (~1.2 us
// from the torch fast path) fewer, ~4.9 us per call. GPU: the prep of each chunk is on the CTA's
// serial path, and is recomputed by the V / 16 CTAs of each (sequence, head) -- free only while
// those CTAs fit on idle SMs. Model (docs/HOST_COST.md, "One launch for small chunked calls"):
// fused ~2.5 + 4-6 us per chunk (the prep of a chunk on the CTA's serial path), two-kernel
// ~12 + 0.45-0.6 us per chunk (measured, few heads). Measured on the H200 (session 8, integ10
// edf2b9f, KdaCuda.DISABLED_Timing, H = HV = 4): fused 10.1 / 10.3 / 17.2 / 23.8 / 30.4 us at T = 8 /
// 16 / 32 / 48 / 64 against the two-kernel 13.1 / 13.4 / 14.4 / 15.3 / 16.3 -- ~6.7 us per chunk,
// above the model. With the ~5-11 us of host time it saves, the fused path wins a small call up to
// 2 chunks (+2.8 us of GPU at 32 tokens), is about even at 3 and loses at 4 (+14 us of GPU time,
// which also bounds an asynchronous stream of calls). So it serves sequences of at most 32 tokens,
// and only while its grid fits on the GPU at one CTA per SM (N x HV x V / 16 <= SMs; beyond that the
// recomputed prep costs whole waves).
// On sm_90+ it serves none (fused_path_arch): there the chunked path runs small problems in one
// launch too (the cluster kernel, use_cluster_chunked below), and both chunked forms are faster on the
// GPU at every length the fused path could take (session 18 call 4, KdaCuda.DISABLED_TimingShortPrefill,
// T = 32: cluster kernel 12.1 us, two kernels 13.0-13.7, fused 17.2-17.6 at H = 4-16; T <= 16 is
// the recurrent path's), for at most one allocation (the workspace, ~1 us) of host time more.
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

// Whether the fused path may serve a device of compute capability cc (10 x major + minor): before
// sm_90 only (see the top of this file).
constexpr bool fused_path_arch(int cc) { return cc < 90; }

// Longest sequence the fused one-launch chunked kernel serves (2 chunks of 16), and its V-tile.
inline constexpr int64_t kFusedMaxTokens = 32;
inline constexpr int64_t kFusedValueTile = 16;

// The fused path's token bound alone (dense: T; varlen: the total): false means use_fused_path is
// false whatever the SM count, so a caller can skip asking the device for it.
constexpr bool within_fused_tokens(int64_t tokens) { return tokens <= kFusedMaxTokens; }

// CTAs of the fused kernel: one per (sequence, value head, 16 value columns).
constexpr int64_t fused_ctas(int64_t sequences, int64_t value_heads, int64_t value_dim) {
  return sequences * value_heads * (value_dim / kFusedValueTile);
}

// A chunked problem (not use_recurrent_path) whose sequences all have at most kFusedMaxTokens tokens
// (dense: T; varlen: the total T bounds every sequence, the lengths being on the device) and whose
// fused grid fits on `sms` SMs at one CTA each. sms <= 0 (unknown): never.
constexpr bool use_fused_path(int64_t tokens, int64_t sequences, bool varlen, int64_t value_heads,
                              int64_t value_dim, int64_t sms) {
  return !use_recurrent_path(tokens, sequences, varlen) && within_fused_tokens(tokens) &&
         fused_ctas(sequences, value_heads, value_dim) <= sms;
}

// The chunked path in one launch (kda_chunked.cu's cluster kernel; sm_90+ only, thread-block
// clusters): the V / 16 CTAs of a (sequence, value head) form a cluster, each preps one chunk and then
// runs the state pass of 16 value columns. So each sequence may have at most V / 16 chunks (tokens:
// dense, T; varlen, the total, which bounds every sequence); the grid of ctas16 = N x HV x V / 16 CTAs
// must fit the GPU at one CTA per SM (the state kernel kind this grid runs anyway, state_cols_kind 2),
// and its N x HV clusters must all run at once (cluster_capacity: cudaOccupancyMaxActiveClusters;
// clusters in a second wave cost a whole prep + state pass). The host saves one launch (~3.4 us); the
// GPU the boundary between the two kernels (docs/HOST_COST.md, "Session 18").
constexpr bool use_cluster_chunked(int64_t tokens, int64_t value_dim, int64_t ctas16, int64_t sms, int cc,
                                   int64_t cluster_capacity) {
  return cc >= 90 && tokens <= 16 * (value_dim / 16) && ctas16 <= sms && ctas16 / (value_dim / 16) <= cluster_capacity;
}

}  // namespace groupattn::kda_cuda
