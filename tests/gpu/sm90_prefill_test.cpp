// GPU tier for the sm90-prefill engine (Hopper prefill, issue 3), pinned by name. Every case
// against the fp64 reference (TESTING.md
// pass rules, NaN-poisoned outputs, guard bands: check_case), plus bitwise native GQA == K/V
// copied up, the declines and automatic selection. Skips unless a compute capability 9.0 device
// is visible.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attention/engines/sm90/launch.h"
#include "attention/engines/sm90/prefill_traits.h"
#include "gpu/cuda_attention_harness.h"

namespace groupattn::test {
namespace {

constexpr const char* kEngine = "sm90-prefill";

class Sm90Prefill : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_sm90_device()) GTEST_SKIP() << "no compute capability 9.0 device";
  }
};

// Batched Q and K/V: every sequence the same lengths (different K lengths would need seqlens_k).
Case prefill_case(int64_t hq, int64_t hkv, int batch, int sq, int sk, bool causal) {
  Case c;
  c.hq = hq, c.hkv = hkv, c.d = 128;
  c.q_lens.assign(static_cast<size_t>(batch), sq);
  c.k_lens.assign(static_cast<size_t>(batch), sk);
  c.causal = causal;
  return c;
}

TEST_F(Sm90Prefill, SmallCausal) { check_case(prefill_case(8, 2, 1, 128, 128, true), kEngine); }

TEST_F(Sm90Prefill, HeadRatiosCausal) {
  for (auto [hq, hkv] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 4}, {8, 2}, {64, 8}, {32, 2}, {8, 1}, {12, 4}}) {
    check_case(prefill_case(hq, hkv, 2, 200, 200, true), kEngine);
  }
}

// Query and key lengths around the 128-row and 128-key tiles, Sq == Sk and both ways unequal
// (bottom-right causal: with Sq > Sk the first rows see no key).
TEST_F(Sm90Prefill, LengthsAroundTiles) {
  for (int sq : {17, 127, 128, 129, 300}) {  // <= 16 is a decode step: declined (DeclinesWithReason)
    for (int sk : {1, 127, 128, 129, 176, 177, 385}) {
      for (bool causal : {false, true}) check_case(prefill_case(8, 2, 1, sq, sk, causal), kEngine);
    }
  }
}

// Every head dim (64: one 64-wide swizzle block of d, O += P V as RS m64n64k16; 256: four blocks,
// 64-key tiles in a 2-stage ring, O += P V as RS m64n256k16).
constexpr int kHeadDims[] = {128, 64, 256};

TEST_F(Sm90Prefill, DtypesWindowSoftcapScale) {
  for (int d : kHeadDims) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case c = prefill_case(12, 4, 2, 333, 333, false);
      c.d = d;
      c.dtype = dt;
      check_case(c, kEngine);
      c.window_left = 100, c.window_right = 0;
      check_case(c, kEngine);
      c.window_left = 50, c.window_right = 70;
      check_case(c, kEngine);
      c.window_left = c.window_right = -1;
      c.causal = true;
      c.softcap = 30.f;
      check_case(c, kEngine);
      c.softcap = 0.f;
      c.scale = 0.05f;
      check_case(c, kEngine);
    }
  }
}

TEST_F(Sm90Prefill, StridedViews) {
  Case c = prefill_case(8, 2, 2, 260, 260, true);
  c.strided = true;
  check_case(c, kEngine);
}

TEST_F(Sm90Prefill, GqaEqualsCopiedUpBitwise) {
  for (int d : kHeadDims) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case c = prefill_case(12, 4, 2, 300, 300, true);
      c.d = d;
      c.dtype = dt;
      expect_gqa_equals_copied_up(c, kEngine);
    }
  }
}

// One setting of the prefill's bit-preserving forms, each switch 0 or 1.
struct PrefillForm {
  int early, ahead, stsm, tma;
};

// Runs p under one form (every switch forced for the scope of the call).
void run_form(Problem& p, const PrefillForm& f, HostTensor* o, HostTensor* l) {
  ForcedSwitch early(sm90_engine::set_prefill_early_loads_mode, f.early);
  ForcedSwitch ahead(sm90_engine::set_prefill_q_ahead_mode, f.ahead);
  ForcedSwitch stsm(sm90_engine::set_prefill_stsm_epilogue_mode, f.stsm);
  ForcedSwitch tma(sm90_engine::set_prefill_tma_store_o_mode, f.tma);
  ASSERT_TRUE(run_cuda(p, o, l, kEngine).ok()) << describe(p.c);
}

