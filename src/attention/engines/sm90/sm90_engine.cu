// The sm90 engine (Hopper decode, issue 9): support checks, split planning (the portable engine's
// planner), workspace layout (the portable engine's partial layout, so its combine kernel runs
// unchanged), tensor maps, and dispatch over the element type to launch_decode (inst_*.cu).
//
// Two kernel forms: the swap-AB decode kernel (decode_kernel.cuh; KV positions on wgmma's M side,
// packed query columns on N) and, for a 16-bit cache at head dim 64, 128 or 256 or an f8e4m3 one at
// 128 with group x new tokens >= packed_decode_min_rows (D 64 17, D 128 32, D 256 33; fp8 33) --
// and at D 64 / 256 from 16 rows where the call reads >= 64 MiB (plan_call) --, the packed-rows
// form (the prefill kernel's packed-decode mode: query rows on M, KV tiles of packed_decode_tile;
// docs/DECODE_SM90.md sections 12, 13, 15 and 31).
//
// Split-KV of the swap-AB kernel reduces either through the workspace and the combine kernel or,
// for small problems, inside a thread-block cluster of the splits (decode_traits.h
// cluster_reduction; docs/DECODE_SM90.md section 14); "sm90-split" pins the workspace mode.
//
// Registered first: on a compute capability 9.0 device it serves every decode problem it supports
// (it measured faster than the portable engine on every decode shape tried, docs/DECODE_SM90.md);
// everything else falls through to the `cuda` engine. A second name, "sm90-rows", runs the
// packed-rows form for every problem it can serve (any group; 16-bit at head dim 64, 128 or 256, fp8
// at 128): automatic
// selection never reaches it (sm90 serves all of them first), pinning it lets the tests compare
// the form bitwise across groups and the benchmark time it below 64 rows.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention/engine_list.h"
#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/host_params.h"
#include "attention/engines/cuda/split_planner.h"
#include "attention/engines/sm90/decode_split_plan.h"
#include "attention/engines/sm90/decode_traits.h"
#include "attention/engines/sm90/engine_checks.h"
#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/mode_switch.h"
#include "attention/engines/sm90/prefill_traits.h"
#include "attention/engines/sm90/tma_desc.h"
#include "core/cuda_runtime_shim.h"
#include "core/host_timing.h"
#include "groupattn/supported.h"

