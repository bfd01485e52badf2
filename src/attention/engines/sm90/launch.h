// Host launchers of the sm90 engines, explicit instantiations per element type and head dim
// (decode: inst_{bf16,f16}_d128.cu for 128 and the dispatch, inst_{bf16,f16}_d{64,256}.cu for 64
// and 256, inst_decode_packed_{bf16,f16}.cu (D 64, 128) and inst_decode_packed_{bf16,f16}_d256.cu
// for the multi-token form; prefill:
// inst_prefill_{bf16,f16}_d128.cu for head dims 64 and 128, inst_prefill_{bf16,f16}_d256.cu for 256).
#pragma once

#include <cuda_runtime.h>

#include "attention/engines/cuda/kernel_params.h"
#include "groupattn/status.h"

namespace groupattn::sm90_engine {

// What the launcher needs besides the portable engine's KernelParams (which it reuses as is: the
// combine kernel reads them). k_tmap/v_tmap point at CUtensorMap objects built by tma_desc.h.
struct DecodeLaunch {
  const void* k_tmap = nullptr;
  const void* v_tmap = nullptr;
  int col_tile = 8;    // column_tile(max_q * group)
  int head_dim = 128;  // D == Dv: one of kDecodeHeadDims
  bool fp8 = false;    // f8e4m3 K/V (head dim 128): fp8 tensor maps, in-register conversion
  // fp8 packed rows with section 17's single converter warpgroup (decode_fp8_one_converter_wg).
  bool fp8_one_converter_wg = false;
  // fp8 with a bf16 Q: the GEMMs in bf16 as before session 19 -- swap-AB both, packed rows S
  // (decode_fp8_bf16_mma; default f16: DecodeTraits::kF16Mma, PrefillTraits::kSF16).
  bool fp8_bf16_mma = false;
  // Cluster mode (p.cluster_reduce) with a caller-forced split count: one cluster resident at a
  // time is enough (an automatic count needs the whole grid resident, one wave).
  bool cluster_forced = false;
  // Planning only (the engine's workspace_bytes): when set, launch_decode launches nothing and
  // stores here whether it would reduce the splits in a cluster, the choice a launch with the same
  // params makes on this device (then the call needs no workspace). The stream is not used.
  bool* plan_cluster = nullptr;
  // The calling thread's current device as the engine asked it on this call (cuda_current_device),
  // so the launcher's once-per-device caches (the shared-memory attribute, the cluster occupancy)
  // are read without another cudaGetDevice; -1: the launcher asks.
  int device = -1;
};

// Runs the decode kernel (grid: m_blocks * num_splits, Hkv, B) and, when p.num_splits > 1, the
// portable engine's combine kernel as a programmatic dependent launch, or in cluster mode the
// kernel alone (p.o_partial may then be null). Dispatches on l.head_dim to
// launch_decode_head_dim. With l.plan_cluster set it only plans (see DecodeLaunch).
template <class T>
Status launch_decode(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream);

// The decode kernels of one head dim (64, 128 or 256).
template <class T, int kHeadDim>
Status launch_decode_head_dim(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream);

// The multi-token decode form (decode_traits.h packed_rows_form): the prefill kernel in its
// packed-decode mode at head dim l.head_dim (64, 128 or 256; l.fp8: 128) (grid: m_blocks *
// num_splits, Hkv, B; m_blocks = row blocks of 128 packed query rows), then the combine kernel
// when p.num_splits > 1. Tensor maps of K and V as for launch_decode (64-row boxes); l.col_tile is
// not read.
template <class T>
Status launch_decode_packed(const cuda_engine::KernelParams& p, const DecodeLaunch& l, cudaStream_t stream);

// The prefill kernel (prefill_kernel.cuh): tensor maps of Q (64-row boxes) and of K and V (boxes of
// prefill_tile(head_dim).block_n rows), built by tma_desc.h.
struct PrefillLaunch {
  const void* q_tmap = nullptr;
  const void* k_tmap = nullptr;
  const void* v_tmap = nullptr;
  int head_dim = 128;  // D == Dv: 64, 128 or 256
  // Grid (Hq, m_blocks, B) instead of (m_blocks, Hq, B): within a sequence every head's last query
  // tile launches before any head's second-to-last (longest first over the whole sequence, not
  // per head). p.m_blocks must then be <= 65535 (grid y).
  bool heads_fastest = false;
  // The producer prefetches into L2 the Q tile of the CTA one SM count later in launch order
  // (prefill_kernel.cuh, prefetch_q_ahead; batched Q only). Results are the same either way.
  bool q_prefetch_ahead = false;
  // Thread 0 issues the CTA's Q and first KV tile right after the barrier init, before the CTA's
  // __syncthreads (prefill_kernel.cuh, issue_first_loads). Results are the same either way.
  bool early_first_loads = false;
  // The staged epilogue writes O into shared memory with stmatrix instead of 4-byte stores
  // (prefill_kernel.cuh, store_o_staged). Results are the same either way.
  bool stsm_epilogue = false;
  // O leaves the staged epilogue by TMA stores (prefill_kernel.cuh, store_o_staged; the kernel's
  // second form, head dims 128 and 256: PrefillTraits::kTmaStoreO), each consumer warp its 16 rows
  // through o_tmap: a map of out with boxes of PrefillTraits::kOBoxRows rows whose row extent is the
  // sequence length (batched Q; ignored for varlen Q, whose rows past a sequence belong to the
  // next, and at head dim 64). Results are the same either way.
  bool tma_store_o = false;
  const void* o_tmap = nullptr;
  // Head dim 256: the 80-key form (PrefillTraitsD256N80, prefill_launch_tile; k_tmap and v_tmap
  // then have 80-row boxes). Ignored at other head dims. Results agree with the 64-key form's to
  // rounding (the softmax sees other tile boundaries), both against the fp64 reference.
  bool d256_n80 = false;
  // > 0: the persistent form (prefill_persistent.cuh; head dim 128, batched Q and K/V without
  // seqlens_k, full or causal attention without window, with tma_store_o and o_tmap) on this many CTAs,
  // each taking the units c, c + grid, ... of a static list (full: (sequence, query head, 128-row
  // block); causal: persistent_causal_units); the engine's choose_persistent decides. 0: the plain
  // grid. Results are the same either way (bitwise).
  int persistent_grid = 0;
};

// The persistent form's causal list (docs/PREFILL_SM90.md, "Step C as built"): with pairs (Sq == Sk)
// each (sequence, query head) has m_blocks / 2 units of two works, the 128-row blocks m - 1 - i and i
// (m + 1 KV tiles together), and with m_blocks odd one more unit of the middle block alone, after all
// the pairs; without pairs (Sq != Sk) one unit per block, the longest first. Heads fastest while one
// sequence's K and V fit in kHeadsFastestKvBytes (the plain grid's rule, PrefillLaunch::heads_fastest),
// else a head's units together (longer sequences: the CTAs in flight then read one or two KV heads,
// whose K and V stay in L2). The engine's grid and the kernel's list take their unit count from here.
inline constexpr int64_t kHeadsFastestKvBytes = int64_t{16} << 20;
constexpr int64_t persistent_causal_units(int64_t m_blocks, int64_t heads_q, int64_t batch, bool pairs) {
  return heads_q * batch * (pairs ? m_blocks / 2 + m_blocks % 2 : m_blocks);
}

// Runs the prefill kernel (grid: m_blocks, Hq, B, or Hq, m_blocks, B with l.heads_fastest);
// p.num_splits must be 1. Dispatches on l.head_dim to launch_prefill_head_dim.
template <class T>
Status launch_prefill(const cuda_engine::KernelParams& p, const PrefillLaunch& l, cudaStream_t stream);

// The Q prefetch of the prefill kernel (PrefillLaunch::q_prefetch_ahead), a switch for measurement
// and tests: -1 from GROUPATTN_SM90_PREFILL_Q_AHEAD ("1": on; read at the first call, default off),
// 0 off, 1 on.
void set_prefill_q_ahead_mode(int mode);
bool prefill_q_ahead();

// The early first loads of the prefill kernel (PrefillLaunch::early_first_loads), the same kind of
// switch: -1 from GROUPATTN_SM90_PREFILL_EARLY_LOADS ("0": off; read at the first call, default on),
// 0 off, 1 on.
void set_prefill_early_loads_mode(int mode);
bool prefill_early_loads();

// The stmatrix epilogue (PrefillLaunch::stsm_epilogue), the same kind of switch:
// GROUPATTN_SM90_PREFILL_STSM_EPILOGUE ("0": off; default on).
void set_prefill_stsm_epilogue_mode(int mode);
bool prefill_stsm_epilogue();

// The decode work list for batches of mixed lengths (docs/DECODE_SM90.md section 20), a switch for
// measurement and tests: -1 from GROUPATTN_SM90_DECODE_WORK_LIST ("0": off; read at the first call,
// default on), 0 off, 1 on. decode_work_list() is the value in force.
void set_decode_work_list_mode(int mode);
bool decode_work_list();

// The decode's cluster launch through the driver's cuLaunchKernelEx on a CUfunction fetched once per
// kernel and device (cuda/driver_launch.h) instead of cudaLaunchKernelEx (issue 11's host cost), a
// switch for measurement and tests: -1 from GROUPATTN_SM90_DECODE_DRIVER_LAUNCH ("0": off; read at the
// first call, default on), 0 off, 1 on. The same kernel, parameters and configuration either way.
void set_decode_driver_launch_mode(int mode);
bool decode_driver_launch();

// The swap-AB decode's first KV tile issued by thread 0 before the CTA barrier (batched K/V;
// KernelParams::early_first_tiles), the same kind of switch: GROUPATTN_SM90_DECODE_EARLY_TILES
// ("0": off; default on). Results are the same either way.
void set_decode_early_tiles_mode(int mode);
bool decode_early_tiles();

// The work list's grid order (KernelParams::list_heads_fastest), the same kind of switch:
// GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST ("0": off, the plane-major grid; default on).
void set_decode_list_heads_fastest_mode(int mode);
bool decode_list_heads_fastest();

// The plan's shortcut for equal lengths (KernelParams::list_uniform_fast), the same kind of switch:
// GROUPATTN_SM90_DECODE_LIST_UNIFORM_FAST ("0": off; default on).
void set_decode_list_uniform_fast_mode(int mode);
bool decode_list_uniform_fast();

// The work list for batches just under the wave, P / 2 < B <= P (KernelParams::list_near_wave,
// cuda/decode_work_list.h list_near_wave), the same kind of switch:
// GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE ("1": on; default off).
void set_decode_list_near_wave_mode(int mode);
bool decode_list_near_wave();

// The TMA store of O (PrefillLaunch::tma_store_o), the same kind of switch:
// GROUPATTN_SM90_PREFILL_TMA_STORE_O ("0": off; default on).
void set_prefill_tma_store_o_mode(int mode);
bool prefill_tma_store_o();

// The 80-key D 256 prefill form (PrefillLaunch::d256_n80), the same kind of switch:
// GROUPATTN_SM90_PREFILL_D256_N80 ("0": off; default on).
void set_prefill_d256_n80_mode(int mode);
bool prefill_d256_n80();

// The persistent form of the prefill kernel (PrefillLaunch::persistent_grid; docs/PREFILL_SM90.md, "A
// persistent form with per-warpgroup query tiles"), the same kind of switch:
// GROUPATTN_SM90_PREFILL_PERSISTENT ("0": off; default on). It applies where choose_persistent admits
// the problem (head dim 128, full attention, batched Q and K/V without seqlens_k or window, O by TMA
// store); elsewhere the plain grid runs either way.
void set_prefill_persistent_mode(int mode);
bool prefill_persistent();
// The persistent form for causal attention (the same kernel's causal list; docs/PREFILL_SM90.md,
// "Step C as built"), a switch of its own so that the full form stays as measured:
// GROUPATTN_SM90_PREFILL_PERSISTENT_CAUSAL ("0": off; read at the first call, default on). It applies
// where choose_persistent admits a causal problem (as above, and no 128-row block whose rows all see
// no key: Sq - Sk < 128) with the persistent form itself on.
void set_prefill_persistent_causal_mode(int mode);
bool prefill_persistent_causal();
// Test hook: the persistent form's grid forced to min(ctas, units) CTAs (0: one per SM, the default),
// so that a CTA runs dozens of works in a small problem.
void set_prefill_persistent_grid(int ctas);
// Test hook: the persistent grid of this process's last sm90-prefill run (0: it ran the plain grid).
int prefill_last_persistent_grid();

// fp8 packed rows with one converter warpgroup (DecodeLaunch::fp8_one_converter_wg; docs/DECODE_SM90.md
// section 21), the same kind of switch: GROUPATTN_SM90_FP8_CONVERTER_WGS ("1": one; default two).
void set_decode_fp8_one_converter_wg_mode(int mode);
bool decode_fp8_one_converter_wg();

// The swap-AB split plan's wave of two CTAs an SM for paged K/V of any page size, and the work
// list's several-wave fallback where a wave of two puts the batch in the band (decode_split_plan.h
// split_wave_of, sm90_engine.cu list_plan; docs/DECODE_SM90.md section 29), the same kind of switch:
// GROUPATTN_SM90_DECODE_PAGED_WAVE_TWO ("0": the plans before session 19; default on).
void set_decode_paged_wave_two_mode(int mode);
bool decode_paged_wave_two();

// fp8 K/V with a bf16 Q: the GEMMs in bf16 as before session 19, both in the swap-AB form and
// S = Q K^T in the packed-rows form (DecodeLaunch::fp8_bf16_mma; docs/DECODE_SM90.md sections 28
// and 30), the same kind of switch: GROUPATTN_SM90_DECODE_FP8_BF16_MMA ("1": bf16; default f16).
void set_decode_fp8_bf16_mma_mode(int mode);
bool decode_fp8_bf16_mma();

// Multi-token decode on small pages in the packed-rows form (sm90_engine.cu pages_fit_packed_rows;
// docs/DECODE_SM90.md section 22), a switch for measurement and tests: -1 from
// GROUPATTN_SM90_DECODE_PACKED_SMALL_PAGES ("0": off; read at the first call, default on), 0 off, 1 on.
void set_decode_packed_small_pages_mode(int mode);
bool decode_packed_small_pages();

// The packed-rows form below its cut at head dims 64 and 256 (decode_traits.h packed_rows_below_cut,
// sm90_engine.cu plan_call; docs/DECODE_SM90.md section 31), the same kind of switch:
// GROUPATTN_SM90_DECODE_PACKED_BELOW_CUT ("0": swap-AB there as before; default on).
void set_decode_packed_below_cut_mode(int mode);
bool decode_packed_below_cut();

// The prefill kernel of one head dim (64, 128 or 256).
template <class T, int kHeadDim>
Status launch_prefill_head_dim(const cuda_engine::KernelParams& p, const PrefillLaunch& l, cudaStream_t stream);

}  // namespace groupattn::sm90_engine
