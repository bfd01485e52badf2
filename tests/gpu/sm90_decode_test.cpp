// GPU tier for the sm90 engine (Hopper decode, issue 9): pinned by name, every case against the fp64 reference (TESTING.md pass rules, NaN-
// poisoned outputs, guard bands: check_case), plus bitwise checks (native GQA vs K/V copied up,
// determinism) and declines. Skips unless a compute capability 9.0 device is visible.
#include <gtest/gtest.h>

#if GROUPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/host_params.h"
#include "attention/engines/sm90/decode_split_plan.h"
#include "attention/engines/sm90/launch.h"
#include "gpu/cuda_attention_harness.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

constexpr const char* kEngine = "sm90";

class Sm90Decode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_sm90_device()) GTEST_SKIP() << "no compute capability 9.0 device";
  }
};

const std::vector<std::pair<int64_t, int64_t>> kHeadRatios = {{8, 4}, {8, 2},  {64, 8}, {32, 2},
                                                              {8, 1}, {12, 4}, {16, 1}};
const std::vector<int> kNewTokens = {1, 2, 4, 8, 16};
// The engine's head dims (sm90_engine::kDecodeHeadDims, D == Dv): 128 first, the fp8 one; 64 and
// 256 change the number of 64-wide boxes per K/V tile, S^T k-steps and O^T m64 blocks, the ring's
// stage count and the CTAs per SM (decode_traits.h).
const std::vector<int64_t> kHeadDims = {128, 64, 256};
const std::vector<int> kNewTokensD64D256 = {1, 4, 16};

Case decode_case(int64_t hq, int64_t hkv, int tokens, std::vector<int> k_lens, int64_t d = 128) {
  Case c;
  c.hq = hq, c.hkv = hkv, c.d = d;
  c.q_lens.assign(k_lens.size(), tokens);
  c.k_lens = std::move(k_lens);
  c.causal = true;
  c.num_splits = 1;
  return c;
}

// Every head ratio and new-token count (head dims 64 and 256: 1, 4 and 16 tokens, so column tiles
// 8, 16 and 32 and several column blocks); batched K/V with per-sequence lengths (seqlens_k);
// bf16, and f16 for 64 and 256.
TEST_F(Sm90Decode, HeadRatiosNewTokens) {
  for (int64_t d : kHeadDims) {
    for (auto [hq, hkv] : kHeadRatios) {
      for (int tokens : d == 128 ? kNewTokens : kNewTokensD64D256) {
        Case c = decode_case(hq, hkv, tokens, {300, 65}, d);
        check_case(c, kEngine);
        if (d == 128) continue;
        c.dtype = DType::kF16;
        check_case(c, kEngine);
      }
    }
  }
}

// KV lengths around the 64-key tile, one sequence (batched, no seqlens_k) and paged. Head dims 64
// and 256 also with splits 1, 3 and automatic, and 4099 keys (a partial last tile; the ring wraps
// many times at one split).
TEST_F(Sm90Decode, KvLengthsAroundTiles) {
  for (int64_t d : kHeadDims) {
    const std::vector<int> lengths =
        d == 128 ? std::vector<int>{1, 63, 64, 65, 1000, 8192} : std::vector<int>{1, 63, 64, 65, 4099};
    const std::vector<int> splits = d == 128 ? std::vector<int>{1} : std::vector<int>{1, 3, 0};
    for (int k : lengths) {
      for (int tokens : {1, 4, 16}) {
        if (tokens > k) continue;  // causal bottom-right: still valid, but keep the cases meaningful
        for (int split : splits) {
          Case c = decode_case(8, 2, tokens, {k}, d);
          c.num_splits = split;
          check_case(c, kEngine);
          c.kv = KvKind::kPaged;
          c.page_size = 64;
          check_case(c, kEngine);
        }
      }
    }
  }
}

TEST_F(Sm90Decode, DtypesAndNonCausal) {
  for (int64_t d : kHeadDims) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (bool causal : {false, true}) {
        Case c = decode_case(12, 4, 5, {777, 64, 3}, d);
        c.dtype = dt;
        c.causal = causal;
        check_case(c, kEngine);
      }
    }
  }
}

// Paged K/V with shuffled pages (the harness shuffles page ids), page sizes 64 and 128, splits
// 1, 3 and automatic. Split counts innermost: one draw and one reference per problem (the harness
// keeps the last case's).
TEST_F(Sm90Decode, PagedShuffledSplits) {
  for (int64_t d : kHeadDims) {
    for (int page : {64, 128}) {
      for (auto [hq, hkv] : kHeadRatios) {
        for (int splits : {1, 3, 0}) {
          Case c = decode_case(hq, hkv, 3, {1000, 41, 300}, d);
          c.kv = KvKind::kPaged;
          c.page_size = page;
          c.num_splits = splits;
          check_case(c, kEngine);
        }
      }
    }
  }
}

TEST_F(Sm90Decode, LongCacheAutoSplit) {
  for (int64_t d : kHeadDims) {
    for (int tokens : {1, 8}) {
      Case c = decode_case(32, 2, tokens, {8192}, d);
      c.num_splits = 0;
      check_case(c, kEngine);
      c.kv = KvKind::kPaged;
      c.page_size = 64;
      check_case(c, kEngine);
    }
  }
}

// Above 16 splits the combine runs one CTA per row (combine_wide_kernel): forced split counts on
// both sides of that cut and up to the cap, sequences much shorter than the split count (most of
// their splits empty, skipped by their -inf LSE), 1 and 2 new tokens, each head dim. Split counts
// innermost: one draw and one reference per problem (the harness keeps the last case's).
TEST_F(Sm90Decode, WideCombineManySplits) {
  for (int64_t d : kHeadDims) {
    for (int tokens : {1, 2}) {
      for (int splits : {16, 17, 40, 128}) {
        Case c = decode_case(8, 1, tokens, {9000, 100, 3, 2500}, d);
        c.num_splits = splits;
        check_case(c, kEngine);
      }
    }
  }
  Case gqa = decode_case(64, 8, 1, {20000, 77}, 128);
  gqa.num_splits = 96;
  check_case(gqa, kEngine);
}

// Case c (causal) with a causal window, a window straddling the new tokens (not causal), softcap,
// and a custom scale, each checked.
void check_window_softcap_scale(Case c) {
  c.window_left = 100;
  c.window_right = 0;
  check_case(c, kEngine);
  c.window_left = 70, c.window_right = 5, c.causal = false;  // window straddling the new tokens
  check_case(c, kEngine);
  c.window_left = c.window_right = -1;
  c.causal = true;
  c.softcap = 30.f;
  check_case(c, kEngine);
  c.softcap = 0.f;
  c.scale = 0.05f;
  check_case(c, kEngine);
}

TEST_F(Sm90Decode, WindowSoftcapScale) {
  for (int64_t d : kHeadDims) {
    for (int splits : {1, 3}) {
      Case c = decode_case(8, 2, 4, {1000, 200}, d);
      c.num_splits = splits;
      check_window_softcap_scale(c);
    }
  }
}

// Padded strides; paged also with pages of 16 (TMA boxes of 16 rows) and 1 (gathered: the
// cp.async source addresses use the page, row and head strides).
TEST_F(Sm90Decode, StridedViews) {
  for (int64_t d : kHeadDims) {
    Case c = decode_case(8, 2, 2, {500, 90}, d);
    c.strided = true;
    check_case(c, kEngine);
    c.kv = KvKind::kPaged;
    for (int page : {64, 16, 1}) {
      c.page_size = page;
      check_case(c, kEngine);
    }
  }
}

TEST_F(Sm90Decode, GqaEqualsCopiedUpBitwise) {
  for (int64_t d : kHeadDims) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      std::vector<Case> cases;
      Case batched = decode_case(12, 4, 4, {700, 33}, d);
      batched.dtype = dt;
      cases.push_back(batched);
      Case paged = decode_case(8, 2, 4, {700, 33}, d);
      paged.dtype = dt;
      paged.kv = KvKind::kPaged;
      paged.page_size = 64;
      paged.num_splits = 3;
      cases.push_back(paged);
      if (d != 128) {  // the benchmark's group of 16 (one KV head), pages of 128
        Case mqa = decode_case(16, 1, 1, {4099, 700}, d);
        mqa.dtype = dt;
        mqa.kv = KvKind::kPaged;
        mqa.page_size = 128;
        mqa.num_splits = 3;
        cases.push_back(mqa);
      }
      for (const Case& c : cases) {
        expect_gqa_equals_copied_up(c, kEngine);
      }
    }
  }
}

// `runs` runs of case c on the engine give bitwise the same O and LSE.
void expect_repeatable(const Case& c, int runs) {
  auto p = make_problem(c);
  HostTensor o0 = like(p->out), l0 = like(p->lse);
  ASSERT_TRUE(run_cuda(*p, &o0, &l0, kEngine).ok()) << describe(c);
  for (int run = 1; run < runs; ++run) {
    HostTensor o = like(p->out), l = like(p->lse);
    ASSERT_TRUE(run_cuda(*p, &o, &l, kEngine).ok()) << describe(c);
    ASSERT_TRUE(bitwise_equal(o, o0) && bitwise_equal(l, l0)) << describe(c) << ": run " << run << " differs";
  }
}

TEST_F(Sm90Decode, DeterministicOver10Runs) {
  for (int64_t d : kHeadDims) {
    Case c = decode_case(8, 2, 2, {4000}, d);
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    c.num_splits = 0;
    expect_repeatable(c, 10);
  }
}

// Paged K/V of any page size (issue 9: vLLM's and FlashInfer's default is 16; 1 must work). A
// 64-key tile comes as runs of gcd(page_size, 64) keys, one TMA box per run from its own page, or,
// for runs shorter than 8 keys, gathered row by row with cp.async by the producer warp
// (decode_mainloop.cuh, produce() and gather_tile()). Every cache row no live key uses -- spare
// pages, the slots past a sequence's end in its last page -- is NaN, so a box or row read from the
// wrong page or slot, a run past the end that is not masked, or a stale row reaching O fails.
void expect_paged_ignores_stale_rows(const Case& c) {
  const std::string label = describe(c) + " (NaN in every row no key uses)";
  auto p = make_problem(c);
  const int64_t pages = p->k.shape()[0];
  std::vector<char> live(static_cast<size_t>(pages * c.page_size), 0);  // [page][slot]
  for (int64_t b = 0; b < static_cast<int64_t>(c.k_lens.size()); ++b) {
    for (int64_t j = 0; j < c.k_lens[static_cast<size_t>(b)]; ++j) {
      const auto page = static_cast<int64_t>(p->block_table.at({b, j / c.page_size}));
      live[static_cast<size_t>(page * c.page_size + j % c.page_size)] = 1;
    }
  }
  const double nan = std::nan("");
  for (int64_t page = 0; page < pages; ++page) {
    for (int64_t slot = 0; slot < c.page_size; ++slot) {
      if (live[static_cast<size_t>(page * c.page_size + slot)]) continue;
      p->k.fill_sub({page, slot}, nan);  // every head and channel of the slot
      p->v.fill_sub({page, slot}, nan);
    }
  }
  p->upload();
  const Status rs = run_case_reference(*p);
  ASSERT_TRUE(rs.ok()) << label << ": reference: " << rs.to_string();
  HostTensor o = like(p->out), l = like(p->lse);
  const Status s = run_cuda(*p, &o, &l, kEngine);
  ASSERT_TRUE(s.ok()) << label << ": " << s.to_string();
  expect_matches_reference(*p, o, l, label);
  EXPECT_TRUE(p->dout->guards_intact()) << label << ": write outside out";
  EXPECT_TRUE(p->dlse->guards_intact()) << label << ": write outside lse";
}