namespace groupattn {
namespace {

using cuda_engine::KernelParams;

using sm90_engine::kMaxGridYZ;

constexpr bool head_dims_supported() {
  for (int64_t d : sm90_engine::kDecodeHeadDims) {
    bool found = false;
    for (int64_t x : kAttentionHeadDims) found = found || x == d;
    if (!found) return false;
  }
  return true;
}
static_assert(head_dims_supported(), "the sm90 engine's head dims must be a subset of supported.h's kAttentionHeadDims");

// Which kernel form serves a problem: kAuto picks (the "sm90" engine), kPackedRows always takes
// the packed-rows form ("sm90-rows"), kWorkspaceSplits picks the form as kAuto but never the
// cluster reduction ("sm90-split": the workspace + combine kernel mode, for tests and benchmarks).
enum class Form { kAuto, kPackedRows, kWorkspaceSplits };

struct Geometry {
  int64_t batch = 0, total_q = 0, max_q = 0, max_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t group = 0, cols = 0;  // packed query columns (rows of the packed form) per (sequence, KV head)
  bool packed_rows = false;     // the packed-rows form; else swap-AB
  // Swap-AB: column tiles of col_tile, 64-key tiles. Packed rows: 128-row blocks, KV tiles of
  // packed_decode_tile(head_dim).block_n keys (128; D 256 64).
  int col_tile = 8, m_blocks = 0, n_blocks = 0;
};

// sm90_engine::set_decode_fp8_one_converter_wg_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_fp8_one_converter_wg_switch{"GROUPATTN_SM90_FP8_CONVERTER_WGS", false};
// sm90_engine::set_decode_packed_small_pages_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_packed_small_pages_switch{"GROUPATTN_SM90_DECODE_PACKED_SMALL_PAGES", true};
// sm90_engine::set_decode_paged_wave_two_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_paged_wave_two_switch{"GROUPATTN_SM90_DECODE_PAGED_WAVE_TWO", true};
// sm90_engine::set_decode_fp8_bf16_mma_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_fp8_bf16_mma_switch{"GROUPATTN_SM90_DECODE_FP8_BF16_MMA", false};
// sm90_engine::set_decode_packed_below_cut_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_packed_below_cut_switch{"GROUPATTN_SM90_DECODE_PACKED_BELOW_CUT", true};

// Pages that are not a multiple of a 64-key tile: a tile then spans several pages (TMA runs of
// paged_box_rows(page_size) rows, or the gather path for pages that are not a multiple of 8).
bool small_pages(const AttentionParams& p) {
  return kv_layout(p) == KvLayout::kPaged && p.k.size(1) % sm90_engine::kBlockKV != 0;
}

// Upper bound of the K and V bytes a call reads, from the host-visible longest length.
int64_t kv_bound_bytes(const AttentionParams& p, const Geometry& g) {
  return 2 * g.batch * g.max_k * g.heads_kv * g.head_dim * (kv_is_fp8(p) ? 1 : 2);
}

// Whether a problem the engine supports runs the packed-rows form.
// The packed-rows form loads 64-row boxes, one page each, for pages of a multiple of 64 keys. With
// the small-pages switch (decode_packed_small_pages, docs/DECODE_SM90.md section 22) a 16-bit cache
// in pages of a multiple of 8 keys takes it too, its tiles as runs of gcd(page_size, 64) rows, one
// producer lane per run (prefill_kernel.cuh produce_packed_decode_runs). Other pages (and fp8 caches
// in them) take the swap-AB form's per-page boxes or gather path.
bool pages_fit_packed_rows(const AttentionParams& p) {
  if (!small_pages(p)) return true;
  return sm90_engine::decode_packed_small_pages() && !kv_is_fp8(p) && !sm90_engine::paged_gather(p.k.size(1));
}

bool use_packed_rows(const AttentionParams& p, const Geometry& g, Form form) {
  if (form == Form::kPackedRows) return true;
  // (kAuto and kWorkspaceSplits choose the same form.)
  if (!pages_fit_packed_rows(p) || !sm90_engine::packed_rows_form(g.head_dim, kv_is_fp8(p), g.group, g.max_q)) {
    return false;
  }
  return !small_pages(p) ||
         g.group * g.max_q >= sm90_engine::packed_decode_min_rows_small_pages(g.head_dim, kv_bound_bytes(p, g));
}

Geometry geometry(const AttentionParams& p, Form form) {
  Geometry g;
  g.batch = p.q.size(0);
  g.max_q = p.q.size(1);
  g.total_q = g.batch * g.max_q;
  g.heads_q = p.q.size(-2);
  g.heads_kv = p.k.size(-2);
  g.head_dim = p.q.size(-1);
  g.group = g.heads_kv > 0 ? g.heads_q / g.heads_kv : 0;
  if (kv_layout(p) == KvLayout::kPaged) {
    g.max_k = p.max_seqlen_k > 0 ? p.max_seqlen_k : p.block_table.size(1) * p.k.size(1);
  } else {
    g.max_k = p.k.size(1);
  }
  g.cols = g.max_q * g.group;
  g.packed_rows = use_packed_rows(p, g, form);
  if (g.packed_rows) {
    const int block_n = sm90_engine::packed_decode_tile(static_cast<int>(g.head_dim)).block_n;
    g.m_blocks = static_cast<int>((g.cols + sm90_engine::kPrefillBlockM - 1) / sm90_engine::kPrefillBlockM);
    g.n_blocks = static_cast<int>((g.max_k + block_n - 1) / block_n);
    return g;
  }
  g.col_tile = sm90_engine::column_tile(g.cols);
  g.m_blocks = static_cast<int>((g.cols + g.col_tile - 1) / g.col_tile);
  g.n_blocks = static_cast<int>((g.max_k + sm90_engine::kBlockKV - 1) / sm90_engine::kBlockKV);
  return g;
}

// The swap-AB split planner's view of a problem (decode_split_plan.h).
sm90_engine::DecodeSplitShape split_shape(const AttentionParams& p, const Geometry& g, int sm_count) {
  sm90_engine::DecodeSplitShape shape;
  shape.sm_count = sm_count;
  shape.batch = g.batch;
  shape.kv_heads = g.heads_kv;
  shape.m_blocks = g.m_blocks;
  shape.n_blocks = g.n_blocks;
  shape.head_dim = static_cast<int>(g.head_dim);
  shape.col_tile = g.col_tile;
  shape.fp8 = kv_is_fp8(p);
  shape.paged = small_pages(p) || (kv_layout(p) == KvLayout::kPaged && sm90_engine::decode_paged_wave_two());
  return shape;
}

int num_splits_for(const AttentionParams& p, const Geometry& g, int sm_count) {
  cuda_engine::SplitProblem sp;
  sp.sm_count = sm_count;
  sp.batch = static_cast<int>(g.batch);
  sp.kv_heads = static_cast<int>(g.heads_kv);
  sp.m_blocks = g.m_blocks;
  sp.n_blocks = g.n_blocks;
  if (p.num_splits > 0) return cuda_engine::plan_num_splits(sp, p.num_splits);
  if (g.packed_rows) {
    // One CTA per SM (384 threads of 168 registers; 192-224 KB of shared memory), a wave of one;
    // at least 512 keys per split (the swap-AB form's 8 x 64): 4 tiles of 128 keys, D 256 8 of 64.
    return cuda_engine::balanced_num_splits(
        sp, 512 / sm90_engine::packed_decode_tile(static_cast<int>(g.head_dim)).block_n);
  }
  // Swap-AB: the costed planner (decode_split_plan.h, docs/DECODE_SM90.md section 15). It starts
  // from the wave-filling count (balanced_num_splits over decode_tile().split_wave CTAs per SM -- fp8
  // and D 64 a wave of two, section 9 and 10 --, >= 8 KV tiles per split, section 8) and takes fewer
  // or more splits where the combine kernel's per-split cost or a too-short grid says so.
  return sm90_engine::auto_decode_splits(split_shape(p, g, sm_count));
}

// Whether the swap-AB kernel reduces its splits in a cluster (decode_traits.h cluster_reduction;
// docs/DECODE_SM90.md section 14). The same answer for native GQA and K/V copied up when the split
// count is forced and fits a cluster.
bool use_cluster_reduction(const AttentionParams& p, const Geometry& g, int num_splits, int sm_count, Form form) {
  if (form == Form::kWorkspaceSplits || g.packed_rows) return false;
  const int64_t ctas = g.batch * g.heads_kv * g.m_blocks * num_splits;
  const int64_t tiles_per_split = num_splits > 0 ? (g.n_blocks + num_splits - 1) / num_splits : g.n_blocks;
  return sm90_engine::cluster_reduction(num_splits, ctas, tiles_per_split, sm_count, g.head_dim, kv_is_fp8(p),
                                        p.num_splits > 0);
}

// The device-side work list for batches of mixed lengths (decode_work_list.h; docs/DECODE_SM90.md
// section 20), or none (use false). Only where it can win and stay exact: the swap-AB kernel in the
// workspace mode with the automatic split count (a forced count keeps its meaning), per-sequence
// lengths the host cannot see (seqlens_k, or paged), no sliding window (the list balances whole
// sequences), 2..kListMaxBatch sequences, an ordinary plan of at most kListMaxPlanSplits splits
// (above that the planner already cuts every sequence finely), and a K/V upper bound of at least
// kListMinKvBytes (the plan's few us). Depends only on shapes and flags, never on data; the plan
// itself is computed by the decode CTAs (decode_work_list.cuh fold_list_slot).
//
// The list's wave P is the ordinary plan's (split_wave_of: two CTAs an SM for paged K/V, D 64 and
// fp8). Where that puts the batch in the band P / 2 < B <= P and one CTA an SM is a wave the batch
// exceeds, the list runs its several-wave plan at that wave (session 19, section 29). The near-wave
// switch (GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE, default off; docs/DECODE_SM90.md
// section 25) also takes the batches list_serves_batch turns away at the ordinary wave (P / 2 < B <=
// P), at the wave decode_work_list.h list_near_wave picks: every CTA place (D 128 16-bit: two an SM,
// the one-wave plan with the near-uniform guard) or one CTA an SM (several waves).
struct ListPlan {
  bool use = false;
  int plane_wave = 0;      // P
  bool near_wave = false;  // KernelParams::list_near_wave (the near-uniform guard)
  int64_t slots = 0;       // list_slot_bound(P, B): the grid's CTAs per plane and the partials' slots
};

ListPlan list_plan(const AttentionParams& p, const Geometry& g, int num_splits, int sm_count, Form form) {
  ListPlan l;
  if (form == Form::kPackedRows || g.packed_rows || p.num_splits > 0) return l;
  if (!sm90_engine::decode_work_list()) return l;
  const KernelParams kp = cuda_engine::kernel_params_from(p);
  if (kp.seqlens_k == nullptr || kp.window_left >= 0) return l;
  if (num_splits > cuda_engine::kListMaxPlanSplits) return l;
  if (use_cluster_reduction(p, g, num_splits, sm_count, form)) return l;
  if (kv_bound_bytes(p, g) < cuda_engine::kListMinKvBytes) return l;
  // The plan sums the batch's tile counts in 32-bit integers.
  if (g.batch * ((g.max_k + sm90_engine::kBlockKV - 1) / sm90_engine::kBlockKV) >= std::numeric_limits<int32_t>::max()) return l;
  const int split_wave = sm90_engine::split_wave_of(split_shape(p, g, sm_count));
  if (sm90_engine::decode_paged_wave_two()) {
    // P, or where a wave of two (paged, D 64, fp8) puts the batch in the band the several-wave plan
    // at one CTA an SM (64/8 B32 x 32K mixed on pages of 64: P 33 -> 16; docs/DECODE_SM90.md
    // section 29); 0: neither serves the batch.
    l.plane_wave = cuda_engine::list_plane_wave_for(sm_count, split_wave, g.heads_kv, g.m_blocks, g.batch);
  } else {
    const int wave = cuda_engine::list_plane_wave(sm_count, split_wave, g.heads_kv, g.m_blocks);
    l.plane_wave =
        cuda_engine::list_serves_batch(g.batch, wave) ? wave : 0;  // 2..kListMaxBatch, not P / 2 < B <= P
  }
  if (l.plane_wave == 0) {
    if (!sm90_engine::decode_list_near_wave()) return l;
    const int ctas_per_sm = sm90_engine::decode_tile(static_cast<int>(g.head_dim), kv_is_fp8(p)).ctas_per_sm;
    const cuda_engine::NearWave nw =
        cuda_engine::list_near_wave(sm_count, split_wave, ctas_per_sm, g.heads_kv, g.m_blocks, g.batch);
    if (nw.plane_wave == 0) return l;
    l.plane_wave = nw.plane_wave;
    l.near_wave = nw.near_uniform_guard;
  }
  l.slots = cuda_engine::list_slot_bound(l.plane_wave, g.batch);
  l.use = l.slots * g.m_blocks <= std::numeric_limits<int32_t>::max();
  return l;
}

// A call's plan, computed once for workspace_bytes and run: its geometry, split count and work list.
struct CallPlan {
  Geometry g;
  int num_splits = 0;
  ListPlan list;
};

// geometry(), its split count and list, except that kAuto and kWorkspaceSplits take the packed-rows
// form below its cut where decode_traits.h packed_rows_below_cut says it streams faster, K/V are
// contiguous or in pages of a multiple of 64 keys, and swap-AB would not run its work list -- the
// list balances mixed lengths the packed form would plan by the longest sequence, and the host
// cannot tell equal lengths from mixed (docs/DECODE_SM90.md section 31). Smaller pages keep
// swap-AB: the packed form's per-page runs at D 256 lost 20 % (32/2 B1 x 128K page 16: 96.8 us
// against swap-AB's 80.4 in the suites at 94629f0 and e9f0fb4). GROUPATTN_SM90_DECODE_PACKED_BELOW_CUT=0
// keeps swap-AB everywhere below the cut.
CallPlan plan_call(const AttentionParams& p, Form form, int sm_count) {
  CallPlan c;
  c.g = geometry(p, form);
  c.num_splits = num_splits_for(p, c.g, sm_count);
  c.list = list_plan(p, c.g, c.num_splits, sm_count, form);
  if (c.list.use || c.g.packed_rows || !sm90_engine::decode_packed_below_cut() || small_pages(p) ||
      !sm90_engine::packed_rows_below_cut(c.g.head_dim, kv_is_fp8(p), c.g.cols, kv_bound_bytes(p, c.g))) {
    return c;
  }
  c.g = geometry(p, Form::kPackedRows);
  c.num_splits = num_splits_for(p, c.g, sm_count);
  c.list = ListPlan{};  // (list_plan never serves the packed form)
  return c;
}

// Work-list workspace (decode_work_list.h): the partials of l.slots slots of max_q x Hq rows, then
// the per-sequence {count, first slot}.
size_t list_partials_bytes(const ListPlan& l, const Geometry& g) {
  return cuda_engine::list_partials_bytes(l.slots, g.max_q, g.heads_q, g.head_dim);
}
size_t list_workspace_bytes(const ListPlan& l, const Geometry& g) {
  return cuda_engine::list_workspace_bytes(l.slots, g.max_q, g.heads_q, g.head_dim, g.batch);
}

class Sm90Attention final : public AttentionEngine {
 public:
  explicit Sm90Attention(Form form) : form_(form) {}
  const char* name() const override {
    switch (form_) {
      case Form::kPackedRows:
        return "sm90-rows";
      case Form::kWorkspaceSplits:
        return "sm90-split";
      default:
        return "sm90";
    }
  }
  const char* description() const override {
    switch (form_) {
      case Form::kPackedRows:
        return "Hopper decode, the packed-query-rows form of sm90 for every group (tests, benchmarks; automatic "
               "selection uses sm90), sm90a";
      case Form::kWorkspaceSplits:
        return "Hopper decode, sm90 with split-KV always merged through the workspace and the combine kernel, "
               "never a thread-block cluster (tests, benchmarks; automatic selection uses sm90), sm90a";
      default:
        return "Hopper decode (wgmma swap-AB, or packed query rows for group x new tokens >= 32 (D 64 17, "
               "D 256 33, fp8 33; D 64 / 256 from 16 where the call reads >= 64 MiB of K/V); TMA; fp8 K/V "
               "widened in registers or, packed rows, in shared memory; small split problems reduce in "
               "thread-block clusters), sm90a";
    }
  }
  std::string supports() const override {
    if (form_ == Form::kPackedRows) {
      return "what sm90 supports (16-bit K/V at head dim 64, 128 or 256, f8e4m3 at 128; paged: page_size a "
             "multiple of 64)";
    }
    if (form_ == Form::kWorkspaceSplits) return "what sm90 supports";
    return "device tensors, bf16/f16, head dim 64, 128 or 256 (D == Dv), decode of 1.." +
           std::to_string(sm90_engine::kMaxNewTokens) +
           " new tokens (batched Q); batched K/V (optional seqlens_k) or paged K/V of any page_size "
           "(TMA boxes of gcd(page_size, 64) rows, one per run of keys in a page; pages not a multiple of 8 "
           "keys gathered with cp.async); causal, window, softcap, scale, split-KV, partial-output mode; "
           "f8e4m3 K/V with per-(sequence, KV head) scales at head dim 128";
  }
  Status available() const override { return sm90_engine::sm90_device_available(name()); }

