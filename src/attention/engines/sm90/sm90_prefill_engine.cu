// The sm90-prefill engine (Hopper prefill, issue 3): support checks, tensor maps and dispatch to
// launch_prefill (inst_prefill_*.cu).
//
// Its first cut (SS variant) passed its whole GPU tier on its first hardware run (136d1ec) and was
// 1.3x the portable engine's speed there, so automatic selection picks it for the prefill problems
// it supports (registered after the sm90 decode engine, before the portable one).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "attention/engine_list.h"
#include "attention/engines/cuda/host_params.h"
#include "attention/engines/sm90/engine_checks.h"
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/mode_switch.h"
#include "attention/engines/sm90/prefill_traits.h"
#include "attention/engines/sm90/tma_desc.h"
#include "core/cuda_runtime_shim.h"

namespace groupattn {
namespace {

using sm90_engine::kMaxGridYZ;
using sm90_engine::kMaxNewTokens;

// sm90_engine::set_prefill_q_ahead_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_q_ahead_switch{"GROUPATTN_SM90_PREFILL_Q_AHEAD", false};
// sm90_engine::set_prefill_early_loads_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_early_loads_switch{"GROUPATTN_SM90_PREFILL_EARLY_LOADS", true};
// sm90_engine::set_prefill_stsm_epilogue_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_stsm_epilogue_switch{"GROUPATTN_SM90_PREFILL_STSM_EPILOGUE", true};
// sm90_engine::set_prefill_tma_store_o_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_tma_store_o_switch{"GROUPATTN_SM90_PREFILL_TMA_STORE_O", true};
// sm90_engine::set_prefill_d256_n80_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_d256_n80_switch{"GROUPATTN_SM90_PREFILL_D256_N80", true};
// sm90_engine::set_prefill_persistent_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_persistent_switch{"GROUPATTN_SM90_PREFILL_PERSISTENT", true};
// sm90_engine::set_prefill_persistent_causal_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_persistent_causal_switch{"GROUPATTN_SM90_PREFILL_PERSISTENT_CAUSAL", true};
// sm90_engine::set_prefill_persistent_grid: the persistent form's CTAs (0: one per SM).
std::atomic<int> g_persistent_grid{0};
// sm90_engine::prefill_last_persistent_grid: the last run's PrefillLaunch::persistent_grid.
std::atomic<int> g_last_persistent_grid{0};

// The persistent form's grid for this launch (PrefillLaunch::persistent_grid), or 0 for the plain grid.
// Its scope (docs/PREFILL_SM90.md, "A persistent form with per-warpgroup query tiles", step B): head
// dim 128, full attention (no causal mask, no window), batched Q and K/V without seqlens_k (every work
// the same KV tiles, rows past Sk zero-filled by the K/V maps), O by TMA store. Everything else runs
// the plain grid: nothing is declined. Causal (step C, its own switch prefill_persistent_causal, default
// off): the same scope without a 128-row block whose rows all see no key (Sq - Sk >= 128: such a work
// would have no KV tile), the static list of persistent_causal_units (pairs of blocks when Sq == Sk).
int choose_persistent(const cuda_engine::KernelParams& kp, const sm90_engine::PrefillLaunch& l, int head_dim) {
  if (!sm90_engine::prefill_persistent() || head_dim != 128 || !l.tma_store_o || l.o_tmap == nullptr) return 0;
  if (kp.cu_seqlens_q != nullptr || kp.cu_seqlens_k != nullptr || kp.seqlens_k != nullptr ||
      kp.block_table != nullptr || kp.kv_total_len != nullptr)
    return 0;
  if (kp.window_left >= 0 || kp.window_right >= 0 || kp.seqlen_k < 1) return 0;
  if (kp.causal &&
      (!sm90_engine::prefill_persistent_causal() ||
       int64_t{kp.seqlen_q} - kp.seqlen_k >= sm90_engine::PrefillTraits<__nv_bfloat16, 128>::kBlockM))
    return 0;
  const int64_t units = kp.causal ? sm90_engine::persistent_causal_units(kp.m_blocks, kp.heads_q, kp.batch,
                                                                         kp.seqlen_q == kp.seqlen_k)
                                  : int64_t{kp.m_blocks} * kp.heads_q * kp.batch;
  if (units < 1 || units > std::numeric_limits<int32_t>::max()) return 0;
  int sms = 0, cc = 0;
  if (!cuda_device_properties(&sms, &cc).ok() || sms < 1) return 0;
  const int forced = g_persistent_grid.load();
  return static_cast<int>(std::min<int64_t>(units, forced > 0 ? forced : sms));
}

class Sm90PrefillAttention final : public AttentionEngine {
 public:
  const char* name() const override { return "sm90-prefill"; }
  const char* description() const override {
    return "Hopper prefill (TMA + wgmma, warp-specialized), sm90a";
  }
  std::string supports() const override {
    return "device tensors, bf16/f16, head dim 64, 128 or 256 (D == Dv), batched or varlen Q and K/V (seqlens_k too; "
           "not paged), causal, window, softcap, scale, MHA/GQA/MQA";
  }
  Status available() const override { return sm90_engine::sm90_device_available("sm90-prefill"); }

