// KDA recurrent kernel: the exact per-token recurrence (include/groupattn/kda.h), the decode step.
//
//   q, k [B,T,H,K] (bf16/f16), v [B,T,HV,V], g [B,T,HV,K] f32, beta [B,T,HV] f32, out [B,T,HV,V]
//   state fp32 [pool, HV, V, K] (V-first) or [pool, HV, K, V] (K-first), rows via state_indices
//
// Decode is a stream over the state: each element is read once and written once per call, a few
// FLOPs per token in between, so the kernel is built to keep HBM busy (docs/ENGINES.md, kda/cuda):
//  - Work item = (sequence n, value head hv, tile of kRows = 64 value columns e): 32 KiB of state at
//    K = 128, one contiguous block in the V-first layout. Grid (HV * tiles, sequences): the items
//    of one sequence run side by side (one contiguous pool row; GVA heads share q/k through L2).
//  - First thing, every thread issues cp.async copies of its whole slice of the item's state into
//    shared memory (16-byte vectors on the aligned V-first path): 32 KiB per CTA in flight that hold
//    no registers while the tokens are prepared, 4 CTAs per SM: 128 KiB (Little's law at ~4.6 TB/s
//    and ~1 us loaded latency needs ~35 KiB per SM).
//  - While the state is in flight, each warp prepares tokens (warp w: tokens w, w+4, ...) into shared
//    memory once per CTA: a = exp(gate), k and q (l2-normalised), k.q, beta, and v of the tile's rows.
//  - Thread layout: kLanesPerRow = K/8 consecutive lanes share a state row S^T[e][.]; lane j holds
//    channels [4j, 4j+4) and [4(j+L), 4(j+L)+4) (two float4: each warp access covers L*16
//    contiguous bytes per row) of kRowsPerThread rows. Rows are independent through the whole
//    recurrence, so a thread takes its rows in groups of 4 (32 floats in registers): all tokens on
//    a group, then its stores (fire-and-forget), then the next group.
//  - Per token, per row: S' = Diag(a) S; sk = S'^T k, sq = S'^T q (per-lane partial sums, then an
//    xor butterfly over the row's L lanes); r = v - sk; S = S' + beta k r^T;
//    o = scale (sq + beta r (k.q)) (= S^T scale q after the write).
// Any T runs (this is also the reference-exact path for short prefill): tokens are staged in blocks
// of kChunk, the state parked in shared memory between blocks. K-first states and unaligned V-first
// views copy 4-byte elements (correct, slower).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/host_timing.h"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_check.h"
#include "kda/engines/cuda/kda_cuda_common.cuh"
#include "kda/engines/cuda/kda_cuda_launch.h"

namespace groupattn::kda_cuda {
namespace {

// Compile-time shape of one work item and of the threads that hold it.
template <int K>
struct RecurrentConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kVecsPerRow = 2;                   // float4s of a state row per lane
  static constexpr int kChannels = 4 * kVecsPerRow;       // key channels per lane
  static constexpr int kLanesPerRow = K / kChannels;      // L: lanes sharing one state row
  static constexpr int kRowSlots = kWarp / kLanesPerRow;  // rows a warp covers at once
  static constexpr int kRows = 64;                        // value columns per work item
  static constexpr int kRowsPerThread = kRows / (kWarps * kRowSlots);
  static constexpr int kRowGroup = 4;  // rows in registers at once
  static constexpr int kVecsPerThread = kRowsPerThread * kVecsPerRow;
  static constexpr int kTileFloats = kRows * K;  // the item's state in shared memory
  // CTAs per SM (the register cap: 128 registers, no spills; 5 or 6 spill): 4 x 32 KiB of state
  // in flight per SM at K = 128 (T <= 16 needs at most 61 KiB of shared memory per CTA).
  static constexpr int kMinBlocks = 4;

