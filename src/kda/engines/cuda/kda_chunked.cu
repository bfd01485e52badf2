// KDA chunked prefill (research/kda.md 3.1; the fp64 blueprint is src/kda/reference_chunked.cpp).
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Three kernels, all fp32 arithmetic on bf16/f16 inputs:
//  1. chunk map (one thread): chunk_offsets[n] = sum_{m<n} ceil(len_m / 16).
//  2. prep, grid (chunk, value head): per 16-token chunk with Gamma the chunk-local cumsum of the
//     effective gate, L[r][s] = beta_r sum_d k_rd k_sd exp(Gamma_rd - Gamma_sd) (s < r) and
//     Aqk[r][s] = scale sum_d q_rd k_sd exp(Gamma_rd - Gamma_sd) (s <= r) elementwise per channel
//     (the token-parallel form: no reference point, every exponent <= 0, so no gate strength can
//     overflow it); Tm = (I + L)^-1 by forward substitution; W = Tm Diag(beta) (k exp(Gamma)),
//     U = Tm Diag(beta) V, Kh = k exp(Gamma_C - Gamma), Qt = scale q exp(Gamma), exp(Gamma_C).
//     A partial last chunk is padded with k = q = v = beta = g = 0, which leaves every real row exact.
//  3. state pass, grid (sequence, value head, V-tile of 16), sequential over the sequence's chunks:
//     D = U - W S;  O = Qt S + Aqk D;  S <- Diag(exp(Gamma_C)) S + Kh^T D.
// The state pass is one serial chain per (sequence, value head, V-tile): few heads and long
// sequences leave SMs idle (splitting it is a later step, issue 4).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"

namespace groupattn::kda_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxV = 128;
constexpr int kAcc = 4;  // partial sums per dot product in the state pass
static_assert(kThreads == kChunk * kValueTile, "state pass: one thread per (row, column) of a chunk tile");

__global__ void kda_chunk_map_kernel(const DeviceParams p, int64_t* chunk_offsets) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t acc = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    chunk_offsets[n] = acc;
    acc += (seq_span(p, n).len + kChunk - 1) / kChunk;
  }
  chunk_offsets[p.N] = acc;
}

