// The KDA "cuda" engine (portable CUDA, sm80+): the recurrent decode path and the chunked prefill.
// kda_cuda_run_path lets tests run either path on any problem (the engine picks one by length).
#pragma once

#include <cstddef>

#include "groupattn/kda.h"
#include "kda/engine_list.h"

namespace groupattn {

#if GROUPATTN_WITH_CUDA
const KdaEngine& kda_cuda_engine();  // engines/cuda/kda_cuda_engine.cu

// kChunkedFused: the chunked path's one-launch kernel for small problems (no workspace).
enum class KdaCudaPath { kAuto, kRecurrent, kChunked, kChunkedFused };
// Checks support as the engine does, then runs `path` on `stream` (cudaStream_t as void*), with
// a stream-ordered workspace allocation when the path needs scratch.
Status kda_cuda_run_path(const KdaParams& p, KdaCudaPath path, void* stream);
// The path the engine picks for p on the current device (kRecurrent, kChunkedFused or kChunked;
// kda_cuda_path.h), for tests.
KdaCudaPath kda_cuda_auto_path(const KdaParams& p);
// The chunked state pass's copy-ring stages at 16-column V-tiles (2, 3 or 4; 0: back to
// GROUPATTN_KDA_STATE_STAGES, else 3), for tests: every count gives the same bits.
void kda_cuda_set_state_stages(int stages);
// The chunked state pass's kernel (-1: GROUPATTN_KDA_STATE_COLS, else automatic by grid size; 0:
// the K-quarter kernel; 1: the column-owning kernel; 2: the column-owning kernel, K in halves),
// for tests.
void kda_cuda_set_state_cols(int mode);
// The chunked prep's pair sums (-1: GROUPATTN_KDA_PREP_PAIRS, else anchored where exact; 0: the
// running-product loop for every chunk; 1: anchored where exact), for tests.
void kda_cuda_set_prep_pairs(int mode);
// The chunked path's launches (-1: GROUPATTN_KDA_DRIVER_LAUNCH, else through the driver; 0: <<<>>>;
// 1: the driver's cuLaunchKernelEx), for tests: both give the same bits.
void kda_cuda_set_driver_launch(int mode);
// Small chunked problems in one launch, the cluster kernel, on sm_90+ (-1: GROUPATTN_KDA_CLUSTER_CHUNKED,
// else on; 0: the prep and state kernels; 1: the cluster kernel where kda_cuda_path.h's
// use_cluster_chunked admits the problem), for tests: both give the same bits.
void kda_cuda_set_cluster_chunked(int mode);
// Whether the calling thread's last chunked-path call ran the cluster kernel, for tests.
bool kda_cuda_last_call_used_cluster_kernel();
// The chunked state pass on wgmma where it can run (compute capability 9.0, K = V = 128;
// kda_state_sm90.cuh) (-1: GROUPATTN_KDA_STATE_SM90, else on; 0: the portable state kernels; 1: on),
// for tests: the same products in another order, so results agree to rounding, not bitwise.
void kda_cuda_set_state_sm90(int mode);
// Whether the calling thread's last chunked-path call ran the sm_90 state kernel, for tests.
bool kda_cuda_last_call_used_sm90_state();
// The sm_90 state pass streamed beside the prep where its grid is small (-1: GROUPATTN_KDA_STREAMED,
// else on; 0: the prep, then the state pass; 1: streamed where kda_chunked.cu's use_streamed_sm90
// admits the problem), for tests: the same kernels' arithmetic, so the same bits.
void kda_cuda_set_state_streamed(int mode);
// Whether the calling thread's last chunked-path call ran the streamed sm_90 path, for tests.
bool kda_cuda_last_call_streamed();
#endif

}  // namespace groupattn