  static_assert(K % kChannels == 0 && kWarp % kLanesPerRow == 0, "a row splits evenly over whole lanes");
  static_assert(kRowsPerThread * kWarps * kRowSlots == kRows, "the CTA's threads cover its rows");
  static_assert(64 % kRows == 0, "V in {64, 128} is a whole number of items");
  static_assert(kRowsPerThread % kRowGroup == 0, "row groups tile the thread's rows");
  static_assert(kRowGroup <= kLanesPerRow, "one lane per row of a group stores the row's output");
  static_assert(kVecsPerThread * 4 * kThreads == kTileFloats, "the slices tile the item's state");
};

// Dynamic shared memory: the item's state [kVecsPerThread][kThreads] float4 (thread-major per
// vector: conflict-free 16-byte accesses), then up to `cap` staged tokens: a, k, q [cap][K],
// v [cap][kRows], beta, k.q [cap].
template <int K>
struct SharedLayout {
  using Cfg = RecurrentConfig<K>;
  float4* state;
  float *a, *k, *q, *v, *beta, *kq;
  __device__ SharedLayout(float4* base, int cap) {
    state = base;
    a = reinterpret_cast<float*>(base + Cfg::kVecsPerThread * Cfg::kThreads);
    k = a + cap * K;
    q = k + cap * K;
    v = q + cap * K;
    beta = v + cap * Cfg::kRows;
    kq = beta + cap;
  }
  static size_t bytes(int cap) {
    return (static_cast<size_t>(Cfg::kTileFloats) + static_cast<size_t>(cap) * (3 * K + Cfg::kRows + 2)) *
           sizeof(float);
  }
};

// The thread's rows and channels inside an item: row r of the thread is value column
// e0 + (warp * R + r) * kRowSlots + slot; vector c holds channels 4 (j + L c) .. +3, and lives in
// shared memory at state[(r * kVecsPerRow + c) * kThreads + threadIdx.x].
template <int K>
struct Place {
  using Cfg = RecurrentConfig<K>;
  int tid, warp, slot, j;
  __device__ Place() {
    tid = static_cast<int>(threadIdx.x);
    const int lane = tid % kWarp;
    warp = tid / kWarp;
    slot = lane / Cfg::kLanesPerRow;
    j = lane % Cfg::kLanesPerRow;
  }
  __device__ int row(int r) const { return (warp * Cfg::kRowsPerThread + r) * Cfg::kRowSlots + slot; }
  __device__ int channel(int c) const { return 4 * (j + Cfg::kLanesPerRow * c); }
  __device__ int vec(int r, int c) const { return (r * Cfg::kVecsPerRow + c) * Cfg::kThreads + tid; }
};

// Sum over the L consecutive lanes of a row group (xor butterfly: every lane ends with the same,
// order-fixed sum, so results are bitwise reproducible).
template <int kLanes>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Element (d, e) of state (row, hv) is at base + e * ce + d * cd (V-first: ce = row stride, cd = 1).
struct StateAddr {
  int64_t ce, cd;
};

// Starts the copy of the thread's slice of state rows (row, hv) at value column e0 into shared
// memory. kVec4: V-first with 16-byte aligned rows (one 16-byte copy per vector); else 4-byte copies.
template <int K, bool kVec4>
__device__ __forceinline__ void copy_slice_async(const DeviceParams& p, int64_t row, int hv, int e0,
                                                 const Place<K>& pl, float4* tile) {
  using Cfg = RecurrentConfig<K>;
  const float* base = p.s_in + row * p.si_sn + hv * p.si_sh;
  const StateAddr a{p.v_first ? p.si_sr : 1, p.v_first ? 1 : p.si_sr};
#pragma unroll
  for (int r = 0; r < Cfg::kRowsPerThread; ++r) {
#pragma unroll
    for (int c = 0; c < Cfg::kVecsPerRow; ++c) {
      const int64_t e = e0 + pl.row(r), d = pl.channel(c);
      if constexpr (kVec4) {
        cuda::cp_async_16_or_zero(tile + pl.vec(r, c), base + e * a.ce + d, true);
      } else {
        float* dst = reinterpret_cast<float*>(tile + pl.vec(r, c));
#pragma unroll
        for (int i = 0; i < 4; ++i) cuda::cp_async_4(dst + i, base + e * a.ce + (d + i) * a.cd);
      }
    }
  }
  cuda::cp_async_commit();
}

template <int K, bool kVec4>
__device__ __forceinline__ void store_group(
    const DeviceParams& p, int64_t row, int hv, int e0, int r0, const Place<K>& pl,
    const float (&s)[RecurrentConfig<K>::kRowGroup][RecurrentConfig<K>::kChannels]) {
  using Cfg = RecurrentConfig<K>;
  float* base = p.s_out + row * p.so_sn + hv * p.so_sh;
  const StateAddr a{p.v_first ? p.so_sr : 1, p.v_first ? 1 : p.so_sr};
#pragma unroll
  for (int r = 0; r < Cfg::kRowGroup; ++r) {
#pragma unroll
    for (int c = 0; c < Cfg::kVecsPerRow; ++c) {
      const int64_t e = e0 + pl.row(r0 + r), d = pl.channel(c);
      if constexpr (kVec4) {
        __stcs(reinterpret_cast<float4*>(base + e * a.ce + d),
               make_float4(s[r][4 * c], s[r][4 * c + 1], s[r][4 * c + 2], s[r][4 * c + 3]));
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) base[e * a.ce + (d + i) * a.cd] = s[r][4 * c + i];
      }
    }
  }
}

