// The supported sets, declared once: validation, dispatch, the CLI's help, tests and docs read
// them from here. An engine may serve a subset and declines the rest with a reason.
#pragma once

#include <array>
#include <cstdint>

#include "groupattn/tensor.h"

namespace groupattn {

// Attention: Q/K/V element types (O has Q's type; LSE is always f32) and head dims (D for Q/K,
// Dv for V/O, each from this list; D != Dv allowed).
inline constexpr std::array<DType, 3> kAttentionDTypes = {DType::kBF16, DType::kF16, DType::kF32};
inline constexpr std::array<int64_t, 6> kAttentionHeadDims = {32, 64, 96, 128, 192, 256};
// FP8 KV cache (AttentionParams::k_scale): the K/V element type, and the Q/O types it pairs with.
inline constexpr DType kAttentionFp8KvDType = DType::kF8E4M3;
inline constexpr std::array<DType, 2> kAttentionFp8QDTypes = {DType::kBF16, DType::kF16};
// Decode: new tokens per sequence the decode engines are built for (prefill has no limit).
inline constexpr int64_t kMaxDecodeNewTokens = 16;

// KDA: q/k/v element types; g, beta, A_log, dt_bias and states are f32. Key and value head dims.
inline constexpr std::array<DType, 3> kKdaDTypes = {DType::kBF16, DType::kF16, DType::kF32};
inline constexpr std::array<int64_t, 4> kKdaHeadDims = {32, 64, 128, 256};

}  // namespace groupattn