// Page sizes 1 (gathered), 8 (boxes of 8 rows), 16, 32, 48 (gcd 16: a page's runs straddle tiles),
// 96 (gcd 32), and 64 (one box per tile, the unchanged path); shuffled pages and spare pages (the
// harness), lengths that are multiples of neither the page nor the tile, splits 1 / 3 / automatic,
// head ratios 8/2 (4 new tokens) and 64/8 (1 new token), bf16 and fp8 K/V. Split counts innermost:
// one draw and one reference per problem.
TEST_F(Sm90Decode, PagedAnyPageSize) {
  for (int page : {1, 8, 16, 32, 48, 96, 64}) {
    for (bool fp8 : {false, true}) {
      for (auto [hq, hkv, tokens] : std::vector<std::tuple<int64_t, int64_t, int>>{{8, 2, 4}, {64, 8, 1}}) {
        for (int splits : {1, 3, 0}) {
          Case c = decode_case(hq, hkv, tokens, {1000, 41, 300});
          c.kv = KvKind::kPaged;
          c.page_size = page;
          c.num_splits = splits;
          c.kv_fp8 = fp8;
          expect_paged_ignores_stale_rows(c);
        }
      }
    }
  }
}

// Small pages at head dims 64, 128 and 256 (1, 2 or 4 d boxes per run: the run's row offset inside
// each d box; gathered: 8, 16 or 32 lanes per key row), f16 too; pages of 1 and 12 (gcd 4) are
// gathered, 16 and 48 come by TMA boxes. And one split over 4099 keys, so the ring wraps many
// times, with a last tile of 3 keys and 16 new tokens (32-column tiles, several column blocks).
TEST_F(Sm90Decode, PagedSmallPagesHeadDimsRingWrap) {
  for (int page : {1, 12, 16, 48}) {
    for (int64_t d : kHeadDims) {
      for (DType dt : {DType::kBF16, DType::kF16}) {
        Case c = decode_case(8, 2, 3, {700, 129, 64}, d);
        c.dtype = dt;
        c.kv = KvKind::kPaged;
        c.page_size = page;
        c.num_splits = 3;
        expect_paged_ignores_stale_rows(c);
      }
      Case wrap = decode_case(8, 1, 16, {4099, 65}, d);
      wrap.kv = KvKind::kPaged;
      wrap.page_size = page;
      wrap.num_splits = 1;
      expect_paged_ignores_stale_rows(wrap);
      if (d == 128) {
        wrap.kv_fp8 = true;
        expect_paged_ignores_stale_rows(wrap);
      }
    }
  }
}

// The producer's lookahead (docs/DECODE_SM90.md section 18: a tile's block-table entries loaded one
// tile ahead, the table line 8 tiles ahead prefetched to L2, one lane per TMA run): splits that
// start mid-page (pages 48, 80 and 96: a split starts on a 64-key tile, inside a page) and on page
// edges (16, 32), forced counts 2 / 3 / 5 / 7 and automatic, long sequences whose table spans many
// 128-byte lines (4099 keys = 257 pages of 16) next to short ones (1, 17, 63), NaN in every cache
// row no key uses; head dims 64, 128, 256 and 64/8, 8/1, 32/2. Every split count of a page size and
// shape runs the same inputs (a seed per page size; session 11: one per split count too, which
// only multiplied the draws and fp64 references), split counts innermost: one draw and one
// reference per problem.
TEST_F(Sm90Decode, PagedSplitsStartMidPage) {
  for (int page : {16, 32, 48, 80, 96}) {
    for (auto [hq, hkv, d] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 8, 128}, {8, 1, 64}, {32, 2, 256}}) {
      for (int splits : {2, 3, 5, 7, 0}) {
        Case c = decode_case(hq, hkv, 1, {4099, 1, 1000, 17, 2113, 63}, d);
        c.kv = KvKind::kPaged;
        c.page_size = page;
        c.num_splits = splits;
        c.seed = static_cast<uint64_t>(page * 16);
        expect_paged_ignores_stale_rows(c);
      }
    }
  }
}

// Mixed lengths with zero-length sequences in the batch (no key: O = 0, LSE = -inf, whatever the
// split count or reduction mode), paged in pages of 16 (boxes), 48 (boxes, runs straddling tiles)
// and 1 (gathered) and batched; the automatic plan (for small pages a wave of two CTAs per SM,
// decode_split_plan.h split_wave_of) and forced counts, one and several new tokens. Every split
// count of a layout and shape runs the same inputs (a seed per layout and head dim; session 11: one
// per split count too), split counts innermost: one draw and one reference per problem.
TEST_F(Sm90Decode, MixedLengthsWithEmptySequences) {
  const std::vector<int> lens = {0, 5000, 1, 0, 777, 64, 65, 2048, 0, 130};
  for (KvKind kv : {KvKind::kPaged, KvKind::kBatched}) {
    for (int page : kv == KvKind::kPaged ? std::vector<int>{16, 48, 1} : std::vector<int>{64}) {
      for (auto [hq, hkv, d, tokens] : std::vector<std::tuple<int64_t, int64_t, int64_t, int>>{
               {8, 1, 128, 1}, {64, 8, 128, 1}, {16, 1, 64, 1}, {8, 2, 128, 3}}) {
        for (int splits : {1, 3, 16, 0}) {
          Case c = decode_case(hq, hkv, tokens, lens, d);
          c.kv = kv;
          c.page_size = page;
          c.num_splits = splits;
          c.seed = static_cast<uint64_t>(page * 32 + d);
          if (kv == KvKind::kPaged) {
            expect_paged_ignores_stale_rows(c);
          } else {
            check_case(c, kEngine);
          }
        }
      }
    }
  }
}

// The device-side work list (cuda/decode_work_list.h, docs/DECODE_SM90.md section 20) is taken
// only above kListMinKvBytes of K/V (from the longest length) and where the ordinary plan has at
// most kListMaxPlanSplits splits (>= 17 sequence x KV head rows on 132 SMs): these batches of 24
// hold two long sequences (32K keys; 16K at D 256, 8K for 64/8) among short and empty ones, so the
// bound is 384-768 MiB. Lengths end mid-tile, on a tile (64, 2048) and on one key; a sequence of
// 0 keys gives O = 0, LSE = -inf.
std::vector<std::tuple<int64_t, int64_t, int64_t, int, int>> work_list_shapes() {
  // hq, hkv, d, new tokens, longest length
  return {{8, 1, 128, 1, 32768}, {32, 2, 64, 1, 32768}, {32, 2, 256, 1, 16384}, {64, 8, 128, 1, 8192},
          {8, 2, 128, 2, 32768}};
}
std::vector<int> work_list_lens(int longest) {
  return {longest, 0, 1, 100, 4099, 0, 65, 700, 2048, 64, longest / 3 + 5, 5,
          3, 999, 0, 128, 63, longest - 1, 1500, 2, 0, 257, 4096, 31};
}

// Shapes [first, last) of work_list_shapes(), batched and paged 16 / 64. Two tests: at 14 jobs the
// whole list ran past ctest's 150 s (session 11 call 4: the host's reference over B24 x 32K rows is
// most of the time), so each half stays well inside it. Batched K/V: NaN in the rows past each
// sequence's length, like the paged cases' stale slots (Case::stale_rows_nan; ~88% of a B24 x 32K
// cache, drawn before session 11).
void expect_work_list_shapes(size_t first, size_t last) {
  const auto shapes = work_list_shapes();
  for (size_t i = first; i < last && i < shapes.size(); ++i) {
    const auto [hq, hkv, d, tokens, longest] = shapes[i];
    for (KvKind kv : {KvKind::kBatched, KvKind::kPaged}) {
      for (int page : kv == KvKind::kPaged ? std::vector<int>{16, 64} : std::vector<int>{64}) {
        Case c = decode_case(hq, hkv, tokens, work_list_lens(longest), d);
        c.kv = kv;
        c.page_size = page;
        c.num_splits = 0;  // automatic: the list (a forced count never takes it)
        c.seed = static_cast<uint64_t>(d + page + tokens);
        c.stale_rows_nan = kv == KvKind::kBatched;
        if (kv == KvKind::kPaged) {
          expect_paged_ignores_stale_rows(c);
        } else {
          check_case(c, kEngine);
        }
      }
    }
  }
}

TEST_F(Sm90Decode, WorkListMixedLengths) { expect_work_list_shapes(0, 2); }
TEST_F(Sm90Decode, WorkListMixedLengthsD256AndMore) { expect_work_list_shapes(2, 5); }

// Uniform lengths through the list (seqlens_k all equal: the host cannot tell), and every
// sequence empty but one.
TEST_F(Sm90Decode, WorkListUniformAndNearlyEmpty) {
  Case c = decode_case(8, 1, 1, std::vector<int>(24, 16384));
  c.kv = KvKind::kPaged;
  c.page_size = 64;
  c.num_splits = 0;
  check_case(c, kEngine);
  std::vector<int> lens(24, 0);
  lens[9] = 32768;
  c = decode_case(8, 1, 1, lens);
  c.kv = KvKind::kPaged;
  c.page_size = 16;
  c.num_splits = 0;
  expect_paged_ignores_stale_rows(c);
}

// Bitwise the same O and LSE over 20 runs (fixed chunk, fixed slot order, fixed combine order).
TEST_F(Sm90Decode, WorkListDeterministicOver20Runs) {
  for (int64_t d : kHeadDims) {
    Case c = decode_case(d == 128 ? 8 : 32, d == 128 ? 1 : 2, 1, work_list_lens(d == 256 ? 16384 : 32768), d);
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    c.num_splits = 0;
    expect_repeatable(c, 20);
    c.kv = KvKind::kBatched;
    c.stale_rows_nan = true;  // NaN past each sequence's keys instead of ~88% of the cache drawn
    expect_repeatable(c, 20);
  }
}

// The list's workspace: partials of list_slot_bound slots of one sequence's rows (one new token),
// then the per-sequence {count, first slot}; no split count of the ordinary plan gives this size.
size_t work_list_workspace_bytes(int64_t slots, int64_t batch, int64_t hq, int64_t d) {
  return (cuda_engine::split_workspace_bytes(static_cast<int>(slots), 1, hq, d) + 255) / 256 * 256 +
         sizeof(int32_t) * static_cast<size_t>(2 * batch);
}


// The plan every decode CTA computes for itself (decode_work_list.cuh fold_list_slot) against the
// fp64 reference (NaN in every stale paged row) and bitwise repeatable, where its paths differ:
// batches of 24 (one wave, the chunk search, one sequence a lane; batched and paged, D 128, 64,
// 256), 60 (<= P / 2 on 132 SMs: the search over two sequences a lane) and 300 (> P: the
// several-wave chunk from the totals, runs of 10 sequences a lane). The list is what runs (its
// workspace); with the switch off (set_decode_work_list_mode(0)) the ordinary plan runs, and
// agrees with the reference too.
TEST_F(Sm90Decode, WorkListFoldedPlanAgainstReferenceAndRepeatable) {
  // Written for pages of 64 at a wave of one CTA an SM (the plan before section 29).
  ForcedSwitch wave_of_one(sm90_engine::set_decode_paged_wave_two_mode, 0);
  auto lens_of = [](int batch, int longest) {
    std::vector<int> lens;
    for (int i = 0; i < batch; ++i) lens.push_back(i % 7 == 0 ? longest - i : (i * 37) % 900 + (i % 5 == 0 ? 0 : 1));
    return lens;
  };
  struct Shape {
    int64_t hq, hkv, d;
    std::vector<int> lens;
    int page;
  };
  // page 0: batched K/V (seqlens_k)
  const std::vector<Shape> shapes = {{8, 1, 128, work_list_lens(32768), 64},  {8, 1, 128, work_list_lens(32768), 0},
                                     {32, 2, 64, work_list_lens(32768), 64},  {32, 2, 256, work_list_lens(16384), 64},
                                     {8, 1, 128, lens_of(60, 32768), 64},     {8, 1, 128, lens_of(300, 8192), 64}};
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  for (const Shape& sh : shapes) {
    Case c = decode_case(sh.hq, sh.hkv, 1, sh.lens, sh.d);
    c.kv = sh.page > 0 ? KvKind::kPaged : KvKind::kBatched;
    c.stale_rows_nan = sh.page == 0;  // batched: NaN past each sequence's keys, as the paged stale slots
    c.page_size = std::max(sh.page, 64);
    c.num_splits = 0;
    c.seed = static_cast<uint64_t>(sh.lens.size() + sh.page);
    auto p = make_problem(c);
    sm90_engine::DecodeSplitShape shape;
    shape.head_dim = static_cast<int>(sh.d);
    shape.paged = sh.page > 0 && (sm90_engine::paged_box_rows(sh.page) < sm90_engine::kBlockKV ||
                                  sm90_engine::decode_paged_wave_two());  // the engine's split_shape
    const int64_t batch = static_cast<int64_t>(sh.lens.size());
    const int64_t slots = cuda_engine::list_slot_bound(
        cuda_engine::list_plane_wave(sms, sm90_engine::split_wave_of(shape), sh.hkv, 1), batch);
    const size_t list_bytes = work_list_workspace_bytes(slots, batch, sh.hq, sh.d);
    RunOptions opt;
    opt.engine = kEngine;
    for (int mode : {1, 0}) {
      ForcedSwitch forced(sm90_engine::set_decode_work_list_mode, mode);
      size_t bytes = 0;
      ASSERT_TRUE(attention_workspace_bytes(p->device_params(), opt, &bytes).ok());
      if (mode == 1) {
        EXPECT_EQ(bytes, list_bytes) << describe(c) << ": the work list is not taken";
      } else {
        EXPECT_NE(bytes, list_bytes) << describe(c) << ": the work list is taken with the switch off";
      }
      if (sh.page > 0) {
        expect_paged_ignores_stale_rows(c);
      } else {
        check_case(c, kEngine);
      }
      if (mode == 1) expect_repeatable(c, 3);
    }
  }
}