// For every head dim, full and causal, and each (Sq, Sk): 12/4 heads, 3 sequences; O and LSE of each
// form bitwise those of the plain kernel (every switch off).
void expect_forms_equal_plain_bitwise(const std::vector<std::pair<int, int>>& lengths,
                                      const std::vector<PrefillForm>& forms) {
  for (int d : kHeadDims) {
    for (bool causal : {false, true}) {
      for (auto [sq, sk] : lengths) {
        Case c = prefill_case(12, 4, 3, sq, sk, causal);
        c.d = d;
        auto p = make_problem(c);
        HostTensor o0 = like(p->out), l0 = like(p->lse);
        run_form(*p, {0, 0, 0, 0}, &o0, &l0);
        if (::testing::Test::HasFatalFailure()) return;
        for (const PrefillForm& f : forms) {
          HostTensor o1 = like(p->out), l1 = like(p->lse);
          run_form(*p, f, &o1, &l1);
          if (::testing::Test::HasFatalFailure()) return;
          const std::string form = " (early loads " + std::to_string(f.early) + ", Q prefetch " +
                                   std::to_string(f.ahead) + ", stmatrix epilogue " + std::to_string(f.stsm) +
                                   ", TMA store of O " + std::to_string(f.tma) + ")";
          EXPECT_TRUE(bitwise_equal(o0, o1)) << describe(c) << ": O differs" << form;
          EXPECT_TRUE(bitwise_equal(l0, l1)) << describe(c) << ": LSE differs" << form;
        }
      }
    }
  }
}

// Early first loads (PrefillLaunch::early_first_loads; docs/PREFILL_SM90.md, "The prologue's first
// loads"): thread 0 issues Q and the first KV tile before the CTA barrier, the first tile's K on a
// barrier of its own and its V (and stale-row zeroing) waited for after the first softmax. The
// stmatrix epilogue (PrefillLaunch::stsm_epilogue, D 128 / 256) writes the same bytes to the same
// shared-memory places as the 4-byte stores. The L2 prefetch of a later CTA's Q
// (PrefillLaunch::q_prefetch_ahead, "Where a short CTA's time goes") writes nothing. Same loads and
// arithmetic: O and LSE bitwise those of the plain kernel (all three off), each form alone and all
// together; 288 CTAs at d 128 (more than one per SM, so most CTAs prefetch another's Q). Lengths
// around the tiles, a single partial KV tile (77 keys: the first tile's V rows past the map zeroed
// after the first S), Sq != Sk both ways, every head dim, full and causal.
TEST_F(Sm90Prefill, EarlyLoadsAndStsmEqualPlainBitwise) {
  expect_forms_equal_plain_bitwise({{1000, 1000}, {129, 385}, {385, 129}, {100, 77}},
                                   {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {1, 1, 1, 0}});
}

// Under whatever forms the caller forces, for every head dim against the reference: (strided) padded
// row, head and batch strides; seqlens_k with NaN rows past each sequence's length (first tiles of 71
// and 129 keys); then varlen Q and K/V (a short sequence's first tile holds the next one's keys).
void expect_stale_rows_and_varlen_match_reference(bool strided) {
  for (int d : kHeadDims) {
    for (bool causal : {false, true}) {
      if (strided) {
        Case c = prefill_case(8, 2, 2, 200, 260, causal);
        c.d = d;
        c.strided = true;
        check_case(c, kEngine);
      }
      Case k = prefill_case(8, 2, 3, 150, 300, causal);
      k.d = d;
      k.k_lens = {300, 71, 129};
      expect_ignores_stale_rows(k, kEngine);
    }
    Case v = prefill_case(8, 2, 1, 1, 1, true);
    v.d = d;
    v.q_varlen = true;
    v.kv = KvKind::kVarlen;
    v.q_lens = {129, 1, 0, 300, 128, 77};
    v.k_lens = {129, 200, 5, 300, 0, 385};
    check_case(v, kEngine);
  }
}

