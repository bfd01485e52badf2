// The persistent form of the sm90 prefill kernel (docs/PREFILL_SM90.md, "A persistent form with
// per-warpgroup query tiles", steps B and C; GROUPATTN_SM90_PREFILL_PERSISTENT, default on, and for
// causal attention GROUPATTN_SM90_PREFILL_PERSISTENT_CAUSAL, default on). Full or causal attention at
// head dim 128, batched Q and K/V without seqlens_k or window (the engine's choose_persistent;
// everything else runs the plain grid of prefill_kernel.cuh).
//
//   grid  min(units, SMs) CTAs; CTA c takes units c, c + grid, c + 2 grid, ... (a static list)
//   full  unit u = (sequence b, query head h, 128-row block mb), the block fastest; one work of the
//         sequence's n = ceil(Sk / 128) KV tiles, the same n for every work (batched K/V)
//   causal (kCausal) unit u of persistent_causal_units (launch.h): heads fastest (a head's units
//         together when one sequence's K and V exceed kHeadsFastestKvBytes); with Sq == Sk two works,
//         blocks m - 1 - i and i (m + 1 tiles together), else one block, the longest first.
//         A work of block mb has the plain grid's tiles 0 .. hi / 128 (hi: the last key its last
//         row sees), 1 to m of them; its mask is the plain kernel's (visible_keys)
//   work  128 query rows against its KV tiles; warpgroup w owns rows 64w .. 64w + 63 of it
//
// The CTA's KV tiles form one stream, g = 0 .. works x n - 1, and the plain loop runs over it: turn
// g of a warpgroup issues S(g) with O(g - 1), ring stage g % kStages and phase (g / kStages) & 1 are
// the plain loop's expressions, and the pingpong turns run on across works (every warpgroup takes
// works x n + 1 turns; causal: its tiles + 1). Works of different lengths, 1 tile next to 16, change
// nothing in the stream. At a work boundary (g the first tile of work k + 1):
//   - Q: each warpgroup's 64-row half has its own q_full(w) / q_empty(w); warpgroup w arrives on
//     q_empty(w) once its S product of work k's last tile is done, the producer then loads Q_w(k + 1)
//     into the same half (prefetched into L2 two works ahead), and the warpgroup waits q_full(w)
//     before its turn g;
//   - the boundary turn issues S0(k + 1) together with O_last(k); the softmax of S0(k + 1) starts a
//     fresh row max and sum (work k's are kept for its epilogue); once O_last(k) is done,
//     epilogue(k) runs inside the warpgroup's turn cycle, and O starts again from zero (the plain
//     kernel's first O product also accumulates onto zeros: the same bits);
//   - O(k) is staged (stmatrix, the Q layout) in the K half of work k's last stage, rows 64w ..
//     64w + 63 of both 64-d boxes, after the stage's empty phase (both warpgroups' products of that
//     tile are done), and leaves by TMA store, each warp its 16 rows; each warp then arrives on
//     o_free(stage), which the producer waits for before it refills that stage.
// Every arithmetic step is the plain loop's, in the same order: O and LSE are bitwise those of the
// plain grid (Sm90Prefill.PersistentEqualsPlainGridBitwise).
#pragma once

#include "attention/engines/sm90/prefill_kernel.cuh"