// The host's work-list chunk (decode_work_list.h) for sequences of `lens` keys over their 64-key tile
// counts (written to `tiles`): list_chunk, or list_chunk_near_wave with the near-wave `guard`.
int64_t host_list_chunk(const std::vector<int>& lens, int plane_wave, bool guard, std::vector<int64_t>* tiles) {
  tiles->clear();
  for (int len : lens) tiles->push_back((len + 63) / 64);
  const int64_t total = std::accumulate(tiles->begin(), tiles->end(), int64_t{0});
  const int64_t max_n = *std::max_element(tiles->begin(), tiles->end());
  const int64_t batch = static_cast<int64_t>(lens.size());
  auto count = [&](int64_t chunk) {
    int64_t f = 0;
    for (int64_t n : *tiles) f += cuda_engine::list_splits_of(n, chunk);
    return f;
  };
  return guard ? cuda_engine::list_chunk_near_wave<int64_t>(total, max_n, batch, plane_wave, count)
               : cuda_engine::list_chunk<int64_t>(total, max_n, batch, plane_wave, count);
}

// The plan the decode CTAs fold (decode_work_list.cuh fold_list_slot) is the host's plan exactly:
// after a run, the per-sequence {count, first slot} the CTAs wrote at the end of the list's
// workspace are list_chunk's splits over the sequences' 64-key tiles and their prefix sums
// (the chunk the CPU tier pins, Sm90DecodeWorkList.*). A different but valid plan would pass the
// reference and the repeatability tests; this pins the plan itself. One sequence a lane (B 24,
// mixed and equal lengths: the search and the closed form, each with the uniform shortcut on and
// off), two a lane (B 60), several waves (B 300, mixed and equal).
TEST_F(Sm90Decode, WorkListCountsAreTheHostPlan) {
  // Written for pages of 64 at a wave of one CTA an SM (the plan before section 29).
  ForcedSwitch wave_of_one(sm90_engine::set_decode_paged_wave_two_mode, 0);
  auto lens_of = [](int batch, int longest) {
    std::vector<int> lens;
    for (int i = 0; i < batch; ++i)
      lens.push_back(i % 7 == 0 ? longest - i : (i * 37) % 900 + (i % 5 == 0 ? 0 : 1));
    return lens;
  };
  const std::vector<std::vector<int>> batches = {work_list_lens(32768), std::vector<int>(24, 32768 - 5),
                                                 lens_of(60, 32768), lens_of(300, 8192),
                                                 std::vector<int>(300, 2048)};
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  for (const std::vector<int>& lens : batches) {
    // Paged (pages of 64): the harness gives batched K/V of equal lengths no seqlens_k, and the
    // list runs only with it.
    Case c = decode_case(8, 1, 1, lens);
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    c.num_splits = 0;
    c.seed = static_cast<uint64_t>(lens.size());
    auto p = make_problem(c);
    const int64_t batch = static_cast<int64_t>(lens.size());
    sm90_engine::DecodeSplitShape shape;
    shape.head_dim = 128;
    shape.paged =
        sm90_engine::paged_box_rows(64) < sm90_engine::kBlockKV || sm90_engine::decode_paged_wave_two();
    const int plane_wave = cuda_engine::list_plane_wave(sms, sm90_engine::split_wave_of(shape), 1, 1);
    const size_t list_bytes =
        work_list_workspace_bytes(cuda_engine::list_slot_bound(plane_wave, batch), batch, 8, 128);
    // The host's plan: list_chunk over the tile counts, then each sequence's splits and first slot.
    std::vector<int64_t> tiles;
    const int64_t chunk = host_list_chunk(lens, plane_wave, false, &tiles);
    std::vector<int32_t> want;
    int32_t first = 0;
    for (int64_t n : tiles) {
      const int splits = cuda_engine::list_splits_of(n, chunk);
      want.push_back(splits);
      want.push_back(first);
      first += splits;
    }
    for (int fast : {1, 0}) {
      ForcedSwitch forced(sm90_engine::set_decode_list_uniform_fast_mode, fast);
      RunOptions opt;
      opt.engine = kEngine;
      size_t bytes = 0;
      ASSERT_TRUE(attention_workspace_bytes(p->device_params(), opt, &bytes).ok());
      ASSERT_EQ(bytes, list_bytes) << describe(c) << ": the work list is not taken";
      void* workspace = nullptr;
      ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(workspace, 0xff, bytes), cudaSuccess);  // unwritten counts read -1
      opt.workspace = workspace;
      opt.workspace_bytes = bytes;
      const Status st = attention(p->device_params(), opt);
      std::vector<int32_t> got(want.size());
      const cudaError_t sync = cudaDeviceSynchronize();
      const cudaError_t copy =
          cudaMemcpy(got.data(), static_cast<char*>(workspace) + bytes - got.size() * sizeof(int32_t),
                     got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
      ASSERT_EQ(cudaFree(workspace), cudaSuccess);
      ASSERT_TRUE(st.ok()) << describe(c) << ": " << st.to_string();
      ASSERT_EQ(sync, cudaSuccess);
      ASSERT_EQ(copy, cudaSuccess);
      for (size_t b = 0; b < lens.size(); ++b) {
        EXPECT_EQ(got[2 * b], want[2 * b])
            << describe(c) << " fast " << fast << " chunk " << chunk << ": splits of " << b;
        EXPECT_EQ(got[2 * b + 1], want[2 * b + 1])
            << describe(c) << " fast " << fast << ": first slot of " << b;
      }
    }
  }
}

// c against the fp64 reference (paged: with NaN in every stale page slot), then O and LSE of the
// switch forced on bitwise those of it forced off.
void expect_switch_bitwise(const Case& c, void (*set)(int), const char* differ) {
  if (c.kv == KvKind::kPaged) {
    expect_paged_ignores_stale_rows(c);
  } else {
    check_case(c, kEngine);
  }
  auto p = make_problem(c);
  HostTensor o_on = like(p->out), l_on = like(p->lse), o_off = like(p->out), l_off = like(p->lse);
  {
    ForcedSwitch forced(set, 1);
    ASSERT_TRUE(run_cuda(*p, &o_on, &l_on, kEngine).ok()) << describe(c);
  }
  {
    ForcedSwitch forced(set, 0);
    ASSERT_TRUE(run_cuda(*p, &o_off, &l_off, kEngine).ok()) << describe(c);
  }
  EXPECT_TRUE(bitwise_equal(o_on, o_off) && bitwise_equal(l_on, l_off)) << describe(c) << ": " << differ;
}

// The work list's two grid orders (KernelParams::list_heads_fastest: (Hkv, m_blocks x slots, 1), the
// default, against session 9's (m_blocks x slots, Hkv, 1)) run the same CTAs on the same slots:
// bitwise the same O and LSE. Several KV heads (the order only changes there), one wave and several
// waves, and two column blocks (16/2 with 6 new tokens: 48 columns in tiles of 32; pages of 16 keep
// it in the swap-AB form), each against the fp64 reference too.
TEST_F(Sm90Decode, WorkListGridOrdersBitwise) {
  // hq, hkv, d, new tokens, longest length, page (0: batched)
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int, int, int>> shapes = {
      {64, 8, 128, 1, 8192, 64},
      {32, 2, 64, 1, 32768, 0},
      {32, 2, 256, 1, 16384, 64},
      {16, 2, 128, 6, 32768, 16}};
  for (auto [hq, hkv, d, tokens, longest, page] : shapes) {
    Case c = decode_case(hq, hkv, tokens, work_list_lens(longest), d);
    c.kv = page > 0 ? KvKind::kPaged : KvKind::kBatched;
    c.stale_rows_nan = page == 0;  // batched: NaN past each sequence's keys, as the paged stale slots
    c.page_size = page > 0 ? page : 64;  // (page 0: batched K/V, the size unused)
    c.num_splits = 0;
    c.seed = static_cast<uint64_t>(d + page + tokens);
    expect_switch_bitwise(c, sm90_engine::set_decode_list_heads_fastest_mode, "the work list's grid orders differ");
    if (HasFatalFailure()) return;
  }
}

