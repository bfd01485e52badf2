// KDA recurrent kernel: the exact per-token recurrence (include/groupattn/kda.h), the decode step.
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Grid (sequence n, value head hv, V-tile of 16 columns); 4 warps, each owning 4 value columns e
// of the state, whole K per warp: lane holds channels d = j*32 + lane (j < K/32), so a V-first
// state row is read with coalesced 128-byte warp loads. Per token, in fp32 registers:
//   S' = Diag(exp(g)) S;  sk = S'^T k, sq = S'^T q (warp sums);  r = v - sk
//   S = S' + beta k r^T;  o = scale (sq + beta r (k.q))   (= S^T scale q after the write)
// Each state element is read once and written once per call: memory-bound, as decode must be.
// Runs any T (it is also the reference-exact path for short prefill); long T uses the chunked path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"

namespace groupattn::kda_cuda {
namespace {

constexpr int kRecWarps = 4;
constexpr int kRowsPerWarp = kValueTile / kRecWarps;
static_assert(kRowsPerWarp * kRecWarps == kValueTile, "the CTA's warps cover its V-tile");

template <class T, int K>
__global__ void __launch_bounds__(kRecWarps* kWarp) kda_recurrent_kernel(const DeviceParams p) {
  static_assert(K % kWarp == 0, "K splits evenly over the lanes");
  constexpr int kPerLane = K / kWarp;
  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y);
  const int h = hv / p.group;  // GVA: value head hv reads qk head hv / (HV / H)
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int e0 = static_cast<int>(blockIdx.z) * kValueTile + warp * kRowsPerWarp;  // this warp's first column

  const SeqSpan sq = seq_span(p, n);
  const StateRows rows = state_rows(p, n);

  float S[kRowsPerWarp][kPerLane];  // S[d][e] for d = j*32 + lane, e = e0 + i
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      S[i][j] = rows.in >= 0 ? p.s_in[state_offset(p.v_first, p.si_sn, p.si_sh, p.si_sr, rows.in, hv,
                                                   j * kWarp + lane, e0 + i)]
                             : 0.f;
    }
  }
  const float bad = rows.bad ? NAN : 0.f;  // poisons the outputs of a sequence with a bad pool row

  const T* qb = static_cast<const T*>(p.q) + sq.batch * p.q_sb + h * p.q_sh;
  const T* kb = static_cast<const T*>(p.k) + sq.batch * p.k_sb + h * p.k_sh;
  const T* vb = static_cast<const T*>(p.v) + sq.batch * p.v_sb + hv * p.v_sh;
  const float* gb = p.g + sq.batch * p.g_sb + hv * p.g_sh;
  const float* bb = p.beta + sq.batch * p.b_sb + hv * p.b_sh;
  T* ob = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh;

  for (int64_t t = sq.bos; t < sq.bos + sq.len; ++t) {
    float kr[kPerLane], qr[kPerLane], a[kPerLane];
    float kk = 0.f, qq = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = j * kWarp + lane;
      kr[j] = to_float(kb[t * p.k_st + d]);
      qr[j] = to_float(qb[t * p.q_st + d]);
      a[j] = expf(effective_gate(p, hv, d, gb[t * p.g_st + d]));
      kk += kr[j] * kr[j];
      qq += qr[j] * qr[j];
    }
    if (p.l2norm) {  // x / sqrt(sum x^2 + 1e-6) per head row, before the scale
      const float rk = 1.f / sqrtf(warp_sum(kk) + 1e-6f), rq = 1.f / sqrtf(warp_sum(qq) + 1e-6f);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        kr[j] *= rk;
        qr[j] *= rq;
      }
    }
    float kq = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) kq += kr[j] * qr[j];
    kq = warp_sum(kq);
    const float beta = effective_beta(p, bb[t * p.b_st]);

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      float sk = 0.f, sqv = 0.f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        S[i][j] *= a[j];
        sk += S[i][j] * kr[j];
        sqv += S[i][j] * qr[j];
      }
      sk = warp_sum(sk);
      sqv = warp_sum(sqv);
      const float r = to_float(vb[t * p.v_st + e0 + i]) - sk;
      const float br = beta * r;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) S[i][j] += br * kr[j];
      if (lane == i) ob[t * p.o_st + e0 + i] = from_float<T>(p.scale * (sqv + br * kq) + bad);
    }
  }

  if (rows.out >= 0) {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        p.s_out[state_offset(p.v_first, p.so_sn, p.so_sh, p.so_sr, rows.out, hv, j * kWarp + lane, e0 + i)] =
            S[i][j];
      }
    }
  }
}

template <class T, int K>
Status launch_recurrent_t(const DeviceParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.N), static_cast<unsigned>(p.HV),
                  static_cast<unsigned>(p.V / kValueTile));
  kda_recurrent_kernel<T, K><<<grid, kRecWarps * kWarp, 0, stream>>>(p);
  return cuda::last_launch_status("kda_recurrent_kernel");
}

}  // namespace

Status launch_recurrent(const DeviceParams& p, bool bf16, cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  if (bf16) return p.K == 64 ? launch_recurrent_t<__nv_bfloat16, 64>(p, stream) : launch_recurrent_t<__nv_bfloat16, 128>(p, stream);
  return p.K == 64 ? launch_recurrent_t<__half, 64>(p, stream) : launch_recurrent_t<__half, 128>(p, stream);
}

}  // namespace groupattn::kda_cuda
