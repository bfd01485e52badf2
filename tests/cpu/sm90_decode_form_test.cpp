// Which kernel form of the sm90 decode engine serves which problem (decode_traits.h
// packed_rows_form, the one place the choice is made): the packed-rows multi-token form for a
// cache at head dim 128 with group x new tokens >= 32 (16-bit) or >= 64 (f8e4m3), swap-AB for
// everything else. Pure host function: runs without a GPU.
#include <gtest/gtest.h>

#include "attention/engines/sm90/decode_traits.h"

namespace groupattn::test {
namespace {

using sm90_engine::packed_rows_form;

TEST(Sm90DecodeForm, PackedRowsFromThirtyTwoRows16BitSixtyFourFp8) {
  // (head ratio, new tokens) -> group x tokens rows per KV head.
  EXPECT_TRUE(packed_rows_form(128, false, 8, 8));    // 64/8, 8/1, 16/2 x 8 tokens: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 8, 16));   // x 16 tokens: 128 rows
  EXPECT_TRUE(packed_rows_form(128, false, 16, 4));   // 32/2 x 4: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 16, 16));  // 32/2 x 16: 256 rows, two row blocks
  EXPECT_TRUE(packed_rows_form(128, false, 5, 13));   // 40/8 x 13: 65 rows (a non-power-of-two group)
  EXPECT_TRUE(packed_rows_form(128, false, 64, 1));   // 64/1, one token: 64 rows
  EXPECT_TRUE(packed_rows_form(128, false, 8, 4));    // 64/8 x 4 tokens: 32 rows (16-bit threshold)
  EXPECT_TRUE(packed_rows_form(128, false, 8, 7));    // 56 rows
  EXPECT_TRUE(packed_rows_form(128, false, 5, 12));   // 40/8 x 12: 60 rows
  // f8e4m3 K/V from 64 rows (tiles widened in shared memory, DECODE_SM90.md section 13).
  EXPECT_TRUE(packed_rows_form(128, true, 8, 8));
  EXPECT_TRUE(packed_rows_form(128, true, 8, 16));
  EXPECT_TRUE(packed_rows_form(128, true, 5, 13));
}

TEST(Sm90DecodeForm, SwapAbBelowTheThresholdsAndElsewhere) {
  EXPECT_FALSE(packed_rows_form(128, false, 8, 1));   // 64/8, one token: 8 columns
  EXPECT_FALSE(packed_rows_form(128, false, 8, 3));   // 24 columns
  EXPECT_FALSE(packed_rows_form(128, false, 4, 7));   // 32/8 x 7: 28 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 4));    // f8e4m3 at 32 and 56 rows: swap-AB
  EXPECT_FALSE(packed_rows_form(128, false, 1, 16));  // MHA: 16 columns
  EXPECT_FALSE(packed_rows_form(128, true, 8, 1));    // f8e4m3 K/V below 64 rows: swap-AB's register
  EXPECT_FALSE(packed_rows_form(128, true, 8, 7));    // conversion
  EXPECT_FALSE(packed_rows_form(64, false, 8, 16));   // head dims 64 and 256: swap-AB only
  EXPECT_FALSE(packed_rows_form(256, false, 8, 16));
}

}  // namespace
}  // namespace groupattn::test