namespace groupattn::sm90_engine {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace prefill_detail {

// The persistent form's barriers after the plain kernel's (PrefillTraits::kPersistentBarBytes):
// wg_q_full(w) (one TMA arrival + bytes), wg_q_empty(w) (the warpgroup's 4 warps, once per work),
// o_free(stage) (the 8 consumer warps, once per work whose last tile sat in the stage).
template <class Traits>
struct PersistentSmem : Smem<Traits> {
  __device__ uint64_t* wg_q_full(int wg) const {
    return reinterpret_cast<uint64_t*>(this->base + Traits::kBarOffset + Traits::kBarBytes) + wg;
  }
  __device__ uint64_t* wg_q_empty(int wg) const { return wg_q_full(Traits::kConsumerWgs) + wg; }
  __device__ uint64_t* o_free(int stage) const { return wg_q_full(2 * Traits::kConsumerWgs) + stage; }
  // Warpgroup wg's 64 rows of O staged in the K half of `stage` (both 64-d boxes, kKvBoxBytes apart).
  __device__ unsigned char* o_rows(int stage, int wg) const { return this->k(stage) + wg * Traits::kRowsPerWg * 128; }
};

// Unit u of the static list (the block fastest): its query head, KV head, sequence and first row.
struct PersistentUnit {
  int h, kvh, b, m0;
};
template <class Traits>
__device__ __forceinline__ PersistentUnit persistent_unit(const KernelParams& p, int u) {
  PersistentUnit w;
  const int rest = u / p.m_blocks;
  w.m0 = (u - rest * p.m_blocks) * Traits::kBlockM;
  w.h = rest % p.heads_q;
  w.b = rest / p.heads_q;
  w.kvh = cuda_engine::kv_head_of(w.h, p.group, p.heads_kv);
  return w;
}

// Both 64-row halves of work w's Q into L2 only (a hint; nothing waits for it).
template <class Traits>
__device__ __forceinline__ void prefetch_work_q(const CUtensorMap* tq, const PersistentUnit& w) {
  for (int db = 0; db < Traits::kDBlocks; ++db)
    for (int wg = 0; wg < Traits::kConsumerWgs; ++wg)
      hw::tma_prefetch_l2_4d(tq, db * Traits::kSwizzleElems, w.h, w.m0 + wg * Traits::kRowsPerWg, w.b);
}
template <class Traits>
__device__ __forceinline__ void prefetch_unit_q(const KernelParams& p, const CUtensorMap* tq, int u) {
  prefetch_work_q<Traits>(tq, persistent_unit<Traits>(p, u));
}

// The causal list (kCausal; launch.h's persistent_causal_units): pairs when Sq == Sk. Producer and
// consumers derive every work from it the same way.
struct CausalList {
  int m;               // 128-row blocks per sequence
  int pair_units;      // units of two works (pairs: m / 2 per (sequence, head)), before the single ones
  bool pairs;
  bool heads_fastest;  // else a head's units together
};
template <class Traits>
__device__ __forceinline__ CausalList causal_list(const KernelParams& p) {
  CausalList l;
  l.m = p.m_blocks;
  l.pairs = p.seqlen_q == p.seqlen_k;
  l.pair_units = l.pairs ? (l.m / 2) * p.heads_q * p.batch : 0;
  // One sequence's K and V (the engine's kv_seq_bytes): 2 x Sk x Hkv x D x 2 bytes.
  l.heads_fastest = int64_t{p.seqlen_k} * p.heads_kv * (4 * Traits::kHeadDim) <= kHeadsFastestKvBytes;
  return l;
}
__device__ __forceinline__ int causal_unit_works(const CausalList& l, int u) {
  return u < l.pair_units ? 2 : 1;
}
// Work `half` of unit u: pairs (b, i, h), h fastest (or (b, h, i)): block m - 1 - i, then block i;
// then (pairs, m odd) the middle blocks (b, h); without pairs (b, rank, h) (or (b, h, rank)): block
// m - 1 - rank, the longest first.
template <class Traits>
__device__ __forceinline__ PersistentUnit causal_work(const KernelParams& p, const CausalList& l, int u,
                                                      int half) {
  PersistentUnit w;
  int block;
  if (l.pairs && u >= l.pair_units) {
    const int v = u - l.pair_units;
    w.b = v / p.heads_q;
    w.h = v - w.b * p.heads_q;
    block = l.m / 2;
  } else {
    const int per_head = l.pairs ? l.m / 2 : l.m;  // units of one (sequence, head)
    const int b_units = per_head * p.heads_q;
    w.b = u / b_units;
    const int v = u - w.b * b_units;
    int i;
    if (l.heads_fastest) {
      i = v / p.heads_q;
      w.h = v - i * p.heads_q;
    } else {
      w.h = v / per_head;
      i = v - w.h * per_head;
    }
    block = !l.pairs || half == 0 ? l.m - 1 - i : i;
  }
  w.m0 = block * Traits::kBlockM;
  w.kvh = cuda_engine::kv_head_of(w.h, p.group, p.heads_kv);
  return w;
}
// KV tiles of the causal work at m0: the plain grid's (cta_work) 0 .. hi / kBlockN, hi the last key its
// last row sees. >= 1: choose_persistent admits no block whose rows all see no key (hi < 0); were
// there one, its single fully masked tile would give O = 0 and LSE = -inf all the same.
template <class Traits>
__device__ __forceinline__ int causal_tiles(const KernelParams& p, const cuda_engine::SeqInfo& s, int m0) {
  const int hi = cuda_engine::visible_keys(p, s, min(m0 + Traits::kBlockM, s.q_len) - 1).hi;
  return max(hi, 0) / Traits::kBlockN + 1;
}

// Producer (one thread): per work, its first KV tile, then Q_0 and Q_1 (each once its warpgroup's
// last S product of the previous work is done), then the work's other tiles. A stage whose previous
// tile ended a work holds that work's staged O: it is refilled only after o_free. Deadlock-free:
// each wait is for a consumer event that, in that consumer's program order, precedes its first wait
// on anything this thread issues later (tile g's stage: O(g - 3), done in step g - 2; o_free of the
// work ending at g - 3: its epilogue, in step g - 2; q_empty(w) of work k: S of tile g - 1, step g - 1).
// None of this depends on the works' lengths (kCausal: 1 to m tiles each).
template <class Traits, bool kCausal>
__device__ void produce_persistent(const KernelParams& p, const PersistentSmem<Traits>& sm,
                                   const CUtensorMap* tq, const CUtensorMap* tk, const CUtensorMap* tv,
                                   int units, int grid, int n) {
  constexpr int kS = Traits::kStages;
  uint32_t staged = 0;   // bit s: the last tile loaded into stage s ended a work (its K half stages O)
  uint32_t o_phase = 0;  // bit s: parity of o_free(s)'s next phase
  int it = 0;
  const int first = static_cast<int>(blockIdx.x);
  // Work k of the CTA (work w, `tiles` KV tiles): its KV tiles into the ring, its Q halves after the first.
  auto load_work = [&](const PersistentUnit& w, int tiles, int k) {
    for (int blk = 0; blk < tiles; ++blk, ++it) {
      const int stage = it % kS;
      hw::mbar_wait(sm.empty(stage), (static_cast<uint32_t>(it / kS) & 1u) ^ 1u);
      if ((staged >> stage) & 1u) {
        hw::mbar_wait(sm.o_free(stage), (o_phase >> stage) & 1u);
        o_phase ^= 1u << stage;
      }
      staged = (staged & ~(1u << stage)) | (blk + 1 == tiles ? 1u << stage : 0u);
      hw::mbar_arrive_expect_tx(sm.full(stage), static_cast<uint32_t>(Traits::kStageBytes));
      const int row = blk * Traits::kBlockN;
      for (int db = 0; db < Traits::kDBlocks; ++db) {
        hw::tma_load_4d(sm.k(stage) + db * Traits::kKvBoxBytes, tk, db * Traits::kSwizzleElems, w.kvh, row, w.b,
                        sm.full(stage));
        hw::tma_load_4d(sm.v(stage) + db * Traits::kKvBoxBytes, tv, db * Traits::kSwizzleElems, w.kvh, row, w.b,
                        sm.full(stage));
      }
      if (blk == 0) {
        for (int wg = 0; wg < Traits::kConsumerWgs; ++wg) {
          if (k > 0) hw::mbar_wait(sm.wg_q_empty(wg), static_cast<uint32_t>(k - 1) & 1u);
          hw::mbar_arrive_expect_tx(sm.wg_q_full(wg), static_cast<uint32_t>(Traits::kQBytes / Traits::kConsumerWgs));
          for (int db = 0; db < Traits::kDBlocks; ++db)
            hw::tma_load_4d(sm.q() + db * Traits::kQBlockBytes + wg * Traits::kRowsPerWg * 128, tq,
                            db * Traits::kSwizzleElems, w.h, w.m0 + wg * Traits::kRowsPerWg, w.b, sm.wg_q_full(wg));
        }
      }
    }
  };
  if constexpr (kCausal) {
    // Q of every work of unit u + 2 grid into L2 when unit u's first work is issued (at the start,
    // unit first's second work and unit first + grid).
    const CausalList l = causal_list<Traits>(p);
    const cuda_engine::SeqInfo s =
        cuda_engine::seq_info(p, 0);  // batched: the same lengths for every sequence
    auto prefetch_unit = [&](int u, int from) {
      for (int half = from; half < causal_unit_works(l, u); ++half)
        prefetch_work_q<Traits>(tq, causal_work<Traits>(p, l, u, half));
    };
    prefetch_unit(first, 1);
    if (first + grid < units) prefetch_unit(first + grid, 0);
    int k = 0;
    for (int u = first; u < units; u += grid) {
      if (u + 2 * grid < units) prefetch_unit(u + 2 * grid, 0);
      for (int half = 0; half < causal_unit_works(l, u); ++half, ++k) {
        const PersistentUnit w = causal_work<Traits>(p, l, u, half);
        load_work(w, causal_tiles<Traits>(p, s, w.m0), k);
      }
    }
  } else {
    if (first + grid < units) prefetch_unit_q<Traits>(p, tq, first + grid);
    for (int u = first, k = 0; u < units; u += grid, ++k) {
      const PersistentUnit w = persistent_unit<Traits>(p, u);
      if (u + 2 * grid < units) prefetch_unit_q<Traits>(p, tq, u + 2 * grid);
      load_work(w, n, k);
    }
  }
}

// One consumer warpgroup over the CTA's tile stream (the file's comment). The steady step is the
// plain loop's body; the boundary step adds the Q wait, the fresh softmax state and the epilogue.
template <class Traits, bool kCausal>
__device__ void consume_persistent(const KernelParams& p, const PersistentSmem<Traits>& sm, int wg,
                                   int warp_in_wg, int lane, int units, int grid, int n,
                                   const CUtensorMap* to) {
  using PStore = ::groupattn::cuda::MmaType<typename Traits::Element>;
  using Store = PStore;
  constexpr int kS = Traits::kBlockN / 2;
  constexpr int kStages = Traits::kStages;
  const int first_unit = static_cast<int>(blockIdx.x);
  const int works = (units - 1 - first_unit) / grid + 1;
  const int total = works * n;
  // kCausal: the work that owns the current tile, by its cursor (unit cu, work ch of the unit): n_cur
  // tiles, the CTA's work k_cur, whether a work follows it (more); at a boundary (du, dh) is the
  // cursor of the work that ended at the tile before. Works are re-derived from cursors where needed
  // rather than held through the loop. (Full attention keeps n, works and total: every work n tiles.)
  [[maybe_unused]] const CausalList clist = causal_list<Traits>(p);
  [[maybe_unused]] int cu = first_unit, ch = 0, du = 0, dh = 0, n_cur = 0, k_cur = 0;
  [[maybe_unused]] bool more = false;

  // The work's mask (plain consume's vis / common_lo / common_hi): rows past Sq see no key.
  const cuda_engine::SeqInfo s = cuda_engine::seq_info(p, 0);  // batched: the same lengths for every sequence
  KeyInterval vis[2];
  int common_lo = 1, common_hi = 0;
  auto set_mask = [&](int m0) {
    const int row_base = m0 + wg * Traits::kRowsPerWg + 16 * warp_in_wg + lane / 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_base + 8 * r;
      vis[r] = row < s.q_len ? cuda_engine::visible_keys(p, s, row) : KeyInterval{0, -1};
    }
    const int wg_first = m0 + wg * Traits::kRowsPerWg;
    const int wg_last = min(wg_first + Traits::kRowsPerWg, s.q_len) - 1;
    common_lo = 1, common_hi = 0;
    if (wg_first <= wg_last) {
      common_lo = cuda_engine::visible_keys(p, s, wg_last).lo;
      common_hi = cuda_engine::visible_keys(p, s, wg_first).hi;
    }
  };