// The paths where the first tile's stale V rows matter, with early first loads (and the stmatrix
// epilogue) forced, against the reference: seqlens_k with NaN rows past each sequence's length
// (first tiles of 71 and 129 keys hold them), and varlen K/V (the first tile of a short sequence
// holds the next sequence's keys; the epilogue's rows past a sequence must not be stored).
TEST_F(Sm90Prefill, EarlyLoadsStaleRowsAndVarlen) {
  ForcedSwitch on(sm90_engine::set_prefill_early_loads_mode, 1);
  ForcedSwitch stsm(sm90_engine::set_prefill_stsm_epilogue_mode, 1);
  expect_stale_rows_and_varlen_match_reference(/*strided=*/false);
}

// O by TMA store (PrefillLaunch::tma_store_o, D 128 / 256, batched Q; docs/PREFILL_SM90.md, "The
// epilogue by TMA store"): each consumer warp's 16 staged rows leave through an O map whose row
// extent Sq stops a sequence's last query tile at its end. The same bytes as the 16-byte stores: O
// and LSE bitwise those of the plain kernel, with either shared-memory form (4-byte stores,
// stmatrix) and with early loads. Query lengths whose last tile ends inside a warp's 16 rows (1000,
// 385, 100, 17: the box hangs over Sq) or leaves whole warps and warpgroups without rows (129, 17),
// three sequences (a box past Sq must not reach the next sequence's rows), Sq != Sk both ways, full
// and causal (both grid orders). D 64 keeps the stores (declared: the form is not compiled there)
// and must be unchanged by the switch.
TEST_F(Sm90Prefill, TmaStoreOEqualsPlainBitwise) {
  expect_forms_equal_plain_bitwise({{1000, 1000}, {129, 385}, {385, 129}, {100, 77}, {17, 300}},
                                   {{0, 0, 0, 1}, {0, 0, 1, 1}, {1, 0, 1, 1}});
}

// The TMA store of O forced, against the reference with the harness's guards (NaN-poisoned
// outputs, the neighbours of every tensor untouched): strided views (padded row, head and batch
// strides: the map's strides, and nothing written into the padding), seqlens_k with NaN stale
// rows, and varlen Q, which keeps the 16-byte stores (a sequence's last tile must not write the
// next sequence's rows).
TEST_F(Sm90Prefill, TmaStoreOGuardsStridedAndVarlen) {
  ForcedSwitch on(sm90_engine::set_prefill_tma_store_o_mode, 1);
  expect_stale_rows_and_varlen_match_reference(/*strided=*/true);
}

// Varlen Q and K/V (rank-3 maps, coordinates from cu_seqlens): lengths around the tiles, a
// sequence without queries, one without keys, Sq != Sk per sequence; causal, window, GQA ratios.
TEST_F(Sm90Prefill, VarlenQAndKv) {
  Case c = prefill_case(8, 2, 1, 1, 1, true);
  c.q_varlen = true;
  c.kv = KvKind::kVarlen;
  c.q_lens = {129, 1, 0, 300, 128, 77};
  c.k_lens = {129, 200, 5, 300, 0, 385};
  for (bool causal : {false, true}) {
    c.causal = causal;
    check_case(c, kEngine);
  }
  c.window_left = 60, c.window_right = 10;
  check_case(c, kEngine);
  c.window_left = c.window_right = -1;
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{8, 4}, {64, 8}, {8, 1}, {12, 4}}) {
    c.hq = hq, c.hkv = hkv;
    check_case(c, kEngine);
  }
}

// Batched K/V with seqlens_k: the rows past a sequence's length hold stale cache values -- here
// NaN (expect_ignores_stale_rows, the harness). The tile holding the last key also holds those
// rows; their scores are masked and their V rows zeroed in shared memory, so O stays exact.
TEST_F(Sm90Prefill, SeqlensKIgnoresStaleRows) {
  for (bool causal : {false, true}) {
    Case c = prefill_case(8, 2, 3, 150, 300, causal);
    c.k_lens = {300, 171, 129};
    expect_ignores_stale_rows(c, kEngine);
  }
}

