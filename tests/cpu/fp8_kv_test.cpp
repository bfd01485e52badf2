// FP8 KV cache (issue 7), CPU tier: the E4M3FN conversions, the validation rules for f8e4m3 k/v
// and their scales, and the reference semantics (the key is k * k_scale, the value v * v_scale,
// then fp64), checked against the same problem stored in f32 with the dequantized values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.h"
#include "core/dtype.h"
#include "groupattn/attention.h"

namespace groupattn::test {
namespace {

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const auto b = static_cast<uint8_t>(code);
    const float f = e4m3_bits_to_float(b);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << code;
      continue;
    }
    EXPECT_EQ(float_to_e4m3_bits(f), b) << "code " << code << " = " << f;
  }
}

// Every code against the format's definition, computed here in double (the decoder is a table
// since session 11): S.EEEE.MMM is (-1)^S 2^(E-7) (1 + M/8), E = 0 is M 2^-9, S.1111.111 NaN.
TEST(Fp8E4M3, EveryCodeDecodesToItsDefinedValue) {
  for (int code = 0; code < 256; ++code) {
    const int e = (code >> 3) & 0xf, m = code & 0x7;
    const float f = e4m3_bits_to_float(static_cast<uint8_t>(code));
    if (e == 0xf && m == 0x7) {
      EXPECT_TRUE(std::isnan(f)) << code;
      continue;
    }
    const double mag = e == 0 ? m * std::pow(2.0, -9) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
    const double want = (code & 0x80) != 0 ? -mag : mag;
    EXPECT_EQ(static_cast<double>(f), want) << "code " << code;
    EXPECT_EQ(std::signbit(f), (code & 0x80) != 0) << "code " << code;  // -0 for 0x80
  }
}

TEST(Fp8E4M3, KnownValuesRoundingAndSaturation) {
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.f);               // largest finite
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_bits_to_float(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.f);
  EXPECT_EQ(e4m3_bits_to_float(0xb8), -1.f);
  EXPECT_EQ(float_to_e4m3_bits(1000.f), 0x7e);                 // saturates
  EXPECT_EQ(float_to_e4m3_bits(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_e4m3_bits(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.0625f)), 1.f);    // tie to even (1.0)
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.1875f)), 1.25f);  // tie to even (1.25)
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.1f)), 1.125f);
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(std::ldexp(3.f, -11))), std::ldexp(1.f, -9));  // 0.75 ulp
  EXPECT_EQ(round_to_dtype(0.3, DType::kF8E4M3), static_cast<double>(e4m3_bits_to_float(float_to_e4m3_bits(0.3f))));
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_STREQ(dtype_name(DType::kF8E4M3), "f8e4m3");
}

// A decode-shaped problem: q [B, Sq, Hq, D] bf16, K/V fp8 with scales (batched [B, Sk, Hkv, D] or
// paged), out bf16, lse; plus the same problem with f32 q/k/v holding the dequantized values.
struct Fp8Problem {
  int64_t B = 2, Sq = 3, Hq = 8, Hkv = 2, D = 32, Sk = 37, page = 8;
  bool paged = false, per_page = false;
  HostTensor q, k, v, out, lse, k_scale, v_scale, seqlens, table;
  HostTensor q32, k32, v32, out32, lse32;
  AttentionParams p, p32;