  float o[Traits::kDBlocks][32];
#pragma unroll
  for (int hh = 0; hh < Traits::kDBlocks; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float sacc[kS];
  const float scale = p.scale;
  const float inv_cap = p.softcap > 0.f ? scale / p.softcap : 0.f;

  // The plain consume's softmax_tile (the same helpers, so the same operations in the same order).
  auto softmax_tile = [&](int blk, float(&alpha)[2]) {
    const float mult = cap_and_mask_scores<Traits::kBlockN>(sacc, blk, p.softcap, scale, inv_cap, vis,
                                                            common_lo, common_hi, lane);
    online_softmax_rows(sacc, m_run, l_run, mult, alpha);
  };
  auto pack_p = [&](uint32_t (&pf)[Traits::kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < Traits::kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pf[kk][r] = PStore::pack(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
  };

  // Pingpong turns as in the plain consume (two warpgroups): warpgroup 1 pre-arrives once on
  // warpgroup 0's barrier and skips its arrive after its last turn of the CTA.
  constexpr uint32_t kTurnThreads = 2 * 128;
  static_assert(Traits::kConsumerWgs == 2, "two consumer warpgroups: turn barriers 1 and 2");
  auto turn_begin = [&] { hw::named_bar_sync(1u + static_cast<uint32_t>(wg), kTurnThreads); };
  auto turn_end = [&](bool last) {
    if (!(last && wg == 1)) hw::named_bar_arrive(wg == 1 ? 1u : 2u, kTurnThreads);
  };
  auto wait_k = [&](int g) {
    hw::mbar_wait(sm.full(g % kStages), static_cast<uint32_t>(g / kStages) & 1u);
  };
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) hw::mbar_arrive(sm.empty(stage));
  };
  auto release_q = [&] {
    __syncwarp();
    if (lane == 0) hw::mbar_arrive(sm.wg_q_empty(wg));
  };
  // Epilogue of work w (row sums m_fin / l_fin), its last tile `last_g`: O normalised into the K half
  // of that tile's stage once both warpgroups' products of it are done, out by TMA store (each warp
  // its 16 rows: the plain kernel's stmatrix form and O map), then o_free and the LSE.
  auto epilogue = [&](const PersistentUnit& w, int last_g, const float(&m_fin)[2], const float(&l_fin)[2]) {
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_fin[r];
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      inv[r] = l > 0.f ? 1.f / l : 0.f;
      lse[r] = l > 0.f ? (m_fin[r] + log2f(l)) * kLn2 : -INFINITY;
    }
    const int stage = last_g % kStages;
    hw::mbar_wait(sm.empty(stage), static_cast<uint32_t>(last_g / kStages) & 1u);
    unsigned char* rows = sm.o_rows(stage, wg);
    const int nrow = 16 * warp_in_wg + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int c0 = (lane >> 4) ^ (lane & 7);
    unsigned char* row = rows + nrow * 128;
#pragma unroll
    for (int hh = 0; hh < Traits::kDBlocks; ++hh) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i0 = 8 * q, i1 = 8 * q + 4;
        hw::stmatrix_x4(row + hh * Traits::kKvBoxBytes + ((c0 ^ (2 * q)) << 4),
                        Store::pack(o[hh][i0] * inv[0], o[hh][i0 + 1] * inv[0]),
                        Store::pack(o[hh][i0 + 2] * inv[1], o[hh][i0 + 3] * inv[1]),
                        Store::pack(o[hh][i1] * inv[0], o[hh][i1 + 1] * inv[0]),
                        Store::pack(o[hh][i1 + 2] * inv[1], o[hh][i1 + 3] * inv[1]));
      }
    }
    hw::fence_proxy_async_smem();
    __syncwarp();
    const int box_row = w.m0 + wg * Traits::kRowsPerWg + Traits::kOBoxRows * warp_in_wg;
    if (lane == 0) {
      if (box_row < s.q_len) {
        const unsigned char* box = rows + Traits::kOBoxRows * warp_in_wg * 128;
#pragma unroll
        for (int hh = 0; hh < Traits::kDBlocks; ++hh)
          hw::tma_store_4d(to, hh * Traits::kSwizzleElems, w.h, box_row, w.b, box + hh * Traits::kKvBoxBytes);
        hw::bulk_commit_group();
        hw::bulk_wait_group_read_all();
      }
      hw::mbar_arrive(sm.o_free(stage));
    }
    const int row_base = w.m0 + wg * Traits::kRowsPerWg + 16 * warp_in_wg + lane / 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int qrow = row_base + 8 * r;
      if (qrow < s.q_len && p.lse != nullptr && (lane & 3) == 0)
        p.lse[w.h * p.lse_head_stride + (static_cast<int64_t>(w.b) * p.seqlen_q + qrow) * p.lse_row_stride] = lse[r];
    }
  };

  uint32_t pfrag[Traits::kBlockN / 16][4];
  float alpha[2];
  // Tile g (g >= 1): S(g) with O(g - 1). kBoundary: g is the first tile of the work after unit
  // u_done (whose last tile is g - 1; kCausal: the work at (cu, ch), after the one at (du, dh)). t:
  // g's tile index in its work (the key offset of its mask).
  auto step = [&](int g, int t, auto boundary_tag, int u_done) {
    constexpr bool kBoundary = decltype(boundary_tag)::value;
    const int stage = g % kStages, prev_stage = (g - 1) % kStages;
    if constexpr (kBoundary) {
      const int k = kCausal ? k_cur : g / n;  // the CTA's work index of g
      hw::mbar_wait(sm.wg_q_full(wg), static_cast<uint32_t>(k) & 1u);
    }
    hw::fence_regs(sacc);
    fence_output<Traits>(o, pfrag);
    turn_begin();
    hw::wgmma_fence();
    issue_scores<Traits>(sacc, sm, stage, wg);
    hw::wgmma_commit();
    issue_output<Traits>(o, pfrag, sm, prev_stage);
    hw::wgmma_commit();
    turn_end(false);
    hw::wgmma_wait<1>();
    hw::fence_regs(sacc);
    if (t == (kCausal ? n_cur : n) - 1)
      release_q();  // S of the work's last tile done: its Q half may be reloaded
    [[maybe_unused]] float m_fin[2], l_fin[2];
    if constexpr (kBoundary) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m_fin[r] = m_run[r], l_fin[r] = l_run[r];
        m_run[r] = -INFINITY, l_run[r] = 0.f;
      }
      set_mask(kCausal ? causal_work<Traits>(p, clist, cu, ch).m0
                       : persistent_unit<Traits>(p, u_done + grid).m0);
    }
    softmax_tile(t, alpha);
    if (kCausal ? t + 1 < n_cur || more : g + 1 < total) wait_k(g + 1);
    hw::wgmma_wait<0>();
    fence_output<Traits>(o, pfrag);
    release(prev_stage);
    if constexpr (kBoundary) {
      epilogue(kCausal ? causal_work<Traits>(p, clist, du, dh) : persistent_unit<Traits>(p, u_done), g - 1,
               m_fin, l_fin);
#pragma unroll
      for (int hh = 0; hh < Traits::kDBlocks; ++hh)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
    } else {
      rescale_o(o, alpha);
    }
    pack_p(pfrag);
  };

  // kCausal: the work at the cursor (cu, ch): its tiles, whether another follows it. (The lane-0
  // shuffle lets ptxas keep the tile counters on the uniform datapath, as the plain consume's own_end:
  // without it the steady step took 528 SASS instructions instead of 514.)
  [[maybe_unused]] auto enter_work = [&] {
    n_cur = __shfl_sync(kFullMask, causal_tiles<Traits>(p, s, causal_work<Traits>(p, clist, cu, ch).m0), 0);
    more = ch + 1 < causal_unit_works(clist, cu) || cu + grid < units;
  };

  // Tile 0: S alone (the CTA's first turn).
  if constexpr (kCausal) {
    enter_work();
    set_mask(causal_work<Traits>(p, clist, cu, ch).m0);
  } else {
    set_mask(persistent_unit<Traits>(p, first_unit).m0);
  }
  if (wg == 1) hw::named_bar_arrive(1u, kTurnThreads);
  hw::mbar_wait(sm.wg_q_full(wg), 0u);
  wait_k(0);
  hw::fence_regs(sacc);
  turn_begin();
  hw::wgmma_fence();
  issue_scores<Traits>(sacc, sm, 0, wg);
  hw::wgmma_commit();
  turn_end(false);
  hw::wgmma_wait<0>();
  hw::fence_regs(sacc);
  if ((kCausal ? n_cur : n) == 1) release_q();
  softmax_tile(0, alpha);
  pack_p(pfrag);
  if (kCausal ? n_cur > 1 || more : total > 1) wait_k(1);

  int u = first_unit;
  int last_g;
  if constexpr (kCausal) {
    // Works of 1 to m tiles back to back: the boundary step of work k_cur + 1 follows the steady steps
    // of work k_cur directly (none when it has one tile).
    int g0 = 0;
    while (true) {
      for (int t = 1; t < n_cur; ++t) step(g0 + t, t, std::false_type{}, 0);
      if (!more) break;
      g0 += n_cur;
      du = cu, dh = ch;
      if (++ch == causal_unit_works(clist, cu)) cu += grid, ch = 0;
      ++k_cur;
      enter_work();
      step(g0, 0, std::true_type{}, 0);
    }
    last_g = g0 + n_cur - 1;
  } else {
    for (int k = 0; k < works; ++k, u += grid) {
      const int g0 = k * n;
      for (int t = 1; t < n; ++t) step(g0 + t, t, std::false_type{}, u);
      if (k + 1 < works) step(g0 + n, 0, std::true_type{}, u);
    }
    u -= grid;  // the last work's unit
    last_g = total - 1;
  }
  // The last O alone, then the last work's epilogue.
  fence_output<Traits>(o, pfrag);
  turn_begin();
  hw::wgmma_fence();
  issue_output<Traits>(o, pfrag, sm, last_g % kStages);
  hw::wgmma_commit();
  turn_end(true);
  hw::wgmma_wait<0>();
  fence_output<Traits>(o, pfrag);
  release(last_g % kStages);
  const float m_fin[2] = {m_run[0], m_run[1]}, l_fin[2] = {l_run[0], l_run[1]};
  epilogue(kCausal ? causal_work<Traits>(p, clist, cu, ch) : persistent_unit<Traits>(p, u), last_g, m_fin,
           l_fin);
}