  Status check_support(const AttentionParams& p) const override {
    GA_RETURN_IF_ERROR(sm90_engine::all_on_device(p, name()));
    if (form_ == Form::kPackedRows) {
      // (Head dims and fp8 at other head dims: declined below as for sm90, with the same reasons.)
      if (!pages_fit_packed_rows(p)) {
        return NotSupported("sm90-rows engine: paged K/V needs page_size a multiple of " +
                            std::to_string(sm90_engine::kBlockKV) + " (got " + std::to_string(p.k.size(1)) +
                            "; a 16-bit cache in pages of a multiple of 8 with GROUPATTN_SM90_DECODE_PACKED_SMALL_"
                            "PAGES=1); sm90 serves other page sizes with its swap-AB form");
      }
    }
    if (kv_is_fp8(p)) {
      if (p.kv_scale_per_page) {
        return NotSupported("sm90 engine: fp8 scales per page (kv_scale_per_page) are not supported yet (per "
                            "sequence and KV head only)");
      }
    }
    GA_RETURN_IF_ERROR(sm90_engine::check_16bit_head_dims(p, "sm90", sm90_engine::kDecodeHeadDims));
    if (kv_is_fp8(p) && p.q.size(-1) != sm90_engine::kFp8HeadDim) {
      return NotSupported("sm90 engine: f8e4m3 K/V at head dim " + std::to_string(sm90_engine::kFp8HeadDim) +
                          " only (got " + std::to_string(p.q.size(-1)) +
                          "; the fp8 register-fragment maps cover two 64-row halves of d); 16-bit K/V serves "
                          "64, 128 and 256");
    }
    if (q_is_varlen(p)) return NotSupported("sm90 engine: varlen Q not supported yet (batched Q only)");
    const KvLayout layout = kv_layout(p);
    if (layout == KvLayout::kVarlen) {
      return NotSupported("sm90 engine: varlen K/V (cu_seqlens_k) not supported yet (batched or paged only)");
    }
    const Geometry g = geometry(p, form_);
    if (g.max_q < 1 || g.max_q > sm90_engine::kMaxNewTokens) {
      return NotSupported("sm90 engine: decode only, 1.." + std::to_string(sm90_engine::kMaxNewTokens) +
                          " new tokens per sequence (got " + std::to_string(g.max_q) + ")");
    }
    if (p.k.size(1) == 0) {
      return NotSupported("sm90 engine: an empty K/V cache (Sk == 0) is not supported (a TMA map needs every dim >= 1)");
    }
    GA_RETURN_IF_ERROR(sm90_engine::check_tma_layouts(p, "sm90", {{&p.k, "k"}, {&p.v, "v"}}));
    if (g.batch > kMaxGridYZ || g.heads_kv > kMaxGridYZ) {
      return NotSupported("sm90 engine: batch and KV heads must be <= " + std::to_string(kMaxGridYZ));
    }
    const int64_t int_max = std::numeric_limits<int32_t>::max();
    if (g.max_k > int_max || g.total_q * g.heads_q > int_max || p.k.size(0) > int_max) {
      return NotSupported("sm90 engine: sequence lengths, pages and query rows times heads must fit in int32");
    }
    return Status::Ok();
  }