template <class T, int K>
__global__ void __launch_bounds__(kThreads)
    kda_chunk_prep_kernel(const DeviceParams p, const int64_t* chunk_offsets, float* blocks, const ChunkLayout l) {
  const int64_t c = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y);
  if (c >= chunk_offsets[p.N]) return;  // the grid is sized by an upper bound
  // The sequence owning chunk c: the last n with chunk_offsets[n] <= c (empty sequences skipped).
  int64_t lo = 0, hi = p.N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (chunk_offsets[mid] <= c) lo = mid; else hi = mid - 1;
  }
  const SeqSpan sq = seq_span(p, lo);
  const int64_t first = (c - chunk_offsets[lo]) * kChunk;  // chunk start inside the sequence
  const int64_t t0 = sq.bos + first;                          // chunk start along T
  const int C = static_cast<int>(sq.len - first < kChunk ? sq.len - first : kChunk);  // rows of this chunk
  const int h = hv / p.group;  // GVA: value head hv reads qk head hv / (HV / H)
  const int V = p.V;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;

  __shared__ float ks[kChunk][K], qs[kChunk][K], G[kChunk][K], vs[kChunk][kMaxV];
  __shared__ float bs[kChunk], L[kChunk][kChunk], A[kChunk][kChunk], Tm[kChunk][kChunk];

  const T* qb = static_cast<const T*>(p.q) + sq.batch * p.q_sb + h * p.q_sh;
  const T* kb = static_cast<const T*>(p.k) + sq.batch * p.k_sb + h * p.k_sh;
  const T* vb = static_cast<const T*>(p.v) + sq.batch * p.v_sb + hv * p.v_sh;
  const float* gb = p.g + sq.batch * p.g_sb + hv * p.g_sh;
  for (int i = tid; i < kChunk * K; i += kThreads) {
    const int r = i / K, d = i % K;  // token r of the chunk, key channel d
    const bool ok = r < C;
    const int64_t t = t0 + r;
    ks[r][d] = ok ? to_float(kb[t * p.k_st + d]) : 0.f;
    qs[r][d] = ok ? to_float(qb[t * p.q_st + d]) : 0.f;
    G[r][d] = ok ? effective_gate(p, hv, d, gb[t * p.g_st + d]) : 0.f;
  }
  for (int i = tid; i < kChunk * V; i += kThreads) {
    const int r = i / V, e = i % V;
    vs[r][e] = r < C ? to_float(vb[(t0 + r) * p.v_st + e]) : 0.f;
  }
  if (tid < kChunk) {
    bs[tid] = tid < C ? effective_beta(p, p.beta[sq.batch * p.b_sb + (t0 + tid) * p.b_st + hv * p.b_sh]) : 0.f;
  }
  if (tid < kChunk * kChunk) {
    L[tid / kChunk][tid % kChunk] = 0.f;
    A[tid / kChunk][tid % kChunk] = 0.f;
  }
  __syncthreads();

  if (p.l2norm) {  // x / sqrt(sum x^2 + 1e-6) per token row, before the scale; a warp per row
    for (int r = warp; r < kChunk; r += kWarps) {
      float kk = 0.f, qq = 0.f;
      for (int d = lane; d < K; d += kWarp) {
        kk += ks[r][d] * ks[r][d];
        qq += qs[r][d] * qs[r][d];
      }
      const float rk = 1.f / sqrtf(warp_sum(kk) + 1e-6f), rq = 1.f / sqrtf(warp_sum(qq) + 1e-6f);
      for (int d = lane; d < K; d += kWarp) {
        ks[r][d] *= rk;
        qs[r][d] *= rq;
      }
    }
  }
  if (tid < K) {  // Gamma: chunk-local cumsum; fp32 sums of g <= 0 stay non-increasing along r
    for (int r = 1; r < kChunk; ++r) G[r][tid] += G[r - 1][tid];
  }
  __syncthreads();

  // L and Aqk, one (r, s <= r) pair per warp at a time, lanes splitting the channels.
  int pair = 0;
  for (int r = 0; r < kChunk; ++r) {
    for (int s = 0; s <= r; ++s, ++pair) {
      if (pair % kWarps != warp) continue;
      float kk = 0.f, qk = 0.f;
      for (int d = lane; d < K; d += kWarp) {
        const float decay = expf(G[r][d] - G[s][d]);  // exponent <= 0 for s <= r
        kk += ks[r][d] * ks[s][d] * decay;
        qk += qs[r][d] * ks[s][d] * decay;
      }
      kk = warp_sum(kk);
      qk = warp_sum(qk);
      if (lane == 0) {
        if (s < r) L[r][s] = bs[r] * kk;
        A[r][s] = p.scale * qk;
      }
    }
  }
  __syncthreads();

  // Tm = (I + L)^-1, unit lower: lane s owns column s, rows in order (forward substitution).
  if (warp == 0 && lane < kChunk) {
    const int s = lane;
    for (int r = 0; r < kChunk; ++r) {
      float x = r == s ? 1.f : 0.f;
      if (r > s) {
        float acc = 0.f;
        for (int m = s; m < r; ++m) acc += L[r][m] * Tm[m][s];
        x = -acc;
      }
      Tm[r][s] = x;
    }
  }

  float* blk = blocks + (c * p.HV + hv) * l.block_floats;  // this (chunk, value head)'s block
  for (int i = tid; i < kChunk * K; i += kThreads) {
    const int r = i / K, d = i % K;
    const float gr = G[r][d];
    blk[l.qt + i] = p.scale * qs[r][d] * expf(gr);
    blk[l.kh + i] = ks[r][d] * expf(G[kChunk - 1][d] - gr);  // padded rows keep Gamma, so Gamma_15 = Gamma_C
    ks[r][d] = bs[r] * ks[r][d] * expf(gr);                   // Diag(beta) K~, in place (own element only)
  }
  if (tid < K) blk[l.ec + tid] = expf(G[kChunk - 1][tid]);
  if (tid < kChunk * kChunk) blk[l.aqk + tid] = A[tid / kChunk][tid % kChunk];
  __syncthreads();

  for (int i = tid; i < kChunk * K; i += kThreads) {  // W = Tm (Diag(beta) K~)
    const int r = i / K, d = i % K;
    float acc = 0.f;
    for (int m = 0; m <= r; ++m) acc += Tm[r][m] * ks[m][d];
    blk[l.w + i] = acc;
  }
  for (int i = tid; i < kChunk * V; i += kThreads) {  // U = Tm Diag(beta) V
    const int r = i / V, e = i % V;
    float acc = 0.f;
    for (int m = 0; m <= r; ++m) acc += Tm[r][m] * bs[m] * vs[m][e];
    blk[l.u + i] = acc;
  }
}