template <class Traits, bool kCausal>
__device__ void prefill_persistent_cta(const KernelParams& p, const CUtensorMap* tq, const CUtensorMap* tk,
                                       const CUtensorMap* tv, const CUtensorMap* to) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const PersistentSmem<Traits> sm{{hw::align_1024(smem_raw)}};
  const int units = kCausal ? static_cast<int>(persistent_causal_units(p.m_blocks, p.heads_q, p.batch,
                                                                       p.seqlen_q == p.seqlen_k))
                            : p.m_blocks * p.heads_q * p.batch;
  const int grid = static_cast<int>(gridDim.x);
  if (static_cast<int>(blockIdx.x) >= units) return;  // the whole CTA, before any barrier
  const int n = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;  // >= 1 (the engine's maps need Sk >= 1)
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int st = 0; st < Traits::kStages; ++st) {
      hw::mbar_init(sm.full(st), 1);
      hw::mbar_init(sm.empty(st), Traits::kConsumerWarps);
      hw::mbar_init(sm.o_free(st), Traits::kConsumerWarps);
    }
    for (int wg = 0; wg < Traits::kConsumerWgs; ++wg) {
      hw::mbar_init(sm.wg_q_full(wg), 1);
      hw::mbar_init(sm.wg_q_empty(wg), 4);
    }
    hw::mbar_init_fence();
  }
  if (warp == Traits::kProducerWarp && lane == 0) {
    hw::prefetch_tensormap(tq);
    hw::prefetch_tensormap(to);
    hw::prefetch_tensormap(tk);
    hw::prefetch_tensormap(tv);
  }
  __syncthreads();
  if (warp >= Traits::kProducerWarp) {
    hw::setmaxnreg_dec<Traits::kProducerRegs>();
    if (warp == Traits::kProducerWarp && lane == 0)
      produce_persistent<Traits, kCausal>(p, sm, tq, tk, tv, units, grid, n);
  } else {
    hw::setmaxnreg_inc<Traits::kConsumerRegs>();
    consume_persistent<Traits, kCausal>(p, sm, warp / 4, warp % 4, lane, units, grid, n, to);
  }
}

}  // namespace prefill_detail
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The persistent kernel (Traits::kPersistentForm): gridDim.x CTAs over the static list (kCausal: the
// causal list). O leaves by TMA store through tmap_o (batched Q).
template <class Traits, bool kCausal>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm90_prefill_persistent_kernel(const cuda_engine::KernelParams p,
                                   const __grid_constant__ CUtensorMap tmap_q,
                                   const __grid_constant__ CUtensorMap tmap_k,
                                   const __grid_constant__ CUtensorMap tmap_v,
                                   const __grid_constant__ CUtensorMap tmap_o) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(Traits::kPersistentForm, "the persistent form: prefill at head dim 128");
  prefill_detail::prefill_persistent_cta<Traits, kCausal>(p, &tmap_q, &tmap_k, &tmap_v, &tmap_o);
#else
  (void)p;
  (void)tmap_q;
  (void)tmap_k;
  (void)tmap_v;
  (void)tmap_o;
#endif
}