// Equal lengths take the plan's shortcut (KernelParams::list_uniform_fast: the chunk search's count
// without loads or reductions): the same chunk and entries as the general plan, so bitwise the same
// O and LSE with the shortcut off; and against the fp64 reference. One
// wave (8/1 B24, 32/2 d64 B40, 32/2 d256 B24; lengths on, one past and one short of a tile edge)
// and several waves (8/1 B300 > P). Two tests (shapes 0-2, then 3-4): the fp64 reference over
// these full caches (~9e9 multiply-adds in all) is nearly all of their time, and one test of all
// five was the GPU tier's longest after session 11's cuts.
void expect_uniform_fast_shapes(size_t first, size_t last) {
  // hq, hkv, d, batch, length, page (0: batched)
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int, int, int>> shapes = {
      {8, 1, 128, 24, 16385, 64},
      {8, 1, 128, 24, 32768, 0},
      {32, 2, 64, 40, 8191, 16},
      {32, 2, 256, 24, 8192, 64},
      {8, 1, 128, 300, 4096, 64}};
  for (size_t i = first; i < last && i < shapes.size(); ++i) {
    const auto [hq, hkv, d, batch, length, page] = shapes[i];
    Case c = decode_case(hq, hkv, 1, std::vector<int>(static_cast<size_t>(batch), length), d);
    c.kv = page > 0 ? KvKind::kPaged : KvKind::kBatched;
    c.page_size = std::max(page, 16);
    c.num_splits = 0;
    c.seed = static_cast<uint64_t>(batch + length + page);
    expect_switch_bitwise(c, sm90_engine::set_decode_list_uniform_fast_mode,
                          "the uniform shortcut and the general plan differ");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_F(Sm90Decode, WorkListUniformFastBitwise) { expect_uniform_fast_shapes(0, 3); }
TEST_F(Sm90Decode, WorkListUniformFastBitwiseD256AndSeveralWaves) { expect_uniform_fast_shapes(3, 5); }

// The list is what ran: the engine asks for the list's workspace (partials of list_slot_bound
// slots of one sequence's rows -- P for this batch of 24 <= P -- then the per-sequence counts),
// which no split count of the ordinary plan gives.
// One token a sequence of the given lengths on pages of 64 (shuffled), the automatic split plan.
Case paged64_case(int64_t hq, int64_t hkv, std::vector<int> lens) {
  Case c = decode_case(hq, hkv, 1, std::move(lens));
  c.kv = KvKind::kPaged;
  c.page_size = 64;
  c.num_splits = 0;
  return c;
}

// The workspace the sm90 engine asks for p (its plan: the work list's, the split partials', none).
size_t sm90_workspace_bytes(const Problem& p) {
  RunOptions opt;
  opt.engine = kEngine;
  size_t bytes = 0;
  EXPECT_TRUE(attention_workspace_bytes(p.device_params(), opt, &bytes).ok()) << describe(p.c);
  return bytes;
}

TEST_F(Sm90Decode, WorkListIsTaken) {
  // Written for pages of 64 at a wave of one CTA an SM (the plan before section 29).
  ForcedSwitch wave_of_one(sm90_engine::set_decode_paged_wave_two_mode, 0);
  Case c = paged64_case(8, 1, work_list_lens(32768));
  auto p = make_problem(c);
  size_t bytes = sm90_workspace_bytes(*p);
  RunOptions opt;
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  const int64_t batch = static_cast<int64_t>(c.k_lens.size());
  const int64_t slots = cuda_engine::list_slot_bound(cuda_engine::list_plane_wave(sms, 1, 1, 1), batch);
  EXPECT_EQ(bytes, work_list_workspace_bytes(slots, batch, 8, 128));
  // A forced count keeps the ordinary plan (on sm90-split: sm90 would reduce 3 splits in clusters).
  c.num_splits = 3;
  auto q = make_problem(c);
  opt.engine = "sm90-split";
  ASSERT_TRUE(attention_workspace_bytes(q->device_params(), opt, &bytes).ok());
  EXPECT_EQ(bytes, cuda_engine::split_workspace_bytes(3, batch, 8, 128));
}

// The per-sequence {count, first slot} the decode CTAs wrote at the end of the list's workspace
// after one run of p (the workspace filled with 0xff first: unwritten counts read -1).
std::vector<int32_t> run_and_read_list_counts(const Problem& p, size_t bytes, int64_t batch) {
  std::vector<int32_t> got(static_cast<size_t>(2 * batch), -2);
  void* workspace = nullptr;
  if (cudaMalloc(&workspace, bytes) != cudaSuccess) return {};
  RunOptions opt;
  opt.engine = kEngine;
  opt.workspace = workspace;
  opt.workspace_bytes = bytes;
  const bool ok = cudaMemset(workspace, 0xff, bytes) == cudaSuccess && attention(p.device_params(), opt).ok() &&
                  cudaDeviceSynchronize() == cudaSuccess &&
                  cudaMemcpy(got.data(), static_cast<char*>(workspace) + bytes - got.size() * sizeof(int32_t),
                             got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(workspace);
  return ok ? got : std::vector<int32_t>{};
}

// Section 29 (session 19): paged K/V of any page size plans a wave of two CTAs an SM, and the list
// takes its several-wave plan at one CTA an SM where the wave of two puts the batch in the band
// (P / 2 < B <= P). Mixed lengths on pages of 64 (the first at 2048, the rest spread over [1, 2048],
// one empty; K/V bound 128 MiB or more): 8/1 B128 takes the list at P = 2 x SMs; 64/8 B32 is in the
// band at P = 2 x SMs / 8 and takes P = SMs / 8. Each: the list's workspace, the fp64 reference.
TEST_F(Sm90Decode, PagedWaveTwoListPlans) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  ForcedSwitch wave_two(sm90_engine::set_decode_paged_wave_two_mode, 1);
  struct Row {
    int64_t hq, hkv;
    int batch;
    int plane_wave;
  };
  for (const Row& r : std::vector<Row>{{8, 1, 128, 2 * sms}, {64, 8, 32, sms / 8}}) {
    std::vector<int> lens(static_cast<size_t>(r.batch));
    for (int i = 0; i < r.batch; ++i) lens[static_cast<size_t>(i)] = i == 0 ? 2048 : (i * 7919) % 2049;
    const Case c = paged64_case(r.hq, r.hkv, lens);
    auto p = make_problem(c);
    EXPECT_EQ(
        sm90_workspace_bytes(*p),
        work_list_workspace_bytes(cuda_engine::list_slot_bound(r.plane_wave, r.batch), r.batch, r.hq, 128))
        << describe(c) << ": not the list at P " << r.plane_wave;
    check_case(c, kEngine);
  }
}

// Session 12 (docs/DECODE_SM90.md section 25): the near-wave plan, GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE
// forced on, for the band the list turned away (P / 2 < B <= P: 8/1 d128 B128 on 132 SMs, P 132):
// the one-wave plan over both CTA places of every SM (P' 264), near-uniform lengths one split a
// sequence. 8/1 d128 B128 with the bench's kind of mixed lengths (the first at L = 2048, the rest
// drawn in [1, L], a few on tile edges and one empty), so the K/V bound is kListMinKvBytes exactly;
// contiguous (seqlens_k, NaN past each length), pages of 64 and of 16 (NaN in every stale slot; page
// 16 has P 264 and the list already, the switch changes nothing there). Each: the list with the
// band's slots is what runs with the switch on and not with it off; the counts the CTAs wrote are
// list_near_wave's plan on the host; against the fp64 reference; 3 runs bitwise. Then equal lengths
// (page 64): one split a sequence, the ordinary plan's.
TEST_F(Sm90Decode, WorkListNearWaveMixedB128) {
  // Written for pages of 64 at a wave of one CTA an SM (the plan before section 29).
  ForcedSwitch wave_of_one(sm90_engine::set_decode_paged_wave_two_mode, 0);
  constexpr int kBatch = 128, kLongest = 2048;
  std::vector<int> mixed(kBatch);
  uint32_t x = 12345u;
  for (int b = 0; b < kBatch; ++b) {
    x = x * 1664525u + 1013904223u;  // an LCG draw in [1, L]
    mixed[static_cast<size_t>(b)] = 1 + static_cast<int>((x >> 8) % kLongest);
  }
  mixed[0] = kLongest;
  mixed[5] = 0, mixed[6] = 1, mixed[7] = 64, mixed[8] = 65, mixed[9] = kLongest - 1, mixed[10] = kLongest;
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  // page 0: batched K/V (seqlens_k)
  for (auto [page, lens] : std::vector<std::pair<int, std::vector<int>>>{
           {0, mixed}, {64, mixed}, {16, mixed}, {64, std::vector<int>(kBatch, kLongest)}}) {
    Case c = decode_case(8, 1, 1, lens);
    c.kv = page > 0 ? KvKind::kPaged : KvKind::kBatched;
    c.stale_rows_nan = page == 0;
    c.page_size = page > 0 ? page : 64;  // (page 0: batched K/V, the size unused)
    c.num_splits = 0;
    c.seed = static_cast<uint64_t>(page + 7);
    auto p = make_problem(c);
    // The host's view: the ordinary wave P (split_wave_of), whether the list serves B there, and the
    // band's wave with the switch on.
    sm90_engine::DecodeSplitShape shape;
    shape.head_dim = 128;
    shape.paged = page > 0 && (sm90_engine::paged_box_rows(page) < sm90_engine::kBlockKV ||
                               sm90_engine::decode_paged_wave_two());
    const int split_wave = sm90_engine::split_wave_of(shape);
    const int wave = cuda_engine::list_plane_wave(sms, split_wave, 1, 1);
    const bool served = cuda_engine::list_serves_batch(kBatch, wave);
    const cuda_engine::NearWave near = cuda_engine::list_near_wave(
        sms, split_wave, sm90_engine::decode_tile(128, false).ctas_per_sm, 1, 1, kBatch);
    if (!served && near.plane_wave == 0) GTEST_SKIP() << sms << " SMs: B128 is in no wave the list takes";
    const int plane_wave = served ? wave : near.plane_wave;
    const bool guard = !served && near.near_uniform_guard;
    const size_t list_bytes =
        work_list_workspace_bytes(cuda_engine::list_slot_bound(plane_wave, kBatch), kBatch, 8, 128);
    RunOptions opt;
    opt.engine = kEngine;
    for (int mode : {0, 1}) {
      ForcedSwitch forced(sm90_engine::set_decode_list_near_wave_mode, mode);
      size_t bytes = 0;
      ASSERT_TRUE(attention_workspace_bytes(p->device_params(), opt, &bytes).ok());
      if (mode == 1 || served) {
        ASSERT_EQ(bytes, list_bytes) << describe(c) << " switch " << mode << ": not the list of P " << plane_wave;
      } else {
        ASSERT_NE(bytes, list_bytes) << describe(c) << ": the near-wave list is taken with the switch off";
      }
    }
    ForcedSwitch forced(sm90_engine::set_decode_list_near_wave_mode, 1);
    // The plan: list_chunk_near_wave (guard) or list_chunk over the 64-key tile counts.
    std::vector<int64_t> tiles;
    const int64_t chunk = host_list_chunk(lens, plane_wave, guard, &tiles);
    const std::vector<int32_t> got = run_and_read_list_counts(*p, list_bytes, kBatch);
    ASSERT_EQ(got.size(), static_cast<size_t>(2 * kBatch)) << describe(c) << ": the run failed";
    int32_t first = 0, most = 0;
    for (int b = 0; b < kBatch; ++b) {
      const int splits = cuda_engine::list_splits_of(tiles[static_cast<size_t>(b)], chunk);
      EXPECT_EQ(got[2 * b], splits) << describe(c) << " chunk " << chunk << ": splits of " << b;
      EXPECT_EQ(got[2 * b + 1], first) << describe(c) << ": first slot of " << b;
      first += splits;
      most = std::max(most, splits);
    }
    if (lens == mixed) {
      EXPECT_GT(most, 1) << describe(c) << " chunk " << chunk << ": no sequence split";
      if (page > 0) {
        expect_paged_ignores_stale_rows(c);
      } else {
        check_case(c, kEngine);
      }
      expect_repeatable(c, 3);
    } else {
      EXPECT_EQ(first, kBatch) << describe(c) << ": equal lengths not one split a sequence";
      expect_paged_ignores_stale_rows(c);
    }
    if (HasFatalFailure()) return;
  }
}

// Outside the engine's scope it declines with a reason (pinned: an error).
TEST_F(Sm90Decode, DeclinesWithReason) {
  std::vector<std::pair<Case, std::string>> cases;
  Case c = decode_case(8, 2, 1, {100});
  Case d32 = c;
  d32.d = 32;
  cases.push_back({d32, "head dim 64, 128 or 256"});
  for (int64_t d : {64, 256}) {  // the fp8 register-fragment maps are D = 128 only
    Case fp8 = c;
    fp8.d = d;
    fp8.kv_fp8 = true;
    cases.push_back({fp8, "f8e4m3 K/V at head dim 128 only"});
  }
  Case prefill = decode_case(8, 2, 17, {100});
  cases.push_back({prefill, "new tokens"});
  Case varlen = c;  // varlen Q and K/V (the harness's usual varlen pairing)
  varlen.q_varlen = true;
  varlen.kv = KvKind::kVarlen;
  cases.push_back({varlen, "varlen"});
  for (const auto& [cs, reason] : cases) expect_declines(cs, kEngine, reason);
}

// FP8 KV cache (issue 7): f8e4m3 K/V with per-(sequence, KV head) scales, against the fp64 reference of
// the dequantized cache (k * k_scale, v * v_scale), the bf16/f16 pass rules.

TEST_F(Sm90Decode, Fp8KvCache) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int tokens : {1, 4, 16}) {
      Case c = decode_case(8, 2, tokens, {300, 65});
      c.dtype = dt;
      c.kv_fp8 = true;
      check_case(c, kEngine);
      c.kv = KvKind::kPaged;
      c.page_size = 64;
      c.num_splits = 3;
      check_case(c, kEngine);
    }
  }
  Case big = decode_case(64, 8, 2, {5000});
  big.kv_fp8 = true;
  big.num_splits = 0;
  check_case(big, kEngine);
  Case strided = decode_case(12, 4, 3, {333, 90});
  strided.kv_fp8 = true;
  strided.strided = true;
  check_case(strided, kEngine);
}