  // The split workspace, or none where the launcher will reduce the splits in a cluster: the rule
  // (use_cluster_reduction) says cluster and the launcher's own plan on this device agrees (it
  // falls back to the workspace mode where the device cannot place the clusters; that answer is
  // asked once per device and kernel and cached, so run() makes the same choice). A plan that
  // fails reserves the workspace (run() then reports the error itself).
  size_t workspace_bytes(const AttentionParams& p) const override {
    int dev = 0, sms = 0, cc = 0;
    if (!cuda_current_device(&dev, &sms, &cc).ok()) return 0;
    const CallPlan c = plan_call(p, form_, sms);
    const Geometry& g = c.g;
    const int splits = c.num_splits;
    if (c.list.use) return list_workspace_bytes(c.list, g);
    if (splits <= 1) return 0;
    if (g.batch > 0 && g.max_q > 0 && g.heads_kv > 0 && use_cluster_reduction(p, g, splits, sms, form_)) {
      KernelParams kp = cuda_engine::kernel_params_from(p);
      kp.m_blocks = g.m_blocks;
      kp.num_splits = splits;
      kp.cluster_reduce = true;
      bool cluster = false;
      sm90_engine::DecodeLaunch plan = decode_launch(p, g, dev);
      plan.plan_cluster = &cluster;
      const Status s = p.q.dtype == DType::kBF16 ? sm90_engine::launch_decode<__nv_bfloat16>(kp, plan, nullptr)
                                                 : sm90_engine::launch_decode<__half>(kp, plan, nullptr);
      if (s.ok() && cluster) return 0;
    }
    return cuda_engine::split_workspace_bytes(splits, g.total_q, g.heads_q, g.head_dim);
  }