  Status check_support(const AttentionParams& p) const override {
    GA_RETURN_IF_ERROR(sm90_engine::all_on_device(p, "sm90-prefill"));
    if (kv_is_fp8(p)) return NotSupported("sm90-prefill engine: fp8 (f8e4m3) KV caches are not supported");
    GA_RETURN_IF_ERROR(sm90_engine::check_16bit_head_dims(p, "sm90-prefill", {64, 128, 256}));
    // A decode step (<= 16 query tokens per sequence) on 128-row query tiles without split-KV
    // would leave most of the GPU idle: the sm90 decode engine or the portable engine's split-KV
    // path serves it.
    const int64_t max_q = q_is_varlen(p) ? p.max_seqlen_q : p.q.size(1);
    if (max_q <= kMaxNewTokens) {
      return NotSupported("sm90-prefill engine: <= " + std::to_string(kMaxNewTokens) +
                          " query tokens per sequence is a decode step (the sm90 decode engine or the portable "
                          "engine's split-KV path serves it)");
    }
    if (kv_layout(p) == KvLayout::kPaged) {
      return NotSupported("sm90-prefill engine: paged K/V is not supported yet (batched or varlen K/V only)");
    }
    if (kv_is_sharded(p)) return NotSupported("sm90-prefill engine: the partial-output mode is not supported yet");
    if (p.num_splits > 1) return NotSupported("sm90-prefill engine: no split-KV (num_splits must be 0 or 1)");
    // Rows of the tensor maps: Sq / Sk batched, total tokens varlen (rank 3). A map needs every dim >= 1.
    const int64_t q_rows = q_is_varlen(p) ? p.q.size(0) : p.q.size(1);
    const int64_t kv_rows = kv_layout(p) == KvLayout::kVarlen ? p.k.size(0) : p.k.size(1);
    if (q_rows == 0 || kv_rows == 0) {
      return NotSupported("sm90-prefill engine: Q and K/V need >= 1 row (a TMA map needs every dim >= 1)");
    }
    GA_RETURN_IF_ERROR(
        sm90_engine::check_tma_layouts(p, "sm90-prefill", {{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}}));
    const int64_t batch = q_is_varlen(p) ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0);
    if (batch > kMaxGridYZ || p.q.size(-2) > kMaxGridYZ) {
      return NotSupported("sm90-prefill engine: batch and query heads must be <= " + std::to_string(kMaxGridYZ));
    }
    const int64_t int_max = std::numeric_limits<int32_t>::max();
    const sm90_engine::PrefillTile tile =
        sm90_engine::prefill_launch_tile(static_cast<int>(p.q.size(-1)), sm90_engine::prefill_d256_n80());
    if (q_rows > int_max - tile.block_m || kv_rows > int_max - tile.block_n) {
      return NotSupported("sm90-prefill engine: sequence lengths (total tokens if varlen) must fit in int32");
    }
    return Status::Ok();
  }

  size_t workspace_bytes(const AttentionParams&) const override { return 0; }