// The fp8 path's own code (decode_mainloop.cuh): register A fragments with permuted head dims
// (every head ratio and column tile 8 / 16 / 32), the V tail zeroed in registers (65 and 4099 keys
// end mid-tile), and the 6-stage fp8 ring wrapping many times (one split over 65 tiles), batched
// and paged (shuffled pages, automatic splits); then window, softcap and scale on the fp8 scores.
// (Groups >= 8 at 8 tokens reach 64 rows: those cases now run the packed-rows form, section 13.)
TEST_F(Sm90Decode, Fp8KvCacheHeadRatiosRingWrap) {
  for (auto [hq, hkv] : kHeadRatios) {
    for (int tokens : {1, 8}) {
      Case c = decode_case(hq, hkv, tokens, {4099, 65});
      c.kv_fp8 = true;
      check_case(c, kEngine);
      c.kv = KvKind::kPaged;
      c.page_size = 128;
      c.num_splits = 0;
      check_case(c, kEngine);
    }
  }
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Case c = decode_case(8, 2, 4, {1000, 200});
    c.dtype = dt;
    c.kv_fp8 = true;
    c.window_left = 100;
    c.window_right = 0;
    check_case(c, kEngine);
    c.window_left = -1;
    c.window_right = -1;
    c.softcap = 30.f;
    check_case(c, kEngine);
    c.softcap = 0.f;
    c.scale = 0.05f;
    c.num_splits = 3;
    check_case(c, kEngine);
  }
}

// fp8 K/V with a bf16 Q: both GEMMs run in f16 with Q scaled by 2^e (swap-AB: DecodeTraits::kF16Mma;
// packed rows: PrefillTraits::kSF16; docs/DECODE_SM90.md sections 28 and 30), and the switch's bf16
// GEMMs (the forms before them) must match the reference too: every head ratio at 1, 2 and 4 tokens
// (column tiles 8, 16 and 32; or packed rows at >= 33 rows), the packed form at 8 and 16 tokens of
// group 8 (one and two consumer warpgroups), a 4099-key sequence beside a 65-key one, split and paged.
TEST_F(Sm90Decode, Fp8F16GemmsAndBf16GemmsMatchReference) {
  for (auto [hq, hkv] : kHeadRatios) {
    for (int tokens : {1, 2, 4, 8, 16}) {
      if (tokens >= 8 && hq / hkv != 8) continue;  // the packed-rows form: group 8 (64 and 128 rows)
      Case c = decode_case(hq, hkv, tokens, {4099, 65});
      c.kv_fp8 = true;
      c.num_splits = tokens == 2 || tokens == 16 ? 3 : 1;
      if (tokens == 4 || tokens == 8) {
        c.kv = KvKind::kPaged;
        c.page_size = 64;
      }
      check_case(c, kEngine);
      ForcedSwitch bf16_gemms(sm90_engine::set_decode_fp8_bf16_mma_mode, 1);
      check_case(c, kEngine);
    }
  }
}

// Q of every magnitude for the f16 GEMMs: the CTA's largest |q| sets Q's scale 2^e, so heads of one
// KV group 2^30 apart share it (the smallest heads' components fall below f16 and their scores to
// ~0, as they nearly are); Q at 2^100 and 2^-100 with the softmax scale moved the other way, so the
// scores stay where fp32's softmax holds them (scores of 2^24 and more lose their exponent's
// fraction to fp32 rounding in any form) while e sits near its clamp; and Q = 0 (e = 0).
TEST_F(Sm90Decode, Fp8BF16QueryMagnitudes) {
  struct Magnitude {
    std::string name;
    std::vector<double> per_head;  // factor of head h: per_head[h % size]
    float scale;                   // the softmax scale (NAN: 1 / sqrt(D))
  };
  const float d_scale = 1.f / std::sqrt(128.f);
  const std::vector<Magnitude> magnitudes = {
      {"per head 2^6, 1, 2^-24, 2^-8", {0x1p6, 1.0, 0x1p-24, 0x1p-8}, NAN},
      {"2^100, scale x 2^-100", {0x1p100}, d_scale * 0x1p-100f},
      {"2^-100, scale x 2^100", {0x1p-100}, d_scale * 0x1p100f},
      {"0", {0.0}, NAN}};
  for (const Magnitude& m : magnitudes) {
    for (int tokens : {1, 4, 8, 16}) {  // swap-AB (one CTA's Q scale), packed rows (one a warpgroup)
      Case c = decode_case(64, 8, tokens, {700, 65});
      c.kv_fp8 = true;
      c.num_splits = 2;
      c.scale = m.scale;
      const std::string label = describe(c) + ", Q x " + m.name;
      auto p = make_problem(c);
      for_each_index(p->q.shape(), [&](const std::vector<int64_t>& i) {  // [..., Hq, D]
        const double factor = m.per_head[static_cast<size_t>(i[i.size() - 2]) % m.per_head.size()];
        p->q.set(i, p->q.at(i) * factor);
      });
      p->upload();
      ASSERT_TRUE(run_reference(*p).ok()) << label;
      HostTensor o = like(p->out), l = like(p->lse);
      const Status s = run_cuda(*p, &o, &l, kEngine);
      ASSERT_TRUE(s.ok()) << label << ": " << s.to_string();
      expect_matches_reference(*p, o, l, label);
    }
  }
}

// Automatic selection: a decode problem the sm90 engine supports goes to it (head dims 64, 128
// and 256); one it declines falls through: head dim 32 to the portable engine, 40 new tokens to the
// sm90 prefill engine. An fp8 cache needs no opt-in since its register-fragment path measured
// faster than bf16.
TEST_F(Sm90Decode, AutomaticSelectionPrefersItForDecode) {
  const std::vector<std::pair<Case, std::string>> cases = {
      {decode_case(64, 8, 1, {4096}), "sm90"},
      {decode_case(8, 1, 16, {300}), "sm90"},
      {decode_case(64, 8, 8, {4096}), "sm90"},  // the packed-rows form, inside sm90
      {decode_case(64, 8, 16, {4096}), "sm90"},
      {decode_case(16, 1, 1, {4096}, 64), "sm90"},
      {decode_case(32, 2, 1, {4096}, 256), "sm90"},
      {[] {  // vLLM's default page size (any page size is served since the sub-page boxes)
         Case c = decode_case(64, 8, 1, {4096});
         c.kv = KvKind::kPaged;
         c.page_size = 16;
         return c;
       }(),
       "sm90"},
      {[] {
         Case c = decode_case(8, 2, 1, {100});
         c.kv = KvKind::kPaged;
         c.page_size = 1;
         return c;
       }(),
       "sm90"},
      {decode_case(8, 2, 1, {100}, 32), "cuda"},
      {decode_case(8, 2, 40, {100}), "sm90-prefill"},  // 40 query rows: past decode, a batched prefill
      {[] {
         Case c = decode_case(8, 2, 1, {100});
         c.kv_fp8 = true;
         return c;
       }(),
       "sm90"},
      {[] {  // fp8 with 64 packed rows: the packed-rows form, inside sm90
         Case c = decode_case(64, 8, 8, {4096});
         c.kv_fp8 = true;
         return c;
       }(),
       "sm90"},
  };
  for (const auto& [cs, want] : cases) {
    auto p = make_problem(cs);
    const char* name = nullptr;
    ASSERT_TRUE(attention_engine_for(p->device_params(), RunOptions{}, &name).ok()) << describe(cs);
    EXPECT_EQ(std::string(name), want) << describe(cs);
  }
}

// ---- The packed-rows multi-token form (docs/DECODE_SM90.md section 12) ----
// A 16-bit cache at head dim 128 with group x new tokens >= 64 runs the prefill kernel's
// packed-decode mode: query rows r = token * group + head on wgmma's M side, 128-key tiles as two
// 64-row boxes, split-KV partials for the combine kernel. "sm90" takes it by itself for these
// problems; "sm90-rows" pins it for any group (the bitwise comparison against K/V copied up,
// whose group of 1 would otherwise run swap-AB).

// Head ratios whose group x {8, 16} tokens reach 64 rows: group 8 (64/8, 8/1, 16/2; 64 rows at 8
// tokens fill one warpgroup, the second exits), group 16 (32/2: 256 rows at 16 tokens, two row
// blocks) and a non-power-of-two group (40/8: 80 rows at 16 tokens, the second warpgroup 16 rows).
const std::vector<std::pair<int64_t, int64_t>> kPackedRatios = {{64, 8}, {8, 1}, {16, 2}, {32, 2}, {40, 8}};

bool packed_rows(int64_t hq, int64_t hkv, int tokens) { return (hq / hkv) * tokens >= 64; }

TEST_F(Sm90Decode, PackedRowsHeadRatiosTokens) {
  for (auto [hq, hkv] : kPackedRatios) {
    for (int tokens : {8, 16}) {
      if (!packed_rows(hq, hkv, tokens)) continue;  // 40/8 x 8: 40 rows, swap-AB
      for (bool causal : {true, false}) {
        Case c = decode_case(hq, hkv, tokens, {300, 65});  // seqlens_k: 300 and 65 keys
        c.causal = causal;
        c.num_splits = 0;
        check_case(c, kEngine);
        c.dtype = DType::kF16;
        c.num_splits = 3;
        check_case(c, kEngine);
      }
    }
  }
}

// KV lengths around the 128-key tile, its 64-row boxes and the splits, 16-bit or fp8 K/V: a
// sequence whose early rows see no key (1 key, 8 tokens, causal), tile +- 1, two tiles +- 1, 4099
// keys (33 tiles: at one split the 3-stage ring wraps; fp8's ring 11 times, its converted V tiles
// 16, its K tile 33); splits 1, 3 and automatic; batched and paged 64 (a tile spans two shuffled
// pages; the table's last page ends mid-tile); then 16 tokens over several sequences, non-causal,
// and paged 128.
// Head dims 64 and 256 (section 15; 64 rows are packed at every head dim): D 64's 6-stage ring
// wraps at one split from 769 keys; D 256's tiles are 64 keys (a single box, split K/V barriers),
// so 63 / 64 / 65 / 127 / 128 / 129 are one tile +- 1 and two tiles +- 1 there.
void expect_packed_lengths_around_tiles(bool fp8, int64_t d = 128) {
  for (int k : {1, 63, 64, 65, 127, 128, 129, 255, 257, 1000, 4099}) {
    for (int split : {1, 3, 0}) {
      for (bool paged : {false, true}) {
        Case c = decode_case(16, 2, 8, {k}, d);
        c.kv_fp8 = fp8;
        c.num_splits = split;
        if (paged) {
          c.kv = KvKind::kPaged;
          c.page_size = 64;
        }
        check_case(c, kEngine);
      }
    }
  }
  // 16 tokens (128 rows: both warpgroups), several sequences of different lengths, non-causal.
  Case c = decode_case(64, 8, 16, {129, 1000, 64}, d);
  c.kv_fp8 = fp8;
  c.causal = false;
  c.num_splits = 3;
  check_case(c, kEngine);
  c.kv = KvKind::kPaged;
  c.page_size = 128;
  c.causal = true;
  c.num_splits = 0;
  check_case(c, kEngine);
}

TEST_F(Sm90Decode, PackedRowsLengthsAroundTilesAndSplits) { expect_packed_lengths_around_tiles(false); }

// Rows of the cache no sequence reads hold NaN (expect_ignores_stale_rows, the harness): none may
// reach O. The packed form zeroes V rows past the end in shared memory and skips 64-row boxes
// wholly past it (a paged table's last page may end mid-tile).
TEST_F(Sm90Decode, PackedRowsIgnoreStaleRows) {
  for (int split : {1, 3}) {
    Case c = decode_case(8, 1, 8, {300, 171, 129, 64});
    c.num_splits = split;
    expect_ignores_stale_rows(c, kEngine);
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    expect_ignores_stale_rows(c, kEngine);
  }
}

