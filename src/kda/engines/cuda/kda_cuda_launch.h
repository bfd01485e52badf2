// Host-side entry points of the KDA cuda kernels (kda_recurrent.cu, kda_chunked.cu) and the
// chunked path's workspace layout, shared by the engine and its launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "groupattn/status.h"
#include "kda/engines/cuda/kda_cuda_common.cuh"

namespace groupattn::kda_cuda {

// Workspace of the chunked path, carved from the caller's buffer:
//   chunk_offsets int64 [N + 1]                  first chunk index of each sequence
//   chunk blocks  fp32  [max_chunks, HV, block]  one prep result per (chunk, value head)
//   stream sync   int32 [2 + max_chunks * HV]     the streamed sm_90 pass's item counter (64-bit)
//                                                  and one ready flag per block (zeroed per call)
// with block = W [16,K] | Qt [16,K] | Kh [16,K] | U [16,V] | Aqk [16,16] | exp(Gamma_C) [K].
// Floats of kda_wgmma_image.cuh's block (K = V = 128), checked there.
inline constexpr int64_t kWgmmaImageFloats = 8832;

struct ChunkLayout {
  int64_t max_chunks = 0;    // upper bound on sum_n ceil(len_n / 16)
  int64_t block_floats = 0;  // floats per (chunk, value head)
  size_t offsets_bytes = 0;  // aligned
  size_t sync_offset = 0;    // bytes from the workspace start to the stream sync words (aligned)
  size_t sync_bytes = 0;
  size_t total_bytes = 0;
  // Float offsets inside one block.
  int64_t w = 0, qt = 0, kh = 0, u = 0, aqk = 0, ec = 0;
};

inline ChunkLayout chunk_layout(int64_t B, int64_t T, int64_t N, bool varlen, int64_t HV, int64_t K, int64_t V) {
  constexpr size_t kAlign = 256;
  ChunkLayout l;
  const int64_t per_seq = (T + kChunk - 1) / kChunk;
  // Dense: B sequences of T tokens. Varlen: the N lengths sum to T, and each adds at most one
  // partial chunk beyond T / 16.
  l.max_chunks = varlen ? per_seq + N : B * per_seq;
  l.w = 0;
  l.qt = l.w + kChunk * K;
  l.kh = l.qt + kChunk * K;
  l.u = l.kh + kChunk * K;
  l.aqk = l.u + kChunk * V;
  l.ec = l.aqk + kChunk * kChunk;
  l.block_floats = l.ec + K;
  // K = V = 128 blocks may be the sm_90 state pass's image (kda_wgmma_image.cuh), a little larger.
  if (K == 128 && V == 128) l.block_floats = std::max<int64_t>(l.block_floats, kWgmmaImageFloats);
  l.offsets_bytes = (static_cast<size_t>(N + 1) * sizeof(int64_t) + kAlign - 1) / kAlign * kAlign;
  const size_t blocks_end =
      l.offsets_bytes + static_cast<size_t>(l.max_chunks * HV * l.block_floats) * sizeof(float);
  l.sync_offset = (blocks_end + kAlign - 1) / kAlign * kAlign;
  l.sync_bytes = static_cast<size_t>(2 + l.max_chunks * HV) * sizeof(int32_t);
  l.total_bytes = l.sync_offset + l.sync_bytes;
  return l;
}

// The per-token recurrence (any T; the decode path). `bf16` selects the q/k/v/out element type
// (else f16). K is 64 or 128.
Status launch_recurrent(const DeviceParams& p, bool bf16, cudaStream_t stream);
// The chunked path: chunk map, per-(chunk, head) prep, then the sequential state pass and output.
Status launch_chunked(const DeviceParams& p, bool bf16, void* workspace, const ChunkLayout& layout,
                      cudaStream_t stream);
// The chunked path in one launch, no workspace (kda_chunked_fused.cu): each CTA preps its own
// chunks in shared memory before each state step. Any length is exact; the engine uses it for small
// problems only (kda_cuda_path.h's use_fused_path).
Status launch_chunked_fused(const DeviceParams& p, bool bf16, cudaStream_t stream);

// Stages of the chunked state pass's copy ring at 16-column V-tiles (2: double buffer; 3 or 4: the
// next two or three chunks' blocks in flight; any other value means 3, the default: 4.3-5.4 %
// faster than 2 at T 2048-8192 over two calls, docs/ENGINES.md "Session 14: a deeper copy ring"). A measurement
// switch: GROUPATTN_KDA_STATE_STAGES, read once; set_kda_state_stages(n) overrides it for tests (0:
// back to the environment). Results are the same bits for every count (KdaCuda.StateStagesBitwise).
int kda_state_stages();
void set_kda_state_stages(int stages);
// Which state kernel serves a chunked problem of ctas16 = N x HV x V / 16 sixteen-column CTAs on
// `sms` SMs: 0 the K-quarter one (kda_state_step.cuh, at the stages above), 1 the column-owning one
// (kda_state_cols.cuh, one barrier a step, 2 warps a CTA), 2 the column-owning one with K in halves
// (4 warps a CTA, partial sums under a named barrier). Automatic: 1 where the 16-column grid does
// not fit one CTA an SM (ctas16 > sms; -14 to -15 % at T 8192 H 24 and H 32 against the K-quarter
// kernel, where K in halves gives -9 %), else 2 (-3.0 to -5.1 % at T 1024-8192, H 4-16, against the
// K-quarter kernel, where the 2-warp form is 10-13 % slower; session 15 call 1, docs/ENGINES.md
// "Session 14: a state step without the partials"). Measured at K = 128 only. A measurement switch:
// GROUPATTN_KDA_STATE_COLS=0 / 1 / 2 forces a kind; read once; set_kda_state_cols(mode) overrides
// it for tests (-1: back to the environment / automatic).
int state_cols_kind(int64_t ctas16, int64_t sms);
void set_kda_state_cols(int mode);
// Whether the prep takes its pair sums through the anchor on tensor cores where a chunk's decays allow
// it exactly (kda_chunk_prep.cuh, kPairAnchorBound; the default), or through the running-product loop
// for every chunk (0). A measurement switch: GROUPATTN_KDA_PREP_PAIRS=0 / 1, read once;
// set_kda_prep_pairs(mode) overrides it for tests (-1: back to the environment).
bool kda_prep_anchored();
void set_kda_prep_pairs(int mode);
// Whether the chunked path's kernels (chunk map, prep, state) are launched through the driver's
// cuLaunchKernelEx on a CUfunction fetched once per kernel and device (cuda/driver_launch.h; host
// cost, issue 11: the runtime's per-launch lookup saved, as for the sm90 decode), or by <<<>>> (0).
// Same kernels, same arguments. A measurement switch: GROUPATTN_KDA_DRIVER_LAUNCH, read once;
// set_kda_driver_launch(mode) overrides it for tests (-1: back to the environment).
bool kda_driver_launch();
void set_kda_driver_launch(int mode);

// Whether the chunked path runs problems that use_cluster_chunked admits (kda_cuda_path.h) in one
// launch, the cluster kernel, on sm_90+ (the default), or through the prep and state kernels (0).
// The same prep and state pass: the same bits (KdaCuda.ClusterChunkedBitwise). A measurement switch:
// GROUPATTN_KDA_CLUSTER_CHUNKED, read once; set_kda_cluster_chunked(mode) overrides it for tests (-1:
// back to the environment).
bool kda_cluster_chunked();
void set_kda_cluster_chunked(int mode);
// Whether the calling thread's last launch_chunked ran the cluster kernel (for tests).
bool last_chunked_used_cluster_kernel();

// Whether the chunked path's state pass runs on wgmma (kda_state_sm90.cuh) where it can: compute
// capability 9.0 and K = V = 128 (the default), or on the portable kernels (0). Same products on
// the same tf32 operands in another order: results agree to rounding, not bitwise. A measurement
// switch: GROUPATTN_KDA_STATE_SM90, read once; set_kda_state_sm90(mode) overrides it for tests (-1:
// back to the environment).
bool kda_state_sm90();
void set_kda_state_sm90(int mode);
// Whether the calling thread's last launch_chunked ran the sm_90 state kernel (for tests).
bool last_chunked_used_sm90_state();
// Whether the sm_90 state pass may run streamed beside the prep where the state grid is small
// (use_streamed_sm90 in kda_chunked.cu): on by default; GROUPATTN_KDA_STREAMED, read once;
// set_kda_state_streamed(mode) overrides it for tests (-1: back to the environment).
bool kda_state_streamed();
void set_kda_state_streamed(int mode);
// Whether the calling thread's last launch_chunked ran the streamed path (for tests).
bool last_chunked_streamed();

}  // namespace groupattn::kda_cuda