// Stages tokens [t0, t0 + nb) of the sequence (nb <= the stage's capacity): warp w prepares
// tokens w, w + kWarps, ... with lane-strided channels d = jj*32 + lane; every thread loads v.
template <class T, int K>
__device__ __forceinline__ void stage_tokens(const DeviceParams& p, const SeqSpan& sq, int64_t t0, int nb,
                                             int h, int hv, int e0, const SharedLayout<K>& st) {
  using Cfg = RecurrentConfig<K>;
  constexpr int kPerLane = K / kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const T* qb = static_cast<const T*>(p.q) + sq.batch * p.q_sb + h * p.q_sh;
  const T* kb = static_cast<const T*>(p.k) + sq.batch * p.k_sb + h * p.k_sh;
  const float* gb = p.g + sq.batch * p.g_sb + hv * p.g_sh;
  const bool in_kernel_gate = p.gate != kGateLogDecay;  // else g is the log decay itself
  for (int i = warp; i < nb; i += Cfg::kWarps) {
    const int64_t t = sq.bos + t0 + i;
    float kr[kPerLane], qr[kPerLane], gr[kPerLane];
#pragma unroll
    for (int jj = 0; jj < kPerLane; ++jj) {  // all loads first
      const int d = jj * kWarp + lane;
      kr[jj] = to_float(kb[t * p.k_st + d]);
      qr[jj] = to_float(qb[t * p.q_st + d]);
      gr[jj] = gb[t * p.g_st + d];
      if (in_kernel_gate && p.dt_bias != nullptr) gr[jj] += p.dt_bias[hv * p.dt_sh + d];
    }
    const float eA = in_kernel_gate && p.A_log != nullptr ? expf(p.A_log[hv]) : 1.f;
    const float beta = effective_beta(p, p.beta[sq.batch * p.b_sb + t * p.b_st + hv * p.b_sh]);
    float kk = 0.f, qq = 0.f;
#pragma unroll
    for (int jj = 0; jj < kPerLane; ++jj) {
      kk += kr[jj] * kr[jj];
      qq += qr[jj] * qr[jj];
    }
    if (p.l2norm) {  // x / sqrt(sum x^2 + 1e-6) per head row, before the scale
      const float rk = 1.f / sqrtf(warp_sum(kk) + 1e-6f), rq = 1.f / sqrtf(warp_sum(qq) + 1e-6f);
#pragma unroll
      for (int jj = 0; jj < kPerLane; ++jj) {
        kr[jj] *= rk;
        qr[jj] *= rq;
      }
    }
    float kq = 0.f;
#pragma unroll
    for (int jj = 0; jj < kPerLane; ++jj) {
      const int d = jj * kWarp + lane;
      kq += kr[jj] * qr[jj];
      st.k[i * K + d] = kr[jj];
      st.q[i * K + d] = qr[jj];
      st.a[i * K + d] = gr[jj];
    }
    kq = warp_sum(kq);
    // The decay in place, one channel at a time (the gate input plus dt_bias parked in st.a): the
    // transcendentals' slow paths are calls, and narrow code keeps the register cap for the step.
#pragma unroll 1
    for (int d = lane; d < K; d += kWarp) {
      const float x = st.a[i * K + d];
      st.a[i * K + d] = expf(in_kernel_gate ? gate_from_biased(p, x, eA) : x);
    }
    if (lane == 0) {
      st.kq[i] = kq;
      st.beta[i] = beta;
    }
  }
  const T* vb = static_cast<const T*>(p.v) + sq.batch * p.v_sb + hv * p.v_sh + e0;
#pragma unroll 1
  for (int x = static_cast<int>(threadIdx.x); x < nb * Cfg::kRows; x += Cfg::kThreads) {
    const int i = x / Cfg::kRows, e = x % Cfg::kRows;
    st.v[i * Cfg::kRows + e] = to_float(vb[(sq.bos + t0 + i) * p.v_st + e]);
  }
}