TEST_F(Sm90Decode, PackedRowsWindowSoftcapScaleStrided) {
  for (int splits : {1, 3}) {
    Case c = decode_case(16, 2, 16, {1000, 200});
    c.num_splits = splits;
    check_window_softcap_scale(c);
    c.strided = true;
    check_case(c, kEngine);
  }
}

// Native GQA through the packed form == the same form on K/V copied up to every query head (group
// 1: one row per token, where "sm90" would take swap-AB, hence the pinned "sm90-rows"): the head
// mapping reads the right KV head and no row's bits depend on its neighbours or the group. Split
// counts are fixed (the automatic count depends on the number of KV heads).
TEST_F(Sm90Decode, PackedRowsGqaEqualsCopiedUpBitwise) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<Case> cases;
    Case batched = decode_case(64, 8, 8, {700, 33});
    batched.dtype = dt;
    cases.push_back(batched);
    Case paged = decode_case(16, 2, 16, {700, 129});
    paged.dtype = dt;
    paged.kv = KvKind::kPaged;
    paged.page_size = 64;
    paged.num_splits = 3;
    cases.push_back(paged);
    Case odd_group = decode_case(40, 8, 16, {300});  // 80 rows: the second warpgroup holds 16
    odd_group.dtype = dt;
    odd_group.num_splits = 3;
    cases.push_back(odd_group);
    for (const Case& c : cases) expect_gqa_equals_copied_up(c, "sm90-rows");
  }
}

TEST_F(Sm90Decode, PackedRowsDeterministicOver20Runs) {
  Case c = decode_case(64, 8, 16, {5000});
  c.kv = KvKind::kPaged;
  c.page_size = 64;
  c.num_splits = 0;
  expect_repeatable(c, 20);
}

// Pinned, the packed form serves any group (MHA, one token: 1 row of 64; fp8 too) and declines
// what it does not build, with the reason (sm90 serves those with swap-AB).
TEST_F(Sm90Decode, PackedRowsPinnedServesAnyGroupDeclinesOthers) {
  check_case(decode_case(8, 8, 1, {300, 65}), "sm90-rows");
  check_case(decode_case(8, 2, 4, {129}), "sm90-rows");
  Case fp8 = decode_case(8, 2, 4, {129, 300});
  fp8.kv_fp8 = true;
  check_case(fp8, "sm90-rows");
  fp8.kv = KvKind::kPaged;
  fp8.page_size = 16;
  expect_declines(fp8, "sm90-rows", "page_size a multiple of 64");
  // Head dims 64 and 256 are served (section 15), MHA one token too; fp8 there and D 32 are not.
  for (int64_t d : {64, 256}) {
    check_case(decode_case(8, 8, 1, {300, 65}, d), "sm90-rows");
    Case fp8_d = decode_case(64, 8, 8, {100}, d);
    fp8_d.kv_fp8 = true;
    expect_declines(fp8_d, "sm90-rows", "f8e4m3 K/V at head dim 128 only");
  }
  Case d32 = decode_case(64, 8, 8, {100}, 32);
  expect_declines(d32, "sm90-rows", "head dim 64, 128 or 256");
}

// ---- Head dims 64 and 256 in the packed-rows form (docs/DECODE_SM90.md section 15) ----
// The same packed-decode mode at D 64 (128-key tiles of two 64-row boxes, one 64-wide d block, a
// 6-stage ring) and D 256 (64-key tiles of one box, four d blocks, 2 stages with split K/V
// barriers: K refilled after S, V after O). "sm90" takes it from 17 rows at D 64 and 33 at D 256
// (decode_traits.h packed_decode_min_rows); "sm90-rows" pins it below.
const std::vector<int64_t> kPackedHeadDims64256 = {64, 256};
const std::vector<std::pair<int64_t, int64_t>> kPackedRatios64256 = {{8, 4}, {8, 2}, {16, 1}, {32, 2}};

// Tokens around each head dim's threshold for a group: the last count below it (swap-AB under
// "sm90", here also pinned to the packed form), the first at or above it, and 16 (group 16: 256
// rows, two row blocks); counts outside 1..16 dropped.
std::vector<int> tokens_around_threshold(int64_t d, int64_t group) {
  const int64_t min_rows = d == 64 ? 17 : 33;
  const int first = static_cast<int>((min_rows + group - 1) / group);
  std::vector<int> out;
  for (int t : {first - 1, first, 16}) {
    if (t >= 1 && t <= 16 && (out.empty() || out.back() != t)) out.push_back(t);
  }
  return out;
}

// Head ratios 8/4, 8/2, 16/1, 32/2 x tokens around the threshold, causal and not; bf16 with
// automatic splits through "sm90" and pinned, f16 with 3 splits through "sm90".
TEST_F(Sm90Decode, PackedRowsD64D256HeadRatiosTokens) {
  for (int64_t d : kPackedHeadDims64256) {
    for (auto [hq, hkv] : kPackedRatios64256) {
      for (int tokens : tokens_around_threshold(d, hq / hkv)) {
        for (bool causal : {true, false}) {
          Case c = decode_case(hq, hkv, tokens, {300, 65}, d);  // seqlens_k: 300 and 65 keys
          c.causal = causal;
          c.num_splits = 0;
          check_case(c, kEngine);
          check_case(c, "sm90-rows");
          c.dtype = DType::kF16;
          c.num_splits = 3;
          check_case(c, kEngine);
        }
      }
    }
  }
}

// Whether "sm90" gives p O and LSE bit for bit equal to the pinned packed form's ("sm90-rows").
bool sm90_gives_packed_bits(Problem& p) {
  HostTensor o_auto = like(p.out), l_auto = like(p.lse), o_rows = like(p.out), l_rows = like(p.lse);
  const bool ran =
      run_cuda(p, &o_auto, &l_auto, kEngine).ok() && run_cuda(p, &o_rows, &l_rows, "sm90-rows").ok();
  EXPECT_TRUE(ran) << describe(p.c);
  return ran && bitwise_equal(o_auto, o_rows) && bitwise_equal(l_auto, l_rows);
}

// Below the cut (section 31, decode_traits.h packed_rows_below_cut): from 16 rows and 64 MiB of K/V
// at D 64 / 256, "sm90" runs the packed form where swap-AB's work list would not (these K/V bounds
// are below kListMinKvBytes): its O and LSE are "sm90-rows"'s bit for bit. One token of 16/1 d64 (B16
// x 16K) and 32/2 d256 (B8 x 4K), two of 16/2 d256 (16 rows) and 32/2 d256 (32 rows); equal lengths
// (batched K/V, no seqlens_k) and mixed lengths with an empty sequence (seqlens_k, NaN past each
// length); each against the fp64 reference too. With the switch off, 1 key short of the bound, or
// on pages of 16 keys, "sm90" keeps swap-AB: correct, and not those bits.
TEST_F(Sm90Decode, PackedBelowCutIsTakenBitwise) {
  struct Row {
    int64_t d, hq, hkv;
    int tokens, batch, capacity;
  };
  for (const Row& r : std::vector<Row>{{64, 16, 1, 1, 16, 16384},
                                       {256, 32, 2, 1, 8, 4096},
                                       {256, 16, 2, 2, 8, 4096},
                                       {256, 32, 2, 2, 8, 4096}}) {
    for (bool mixed : {false, true}) {
      std::vector<int> lens(static_cast<size_t>(r.batch), r.capacity);
      if (mixed) {  // the first at the capacity (so batched K/V is capacity keys long), one empty
        for (int i = 1; i < r.batch; ++i) lens[static_cast<size_t>(i)] = i == 1 ? 0 : 64 + (i * 389) % 1200;
      }
      Case c = decode_case(r.hq, r.hkv, r.tokens, lens, r.d);
      c.num_splits = 0;
      c.stale_rows_nan = mixed;
      auto p = make_problem(c);
      EXPECT_TRUE(sm90_gives_packed_bits(*p))
          << describe(c) << ": sm90 did not run the packed form below the cut";
      check_case(c, kEngine);
      ForcedSwitch off(sm90_engine::set_decode_packed_below_cut_mode, 0);
      EXPECT_FALSE(sm90_gives_packed_bits(*p)) << describe(c) << ": the packed form with the switch off";
      check_case(c, kEngine);
    }
  }
  // Swap-AB one key short of 64 MiB, and on pages of 16 keys at 64 MiB (32/2 d256 B1 x 32K), while
  // pages of 64 there take the packed form.
  Case short_kv = decode_case(16, 1, 1, std::vector<int>(16, 16383), 64);
  Case page16 = decode_case(32, 2, 1, {32768}, 256);
  page16.kv = KvKind::kPaged;
  page16.page_size = 16;
  Case page64 = page16;
  page64.page_size = 64;
  for (Case* c : {&short_kv, &page16, &page64}) {
    c->num_splits = 0;
    auto p = make_problem(*c);
    EXPECT_EQ(sm90_gives_packed_bits(*p), c == &page64) << describe(*c) << ": the form sm90 took";
    check_case(*c, kEngine);
  }
}

TEST_F(Sm90Decode, PackedRowsD64D256LengthsAroundTilesAndSplits) {
  for (int64_t d : kPackedHeadDims64256) expect_packed_lengths_around_tiles(false, d);
}

// Stale (NaN) cache rows past each sequence and in spare pages, batched and paged 64 / 128, splits
// 1 and 3, 8 and 16 tokens of group 8 (64 and 128 rows).
TEST_F(Sm90Decode, PackedRowsD64D256IgnoreStaleRows) {
  for (int64_t d : kPackedHeadDims64256) {
    for (int tokens : {8, 16}) {
      for (int split : {1, 3}) {
        Case c = decode_case(8, 1, tokens, {300, 171, 129, 64}, d);
        c.num_splits = split;
        expect_ignores_stale_rows(c, kEngine);
        c.kv = KvKind::kPaged;
        c.page_size = tokens == 8 ? 64 : 128;
        expect_ignores_stale_rows(c, kEngine);
      }
    }
  }
}

TEST_F(Sm90Decode, PackedRowsD64D256WindowSoftcapScaleStrided) {
  for (int64_t d : kPackedHeadDims64256) {
    for (int splits : {1, 3}) {
      Case c = decode_case(16, 2, 16, {1000, 200}, d);
      c.num_splits = splits;
      check_window_softcap_scale(c);
      c.strided = true;
      check_case(c, kEngine);
      c.dtype = DType::kF16;
      c.kv = KvKind::kPaged;
      c.page_size = 64;
      check_case(c, kEngine);
    }
  }
}

// Native GQA == K/V copied up, bitwise, both through the pinned packed form (copied up, the group
// is 1 and "sm90" would take swap-AB): 16/1 x 2 tokens (32 rows against 2), 8/2 x 16 paged 64,
// 32/2 x 3 paged 128 (48 rows), fixed split counts; bf16 and f16.
TEST_F(Sm90Decode, PackedRowsD64D256GqaEqualsCopiedUpBitwise) {
  for (int64_t d : kPackedHeadDims64256) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      std::vector<Case> cases;
      Case batched = decode_case(16, 1, 2, {700, 33}, d);
      batched.num_splits = 1;
      cases.push_back(batched);
      Case paged = decode_case(8, 2, 16, {700, 129}, d);
      paged.kv = KvKind::kPaged;
      paged.page_size = 64;
      paged.num_splits = 3;
      cases.push_back(paged);
      Case mqa = decode_case(32, 2, 3, {4099, 700}, d);
      mqa.kv = KvKind::kPaged;
      mqa.page_size = 128;
      mqa.num_splits = 3;
      cases.push_back(mqa);
      for (Case& c : cases) {
        c.dtype = dt;
        expect_gqa_equals_copied_up(c, "sm90-rows");
      }
    }
  }
}