  Status run(const AttentionParams& p, void*, void* stream) const override {
    cuda_engine::KernelParams kp = cuda_engine::kernel_params_from(p);
    kp.num_splits = 1;
    // kp.seqlen_q: Sq, or max_seqlen_q for varlen Q (the grid covers the longest sequence). Query
    // and KV tiles of the launched kernel (prefill_launch_tile, the same choice the traits make; head
    // dim 256 takes the 80-key form when its switch is on).
    const int head_dim = static_cast<int>(p.q.size(-1));
    const bool d256_n80 = head_dim == 256 && sm90_engine::prefill_d256_n80();
    const sm90_engine::PrefillTile tile = sm90_engine::prefill_launch_tile(head_dim, d256_n80);
    const int block_m = tile.block_m;
    kp.m_blocks = (kp.seqlen_q + block_m - 1) / block_m;
    if (kp.batch == 0 || kp.heads_q == 0) return Status::Ok();
    CUtensorMap q_map, k_map, v_map;
    GA_RETURN_IF_ERROR(sm90_engine::encode_map_of(p.q, sm90_engine::PrefillTraits<__nv_bfloat16>::kQBoxRows, &q_map));
    // K and V boxes: one KV tile.
    GA_RETURN_IF_ERROR(sm90_engine::encode_map_of(p.k, tile.block_n, &k_map));
    GA_RETURN_IF_ERROR(sm90_engine::encode_map_of(p.v, tile.block_n, &v_map));
    sm90_engine::PrefillLaunch launch;
    launch.q_tmap = &q_map;
    launch.k_tmap = &k_map;
    launch.v_tmap = &v_map;
    launch.head_dim = head_dim;
    launch.d256_n80 = d256_n80;
    // Causal or windowed, query tiles differ in work (causal: 1 .. m_blocks KV tiles). The default
    // grid launches each head's tiles longest first, so the last heads' longest tiles start near the
    // end of the grid and the other SMs idle while they finish (S2048 B8 causal, list-scheduling
    // model over 132 SMs: makespan 1.035-1.045x the balanced one). Heads fastest, all of a
    // sequence's longest tiles go first (1.004-1.008x). Only while one sequence's K and V stay in
    // L2 (<= 16 MiB): the CTAs in flight then span all heads of the sequence, where the default
    // order keeps them on a few heads' K/V (a persistent grid ordered like this read K/V from HBM
    // and lost 4-15 % on long sequences, docs/PREFILL_SM90.md).
    const bool varying = kp.causal || kp.window_left >= 0 || kp.window_right >= 0;
    const int64_t seq_k = kv_layout(p) == KvLayout::kVarlen ? (p.max_seqlen_k > 0 ? p.max_seqlen_k : p.k.size(0))
                                                            : p.k.size(1);
    const int64_t kv_seq_bytes = 2 * seq_k * kp.heads_kv * head_dim * 2;
    launch.heads_fastest = varying && kv_seq_bytes <= sm90_engine::kHeadsFastestKvBytes && kp.m_blocks <= kMaxGridYZ;
    launch.q_prefetch_ahead = sm90_engine::prefill_q_ahead();
    launch.early_first_loads = sm90_engine::prefill_early_loads();
    launch.stsm_epilogue = sm90_engine::prefill_stsm_epilogue();
    // O by TMA stores (head dims 128 and 256: PrefillTraits::kTmaStoreO): batched Q only, through a
    // rank-4 map of out whose row extent Sq clips each sequence's last query tile (varlen keeps the
    // 16-byte stores: a rank-3 map would let a sequence's last tile write the next one's rows).
    // Layouts a map cannot nest keep them too.
    CUtensorMap o_map;
    if (sm90_engine::prefill_tma_store_o() && head_dim != 64 && !q_is_varlen(p) && p.out.rank == 4 &&
        sm90_engine::nested_strides(p.out)) {
      GA_RETURN_IF_ERROR(
          sm90_engine::encode_map_of(p.out, sm90_engine::PrefillTraits<__nv_bfloat16>::kOBoxRows, &o_map));
      launch.tma_store_o = true;
      launch.o_tmap = &o_map;
    }
    launch.persistent_grid = choose_persistent(kp, launch, head_dim);
    g_last_persistent_grid.store(launch.persistent_grid);
    const auto s = static_cast<cudaStream_t>(stream);
    if (p.q.dtype == DType::kBF16) return sm90_engine::launch_prefill<__nv_bfloat16>(kp, launch, s);
    return sm90_engine::launch_prefill<__half>(kp, launch, s);
  }
};

}  // namespace