// Head dims 64 and 256 beyond the tests above that cover every dim: head ratios, lengths around
// the dim's query tile (192 rows at D 64, three consumer warpgroups; 128 at D 256) and KV tile
// (128 keys at D 64, 64 at D 256: prefill_tile), varlen.
TEST_F(Sm90Prefill, HeadDims64And256) {
  for (int d : {64, 256}) {
    auto with_d = [d](Case c) {
      c.d = d;
      return c;
    };
    // D 256: the ratios its users run (16/2) and a non-power-of-two group; 64/8 stays at D 64 (the
    // fp64 reference's time grows with Hq x D).
    const auto ratios = d == 64 ? std::vector<std::pair<int64_t, int64_t>>{{8, 4}, {8, 2}, {64, 8}, {8, 1}}
                                : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {16, 2}, {8, 1}, {12, 4}};
    for (auto [hq, hkv] : ratios) {
      for (bool causal : {false, true})
        check_case(with_d(prefill_case(hq, hkv, 2, 200, 200, causal)), kEngine);
    }
    const int m = sm90_engine::prefill_tile(d).block_m, n = sm90_engine::prefill_tile(d).block_n;
    // Query lengths: one row in the last warpgroup (129), the warpgroup boundaries, the query tile
    // -1 / +0 / +1 (D 64: 191, 192, 193), and two tiles + 1.
    std::vector<int> sqs = {17, 127, 129, m - 1, m, m + 1, 2 * m + 1};
    if (m == 128) sqs = {17, 127, 129};  // D 256: as before
    for (int sq : sqs) {
      for (int sk : {1, n - 1, n, n + 1, 2 * n + 1, 385}) {
        for (bool causal : {false, true}) check_case(with_d(prefill_case(8, 2, 1, sq, sk, causal)), kEngine);
      }
    }
    Case v = with_d(prefill_case(8, 2, 1, 1, 1, true));
    v.q_varlen = true;
    v.kv = KvKind::kVarlen;
    v.q_lens = {129, 0, 300, 77, 65, m - 1, m + 1, m};
    v.k_lens = {129, 5, 300, 385, 63, m - 1, m + 1, 2 * m + 1};
    for (bool causal : {false, true}) {
      v.causal = causal;
      check_case(v, kEngine);
    }
    v.window_left = 60, v.window_right = 10;
    check_case(v, kEngine);
  }
}

// Head dim 64 with seqlens_k poisoning the rows past each sequence's keys: the stale-V zeroing
// and its barrier over three consumer warpgroups (384 threads), query rows in all three.
TEST_F(Sm90Prefill, HeadDim64SeqlensKIgnoresStaleRows) {
  for (bool causal : {false, true}) {
    Case c = prefill_case(8, 2, 3, 200, 300, causal);
    c.d = 64;
    c.k_lens = {300, 171, 129};
    expect_ignores_stale_rows(c, kEngine);
  }
}

// Head dim 256 at the head ratio its users run (16/2), with seqlens_k poisoning the rows past each
// sequence's keys (the stale-V zeroing over four d boxes of a 64-key tile).
TEST_F(Sm90Prefill, HeadDim256SeqlensKIgnoresStaleRows) {
  for (bool causal : {false, true}) {
    Case c = prefill_case(16, 2, 3, 150, 300, causal);
    c.d = 256;
    c.k_lens = {300, 171, 65};
    expect_ignores_stale_rows(c, kEngine);
  }
}

// Head dim 256 in the 80-key form (PrefillLaunch::d256_n80, forced; docs/PREFILL_SM90.md, "Head dim
// 256 with 80-key tiles") against the fp64 reference with the harness's guards (NaN-poisoned
// outputs, untouched neighbours): 80 divides neither the 128-row query tile nor a power of two, so
// the diagonal tiles of bottom-right causal masks, windows and the partial last tile (Sk not a
// multiple of 80) fall at other places than with 64 keys. Sq == Sk around both tiles (79, 80, 81,
// 129, 385, 1000: 12.5 KV tiles), full / causal / window / softcap; Sq != Sk both ways (with Sq >
// Sk the first rows see no key); three sequences at GQA 8/2, MQA 8/1 and 16/2; seqlens_k with NaN
// stale rows (a last tile of 1 and of 79 keys); varlen Q and K/V (both epilogues: batched Q takes
// the TMA store of O, varlen Q the 16-byte stores); bf16 and f16.