template <class Traits, bool kCausal>
Status launch_prefill_persistent_form(const cuda_engine::KernelParams& p, const PrefillLaunch& l,
                                      cudaStream_t stream) {
  constexpr auto kKernel = sm90_prefill_persistent_kernel<Traits, kCausal>;
  GA_RETURN_IF_ERROR(cuda::set_max_dynamic_smem_once<kKernel>(static_cast<int>(Traits::kPersistentSmemBytes)));
  kKernel<<<dim3(static_cast<unsigned>(l.persistent_grid)), Traits::kThreads, Traits::kPersistentSmemBytes,
            stream>>>(p, *static_cast<const CUtensorMap*>(l.q_tmap), *static_cast<const CUtensorMap*>(l.k_tmap),
                      *static_cast<const CUtensorMap*>(l.v_tmap), *static_cast<const CUtensorMap*>(l.o_tmap));
  return cuda::last_launch_status(kCausal ? "sm90_prefill_persistent_kernel (causal)"
                                          : "sm90_prefill_persistent_kernel");
}

template <class Traits>
Status launch_prefill_persistent(const cuda_engine::KernelParams& p, const PrefillLaunch& l,
                                 cudaStream_t stream) {
  if (p.causal) return launch_prefill_persistent_form<Traits, true>(p, l, stream);
  return launch_prefill_persistent_form<Traits, false>(p, l, stream);
}

}  // namespace groupattn::sm90_engine
