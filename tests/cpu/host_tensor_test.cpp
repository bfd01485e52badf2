// The test utilities themselves: copies own their memory, guard bands notice stray writes, fills
// visit elements in row-major index order (the seeded data every test draws), the fp16/bf16
// conversions round to nearest even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

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

TEST(HostTensor, FillsDrawInRowMajorIndexOrder) {
  // The fills walk offsets, not indices: the same draws must land on the same elements as the
  // element-by-element definition (for_each_index + set), contiguous and strided, every float dtype.
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (bool strided : {false, true}) {
      const std::vector<int64_t> shape = {3, 5, 2, 7};
      auto make = [&] { return strided ? HostTensor(dt, shape, {5 * 2 * 9 + 4, 2 * 9 + 1, 9, 1}) : HostTensor(dt, shape); };
      HostTensor by_index = make(), by_offset = make();
      std::mt19937_64 r1(7), r2(7);
      std::normal_distribution<double> dist(0.0, 1.0);
      for_each_index(shape, [&](const std::vector<int64_t>& i) { by_index.set(i, dist(r1)); });
      by_offset.fill_normal(r2);
      EXPECT_TRUE(bitwise_equal(by_index, by_offset));
      std::vector<double> expect;
      for_each_index(shape, [&](const std::vector<int64_t>& i) { expect.push_back(by_index.at(i)); });
      EXPECT_EQ(by_offset.values(), expect);
      EXPECT_TRUE(by_offset.guards_intact());
    }
  }
  HostTensor scalar(DType::kF32, {});
  scalar.fill(2.0);
  EXPECT_EQ(scalar.values(), std::vector<double>{2.0});
  HostTensor empty(DType::kF32, {0, 4});
  empty.fill(1.0);
  EXPECT_TRUE(empty.values().empty());
}

TEST(HostTensor, FillSubWritesOnlyThatRow) {
  HostTensor t(DType::kBF16, {2, 3, 2, 4}, {3 * 2 * 5, 2 * 5, 5, 1});  // padded last dim
  t.fill(1.0);
  t.fill_sub({1, 2}, std::nan(""));
  for_each_index(t.shape(), [&](const std::vector<int64_t>& i) {
    EXPECT_EQ(std::isnan(t.at(i)), i[0] == 1 && i[1] == 2) << i[0] << "," << i[1] << "," << i[2] << "," << i[3];
  });
  EXPECT_TRUE(t.guards_intact());
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