  Status run(const AttentionParams& p, void* workspace, void* stream) const override {
    // One runtime query on the call's success path (cudaGetDevice); the SM count, the launcher's
    // shared-memory attribute and cluster occupancy come from per-device caches keyed by it.
    int dev = 0, sms = 0, cc = 0;
    GA_RETURN_IF_ERROR(cuda_current_device(&dev, &sms, &cc));
    const CallPlan c = plan_call(p, form_, sms);
    const Geometry& g = c.g;
    KernelParams kp = cuda_engine::kernel_params_from(p);
    kp.m_blocks = g.m_blocks;
    kp.num_splits = c.num_splits;
    if (g.batch == 0 || g.max_q == 0 || g.heads_kv == 0) return Status::Ok();
    kp.cluster_reduce = use_cluster_reduction(p, g, kp.num_splits, sms, form_);
    kp.early_first_tiles = sm90_engine::decode_early_tiles();
    const ListPlan& list = c.list;
    if (list.use) {
      if (workspace == nullptr) return Status(StatusCode::kInternal, "sm90 engine: work-list run without workspace");
      kp.num_splits = static_cast<int>(list.slots);
      kp.cluster_reduce = false;
      cuda_engine::set_split_workspace(&kp, workspace, g.max_q, g.head_dim);  // partial_rows = max_q x Hq
      auto* counts = static_cast<char*>(workspace) + list_partials_bytes(list, g);
      kp.seq_splits = reinterpret_cast<int32_t*>(counts);
      kp.list_plane_wave = list.plane_wave;
      kp.list_heads_fastest =
          sm90_engine::decode_list_heads_fastest() && list.slots * g.m_blocks <= kMaxGridYZ;
      kp.list_uniform_fast = sm90_engine::decode_list_uniform_fast();
      kp.list_near_wave = list.near_wave;
    }
    // A split run has a workspace unless workspace_bytes planned the cluster mode (the launcher
    // takes it then; its workspace-mode fallback checks for the partials' buffers itself).
    if (kp.num_splits > 1 && !list.use) {
      if (workspace != nullptr) {
        cuda_engine::set_split_workspace(&kp, workspace, g.total_q, g.head_dim);
      } else if (!kp.cluster_reduce) {
        return Status(StatusCode::kInternal, "sm90 engine: split-KV run without workspace");
      }
    }
    host_timing::mark("sm90 plan (splits, params)");

    // One rank-4 map per K and V over the whole cache: {d, head, row, batch|page}. Boxes of a whole
    // 64-key tile, or for paged K/V of gcd(page_size, 64) rows (the kernel's paged_box_rows, so a
    // box never crosses a page; decode_mainloop.cuh, produce()).
    const bool bf16 = p.q.dtype == DType::kBF16;
    const int box_rows = kv_layout(p) == KvLayout::kPaged ? sm90_engine::paged_box_rows(p.k.size(1))
                                                           : sm90_engine::kBlockKV;
    CUtensorMap k_map, v_map;
    GA_RETURN_IF_ERROR(sm90_engine::encode_map_of(p.k, box_rows, &k_map));
    GA_RETURN_IF_ERROR(sm90_engine::encode_map_of(p.v, box_rows, &v_map));
    host_timing::mark("tensor maps (2x cuTensorMapEncodeTiled)");
    sm90_engine::DecodeLaunch launch = decode_launch(p, g, dev);
    launch.k_tmap = &k_map;
    launch.v_tmap = &v_map;
    const auto s = static_cast<cudaStream_t>(stream);
    if (g.packed_rows) {
      if (bf16) return sm90_engine::launch_decode_packed<__nv_bfloat16>(kp, launch, s);
      return sm90_engine::launch_decode_packed<__half>(kp, launch, s);
    }
    if (bf16) return sm90_engine::launch_decode<__nv_bfloat16>(kp, launch, s);
    return sm90_engine::launch_decode<__half>(kp, launch, s);
  }