namespace sm90_engine {

void set_prefill_q_ahead_mode(int mode) { g_q_ahead_switch.set_mode(mode); }
void set_prefill_early_loads_mode(int mode) { g_early_loads_switch.set_mode(mode); }
void set_prefill_stsm_epilogue_mode(int mode) { g_stsm_epilogue_switch.set_mode(mode); }
void set_prefill_tma_store_o_mode(int mode) { g_tma_store_o_switch.set_mode(mode); }
void set_prefill_d256_n80_mode(int mode) { g_d256_n80_switch.set_mode(mode); }
void set_prefill_persistent_mode(int mode) { g_persistent_switch.set_mode(mode); }
void set_prefill_persistent_causal_mode(int mode) { g_persistent_causal_switch.set_mode(mode); }
void set_prefill_persistent_grid(int ctas) { g_persistent_grid.store(ctas > 0 ? ctas : 0); }
int prefill_last_persistent_grid() { return g_last_persistent_grid.load(); }

// GROUPATTN_SM90_PREFILL_Q_AHEAD=1: the producer prefetches a later CTA's Q into L2
// (PrefillLaunch::q_prefetch_ahead; docs/PREFILL_SM90.md, "Where a short CTA's time goes"). Off by
// default: on top of the early loads it measured +0.05 % (session 9 call 4); bitwise the same.
bool prefill_q_ahead() { return g_q_ahead_switch.on(); }

// Thread 0 issues Q and the first KV tile before the CTA's __syncthreads
// (PrefillLaunch::early_first_loads; docs/PREFILL_SM90.md, "The prologue's first loads"). On by
// default since session 9 call 4 (with the stmatrix epilogue: -0.75 % GPU time over ten S2048 /
// S8192 shapes, the whole GPU tier passed with both on); GROUPATTN_SM90_PREFILL_EARLY_LOADS=0 turns
// it off. Bitwise the same either way.
bool prefill_early_loads() { return g_early_loads_switch.on(); }

// O into shared memory with stmatrix in the staged epilogue (head dims 128 and 256;
// PrefillLaunch::stsm_epilogue; docs/PREFILL_SM90.md, "The prologue's first loads"). On by default
// with the early loads (above); GROUPATTN_SM90_PREFILL_STSM_EPILOGUE=0 turns it off. Bitwise the same.
bool prefill_stsm_epilogue() { return g_stsm_epilogue_switch.on(); }

// O leaves the staged epilogue by TMA stores, each consumer warp its own 16 rows, batched Q only
// (PrefillLaunch::tma_store_o; docs/PREFILL_SM90.md, "The epilogue by TMA store"). On by default
// since session 10 (-0.6 % geomean over ten CLI shapes, -0.8 to -1.6 % on S2048 d128 / d256; the
// stamped epilogue 1.47 -> 1.23 us); GROUPATTN_SM90_PREFILL_TMA_STORE_O=0 turns it off. Bitwise the same.
bool prefill_tma_store_o() { return g_tma_store_o_switch.on(); }

// Head dim 256 in the 80-key form (PrefillTraitsD256N80: 80-key tiles, 2 split stages, 224 KB;
// PrefillLaunch::d256_n80; docs/PREFILL_SM90.md, "Head dim 256 with 80-key tiles"). On by default
// (measured -0.6 to -6.4 % against the 64-key form on five shapes, session 11): =0 turns it off. The
// results agree with the 64-key form's to rounding (other tile boundaries in the online softmax), not
// bitwise.
bool prefill_d256_n80() { return g_d256_n80_switch.on(); }

// The persistent form (PrefillLaunch::persistent_grid; prefill_persistent.cuh; docs/PREFILL_SM90.md, "A
// persistent form with per-warpgroup query tiles"): one CTA per SM over a static list of (sequence,
// head, 128-row block) units, per-warpgroup Q halves, the next work's first S issued with the last O
// and the epilogue inside the warpgroup's turn cycle. On by default where choose_persistent admits
// the problem (measured -2.4 to -5.0 % on three shapes, session 11); GROUPATTN_SM90_PREFILL_PERSISTENT=0
// turns it off. Bitwise the same either way.
bool prefill_persistent() { return g_persistent_switch.on(); }

// The persistent form for causal attention (step C: pairs of 128-row blocks when Sq == Sk, single blocks
// longest first otherwise; docs/PREFILL_SM90.md, "Step C as built"), where choose_persistent admits the
// problem and the persistent form is on. On by default (measured -1.7 % at 32/8 and -2.6 % at 64/8 B8
// S2048, -0.8 % on the B2 S8192 control, session 12): GROUPATTN_SM90_PREFILL_PERSISTENT_CAUSAL=0 turns it
// off. Bitwise the same either way.
bool prefill_persistent_causal() { return g_persistent_causal_switch.on(); }

}  // namespace sm90_engine

const AttentionEngine& attention_sm90_prefill_engine() {
  static const Sm90PrefillAttention engine;
  return engine;
}

}  // namespace groupattn
