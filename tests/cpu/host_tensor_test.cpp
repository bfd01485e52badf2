// The test utilities themselves: copies own their memory, guard bands notice stray writes,
// the fp16/bf16 conversions round to nearest even.
#include <gtest/gtest.h>

#include <cstring>

#include "common/host_tensor.h"
#include "core/dtype.h"

namespace groupattn::test {
namespace {

TEST(HostTensor, CopyOwnsItsBuffer) {
  HostTensor a(DType::kF32, {2, 3}, {8, 1});  // strided rows
  a.fill(1.0);
  HostTensor b = a;
  b.set({1, 2}, 5.0);
  EXPECT_EQ(a.at({1, 2}), 1.0);
  EXPECT_EQ(b.at({1, 2}), 5.0);
  EXPECT_NE(a.view().data, b.view().data);
  EXPECT_EQ(b.view().stride[0], 8);
  HostTensor c;
  c = b;
  EXPECT_EQ(c.at({1, 2}), 5.0);
  EXPECT_NE(c.view().data, b.view().data);
}

TEST(HostTensor, GuardBandsNoticeStrayWrites) {
  HostTensor a(DType::kBF16, {4});
  EXPECT_TRUE(a.guards_intact());
  static_cast<unsigned char*>(a.view().data)[8] = 0;  // one byte past the 8-byte tensor
  EXPECT_FALSE(a.guards_intact());
}

TEST(DType, HalfAndBf16RoundToNearestEven) {
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f)), 1.0f);
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half_bits_to_float(float_to_half_bits(65520.0f))));
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(5.960464477539063e-08f)), 5.960464477539063e-08f);  // 2^-24
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(NAN))));
}

}  // namespace
}  // namespace groupattn::test