// One token (stage slot i) on rows r0 .. r0 + kRowGroup of the thread, writing their outputs.
// Vector by vector, so next to the group's state only one float4 each of a, k, q is live.
template <class T, int K>
__device__ __forceinline__ void step_token(
    const DeviceParams& p, const SharedLayout<K>& sm, int i, int r0, const Place<K>& pl, float bad,
    T* out_row, float (&s)[RecurrentConfig<K>::kRowGroup][RecurrentConfig<K>::kChannels]) {
  using Cfg = RecurrentConfig<K>;
  constexpr int G = Cfg::kRowGroup;
  float sk[G], sqv[G];
#pragma unroll
  for (int r = 0; r < G; ++r) sk[r] = 0.f, sqv[r] = 0.f;
#pragma unroll
  for (int c = 0; c < Cfg::kVecsPerRow; ++c) {  // S' = Diag(a) S; partial S'^T k and S'^T q
    const int d = i * K + pl.channel(c);
    const float4 a4 = *reinterpret_cast<const float4*>(sm.a + d);
    const float4 k4 = *reinterpret_cast<const float4*>(sm.k + d);
    const float4 q4 = *reinterpret_cast<const float4*>(sm.q + d);
    const float a[4] = {a4.x, a4.y, a4.z, a4.w}, kr[4] = {k4.x, k4.y, k4.z, k4.w};
    const float qr[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
    for (int r = 0; r < G; ++r) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        float& e = s[r][4 * c + x];
        e *= a[x];
        sk[r] += e * kr[x];
        sqv[r] += e * qr[x];
      }
    }
  }
  const float beta = sm.beta[i], kq = sm.kq[i];
  float br[G];
  float mine = 0.f;  // lane j < G keeps the output of the group's row j
#pragma unroll
  for (int r = 0; r < G; ++r) {
    sk[r] = row_sum<Cfg::kLanesPerRow>(sk[r]);
    sqv[r] = row_sum<Cfg::kLanesPerRow>(sqv[r]);
    br[r] = beta * (sm.v[i * Cfg::kRows + pl.row(r0 + r)] - sk[r]);
    if (pl.j == r) mine = p.scale * (sqv[r] + br[r] * kq) + bad;
  }
  if (pl.j < G) out_row[pl.row(r0 + pl.j)] = from_float<T>(mine);
#pragma unroll
  for (int c = 0; c < Cfg::kVecsPerRow; ++c) {  // S = S' + beta k r^T
    const float4 k4 = *reinterpret_cast<const float4*>(sm.k + i * K + pl.channel(c));
    const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
    for (int r = 0; r < G; ++r) {
#pragma unroll
      for (int x = 0; x < 4; ++x) s[r][4 * c + x] += br[r] * kr[x];
    }
  }
}

template <class T, int K, bool kVec4>
__global__ void __launch_bounds__(RecurrentConfig<K>::kThreads, RecurrentConfig<K>::kMinBlocks)
    kda_recurrent_kernel(const DeviceParams p, int token_cap) {
  using Cfg = RecurrentConfig<K>;
  constexpr int G = Cfg::kRowGroup;
  extern __shared__ float4 shared_mem[];
  const SharedLayout<K> sm(shared_mem, token_cap);
  const Place<K> pl;
  // blockIdx.x = hv * tiles + tile; sequences n = blockIdx.y + k * gridDim.y (one pass unless
  // N > 65535). The (hv, tile) items of one sequence are neighbours: one contiguous pool row.
  const int tiles = p.V / Cfg::kRows;
  const int hv = static_cast<int>(blockIdx.x) / tiles;
  const int e0 = (static_cast<int>(blockIdx.x) % tiles) * Cfg::kRows;
  const int h = hv / p.group;  // GVA: value head hv reads qk head hv / (HV / H)

  for (int64_t n = blockIdx.y; n < p.N; n += gridDim.y) {
    const SeqSpan sq = seq_span(p, n);
    const StateRows rows = state_rows(p, n);
    __syncthreads();  // the previous item is done with shared memory
    if (rows.in >= 0) copy_slice_async<K, kVec4>(p, rows.in, hv, e0, pl, sm.state);
    bool parked = rows.in >= 0;              // the slice in shared memory is the state (else zero)
    const float bad = rows.bad ? NAN : 0.f;  // poisons the outputs of a sequence with a bad pool row
    T* ob = static_cast<T*>(p.out) + sq.batch * p.o_sb + hv * p.o_sh + e0;

    for (int64_t t0 = 0;; t0 += token_cap) {  // token blocks; one for a decode step (T <= 16)
      const int nb = static_cast<int>(min(static_cast<int64_t>(token_cap), sq.len - t0));
      if (t0 > 0) __syncthreads();  // the previous block's stage is consumed
      stage_tokens<T, K>(p, sq, t0, nb, h, hv, e0, sm);
      cuda::cp_async_wait<0>();
      __syncthreads();
      const bool last = t0 + nb >= sq.len;
#pragma unroll 1
      for (int r0 = 0; r0 < Cfg::kRowsPerThread; r0 += G) {
        float s[G][Cfg::kChannels];  // S[d][e] for e = e0 + pl.row(r0 + r), d = pl.channel(x / 4) + x % 4
#pragma unroll
        for (int r = 0; r < G; ++r) {
#pragma unroll
          for (int c = 0; c < Cfg::kVecsPerRow; ++c) {
            const float4 x = parked ? sm.state[pl.vec(r0 + r, c)] : make_float4(0.f, 0.f, 0.f, 0.f);
            s[r][4 * c] = x.x, s[r][4 * c + 1] = x.y, s[r][4 * c + 2] = x.z, s[r][4 * c + 3] = x.w;
          }
        }
        for (int i = 0; i < nb; ++i)
          step_token<T, K>(p, sm, i, r0, pl, bad, ob + (sq.bos + t0 + i) * p.o_st, s);
        if (!last) {  // park for the next token block (the thread's own vectors: no barrier needed)
#pragma unroll
          for (int r = 0; r < G; ++r)
#pragma unroll
            for (int c = 0; c < Cfg::kVecsPerRow; ++c)
              sm.state[pl.vec(r0 + r, c)] =
                  make_float4(s[r][4 * c], s[r][4 * c + 1], s[r][4 * c + 2], s[r][4 * c + 3]);
        } else if (rows.out >= 0) {
          store_group<K, kVec4>(p, rows.out, hv, e0, r0, pl, s);
        }
      }
      parked = true;
      if (last) break;
    }
  }
}