TEST_F(Sm90Prefill, HeadDim256N80Tiles) {
  ForcedSwitch on(sm90_engine::set_prefill_d256_n80_mode, 1);
  static_assert(sm90_engine::kPrefillTileD256N80.block_n == 80, "the lengths below sit around 80 keys");
  for (DType dt : {DType::kBF16, DType::kF16}) {
    auto with = [dt](Case c) {
      c.d = 256;
      c.dtype = dt;
      return c;
    };
    // MQA at the longest length (the fp64 reference's time grows with Hq x Sq x Sk).
    for (bool causal : {false, true}) check_case(with(prefill_case(2, 1, 1, 1000, 1000, causal)), kEngine);
    for (int n : {385, 129, 80, 81, 79, 17}) {
      Case c = with(prefill_case(4, 2, 1, n, n, false));
      check_case(c, kEngine);
      c.causal = true;
      check_case(c, kEngine);
      c.causal = false;
      c.window_left = 50, c.window_right = 70;
      check_case(c, kEngine);
      c.window_left = 100, c.window_right = 0;
      check_case(c, kEngine);
      c.window_left = c.window_right = -1;
      c.causal = true;
      c.softcap = 30.f;
      check_case(c, kEngine);
    }
    for (auto [sq, sk] :
         std::vector<std::pair<int, int>>{{129, 385}, {385, 129}, {100, 81}, {17, 300}, {300, 79}}) {
      for (bool causal : {false, true}) check_case(with(prefill_case(4, 2, 1, sq, sk, causal)), kEngine);
    }
    for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {8, 1}, {16, 2}}) {
      for (bool causal : {false, true}) check_case(with(prefill_case(hq, hkv, 3, 200, 241, causal)), kEngine);
    }
    for (bool causal : {false, true}) {
      Case k = with(prefill_case(8, 2, 3, 150, 300, causal));
      k.k_lens = {300, 161, 79};
      expect_ignores_stale_rows(k, kEngine);
    }
    Case v = with(prefill_case(8, 2, 1, 1, 1, true));
    v.q_varlen = true;
    v.kv = KvKind::kVarlen;
    v.q_lens = {129, 1, 0, 300, 80, 81, 79};
    v.k_lens = {129, 200, 5, 300, 0, 161, 80};
    for (bool causal : {false, true}) {
      v.causal = causal;
      check_case(v, kEngine);
    }
    v.window_left = 60, v.window_right = 10;
    check_case(v, kEngine);
  }
}

// ---- The persistent form (PrefillLaunch::persistent_grid, prefill_persistent.cuh; docs/PREFILL_SM90.md,
// "A persistent form with per-warpgroup query tiles", steps B and C): head dim 128, full and causal
// attention, batched Q and K/V. Within a work the KV tiles and the arithmetic are the plain loop's, so
// O and LSE must be bitwise those of the plain grid: a tile of the wrong work, head or stage, a Q half
// reloaded too early, O staged over a K tile still read, or a causal work given the wrong tile count
// or mask shows as a difference.

// Runs p with the persistent switches (full and causal) forced to `mode` (and, when > 0, the
// persistent grid forced to `grid` CTAs); checks which form ran.
void run_persistent(Problem& p, int mode, int grid, HostTensor* o, HostTensor* l) {
  ForcedSwitch form(sm90_engine::set_prefill_persistent_mode, mode);
  ForcedSwitch causal(sm90_engine::set_prefill_persistent_causal_mode, mode);
  ForcedSwitch ctas(sm90_engine::set_prefill_persistent_grid, grid);
  ASSERT_TRUE(run_cuda(p, o, l, kEngine).ok()) << describe(p.c);
  const int ran = sm90_engine::prefill_last_persistent_grid();
  if (mode == 0) {
    ASSERT_EQ(ran, 0) << describe(p.c) << ": the switch off must run the plain grid";
  } else {
    ASSERT_GT(ran, 0) << describe(p.c) << ": the persistent form was not taken";
    if (grid > 0) {
      ASSERT_LE(ran, grid) << describe(p.c);
    }
  }
}