TEST_F(Sm90Decode, PackedRowsD64D256DeterministicOver20Runs) {
  for (int64_t d : kPackedHeadDims64256) {
    Case c = decode_case(16, 1, 16, {5000}, d);
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    c.num_splits = 0;
    expect_repeatable(c, 20);
  }
}

// ---- fp8 K/V in the packed-rows form (docs/DECODE_SM90.md section 13) ----
// An f8e4m3 cache with group x new tokens >= 33 rows (kPackedDecodeMinRowsFp8): TMA brings fp8
// tiles into an fp8 ring, the producer warpgroup widens each into the 16-bit tiles the GEMMs read (two converted K tiles, two
// converted V tiles; rows past the sequence written as zeros), the key scale joins the score
// scale and the value scale multiplies O. Every case against the fp64 reference of the
// dequantized cache (k x k_scale, v x v_scale; the harness draws scales in [0.25, 1)).

// Group 8 (64/8, 8/1, 16/2) x 8 tokens (64 rows: one consumer warpgroup, the second exits) and
// x 16 (128 rows: both, pingpong), causal and not, bf16 with automatic splits and f16 with 3;
// 32/2 x 16 (256 rows: two row blocks) and 40/8 x 16 (80 rows) once each.
TEST_F(Sm90Decode, PackedRowsFp8HeadRatiosTokens) {
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{64, 8}, {8, 1}, {16, 2}}) {
    for (int tokens : {8, 16}) {
      for (bool causal : {true, false}) {
        Case c = decode_case(hq, hkv, tokens, {300, 65});  // seqlens_k: 300 and 65 keys
        c.kv_fp8 = true;
        c.causal = causal;
        c.num_splits = 0;
        check_case(c, kEngine);
        c.dtype = DType::kF16;
        c.num_splits = 3;
        check_case(c, kEngine);
      }
    }
  }
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{32, 2}, {40, 8}}) {
    Case c = decode_case(hq, hkv, 16, {700, 129});
    c.kv_fp8 = true;
    c.num_splits = 3;
    check_case(c, kEngine);
  }
}

TEST_F(Sm90Decode, PackedRowsFp8LengthsAroundTilesAndSplits) { expect_packed_lengths_around_tiles(true); }

// Every cache row no sequence reads is NaN (fp8 NaN, 0x7f): rows past a sequence inside a loaded
// box, boxes past it, spare pages. The converters write zeros for rows past the sequence and never
// read their bytes, so no NaN may reach O or LSE. 8 and 16 tokens, splits 1 and 3, batched with
// seqlens_k and paged 64.
TEST_F(Sm90Decode, PackedRowsFp8IgnoreStaleRows) {
  for (int tokens : {8, 16}) {
    for (int split : {1, 3}) {
      Case c = decode_case(8, 1, tokens, {300, 171, 129, 64});
      c.kv_fp8 = true;
      c.num_splits = split;
      expect_ignores_stale_rows(c, kEngine);
      c.kv = KvKind::kPaged;
      c.page_size = 64;
      expect_ignores_stale_rows(c, kEngine);
    }
  }
}

// Window, softcap (on the key-scaled scores) and a custom scale, then padded strides; bf16 and f16.
TEST_F(Sm90Decode, PackedRowsFp8WindowSoftcapScaleStrided) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int splits : {1, 3}) {
      Case c = decode_case(16, 2, 16, {1000, 200});
      c.kv_fp8 = true;
      c.dtype = dt;
      c.num_splits = splits;
      check_window_softcap_scale(c);
      c.strided = true;
      check_case(c, kEngine);
    }
  }
}

// Native GQA == K/V (and their scales) copied up to every query head, bitwise, through the pinned
// packed form (group 1 would otherwise run swap-AB): each row reads its own KV head's fp8 rows and
// scales, and no row depends on its neighbours. Fixed split counts.
TEST_F(Sm90Decode, PackedRowsFp8GqaEqualsCopiedUpBitwise) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<Case> cases;
    Case batched = decode_case(64, 8, 8, {700, 33});
    batched.num_splits = 1;
    cases.push_back(batched);
    Case paged = decode_case(16, 2, 16, {700, 129});
    paged.kv = KvKind::kPaged;
    paged.page_size = 64;
    paged.num_splits = 3;
    cases.push_back(paged);
    Case odd_group = decode_case(40, 8, 16, {300});  // 80 rows: the second warpgroup holds 16
    odd_group.num_splits = 3;
    cases.push_back(odd_group);
    for (Case& c : cases) {
      c.dtype = dt;
      c.kv_fp8 = true;
      expect_gqa_equals_copied_up(c, "sm90-rows");
    }
  }
}

// Two converted K tiles, a two-slot fp8 ring and an L2 prefetch of three more tiles, and P V in f16
// for bf16 queries (docs/DECODE_SM90.md section 17). One split per sequence so the CTA's tile count
// is the sequence's: 1, 2 (the ring), 3, 5 (ring + prefetch window), 6, 7 tiles of 128 keys, and 33
// (4099 keys: both K tiles and both fp8 slots wrap many times, an odd count ends on K tile 0). One
// consumer warpgroup (8 tokens) and two (16 tokens: both release each K tile), bf16 and f16,
// batched and paged 64 (each prefetched box looks up its own page). Then a large softmax scale,
// where most probabilities of a row fall below f16's range and P V drops them (bf16 kept them):
// still inside the bf16 budget.
TEST_F(Sm90Decode, PackedRowsFp8KTilesRingAndPrefetchWindow) {
  for (int tokens : {8, 16}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (bool paged : {false, true}) {
        Case c = decode_case(8, 1, tokens, {128, 256, 384, 640, 641, 896, 4099});
        c.kv_fp8 = true;
        c.dtype = dt;
        c.num_splits = 1;
        if (paged) {
          c.kv = KvKind::kPaged;
          c.page_size = 64;
        }
        check_case(c, kEngine);
      }
    }
  }
  Case peaked = decode_case(64, 8, 8, {4099, 700});
  peaked.kv_fp8 = true;
  peaked.num_splits = 0;
  peaked.scale = 4.f;
  check_case(peaked, kEngine);
}

TEST_F(Sm90Decode, PackedRowsFp8DeterministicOver20Runs) {
  Case c = decode_case(64, 8, 16, {5000});
  c.kv_fp8 = true;
  c.kv = KvKind::kPaged;
  c.page_size = 64;
  c.num_splits = 0;
  expect_repeatable(c, 20);
}

// With one consumer warpgroup (<= 64 packed rows) the second widens V while the producer warpgroup
// widens K (docs/DECODE_SM90.md section 21); GROUPATTN_SM90_FP8_CONVERTER_WGS=1 (forced here through
// set_decode_fp8_one_converter_wg_mode) restores section 17's single converter warpgroup. Same widening, same products in the same order: bitwise-equal O
// and LSE, and the new form against the fp64 reference. 4, 6, 8 tokens at group 8 (32, 48, 64
// rows; pinned to the packed form, which 4 tokens would otherwise leave to swap-AB) and 16 (two
// consumer warpgroups: both settings run the same form); tile counts 1, 2, 3 and 33 (both fp8
// slots and both K and V tiles wrap, the last tile partial), bf16 and f16, batched with one split
// and paged 64 with 3.
TEST_F(Sm90Decode, PackedRowsFp8VConverterWarpgroupBitwise) {
  for (int tokens : {4, 6, 8, 16}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (bool paged : {false, true}) {
        Case c = decode_case(64, 8, tokens, {128, 256, 300, 4099});
        c.kv_fp8 = true;
        c.dtype = dt;
        c.num_splits = paged ? 3 : 1;
        if (paged) {
          c.kv = KvKind::kPaged;
          c.page_size = 64;
        }
        check_case(c, "sm90-rows");
        auto p = make_problem(c);
        HostTensor o_new = like(p->out), l_new = like(p->lse), o_old = like(p->out), l_old = like(p->lse);
        ASSERT_TRUE(run_cuda(*p, &o_new, &l_new, "sm90-rows").ok()) << describe(c);
        {
          ForcedSwitch one_converter(sm90_engine::set_decode_fp8_one_converter_wg_mode, 1);
          ASSERT_TRUE(run_cuda(*p, &o_old, &l_old, "sm90-rows").ok()) << describe(c);
        }
        EXPECT_TRUE(bitwise_equal(o_new, o_old) && bitwise_equal(l_new, l_old))
            << describe(c) << ": the two converter forms differ";
      }
    }
  }
}

// ---- Cluster reduction of the splits (docs/DECODE_SM90.md section 14) ----
// A forced split count that fits a cluster (2..16; head dim 256: 2..8) always reduces in a
// thread-block cluster (decode_traits.h cluster_reduction), so these cases run that mode; small
// automatic problems (a grid of at most one wave) take it too. "sm90-split" pins the workspace mode.

int max_cluster(int64_t d) { return d == 256 ? 8 : 16; }

// Head ratios 8/1, 16/2, 64/8 x head dims 64/128/256 x lengths where most splits are empty (1, 63,
// 64), two splits hold keys and the rest none (65), all hold a partial share (700) or whole
// tiles (8192); split counts cycling through 2..max; dtypes cycling bf16 / f16, and fp8 K/V at D 128.
TEST_F(Sm90Decode, ClusterReduceRatiosDimsLengths) {
  int n = 0;
  for (int64_t d : kHeadDims) {
    for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{8, 1}, {16, 2}, {64, 8}}) {
      for (int k : {1, 63, 64, 65, 700, 8192}) {
        Case c = decode_case(hq, hkv, 1, {k}, d);
        c.num_splits = 2 + n % (max_cluster(d) - 1);
        c.dtype = n % 2 == 0 ? DType::kBF16 : DType::kF16;
        ++n;
        check_case(c, kEngine);
        if (d == 128) {
          c.kv_fp8 = true;
          check_case(c, kEngine);
        }
      }
    }
  }
}

// Causal multi-token problems of <= 32 columns and several column blocks (12/4 x 16 tokens: 48
// columns, two blocks, each its own cluster), per-sequence lengths (seqlens_k) where a short
// sequence leaves whole clusters' splits empty; window, softcap and scale; strided views.
TEST_F(Sm90Decode, ClusterReduceMultiTokenMasks) {
  for (int64_t d : kHeadDims) {
    for (auto [hq, hkv, tokens] :
         std::vector<std::tuple<int64_t, int64_t, int>>{{8, 2, 4}, {16, 2, 4}, {12, 4, 16}, {8, 1, 3}}) {
      Case c = decode_case(hq, hkv, tokens, {1000, 65, 16}, d);
      c.num_splits = max_cluster(d);
      check_case(c, kEngine);
    }
    Case c = decode_case(8, 2, 4, {1000, 200}, d);
    c.num_splits = 5;
    check_window_softcap_scale(c);
    c.strided = true;
    check_case(c, kEngine);
  }
}

// Stale cache rows are NaN: batched with seqlens_k, paged 64, 16 (boxes of 16 rows) and 1
// (gathered), shuffled and spare pages; bf16 and fp8 K/V. Split counts innermost (one draw and
// one reference per problem).
TEST_F(Sm90Decode, ClusterReduceIgnoresStaleRows) {
  for (int splits : {3, 16}) {
    Case c = decode_case(8, 1, 2, {700, 65, 1});
    c.num_splits = splits;
    expect_ignores_stale_rows(c, kEngine);
  }
  for (int page : {64, 16, 1}) {
    for (bool fp8 : {false, true}) {
      for (int splits : {3, 16}) {
        Case pc = decode_case(16, 2, 1, {1000, 41, 300});
        pc.kv = KvKind::kPaged;
        pc.page_size = page;
        pc.num_splits = splits;
        pc.kv_fp8 = fp8;
        expect_paged_ignores_stale_rows(pc);
      }
    }
  }
}