constexpr int64_t kMaxGridY = 65535;

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The 16-byte path needs V-first rows that start on 16 bytes in both states.
bool vec4_state(const DeviceParams& p) {
  if (!p.v_first) return false;
  auto ok = [](const float* base, int64_t sn, int64_t sh, int64_t sr) {
    return base == nullptr || (aligned16(base) && sn % 4 == 0 && sh % 4 == 0 && sr % 4 == 0);
  };
  return ok(p.s_in, p.si_sn, p.si_sh, p.si_sr) && ok(p.s_out, p.so_sn, p.so_sh, p.so_sr);
}

template <class T, int K, bool kVec4>
Status launch_recurrent_t(const DeviceParams& p, cudaStream_t stream) {
  using Cfg = RecurrentConfig<K>;
  // Tokens staged per block: all of a decode step's (T <= 16), blocks of kChunk beyond. Dense:
  // every sequence has T tokens; varlen: each has at most the total T.
  const int token_cap = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(p.T, kChunk)));
  const size_t smem = SharedLayout<K>::bytes(token_cap);
  constexpr auto kernel = kda_recurrent_kernel<T, K, kVec4>;
  if (smem > 48 * 1024) {  // beyond the default dynamic limit (at most 61 KiB: K = 128, 16 tokens)
    // Once per device and kernel, at the kernel's largest request (kChunk staged tokens): the
    // attribute is an upper bound, so every smaller launch runs under it (it was set before each
    // such launch: a driver call per multi-token decode step).
    GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kernel>(static_cast<int>(SharedLayout<K>::bytes(kChunk))));
  }
  const dim3 grid(static_cast<unsigned>(p.HV * (p.V / Cfg::kRows)),
                  static_cast<unsigned>(std::min<int64_t>(p.N, kMaxGridY)));
  host_timing::mark("kda recurrent launch plan");
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(p, token_cap);
  const Status launched = cuda::last_launch_status("kda_recurrent_kernel");
  host_timing::mark("launch kda_recurrent_kernel");
  return launched;
}

template <class T>
Status launch_recurrent_k(const DeviceParams& p, cudaStream_t stream) {
  const bool vec = vec4_state(p);
  if (p.K == 64)
    return vec ? launch_recurrent_t<T, 64, true>(p, stream) : launch_recurrent_t<T, 64, false>(p, stream);
  return vec ? launch_recurrent_t<T, 128, true>(p, stream) : launch_recurrent_t<T, 128, false>(p, stream);
}

}  // namespace

Status launch_recurrent(const DeviceParams& p, bool bf16, cudaStream_t stream) {
  if (p.N == 0) return Status::Ok();
  return bf16 ? launch_recurrent_k<__nv_bfloat16>(p, stream) : launch_recurrent_k<__half>(p, stream);
}

}  // namespace groupattn::kda_cuda