// The persistent form (grid forced to `grid` CTAs, 0: one per SM) against the plain grid, bitwise.
void expect_persistent_equals_plain(const Case& c, int grid) {
  auto p = make_problem(c);
  HostTensor o0 = like(p->out), l0 = like(p->lse), o1 = like(p->out), l1 = like(p->lse);
  run_persistent(*p, 0, 0, &o0, &l0);
  if (::testing::Test::HasFatalFailure()) return;
  run_persistent(*p, 1, grid, &o1, &l1);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string form = " (persistent grid " + std::to_string(sm90_engine::prefill_last_persistent_grid()) + ")";
  EXPECT_TRUE(bitwise_equal(o0, o1)) << describe(c) << ": O differs" << form;
  EXPECT_TRUE(bitwise_equal(l0, l1)) << describe(c) << ": LSE differs" << form;
}

struct PrefillShape {
  int hq, hkv, batch, sq, sk;
};

// expect_persistent_equals_plain (one CTA per SM) on every shape in bf16 and in f16, then on
// `softcapped` (bf16) with softcap 30.
void expect_shapes_persistent_equal_plain(const std::vector<PrefillShape>& shapes, bool causal,
                                          const PrefillShape& softcapped) {
  for (const PrefillShape& sh : shapes) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case c = prefill_case(sh.hq, sh.hkv, sh.batch, sh.sq, sh.sk, causal);
      c.dtype = dt;
      expect_persistent_equals_plain(c, 0);
    }
  }
  Case c = prefill_case(softcapped.hq, softcapped.hkv, softcapped.batch, softcapped.sq, softcapped.sk, causal);
  c.softcap = 30.f;
  expect_persistent_equals_plain(c, 0);
}

// One CTA per SM, >= 288 units (sequence, head, 128-row block) so that CTAs run two to four works:
// 32/8 and 8/8, Sq == Sk and Sq != Sk both ways, lengths whose last query block leaves warpgroup 1
// without rows (129, 1000 % 128 = 104) and whose last KV tile is partial (385, 77); bf16 and f16, one
// with softcap.
TEST_F(Sm90Prefill, PersistentEqualsPlainGridBitwise) {
  expect_shapes_persistent_equal_plain({{32, 8, 2, 1000, 1000},
                                        {32, 8, 3, 385, 1000},
                                        {32, 8, 2, 1000, 385},
                                        {8, 8, 5, 1000, 1000},
                                        {8, 8, 12, 385, 129},
                                        {32, 8, 5, 129, 77}},
                                       false, {32, 8, 2, 1000, 1000});
}

// Causal (step C), one CTA per SM: pairs of 128-row blocks (Sq == Sk) with m even (1000: 8 blocks; 2048:
// 16, the pair (15, 0) is a work of 16 tiles next to one of 1) and m odd (1025: 9, the middle block a
// unit of its own after the pairs; 640: 5 whole blocks; 100: one block, no pair at all); single blocks
// longest first (Sq != Sk) with Sq < Sk (385 / 1000: 3 blocks of 6 to 8 tiles) and Sq > Sk by less than
// a block (1000 / 900: the first 100 rows see no key, block 0 one tile); 8/8 at Sk 4200, whose K and V
// (17.2 MB a sequence) exceed kHeadsFastestKvBytes: a head's units together, pairs (33 blocks) and
// single blocks (4000 / 4200); GQA 12/4, bf16 and f16, one with softcap.
TEST_F(Sm90Prefill, PersistentCausalEqualsPlainGridBitwise) {
  expect_shapes_persistent_equal_plain({{32, 8, 2, 1000, 1000},
                                        {12, 4, 3, 1025, 1025},
                                        {12, 4, 2, 640, 640},
                                        {8, 2, 4, 2048, 2048},
                                        {32, 8, 3, 100, 100},
                                        {32, 8, 3, 385, 1000},
                                        {32, 8, 2, 1000, 900},
                                        {8, 8, 2, 4200, 4200},
                                        {8, 8, 1, 4000, 4200}},
                                       true, {12, 4, 2, 1025, 1025});
}