// The automatic split count of the small shapes the mode is for (8/1 and 64/8 B1 x 8K: 16 splits,
// 16 and 128 CTAs; 16/1 d64 B1 x 8K) reduces in clusters; against the reference, and bitwise the
// same over 10 runs (fixed split order in every CTA).
TEST_F(Sm90Decode, ClusterReduceAutomaticDeterministic) {
  using Shape = std::tuple<int64_t, int64_t, int64_t>;  // Hq, Hkv, D
  for (auto [hq, hkv, d] : std::vector<Shape>{{8, 1, 128}, {64, 8, 128}, {16, 1, 64}}) {
    Case c = decode_case(hq, hkv, 1, {8192}, d);
    c.num_splits = 0;
    check_case(c, kEngine);
    expect_repeatable(c, 10);
  }
}

// Native GQA == K/V copied up (group 1), bitwise, both in cluster mode: the split count is forced
// and fits a cluster, which the rule takes whatever the number of KV heads.
TEST_F(Sm90Decode, ClusterReduceGqaEqualsCopiedUpBitwise) {
  for (int64_t d : kHeadDims) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case batched = decode_case(8, 2, 2, {700, 33}, d);
      batched.dtype = dt;
      batched.num_splits = 4;
      expect_gqa_equals_copied_up(batched, kEngine);
      Case paged = decode_case(16, 1, 1, {4099, 65}, d);
      paged.dtype = dt;
      paged.kv = KvKind::kPaged;
      paged.page_size = 16;
      paged.num_splits = max_cluster(d);
      expect_gqa_equals_copied_up(paged, kEngine);
    }
  }
}

// The cluster mode is really taken on this device (the launcher falls back to the workspace mode
// where cudaOccupancyMaxActiveClusters says the clusters do not fit, which would leave every test
// above passing on the workspace path): its arithmetic differs from the combine kernel's (section
// 14), so across 64 fp32 LSEs and 8192 outputs "sm90" and the pinned workspace mode "sm90-split"
// cannot agree bit for bit unless both ran the same path.
TEST_F(Sm90Decode, ClusterReduceIsTakenOnThisDevice) {
  for (int splits : {0, 16}) {  // automatic (16 splits, 8 clusters) and forced
    Case c = decode_case(64, 8, 1, {8192});
    c.num_splits = splits;
    auto p = make_problem(c);
    HostTensor oc = like(p->out), lc = like(p->lse), ow = like(p->out), lw = like(p->lse);
    ASSERT_TRUE(run_cuda(*p, &oc, &lc, kEngine).ok()) << describe(c);
    ASSERT_TRUE(run_cuda(*p, &ow, &lw, "sm90-split").ok()) << describe(c);
    EXPECT_FALSE(bitwise_equal(oc, ow) && bitwise_equal(lc, lw))
        << describe(c) << ": sm90 gave the workspace mode's bits: the cluster mode was not taken";
  }
}

// A call in cluster mode needs no workspace: workspace_bytes plans the split reduction as the
// launcher does (issue 11: one allocation fewer per call from Python). The automatic count of the
// cluster tests above (64/8 B1 x 8K: 16 splits) and of bench/host_cost.py's decode (64/8 B1 x 4K:
// 8 splits), and a forced count, ask for none; the pinned workspace mode still asks for its
// partials. Each call then runs with what it asked for (none: a null workspace) and matches the
// reference.
TEST_F(Sm90Decode, ClusterModeNeedsNoWorkspace) {
  for (auto [keys, splits] : std::vector<std::pair<int, int>>{{8192, 0}, {4096, 0}, {8192, 16}}) {
    Case c = decode_case(64, 8, 1, {keys});
    c.num_splits = splits;
    auto p = make_problem(c);
    RunOptions o;
    o.engine = kEngine;
    size_t need = 1;
    ASSERT_TRUE(attention_workspace_bytes(p->device_params(), o, &need).ok()) << describe(c);
    EXPECT_EQ(need, 0u) << describe(c) << ": the cluster mode reserved a workspace";
    o.engine = "sm90-split";
    ASSERT_TRUE(attention_workspace_bytes(p->device_params(), o, &need).ok()) << describe(c);
    EXPECT_GT(need, 0u) << describe(c) << ": the workspace mode needs the partials' buffer";
    check_case(c, kEngine);
  }
}

// The cluster launch through the driver's cuLaunchKernelEx (sm90_engine::set_decode_driver_launch_mode,
// docs/HOST_COST.md "Session 12"): the decode (64/8, 4K keys: 8 splits in clusters of 8) and
// longer and forced counts (16 splits: a non-portable cluster size), batched and paged, against the fp64
// reference, and bitwise the O and LSE of the runtime form (same kernel, parameters and configuration).
TEST_F(Sm90Decode, DriverLaunchClusterMode) {
  for (auto [keys, splits] : std::vector<std::pair<int, int>>{{4096, 0}, {8192, 0}, {8192, 16}}) {
    for (KvKind kv : {KvKind::kBatched, KvKind::kPaged}) {
      Case c = decode_case(64, 8, 1, {keys});
      c.num_splits = splits;
      c.kv = kv;
      c.page_size = 64;
      auto p = make_problem(c);
      HostTensor o_runtime = like(p->out), l_runtime = like(p->lse);
      {
        ForcedSwitch forced(sm90_engine::set_decode_driver_launch_mode, 0);
        ASSERT_TRUE(run_cuda(*p, &o_runtime, &l_runtime, kEngine).ok()) << describe(c);
      }
      ForcedSwitch forced(sm90_engine::set_decode_driver_launch_mode, 1);
      ASSERT_TRUE(sm90_engine::decode_driver_launch());
      HostTensor o_driver = like(p->out), l_driver = like(p->lse);
      ASSERT_TRUE(run_cuda(*p, &o_driver, &l_driver, kEngine).ok()) << describe(c);
      EXPECT_TRUE(bitwise_equal(o_driver, o_runtime) && bitwise_equal(l_driver, l_runtime))
          << describe(c) << ": the driver launch differs from the runtime launch";
      check_case(c, kEngine);
    }
  }
}

// The workspace mode, pinned: forced counts inside and outside a cluster's size, automatic. Split
// counts innermost (one draw and one reference per problem).
TEST_F(Sm90Decode, WorkspaceSplitModePinned) {
  for (int64_t d : kHeadDims) {
    for (KvKind kv : {KvKind::kBatched, KvKind::kPaged}) {
      for (int splits : {3, 16, 40, 0}) {
        Case c = decode_case(8, 1, 1, {8192, 700}, d);
        c.num_splits = splits;
        c.kv = kv;
        c.page_size = 16;
        check_case(c, "sm90-split");
      }
    }
  }
}

// ---- Small pages in the packed-rows form (docs/DECODE_SM90.md section 22; the switch
// GROUPATTN_SM90_DECODE_PACKED_SMALL_PAGES, set here through set_decode_packed_small_pages_mode) ----

// The clusters of section 22's failure table (16/1 d64 x 2 and 4 tokens, 32/2 d256 x 4, 64/8 d128
// x 8, 8/1 d128 x 4) and 8/2 x 16 (128 rows, both consumer warpgroups), at pages 16 (4 runs per
// 64 keys), 8 (8-row runs; D 128: 16 lanes per 128-key tile), 48 (gcd 16: a page's runs straddle
// tiles and splits) and 96 (gcd 32); lengths 1000, 41 and 300 (last tiles of 104, 41 and 44 keys:
// runs past the sequence not loaded) and 4099 (a table over many 128-byte lines, the L2 prefetch
// and the one-tile lookahead crossing lines and split ends); splits 1, 3 and automatic; NaN in
// every cache row no key uses. With the switch off "sm90-rows" declines these pages (so with it on
// the pinned engine can only have run the packed form); with it on, "sm90" and "sm90-rows" match
// the fp64 reference, bf16, and f16 at page 16.
TEST_F(Sm90Decode, PackedRowsSmallPages) {
  const std::vector<std::tuple<int64_t, int64_t, int, int64_t>> shapes = {
      {16, 1, 2, 64}, {16, 1, 4, 64}, {32, 2, 4, 256}, {64, 8, 8, 128}, {8, 1, 4, 128}, {8, 2, 16, 128}};
  {
    ForcedSwitch off(sm90_engine::set_decode_packed_small_pages_mode, 0);
    Case c = decode_case(64, 8, 8, {1000, 41, 300});
    c.kv = KvKind::kPaged;
    c.page_size = 16;
    expect_declines(c, "sm90-rows", "page_size a multiple of 64");
  }
  ForcedSwitch on(sm90_engine::set_decode_packed_small_pages_mode, 1);
  for (int page : {16, 8, 48, 96}) {
    for (auto [hq, hkv, tokens, d] : shapes) {
      for (int splits : {1, 3, 0}) {  // one draw and one reference for the three (and both engines)
        Case c = decode_case(hq, hkv, tokens, {1000, 41, 300}, d);
        c.kv = KvKind::kPaged;
        c.page_size = page;
        c.num_splits = splits;
        expect_ignores_stale_rows(c, kEngine);
        expect_ignores_stale_rows(c, "sm90-rows");
      }
      if (page == 16) {
        Case c = decode_case(hq, hkv, tokens, {1000, 41, 300}, d);
        c.dtype = DType::kF16;
        c.kv = KvKind::kPaged;
        c.page_size = page;
        c.num_splits = 3;
        check_case(c, kEngine);
      }
      Case wrap = decode_case(hq, hkv, tokens, {4099, 65}, d);
      wrap.kv = KvKind::kPaged;
      wrap.page_size = page;
      wrap.num_splits = 0;
      expect_ignores_stale_rows(wrap, "sm90-rows");
    }
  }
  // fp8 caches in small pages keep swap-AB under "sm90" and are declined by "sm90-rows".
  Case fp8 = decode_case(64, 8, 8, {1000, 41});
  fp8.kv = KvKind::kPaged;
  fp8.page_size = 16;
  fp8.kv_fp8 = true;
  check_case(fp8, kEngine);
  expect_declines(fp8, "sm90-rows", "page_size a multiple of 64");
}

// The first KV tile issued by thread 0 before the CTA barrier (KernelParams::early_first_tiles,
// GROUPATTN_SM90_DECODE_EARLY_TILES; batched K/V in the swap-AB kernel) against every tile from the
// producer warp: the same tiles in the same stages, so bitwise the same O and LSE, and both against
// the fp64 reference. CTAs of one tile and of a few (keys 1, 63, 64, 65, 129, 200), none (a zero-length
// sequence: no tile, nothing issued), split counts 1 and 3 and automatic (the workspace and cluster
// modes; a split starting mid-sequence issues from its own first tile), several new tokens (causal
// among them: the last token's CTA range), head dims 64 and 128, an fp8 cache, and head dim 256 and paged K/V
// (the switch does not apply there: the producer issues every tile).
TEST_F(Sm90Decode, EarlyFirstTilesBitwise) {
  const char* differ = "the early first tiles changed O or LSE";
  for (int64_t d : kHeadDims) {
    for (int splits : {1, 3, 0}) {
      Case c = decode_case(8, 1, 1, {200, 1, 0, 63, 64, 65, 129, 5000}, d);
      c.num_splits = splits;
      expect_switch_bitwise(c, sm90_engine::set_decode_early_tiles_mode, differ);
    }
    Case tokens = decode_case(16, 2, 3, {700, 129, 64}, d);
    tokens.num_splits = 0;
    expect_switch_bitwise(tokens, sm90_engine::set_decode_early_tiles_mode, differ);
  }
  Case fp8 = decode_case(64, 8, 2, {1000, 41, 130});
  fp8.kv_fp8 = true;
  fp8.num_splits = 0;
  expect_switch_bitwise(fp8, sm90_engine::set_decode_early_tiles_mode, differ);
  Case paged = decode_case(8, 2, 1, {700, 33});
  paged.kv = KvKind::kPaged;
  paged.page_size = 64;
  paged.num_splits = 0;
  expect_switch_bitwise(paged, sm90_engine::set_decode_early_tiles_mode, differ);
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
