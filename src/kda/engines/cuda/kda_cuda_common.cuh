// Device-side plumbing shared by the KDA cuda kernels: the plain params struct (pointers, int64
// strides in elements, counts), sequence spans (dense or varlen), the gate / beta / scalar
// conversions of include/groupattn/kda.h in fp32, warp reductions and state addressing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace groupattn::kda_cuda {

// Tokens per chunk of the chunked path, and per staged block of the recurrent one (which path
// serves a call: kda_cuda_path.h).
inline constexpr int kChunk = 16;
// Value columns per CTA of the state kernels (V is tiled; 64 and 128 are multiples).
inline constexpr int kValueTile = 16;
inline constexpr int kWarp = 32;

enum GateMode : int { kGateLogDecay = 0, kGateSoftplus = 1, kGateLowerBound = 2 };

// The prep's pair sums go through one anchor on tensor cores where every |Gamma_r - Gamma_anchor| of a
// chunk is at most this (kda_chunk_prep.cuh, "anchored"), else through the running-product loop.
inline constexpr float kPairAnchorBound = 60.f;

struct DeviceParams {
  const void *q = nullptr, *k = nullptr, *v = nullptr;  // [B,T,H,K], [B,T,H,K], [B,T,HV,V]
  const float *g = nullptr, *beta = nullptr;            // [B,T,HV,K], [B,T,HV]
  void* out = nullptr;                                  // [B,T,HV,V]
  const float* s_in = nullptr;                          // optional initial state / pool
  float* s_out = nullptr;                               // optional final state / pool
  const void* cu_seqlens = nullptr;                     // optional [N+1]
  bool cu_i64 = false;
  const int32_t* state_indices = nullptr;  // optional [N]
  const float* A_log = nullptr;            // optional [HV]
  const float* dt_bias = nullptr;          // optional [HV, K]

  // Strides in elements: (batch, token, head) for the token tensors; the last dim is contiguous.
  int64_t q_sb = 0, q_st = 0, q_sh = 0, k_sb = 0, k_st = 0, k_sh = 0, v_sb = 0, v_st = 0, v_sh = 0;
  int64_t g_sb = 0, g_st = 0, g_sh = 0, b_sb = 0, b_st = 0, b_sh = 0, o_sb = 0, o_st = 0, o_sh = 0;
  // State strides: (row, head, middle dim); the last dim is contiguous. Pools' row counts.
  int64_t si_sn = 0, si_sh = 0, si_sr = 0, so_sn = 0, so_sh = 0, so_sr = 0;
  int64_t pool_in = 0, pool_out = 0;
  int64_t dt_sh = 0;

  int64_t B = 0, T = 0, N = 0;
  int H = 0, HV = 0, K = 0, V = 0, group = 1;  // group = HV / H (GVA)
  int gate = kGateLogDecay;
  float lower_bound = -5.f;
  float scale = 1.f;
  bool l2norm = false, beta_sigmoid = false, neg_eig = false;
  bool v_first = true;
  // kPairAnchorBound, or -1 to send every chunk through the loop (set_kda_prep_pairs: measurement).
  float pair_anchor_bound = kPairAnchorBound;
};

// First 16-token chunk of sequence n (n = N: the chunk count): the chunk map's entry for varlen,
// and the same value computed for dense sequences, whose map kernel is not launched (kda_chunked.cu;
// every reader of the map -- prep, state -- goes through this).
__device__ __forceinline__ int64_t chunk_offset(const DeviceParams& p, const int64_t* chunk_offsets, int64_t n) {
  return p.cu_seqlens == nullptr ? n * ((p.T + kChunk - 1) / kChunk) : chunk_offsets[n];
}

template <class T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Stable forms: exp never overflows in either branch.
__device__ __forceinline__ float sigmoidf_stable(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  const float e = expf(x);
  return e / (1.f + e);
}
__device__ __forceinline__ float softplusf_stable(float x) { return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x))); }

// The in-kernel gates (softplus, lower bound) from xd = x + dt_bias and eA = exp(A_log[hv]) (any
// value when A_log is absent), for callers that load dt_bias and A_log ahead of the math.
__device__ __forceinline__ float gate_from_biased(const DeviceParams& p, float xd, float eA) {
  if (p.gate == kGateSoftplus) return -eA * softplusf_stable(xd);
  const float arg = p.A_log != nullptr ? eA * xd : xd;
  return p.lower_bound * sigmoidf_stable(arg);
}

// The effective log decay (<= 0) of key channel d of value head hv for the raw gate input x.
__device__ __forceinline__ float effective_gate(const DeviceParams& p, int hv, int d, float x) {
  if (p.gate == kGateLogDecay) return x;
  const float dt = p.dt_bias != nullptr ? p.dt_bias[hv * p.dt_sh + d] : 0.f;
  return gate_from_biased(p, x + dt, p.A_log != nullptr ? expf(p.A_log[hv]) : 1.f);
}

__device__ __forceinline__ float effective_beta(const DeviceParams& p, float b) {
  if (!p.beta_sigmoid) return b;
  return (p.neg_eig ? 2.f : 1.f) * sigmoidf_stable(b);
}

// Sequence n: batch row, first token along T, token count. Varlen packs sequences in batch row 0.
struct SeqSpan {
  int64_t batch, bos, len;
};
__device__ __forceinline__ SeqSpan seq_span(const DeviceParams& p, int64_t n) {
  if (p.cu_seqlens == nullptr) return {n, 0, p.T};
  int64_t a, b;
  if (p.cu_i64) {
    a = static_cast<const int64_t*>(p.cu_seqlens)[n];
    b = static_cast<const int64_t*>(p.cu_seqlens)[n + 1];
  } else {
    a = static_cast<const int32_t*>(p.cu_seqlens)[n];
    b = static_cast<const int32_t*>(p.cu_seqlens)[n + 1];
  }
  return {0, a, b - a};
}

// Pool rows of sequence n (-1: none). A device-resident index outside its pool cannot be reported
// as a Status from inside a kernel; such a sequence reads a zero state, writes no state and gets
// NaN outputs, so the error is visible instead of silently wrong.
struct StateRows {
  int64_t in, out;
  bool bad;
};
__device__ __forceinline__ StateRows state_rows(const DeviceParams& p, int64_t n) {
  const int64_t r = p.state_indices != nullptr ? static_cast<int64_t>(p.state_indices[n]) : n;
  StateRows s{-1, -1, false};
  if (p.s_in != nullptr) {
    if (r >= 0 && r < p.pool_in) s.in = r; else s.bad = true;
  }
  if (p.s_out != nullptr) {
    if (r >= 0 && r < p.pool_out) s.out = r; else s.bad = true;
  }
  if (s.bad) s.in = s.out = -1;
  return s;
}

// Offset of state element S[d][e] (S in R^{K x V}) of (row, hv): V-first [row, HV, V, K] stores
// S^T, K-first [row, HV, K, V] stores S.
__device__ __forceinline__ int64_t state_offset(bool v_first, int64_t sn, int64_t sh, int64_t sr, int64_t row,
                                                int hv, int d, int e) {
  return row * sn + hv * sh + (v_first ? e * sr + d : d * sr + e);
}

}  // namespace groupattn::kda_cuda