// The causal form's scope: off unless its own switch is on (the full form's switch alone leaves causal
// problems on the plain grid), and with both on a problem whose first 128-row block sees no key (Sq -
// Sk >= 128) stays on the plain grid; the full form does not depend on the causal switch.
TEST_F(Sm90Prefill, PersistentCausalScope) {
  struct Want {
    Case c;
    int full, causal;
    bool persistent;
  };
  const std::vector<Want> wants = {
      {prefill_case(8, 2, 2, 300, 300, true), 1, 0, false},
      {prefill_case(8, 2, 2, 300, 300, true), 1, 1, true},
      {prefill_case(8, 2, 2, 300, 300, true), 0, 1, false},
      {prefill_case(8, 2, 2, 300, 172, true), 1, 1, false},
      {prefill_case(8, 2, 2, 300, 173, true), 1, 1, true},
      {prefill_case(8, 2, 2, 300, 300, false), 1, 0, true},
  };
  for (const Want& w : wants) {
    ForcedSwitch form(sm90_engine::set_prefill_persistent_mode, w.full);
    ForcedSwitch causal(sm90_engine::set_prefill_persistent_causal_mode, w.causal);
    auto p = make_problem(w.c);
    HostTensor o = like(p->out), l = like(p->lse);
    ASSERT_TRUE(run_cuda(*p, &o, &l, kEngine).ok()) << describe(w.c);
    EXPECT_EQ(sm90_engine::prefill_last_persistent_grid() > 0, w.persistent)
        << describe(w.c) << " with the switches " << w.full << " / " << w.causal;
  }
}

// The grid forced to 1, 2 and 3 CTAs: dozens of works per CTA, so the ring's phases, the per-stage
// o_free phases, the Q halves' phases and the pingpong turns run on across many boundaries. Works of
// 1 KV tile (Sk 77: every tile ends a work, each stage holds staged O in turn), 2 (129: a work ends
// on every other stage), 4 (385) and 16 (2048); Sq 300 (3 blocks, the last with 44 rows: warpgroup 1
// without rows) and 129. The plain grid's output, bitwise. (Works of different tile counts in one
// launch need seqlens_k, outside step B's scope.)
TEST_F(Sm90Prefill, PersistentManyWorksPerCta) {
  for (int grid : {1, 2, 3}) {
    for (int sk : {77, 129, 385, 2048}) {
      const int sq = sk == 2048 ? 129 : 300;
      expect_persistent_equals_plain(prefill_case(8, 2, 2, sq, sk, false), grid);
    }
  }
}

// Causal works of different lengths in one launch, the grid forced to 1, 2 and 3 CTAs: pairs with m even
// (2048: works of 16 tiles next to works of 1, 15 next to 2, ...) and odd (1100: 9 blocks, the middle
// ones of 5 tiles last; 300: 3 blocks, works of 3, 1 and 2 tiles), single blocks with Sq < Sk (300 /
// 700: 5 to 6 tiles) and Sq > Sk (700 / 600: 1 to 5 tiles; 129 / 77: every work one tile, every tile
// ends a work); 8/8 at 4200 (a head's units together, above kHeadsFastestKvBytes). The plain grid's
// output, bitwise.
TEST_F(Sm90Prefill, PersistentCausalManyWorksPerCta) {
  for (int grid : {1, 2, 3}) {
    for (auto [sq, sk] : std::vector<std::pair<int, int>>{
             {2048, 2048}, {1100, 1100}, {300, 300}, {300, 700}, {700, 600}, {129, 77}}) {
      expect_persistent_equals_plain(prefill_case(8, 2, 2, sq, sk, true), grid);
    }
    expect_persistent_equals_plain(prefill_case(8, 8, 1, 4200, 4200, true), grid);
  }
}

// The persistent form forced, against the fp64 reference with the harness's guards (NaN-poisoned
// outputs, untouched neighbours): GQA 12/4 and MQA 8/1, softcap, a custom scale, bf16 and f16, odd
// lengths (77, 129, 333) with Sq != Sk both ways, one CTA per SM and the grid forced to 2 (several
// works per CTA). Both grids innermost: one draw and one reference per problem (the harness keeps
// the last case's).
TEST_F(Sm90Prefill, PersistentAgainstReference) {
  ForcedSwitch on(sm90_engine::set_prefill_persistent_mode, 1);
  auto check_both_grids = [](const Case& c) {
    for (int grid : {0, 2}) {
      ForcedSwitch ctas(sm90_engine::set_prefill_persistent_grid, grid);
      check_case(c, kEngine);
      EXPECT_GT(sm90_engine::prefill_last_persistent_grid(), 0) << describe(c) << " grid " << grid;
    }
  };
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (auto [sq, sk] : std::vector<std::pair<int, int>>{{77, 129}, {129, 77}, {333, 333}}) {
      Case c = prefill_case(12, 4, 2, sq, sk, false);
      c.dtype = dt;
      check_both_grids(c);
      c.softcap = 30.f;
      check_both_grids(c);
      c.softcap = 0.f;
      c.scale = 0.05f;
      check_both_grids(c);
    }
    Case m = prefill_case(8, 1, 3, 200, 241, false);
    m.dtype = dt;
    check_both_grids(m);
  }
}