  explicit Fp8Problem(bool paged_, bool per_page_) : paged(paged_), per_page(per_page_) {
    std::mt19937_64 rng(7);
    const int64_t pages_per_seq = (Sk + page - 1) / page, num_pages = B * pages_per_seq + 1;
    const std::vector<int64_t> kv_shape =
        paged ? std::vector<int64_t>{num_pages, page, Hkv, D} : std::vector<int64_t>{B, Sk, Hkv, D};
    q = HostTensor(DType::kBF16, {B, Sq, Hq, D});
    k = HostTensor(DType::kF8E4M3, kv_shape);
    v = HostTensor(DType::kF8E4M3, kv_shape);
    out = HostTensor(DType::kBF16, {B, Sq, Hq, D});
    lse = HostTensor(DType::kF32, {Hq, B * Sq});
    q.fill_normal(rng);
    k.fill_normal(rng, 0.0, 2.0);  // stored rounded to e4m3
    v.fill_normal(rng, 0.0, 2.0);
    const int64_t scale_rows = per_page ? num_pages : B;
    k_scale = HostTensor(DType::kF32, {scale_rows, Hkv});
    v_scale = HostTensor(DType::kF32, {scale_rows, Hkv});
    // Powers of two: the dequantized values are exact in f32, so the f32 problem is the same math.
    std::uniform_int_distribution<int> e(-4, 3);
    for (int64_t r = 0; r < scale_rows; ++r) {
      for (int64_t h = 0; h < Hkv; ++h) {
        k_scale.set({r, h}, std::ldexp(1.0, e(rng)));
        v_scale.set({r, h}, std::ldexp(1.0, e(rng)));
      }
    }
    if (paged) {
      seqlens = HostTensor(DType::kI32, {B});
      table = HostTensor(DType::kI32, {B, pages_per_seq});
      for (int64_t b = 0; b < B; ++b) {
        seqlens.set({b}, static_cast<double>(Sk - b));  // different fill levels
        for (int64_t i = 0; i < pages_per_seq; ++i) {
          table.set({b, i}, static_cast<double>(num_pages - 1 - (b * pages_per_seq + i)));  // reversed
        }
      }
    }
    p.q = q.view(), p.k = k.view(), p.v = v.view(), p.out = out.view(), p.lse = lse.view();
    p.k_scale = k_scale.view(), p.v_scale = v_scale.view();
    p.kv_scale_per_page = per_page;
    p.causal = true;
    if (paged) p.seqlens_k = seqlens.view(), p.block_table = table.view();

    // The f32 twin: q's bf16 values and k * scale, v * scale (exact), batched in the same layout.
    q32 = HostTensor(DType::kF32, {B, Sq, Hq, D});
    k32 = HostTensor(DType::kF32, kv_shape);
    v32 = HostTensor(DType::kF32, kv_shape);
    out32 = HostTensor(DType::kF32, {B, Sq, Hq, D});
    lse32 = HostTensor(DType::kF32, {Hq, B * Sq});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t c = 0; c < D; ++c) q32.set({b, i, h, c}, q.at({b, i, h, c}));
    for (int64_t o = 0; o < kv_shape[0]; ++o) {
      for (int64_t j = 0; j < kv_shape[1]; ++j) {
        for (int64_t h = 0; h < Hkv; ++h) {
          // The scale row of this cache row: its page (per page) or its sequence.
          int64_t row = o;
          if (paged && !per_page) row = owner_of_page(o);
          const double ks = row < 0 ? 0.0 : k_scale.at({row, h}), vs = row < 0 ? 0.0 : v_scale.at({row, h});
          for (int64_t c = 0; c < D; ++c) {
            k32.set({o, j, h, c}, k.at({o, j, h, c}) * ks);
            v32.set({o, j, h, c}, v.at({o, j, h, c}) * vs);
          }
        }
      }
    }
    p32 = p;
    p32.q = q32.view(), p32.k = k32.view(), p32.v = v32.view(), p32.out = out32.view(), p32.lse = lse32.view();
    p32.k_scale = TensorView{}, p32.v_scale = TensorView{};
    p32.kv_scale_per_page = false;
  }

  // The sequence whose block table row holds `page` (-1: the spare page no sequence uses).
  int64_t owner_of_page(int64_t page_index) const {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < table.view().shape[1]; ++i)
        if (static_cast<int64_t>(table.at({b, i})) == page_index) return b;
    return -1;
  }
};

void expect_same_math(Fp8Problem& t) {
  RunOptions ro;
  ro.engine = "reference";
  ASSERT_TRUE(attention(t.p, ro).ok()) << attention(t.p, ro).to_string();
  ASSERT_TRUE(attention(t.p32, ro).ok()) << attention(t.p32, ro).to_string();
  // LSE is computed in fp64 from identical values: equal after the same fp32 rounding.
  EXPECT_TRUE(bitwise_equal(t.lse, t.lse32));
  // O: the same fp64 value rounded to bf16 directly vs. through f32 (double rounding at most 1 ulp).
  const std::vector<double> o = t.out.values(), o32 = t.out32.values();
  for (size_t i = 0; i < o.size(); ++i) {
    EXPECT_NEAR(o[i], round_to_dtype(o32[i], DType::kBF16), std::fabs(o32[i]) * 0x1p-8 + 1e-30) << i;
  }
}