 private:
  // The launcher's options of a problem, tensor maps aside; `device`: the current device as this
  // call asked it (cuda_current_device).
  static sm90_engine::DecodeLaunch decode_launch(const AttentionParams& p, const Geometry& g, int device) {
    sm90_engine::DecodeLaunch launch;
    launch.device = device;
    launch.col_tile = g.col_tile;
    launch.head_dim = static_cast<int>(g.head_dim);
    launch.fp8 = kv_is_fp8(p);
    launch.fp8_one_converter_wg = launch.fp8 && sm90_engine::decode_fp8_one_converter_wg();
    launch.fp8_bf16_mma = launch.fp8 && sm90_engine::decode_fp8_bf16_mma();
    launch.cluster_forced = p.num_splits > 0;
    return launch;
  }

  Form form_;
};

// sm90_engine::set_decode_work_list_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_work_list_switch{"GROUPATTN_SM90_DECODE_WORK_LIST", true};
// sm90_engine::set_decode_list_heads_fastest_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_list_heads_fastest_switch{"GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST", true};
// sm90_engine::set_decode_list_uniform_fast_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_list_uniform_fast_switch{"GROUPATTN_SM90_DECODE_LIST_UNIFORM_FAST", true};
// sm90_engine::set_decode_list_near_wave_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_list_near_wave_switch{"GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE", false};
// sm90_engine::set_decode_driver_launch_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_driver_launch_switch{"GROUPATTN_SM90_DECODE_DRIVER_LAUNCH", true};
// sm90_engine::set_decode_early_tiles_mode: -1 the environment, 0 off, 1 on.
switches::BoolSwitch g_early_tiles_switch{"GROUPATTN_SM90_DECODE_EARLY_TILES", true};

}  // namespace

namespace sm90_engine {

void set_decode_work_list_mode(int mode) { g_work_list_switch.set_mode(mode); }
void set_decode_list_heads_fastest_mode(int mode) { g_list_heads_fastest_switch.set_mode(mode); }
void set_decode_list_uniform_fast_mode(int mode) { g_list_uniform_fast_switch.set_mode(mode); }
void set_decode_early_tiles_mode(int mode) { g_early_tiles_switch.set_mode(mode); }

// The first KV tile issued by thread 0 before the CTA barrier (KernelParams::early_first_tiles;
// batched K/V in the swap-AB kernel, head dims 64 and 128 and fp8): on by default (session 22: -0.3 to
// -1.0 us a call on one-token rows, -3.5 to -7 us on the four-wave list row 64/8 B128 x 8K;
// docs/DECODE_SM90.md section 33);
// GROUPATTN_SM90_DECODE_EARLY_TILES=0 leaves every tile to the producer warp. Bitwise the same either way.
bool decode_early_tiles() { return g_early_tiles_switch.on(); }

// GROUPATTN_SM90_DECODE_WORK_LIST=0 turns the work list off (an A/B in one process); unset or any
// other integer, on. Read once (host cost per call, issue 11).
bool decode_work_list() { return g_work_list_switch.on(); }

// The work list's grid with the KV head fastest (KernelParams::list_heads_fastest): on by default
// (session 10, UNVERIFIED on GPU: predicted to remove most of the 64/8 uniform rows' 2 % loss,
// docs/DECODE_SM90.md section 20, "The uniform 64/8 row"); GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST=0
// restores session 9's (m_blocks x slots, Hkv, 1). Bitwise the same either way.
bool decode_list_heads_fastest() { return g_list_heads_fastest_switch.on(); }

// The plan's shortcut for equal lengths (KernelParams::list_uniform_fast): on by default (session
// 10, UNVERIFIED on GPU: predicted -1 us (0.5-2.5) of the uniform 8/1 rows' 3.4-5.7 us,
// docs/DECODE_SM90.md section 20, "The uniform 8/1 row"); GROUPATTN_SM90_DECODE_LIST_UNIFORM_FAST=0
// runs the general plan for them too. Bitwise the same either way.
bool decode_list_uniform_fast() { return g_list_uniform_fast_switch.on(); }

void set_decode_list_near_wave_mode(int mode) { g_list_near_wave_switch.set_mode(mode); }

// The work list for P / 2 < B <= P (ListPlan::near_wave, decode_work_list.h list_near_wave): off by
// default (measured in session 13: the mixed-length rows +6.4 / +45 / +30 %, but the equal-length
// page-64 row -7.0 %; session 14: that row 142.7 against 133 us, the producer's first load ~3.4 us
// late; docs/DECODE_SM90.md sections 25 and 27); GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE=1
// turns it on. Read once. Exact either way (each plan against the fp64 reference).
bool decode_list_near_wave() { return g_list_near_wave_switch.on(); }

void set_decode_driver_launch_mode(int mode) { g_driver_launch_switch.set_mode(mode); }

// The cluster launch through cuLaunchKernelEx on a cached CUfunction (docs/HOST_COST.md "Session 12"):
// on by default (measured in session 12: the launch stage 3.56 -> 3.32 us, an empty cluster launch
// 3.60 -> 3.07; every GPU test passed with it forced on); GROUPATTN_SM90_DECODE_DRIVER_LAUNCH=0 turns
// it off. Read once.
bool decode_driver_launch() { return g_driver_launch_switch.on(); }

void set_decode_fp8_one_converter_wg_mode(int mode) { g_fp8_one_converter_wg_switch.set_mode(mode); }

// GROUPATTN_SM90_FP8_CONVERTER_WGS=1: fp8 packed rows with section 17's single converter warpgroup
// instead of section 21's two (measured the same speed or slower; docs/DECODE_SM90.md section 21).
// Read once; the same bits either way.
bool decode_fp8_one_converter_wg() { return g_fp8_one_converter_wg_switch.on(); }

void set_decode_paged_wave_two_mode(int mode) { g_paged_wave_two_switch.set_mode(mode); }

// GROUPATTN_SM90_DECODE_PAGED_WAVE_TWO=0: the swap-AB plans before session 19 -- paged K/V in pages
// of a multiple of 64 keys plans its splits for a wave of one CTA an SM instead of two
// (decode_split_plan.h split_wave_of), and the work list takes no several-wave fallback where a
// wave of two puts the batch in the band (list_plan) -- docs/DECODE_SM90.md section 29. Read once.
// Each plan is exact (the split count changes the combine's rounding, not the semantics).
bool decode_paged_wave_two() { return g_paged_wave_two_switch.on(); }

void set_decode_fp8_bf16_mma_mode(int mode) { g_fp8_bf16_mma_switch.set_mode(mode); }

// GROUPATTN_SM90_DECODE_FP8_BF16_MMA=1: fp8 decode with a bf16 Q runs its GEMMs in bf16 as before
// session 19 (swap-AB: both; packed rows: S = Q K^T) instead of f16 with Q scaled by 2^e
// (docs/DECODE_SM90.md sections 28 and 30). Read once. Not the same bits in the swap-AB form (P^T
// rounds to bf16 instead of f16); each form is checked against the fp64 reference.
bool decode_fp8_bf16_mma() { return g_fp8_bf16_mma_switch.on(); }

void set_decode_packed_small_pages_mode(int mode) { g_packed_small_pages_switch.set_mode(mode); }

// GROUPATTN_SM90_DECODE_PACKED_SMALL_PAGES=1: multi-token decode on 16-bit pages of a multiple of 8
// (not of 64) keys takes the packed-rows form at the same row cuts as other layouts
// (docs/DECODE_SM90.md section 22). On by default since session 10's measurement (page 16: 1.2-2.3x
// faster on every row of more than 32 query rows a KV head; =0 restores swap-AB there); the same
// answers either way up to the forms' rounding (each form is checked against the fp64 reference).
bool decode_packed_small_pages() { return g_packed_small_pages_switch.on(); }

void set_decode_packed_below_cut_mode(int mode) { g_packed_below_cut_switch.set_mode(mode); }

// GROUPATTN_SM90_DECODE_PACKED_BELOW_CUT=0: 16-bit K/V at head dims 64 and 256 keeps swap-AB below
// the packed-rows cut (plan_call; docs/DECODE_SM90.md section 31), as before session 20. Read
// once. Each form is checked against the fp64 reference.
bool decode_packed_below_cut() { return g_packed_below_cut_switch.on(); }

}  // namespace sm90_engine

const AttentionEngine& attention_sm90_engine() {
  static const Sm90Attention engine(Form::kAuto);
  return engine;
}

const AttentionEngine& attention_sm90_rows_engine() {
  static const Sm90Attention engine(Form::kPackedRows);
  return engine;
}

const AttentionEngine& attention_sm90_split_engine() {
  static const Sm90Attention engine(Form::kWorkspaceSplits);
  return engine;
}

}  // namespace groupattn