// The causal form forced (step C), against the fp64 reference with the harness's guards: GQA 12/4 and
// MQA 8/1, softcap and a custom scale (on 333), bf16 and f16; pairs with m odd (333: 3 blocks) and even
// (256), single blocks with Sq != Sk both ways (77 / 129; 129 / 77: rows that see no key); one CTA per SM and
// the grid forced to 2.
TEST_F(Sm90Prefill, PersistentCausalAgainstReference) {
  ForcedSwitch on(sm90_engine::set_prefill_persistent_mode, 1);
  ForcedSwitch causal(sm90_engine::set_prefill_persistent_causal_mode, 1);
  for (int grid : {0, 2}) {
    ForcedSwitch ctas(sm90_engine::set_prefill_persistent_grid, grid);
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (auto [sq, sk] : std::vector<std::pair<int, int>>{{77, 129}, {129, 77}, {333, 333}, {256, 256}}) {
        Case c = prefill_case(12, 4, 2, sq, sk, true);
        c.dtype = dt;
        check_case(c, kEngine);
        EXPECT_GT(sm90_engine::prefill_last_persistent_grid(), 0) << describe(c);
        if (sq != 333) continue;  // softcap and scale once per grid and dtype (the test stays < 60 s)
        c.softcap = 30.f;
        check_case(c, kEngine);
        c.softcap = 0.f;
        c.scale = 0.05f;
        check_case(c, kEngine);
      }
      Case m = prefill_case(8, 1, 3, 200, 241, true);
      m.dtype = dt;
      check_case(m, kEngine);
      EXPECT_GT(sm90_engine::prefill_last_persistent_grid(), 0) << describe(m);
    }
  }
}

TEST_F(Sm90Prefill, DeclinesWithReason) {
  std::vector<std::pair<Case, std::string>> cases;
  Case c = prefill_case(8, 2, 1, 100, 100, true);
  Case d32 = c;
  d32.d = 32;
  cases.push_back({d32, "head dim 64, 128 or 256"});
  cases.push_back({prefill_case(8, 2, 1, 16, 100, true), "is a decode step"});
  Case paged = c;
  paged.kv = KvKind::kPaged;
  paged.page_size = 64;
  cases.push_back({paged, "paged K/V is not supported"});
  for (const auto& [cs, reason] : cases) expect_declines(cs, kEngine, reason);
}

// Automatic selection: batched and varlen prefill at D = 64, 128 and 256 go to sm90-prefill; what
// it declines (head dim 32) falls through to the portable engine; decode stays with the sm90 decode
// engine.
TEST_F(Sm90Prefill, AutomaticSelection) {
  Case varlen = prefill_case(8, 2, 1, 100, 100, true);
  varlen.q_varlen = true;
  varlen.kv = KvKind::kVarlen;
  Case d64 = prefill_case(8, 2, 1, 100, 100, true);
  d64.d = 64;
  Case d256 = d64;
  d256.d = 256;
  Case d32 = d64;
  d32.d = 32;
  const std::vector<std::pair<Case, std::string>> cases = {
      {prefill_case(32, 8, 2, 1024, 1024, true), "sm90-prefill"},
      {varlen, "sm90-prefill"},
      {d64, "sm90-prefill"},
      {d256, "sm90-prefill"},
      {d32, "cuda"},
      {prefill_case(64, 8, 1, 1, 4096, true), "sm90"},
  };
  for (const auto& [cs, want] : cases) {
    auto p = make_problem(cs);
    const char* name = nullptr;
    ASSERT_TRUE(attention_engine_for(p->device_params(), RunOptions{}, &name).ok()) << describe(cs);
    EXPECT_EQ(std::string(name), want) << describe(cs);
  }
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
