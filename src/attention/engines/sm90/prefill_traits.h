// Shapes of the sm90 prefill kernel (issue 3), shared by the host and the device code. No CUDA
// types here. The second product is RS: P stays in registers as the A operand (wgmma m64n128k16,
// one instruction per 16 keys over all 128 d), so no P buffer: the shared memory holds Q and three
// K/V stages. (The first cut sent P through shared memory with two stages: 182 TFLOP/s against
// 202 for this form on 64/8 B2 S8192 causal, docs/PREFILL_SM90.md.)
//
//   query tile  kBlockM = 128 rows of one query head: 64 per consumer warpgroup (wgmma M = 64)
//   KV tile     kBlockN = 128 keys x kHeadDim = 128 (S = Q K^T is m64n128k16, N = keys)
//   stages      kStages K+V tiles in flight (TMA, mbarrier ring)
//   threads     two consumer warpgroups (256) + one producer warpgroup (128: one thread issues the
//               TMA copies; a whole warpgroup so that setmaxnreg can move its registers to the
//               consumers, 24 / 240. The overlapped loop holds S (64), O (64) and P (32)
//               registers at once: it needs the consumers' budget above the 168 at entry, which
//               ptxas honours only with the hang guard's trap out of line (hw::hang_trap))
// Operand forms, verified on the H200 by the probe's test g and this kernel's GPU tier: S = Q K^T
// is SS with both operands K-major (Q from its TMA boxes, K from its); O += P V is RS with B = V
// read MN-major (imm-trans-b = 1) over both 64-wide d boxes (LBO = their distance).
#pragma once

#include <cstddef>
#include <cstdint>

namespace groupattn::sm90_engine {

inline constexpr int kPrefillBlockM = 128;
inline constexpr int kPrefillBlockN = 128;

// kHeadDim_: D == Dv, 64 or 128 (one or two 64-wide, 128-byte swizzle blocks of d). The KV tile
// stays at 128 keys: a 176-key tile for full attention (FA3's width at d 128, 2 stages) measured
// 14-19 % slower (docs/PREFILL_SM90.md).
template <class T, int kHeadDim_ = 128>
struct PrefillTraits {
  using Element = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kPrefillBlockM;
  static constexpr int kBlockN = kPrefillBlockN;
  static constexpr int kRowsPerWg = 64;
  static constexpr int kConsumerWgs = kBlockM / kRowsPerWg;  // 2
  static constexpr int kStages = 3;
  static constexpr int kConsumerWarps = 4 * kConsumerWgs;
  static constexpr int kConsumerThreads = 32 * kConsumerWarps;
  static constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
  static constexpr int kProducerWarp = kConsumerWarps;     // its first warp
  static constexpr uint32_t kProducerRegs = 24, kConsumerRegs = 240;

  static constexpr int kSwizzleElems = 64;                   // 16-bit elements per 128-byte row
  static constexpr int kDBlocks = kHeadDim / kSwizzleElems;  // 1 or 2
  // Q: kDBlocks blocks of [kBlockM rows][64 d]; each block is two TMA boxes of 64 rows.
  static constexpr int kQBoxRows = kRowsPerWg;
  static constexpr int kQBlockBytes = kBlockM * 128;
  static constexpr int kQBytes = kDBlocks * kQBlockBytes;
  // K or V tile: kDBlocks boxes of [kBlockN keys][64 d].
  static constexpr int kKvBoxBytes = kBlockN * 128;
  static constexpr int kTileBytes = kDBlocks * kKvBoxBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K then V

  static constexpr int kQOffset = 0;
  static constexpr int kStageOffset = kQOffset + kQBytes;
  static constexpr int kBarOffset = kStageOffset + kStages * kStageBytes;
  static constexpr int kBarBytes = (1 + 2 * kStages) * 8;  // q_full, full[], empty[]
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBarOffset + kBarBytes) + 1024;  // + alignment slack

  static_assert(sizeof(T) == 2, "wgmma path takes 16-bit inputs (bf16, fp16)");
  static_assert((kHeadDim == 64 || kHeadDim == 128) && kBlockN % 16 == 0, "tile shapes");
  static_assert(kQBlockBytes % 1024 == 0 && kKvBoxBytes % 1024 == 0 &&
                    (kRowsPerWg * 128) % 1024 == 0,
                "128B-swizzled operands start on 1024-byte boundaries (descriptor base offset 0)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
  static_assert(128 * (kProducerRegs + kConsumerWgs * kConsumerRegs) <= 65536, "setmaxnreg budget");
};

}  // namespace groupattn::sm90_engine