TEST(Fp8KvReference, BatchedPerSequenceScales) {
  Fp8Problem t(/*paged=*/false, /*per_page=*/false);
  expect_same_math(t);
}

TEST(Fp8KvReference, PagedPerSequenceScales) {
  Fp8Problem t(/*paged=*/true, /*per_page=*/false);
  expect_same_math(t);
}

TEST(Fp8KvReference, PagedPerPageScales) {
  Fp8Problem t(/*paged=*/true, /*per_page=*/true);
  expect_same_math(t);
}

TEST(Fp8KvReference, ScaleBroadcastOverSequencesByStrideZero) {
  Fp8Problem t(/*paged=*/false, /*per_page=*/false);
  // One scale per KV head for every sequence: row 0 broadcast with stride 0 on B.
  for (int64_t h = 0; h < t.Hkv; ++h) {
    t.k_scale.set({1, h}, t.k_scale.at({0, h}));
    t.v_scale.set({1, h}, t.v_scale.at({0, h}));
  }
  Fp8Problem same = std::move(t);
  RunOptions ro;
  ro.engine = "reference";
  ASSERT_TRUE(attention(same.p, ro).ok());
  const HostTensor want_out = same.out, want_lse = same.lse;
  same.p.k_scale.stride[0] = 0;
  same.p.v_scale.stride[0] = 0;
  same.out.fill(NAN);
  same.lse.fill(NAN);
  ASSERT_TRUE(attention(same.p, ro).ok()) << attention(same.p, ro).to_string();
  EXPECT_TRUE(bitwise_equal(same.out, want_out));
  EXPECT_TRUE(bitwise_equal(same.lse, want_lse));
}

// Each rule: the status names the argument and the accepted values, and nothing is written.
void expect_rejected(AttentionParams p, HostTensor* out, const std::string& needle) {
  out->fill(NAN);
  const Status s = validate_attention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle << ": " << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  RunOptions ro;
  ro.engine = "reference";
  EXPECT_FALSE(attention(p, ro).ok());
  for (double x : out->values()) ASSERT_TRUE(std::isnan(x)) << needle << ": out was written";
}

TEST(Fp8KvValidation, RulesNameTheArgumentAndTheAcceptedValues) {
  Fp8Problem t(/*paged=*/true, /*per_page=*/false);
  AttentionParams p = t.p;
  p.k_scale = TensorView{};
  expect_rejected(p, &t.out, "k_scale: required with f8e4m3 k/v");
  p = t.p;
  p.v = t.v32.view();  // v f32 while k is fp8
  expect_rejected(p, &t.out, "v: dtype f32 while k is f8e4m3");
  p = t.p;
  p.k_scale = t.lse.view();  // wrong shape
  expect_rejected(p, &t.out, "k_scale");
  HostTensor bad_scale(DType::kBF16, {t.B, t.Hkv});
  p = t.p;
  p.v_scale = bad_scale.view();
  expect_rejected(p, &t.out, "v_scale: dtype bf16");
  p = t.p;
  p.kv_scale_per_page = true;  // scales are [B, Hkv], not [num_pages, Hkv]
  expect_rejected(p, &t.out, "num_pages");
  // Scales with a non-fp8 cache, per-page scales on a batched cache, fp8 with f32 q.
  p = t.p32;
  p.k_scale = t.k_scale.view();
  expect_rejected(p, &t.out32, "k_scale: given with f32 k/v");
  Fp8Problem b(/*paged=*/false, /*per_page=*/false);
  p = b.p;
  p.kv_scale_per_page = true;
  expect_rejected(p, &b.out, "kv_scale_per_page: set on a K/V cache that is not paged");
  p = b.p;
  p.q = b.q32.view();
  p.out = b.out32.view();
  expect_rejected(p, &b.out32, "q: dtype f32 with an f8e4m3 KV cache (accepted q: bf16, f16)");
}

}  // namespace
}  // namespace groupattn::test
