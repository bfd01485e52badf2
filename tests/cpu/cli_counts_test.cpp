// tools/cli_counts (the FLOP and byte counts of `groupattn bench`) against hand-computed values:
// the same cases as tests/python/test_bench_counts.py, so the C++ and Python counts agree.
#include "cli_counts.h"

#include <gtest/gtest.h>

namespace groupattn::cli {
namespace {

AttnCountProblem varlen(std::vector<int64_t> sq, std::vector<int64_t> sk, int64_t hq, int64_t hkv, int64_t d) {
  AttnCountProblem p;
  p.seqlens_q = std::move(sq);
  p.seqlens_k = std::move(sk);
  p.heads_q = hq, p.heads_kv = hkv, p.head_dim = d;
  return p;
}

TEST(CliCounts, NonCausalPairs) { EXPECT_EQ(visible_pairs(3, 5), 15); }

TEST(CliCounts, CausalSquare) { EXPECT_EQ(visible_pairs(3, 3, true), 6); }  // rows see 1, 2, 3 keys

TEST(CliCounts, CausalFewerQueriesThanKeysIsBottomRight) {
  // Sq=2, Sk=4: queries at key positions 2 and 3 -> 3 + 4 keys (top-left would give 1 + 2 = 3).
  EXPECT_EQ(visible_pairs(2, 4, true), 7);
}

TEST(CliCounts, CausalMoreQueriesThanKeys) {
  // Sq=4, Sk=2: positions -2, -1, 0, 1 -> 0 + 0 + 1 + 2 keys.
  EXPECT_EQ(visible_pairs(4, 2, true), 3);
}

TEST(CliCounts, CausalWindow) {
  EXPECT_EQ(visible_pairs(5, 5, true, 2, -1), 12);  // rows see 1, 2, 3, 3, 3 keys
  EXPECT_EQ(visible_pairs(4, 6, true, 1, -1), 8);   // rows at 2..5 see 2 keys each
}

TEST(CliCounts, WindowRightNonCausal) {
  EXPECT_EQ(visible_pairs(4, 4, false, 0, 1), 7);  // 2 + 2 + 2 + 1
}

TEST(CliCounts, CausalClosedFormMatchesRowLoop) {
  // A window that never clips (wl = wr = large) forces the row loop; causal caps at pos anyway.
  for (int64_t sq = 1; sq < 12; ++sq) {
    for (int64_t sk = 1; sk < 12; ++sk) {
      EXPECT_EQ(visible_pairs(sq, sk, true), visible_pairs(sq, sk, true, 1000, 1000)) << sq << " " << sk;
    }
  }
}

TEST(CliCounts, FlopsCausalSqNeSk) {
  // B=1, Sq=2, Sk=4, causal, Hq=2, D=8: 7 pairs * 4 * D * Hq.
  AttnCountProblem p = batched_problem(1, 2, 4, 2, 2, 8);
  p.causal = true;
  EXPECT_EQ(attention_flops(p), 448);
  AttnCountProblem p3 = batched_problem(3, 2, 4, 2, 2, 8);
  p3.causal = true;
  EXPECT_EQ(attention_flops(p3), 3 * 448);
  AttnCountProblem pv = batched_problem(1, 2, 4, 1, 1, 8);
  pv.causal = true;
  pv.head_dim_v = 16;
  EXPECT_EQ(attention_flops(pv), 7 * (2 * 8 + 2 * 16));
}

TEST(CliCounts, PrefillBytesBatched) {
  // B=2, Sq=Sk=4, Hq=4, Hkv=2, D=8, bf16, causal: every key is seen by the last query.
  AttnCountProblem p = batched_problem(2, 4, 4, 4, 2, 8);
  p.causal = true;
  const AttnBytes b = attention_bytes(p);
  EXPECT_EQ(b.q, 512);
  EXPECT_EQ(b.k, 256);
  EXPECT_EQ(b.v, 256);
  EXPECT_EQ(b.o, 512);
  EXPECT_EQ(b.lse, 128);
  EXPECT_EQ(b.total, 512 + 256 + 256 + 512 + 128);
}

TEST(CliCounts, Fp8CacheBytesCountOneBytePerKvElement) {
  // The PagedDecodeBytesCountWholePages problem with an f8e4m3 cache: K and V halve, Q/O/LSE stay.
  AttnCountProblem p = varlen({1}, {100}, 8, 2, 128);
  p.causal = true;
  p.page_size = 16;
  p.kv_elem_bytes = 1;
  const AttnBytes b = attention_bytes(p);
  EXPECT_EQ(b.k, 28672);  // 112 rows x 2 heads x 128 x 1 byte
  EXPECT_EQ(b.v, 28672);
  EXPECT_EQ(b.q, 2048);
  EXPECT_EQ(b.o, 2048);
  EXPECT_EQ(b.total, 28672 * 2 + 2048 * 2 + 32);
}

TEST(CliCounts, PagedDecodeBytesCountWholePages) {
  // One new token, 100 keys in the cache, page 16 -> 7 pages = 112 key rows read.
  AttnCountProblem p = varlen({1}, {100}, 8, 2, 128);
  p.causal = true;
  p.page_size = 16;
  EXPECT_EQ(keys_read(p), 112);
  const AttnBytes b = attention_bytes(p);
  EXPECT_EQ(b.k, 57344);
  EXPECT_EQ(b.v, 57344);
  EXPECT_EQ(b.q, 2048);
  EXPECT_EQ(b.o, 2048);
  EXPECT_EQ(b.lse, 32);
  EXPECT_EQ(b.total, 118816);
  p.page_size = 0;  // contiguous: exactly the 100 rows
  EXPECT_EQ(keys_read(p), 100);
  p.page_size = 64;  // 2 pages
  EXPECT_EQ(keys_read(p), 128);
  AttnCountProblem full = varlen({1}, {64}, 8, 2, 128);
  full.page_size = 16;  // exactly full pages: no extra
  EXPECT_EQ(keys_read(full), 64);
}

TEST(CliCounts, PagedWindowReadsOnlyPagesInTheWindow) {
  // One query at position 99, window left 20 -> keys 79..99 -> pages 4, 5, 6 of 16 -> 48 rows.
  EXPECT_EQ(visible_key_span(1, 100, true, 20, -1), (std::pair<int64_t, int64_t>{79, 100}));
  AttnCountProblem p = varlen({1}, {100}, 8, 2, 128);
  p.causal = true;
  p.window_left = 20;
  p.page_size = 16;
  EXPECT_EQ(keys_read(p), 48);
}

TEST(CliCounts, PagedMixedLengths) {
  AttnCountProblem p = varlen({1, 1}, {17, 33}, 8, 2, 128);
  p.causal = true;
  p.page_size = 16;
  EXPECT_EQ(keys_read(p), (2 + 3) * 16);
}

TEST(CliCounts, VarlenCausal) {
  // seq 0: Sq=3, Sk=5 -> positions 2, 3, 4 -> 3 + 4 + 5 = 12; seq 1: Sq=1, Sk=4 -> 4.
  AttnCountProblem p = varlen({3, 1}, {5, 4}, 4, 2, 64);
  p.causal = true;
  EXPECT_EQ(attention_flops(p), 16384);
  const AttnBytes b = attention_bytes(p);
  EXPECT_EQ(b.q, 2048);
  EXPECT_EQ(b.k, 2304);
  EXPECT_EQ(b.v, 2304);
  EXPECT_EQ(b.o, 2048);
  EXPECT_EQ(b.lse, 64);
  EXPECT_EQ(b.total, 8768);
}

TEST(CliCounts, RowsThatSeeNoKey) {
  // Sq=Sk=4, causal, left window 0: each row sees only itself.
  EXPECT_EQ(visible_pairs(4, 4, true, 0, -1), 4);
  // Sq=4, Sk=2, causal: rows 0 and 1 see nothing; the key span is still [0, 2).
  EXPECT_EQ(visible_key_span(4, 2, true), (std::pair<int64_t, int64_t>{0, 2}));
  // Sq=3, Sk=1, causal, window (0, 0): only row 2 (pos 0) sees key 0.
  EXPECT_EQ(visible_pairs(3, 1, true, 0, 0), 1);
  EXPECT_EQ(visible_key_span(3, 1, true, 0, 0), (std::pair<int64_t, int64_t>{0, 1}));
}

TEST(CliCounts, KdaBytes) {
  // T=4, H=2, HV=4, K=V=8, N=1, bf16, both states, in-kernel gate:
  // q,k 2*4*2*8*2=256; v,o 2*4*4*8*2=512; g 4*4*8*4=512; beta 4*4*4=64; states 2*1*4*8*8*4=2048;
  // gate params (4 + 32)*4 = 144.
  EXPECT_EQ(kda_bytes(4, 2, 4, 8, 8, 1, 2, true, true, true), 256 + 512 + 512 + 64 + 2048 + 144);
  EXPECT_EQ(kda_bytes(4, 2, 4, 8, 8, 1, 2, false, true, false), 256 + 512 + 512 + 64 + 1024);
}

}  // namespace
}  // namespace groupattn::cli