template <class T, int K>
__global__ void __launch_bounds__(kThreads)
    kda_chunk_state_kernel(const DeviceParams p, const int64_t* chunk_offsets, const float* blocks, const ChunkLayout l) {
  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y);
  const int e0 = static_cast<int>(blockIdx.z) * kValueTile;
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid / kValueTile, e = tid % kValueTile;  // this thread's (row, column) of a chunk tile
  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);
  const float bad = rows.bad ? NAN : 0.f;

  __shared__ float S[K][kValueTile];
  __shared__ float Ws[kChunk][K], Qs[kChunk][K], Khs[kChunk][K];
  __shared__ float Us[kChunk][kValueTile], As[kChunk][kChunk], ec[K], D[kChunk][kValueTile], QS[kChunk][kValueTile];

  for (int i = tid; i < K * kValueTile; i += kThreads) {
    // V-first rows are K-contiguous: d fastest; K-first rows are V-contiguous: column fastest.
    const int d = p.v_first ? i % K : i / kValueTile, ee = p.v_first ? i / K : i % kValueTile;
    S[d][ee] = rows.in >= 0 ? p.s_in[state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv, d, e0 + ee)] : 0.f;
  }

  T* ob = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh;
  const int64_t c0 = chunk_offsets[n], nc = chunk_offsets[n + 1] - c0;
  for (int64_t j = 0; j < nc; ++j) {
    __syncthreads();  // the previous chunk's readers of the staged tiles are done
    const float* blk = blocks + ((c0 + j) * p.HV + hv) * l.block_floats;
    for (int i = tid; i < kChunk * K; i += kThreads) {
      (&Ws[0][0])[i] = blk[l.w + i];
      (&Qs[0][0])[i] = blk[l.qt + i];
      (&Khs[0][0])[i] = blk[l.kh + i];
    }
    Us[r][e] = blk[l.u + r * p.V + e0 + e];
    As[r][e] = blk[l.aqk + tid];  // kChunk == kValueTile: tid walks the 16 x 16 Aqk too
    if (tid < K) ec[tid] = blk[l.ec + tid];
    __syncthreads();

    // kAcc independent partial sums per dot: the FMA latency chain is K / kAcc long, not K.
    float ws[kAcc] = {}, qsum[kAcc] = {};
#pragma unroll 4
    for (int d = 0; d < K; d += kAcc) {
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
        ws[a] += Ws[r][d + a] * S[d + a][e];
        qsum[a] += Qs[r][d + a] * S[d + a][e];
      }
    }
#pragma unroll
    for (int a = 1; a < kAcc; ++a) {
      ws[0] += ws[a];
      qsum[0] += qsum[a];
    }
    D[r][e] = Us[r][e] - ws[0];  // the true writes beta_r r_r of the chunk
    QS[r][e] = qsum[0];
    __syncthreads();

    float o = QS[r][e];
    for (int s = 0; s <= r; ++s) o += As[r][s] * D[s][e];
    const int64_t tok = j * kChunk + r;  // token inside the sequence
    if (tok < sq.len) ob[(sq.bos + tok) * p.o_st + e0 + e] = from_float<T>(o + bad);

    static_assert(K * kValueTile % kThreads == 0, "the state tile splits evenly over the threads");
#pragma unroll
    for (int it = 0; it < K * kValueTile / kThreads; ++it) {  // K / 16 independent elements per thread
      const int i = tid + it * kThreads;
      const int d = i / kValueTile, ee = i % kValueTile;
      float acc = ec[d] * S[d][ee];
#pragma unroll
      for (int rr = 0; rr < kChunk; ++rr) acc += Khs[rr][d] * D[rr][ee];
      S[d][ee] = acc;
    }
  }
  __syncthreads();
  if (rows.out >= 0) {
    for (int i = tid; i < K * kValueTile; i += kThreads) {
      const int d = p.v_first ? i % K : i / kValueTile, ee = p.v_first ? i / K : i % kValueTile;
      p.s_out[state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows.out, hv, d, e0 + ee)] = S[d][ee];
    }
  }
}

template <class T, int K>
Status launch_chunked_t(const DeviceParams& p, void* workspace, const ChunkLayout& l, cudaStream_t stream) {
  auto* offsets = static_cast<int64_t*>(workspace);
  auto* blocks = reinterpret_cast<float*>(static_cast<char*>(workspace) + l.offsets_bytes);
  kda_chunk_map_kernel<<<1, kWarp, 0, stream>>>(p, offsets);
  GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk_map_kernel"));
  if (l.max_chunks > 0) {
    const dim3 grid(static_cast<unsigned>(l.max_chunks), static_cast<unsigned>(p.HV));
    kda_chunk_prep_kernel<T, K><<<grid, kThreads, 0, stream>>>(p, offsets, blocks, l);
    GA_RETURN_IF_ERROR(cuda::last_launch_status("kda_chunk_prep_kernel"));
  }
  const dim3 grid(static_cast<unsigned>(p.N), static_cast<unsigned>(p.HV), static_cast<unsigned>(p.V / kValueTile));
  kda_chunk_state_kernel<T, K><<<grid, kThreads, 0, stream>>>(p, offsets, blocks, l);
  return cuda::last_launch_status("kda_chunk_state_kernel");
}

}  // namespace

Status launch_chunked(const DeviceParams& p, bool bf16, void* workspace, const ChunkLayout& layout,
                      cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  if (bf16) {
    return p.K == 64 ? launch_chunked_t<__nv_bfloat16, 64>(p, workspace, layout, stream)
                     : launch_chunked_t<__nv_bfloat16, 128>(p, workspace, layout, stream);
  }
  return p.K == 64 ? launch_chunked_t<__half, 64>(p, workspace, layout, stream)
                   : launch_chunked_t<__half, 128>(p, workspace, layout, stream);
}

}  // namespace groupattn::kda_cuda
