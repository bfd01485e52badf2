// The chunk block of the sm_90 state pass (kda_state_sm90.cuh) at K = V = 128: the prep writes
// each (chunk, value head) block as the exact shared-memory image the state kernel's wgmma reads,
// so the state kernel brings it in with two plain bulk copies and touches nothing on the way.
//
// The state kernel holds S^T (64 value rows x 128 key channels, one V half a CTA) as a wgmma
// accumulator and feeds it back as the A operand of the next products (wgmma_tf32.cuh): the
// accumulator's column 8c + 2q + i is then the A column 8c + q + 4i. Instead of permuting the
// W / Qt columns for that, the accumulator's columns are the channels in the order sigma:
// position 8c + 2q + i holds channel 8c + q + 4i, so the A columns are the channels in natural
// order and W, Qt stay plain [token][channel] rows. The permutation moves to what is indexed by
// position: the rows of the Kh image (the S update's B operand, one row per position), exp(Gamma_C)
// and the state's load and store. The same holds for D^T's columns (tokens) read as the A operand
// of Kh^T D and Aqk D: logical token 8c + q + 4i is token 8c + 2q + i (tau), carried by the Kh and
// Aqk images' columns.
//
// Image (floats from the block start; every matrix 128-byte rows with the 128B swizzle, 16-byte
// chunk x of row r at chunk x ^ (r % 8), 1024-byte atoms of 8 rows):
//   WQ   [4 channel groups of 32][32 rows][32]: rows 0-15 W's tokens, rows 16-31 Qt's
//                                                  B of [X^T | Y^T] = S^T [W^T | Qt^T] (N = 32
//                                                  rows: one m64n32 product where two m64n16 were,
//                                                  half the wgmma instructions of the step)
//   Kh   [64 rows][32]: row r's chunks 0-3 hold position r's 16 logical tokens, chunks 4-7
//        position r + 64's                         B of S^T += D^T Kh (N = positions, K = tokens)
//   Aqk  [16 tokens r][32]: chunks 0-3 hold the 16 logical tokens s, 0 where s > r
//                                                  B of O^T += D^T Aqk^T
//   ec   [128] exp(Gamma_C) by position
//   U^T  [2 V halves][64 values][16 tokens]        read by threads (D^T = U^T - X^T)
// The first kSharedFloats are every CTA's; U^T's half is the CTA's own.
#pragma once

#include <cstdint>

#include "kda/engines/cuda/kda_cuda_launch.h"

namespace groupattn::kda_cuda::wgmma_image {

inline constexpr int kWQ = 0, kKh = 4096, kAqk = 6144, kEc = 6656, kU = 6784;
inline constexpr int kSharedFloats = kU;  // W .. ec
inline constexpr int kUHalfFloats = 64 * 16;
inline constexpr int kBlockFloats = kU + 2 * kUHalfFloats;  // 8832 (35328 bytes)
static_assert(kBlockFloats == kWgmmaImageFloats, "the workspace layout reserves this block size");
static_assert(kSharedFloats % 4 == 0 && kUHalfFloats % 4 == 0, "bulk copies of whole 16-byte pieces");

// Swizzled offset of (row, float column col < 32) in 128-byte rows.
__host__ __device__ constexpr int swz(int row, int col) {
  return row * 32 + ((((col >> 2) ^ row) & 7) << 2) + (col & 3);
}

// Position of channel d (sigma^-1): channel 8c + x sits at 8c + 2x (x < 4) or 8c + 2(x - 4) + 1.
__host__ __device__ constexpr int pos_of_channel(int d) {
  const int x = d & 7;
  return (d & ~7) + (x < 4 ? 2 * x : 2 * x - 7);
}
// Channel at position j (sigma): position 8c + 2q + i holds channel 8c + q + 4i.
__host__ __device__ constexpr int channel_at(int j) { return (j & ~7) + ((j & 7) >> 1) + 4 * (j & 1); }
// Logical k column of token r (tau^-1): token 8c + y is logical 8c + y / 2 + 4 (y % 2) -- the same
// map as sigma (an accumulator column read as an A column), applied to D^T's token columns.
__host__ __device__ constexpr int logical_of_token(int r) { return channel_at(r); }

static_assert(channel_at(pos_of_channel(13)) == 13 && channel_at(pos_of_channel(4)) == 4, "sigma inverts");

// Where the prep (kda_chunk_prep.cuh, BlockDst<.., true> in kda_chunked.cu) writes: row r = token.
// W and Qt: 4 consecutive channels d .. d + 3 (d % 4 == 0) are contiguous (one 16-byte chunk).
__host__ __device__ constexpr int w_at(int r, int d) { return kWQ + (d >> 5) * 1024 + swz(r, d & 31); }
__host__ __device__ constexpr int qt_at(int r, int d) { return w_at(r + 16, d); }
__device__ __forceinline__ void put_kh(float* blk, int r, int d, float x) {
  const int j = pos_of_channel(d);
  blk[kKh + swz(j & 63, 16 * (j >> 6) + logical_of_token(r))] = x;
}
__device__ __forceinline__ void put_aqk(float* blk, int r, int s, float x) {
  blk[kAqk + swz(r, logical_of_token(s))] = s <= r ? x : 0.f;
}
__device__ __forceinline__ void put_ec(float* blk, int d, float x) { blk[kEc + pos_of_channel(d)] = x; }
__device__ __forceinline__ void put_u(float* blk, int r, int e, float x) {
  blk[kU + (e >> 6) * kUHalfFloats + (e & 63) * 16 + r] = x;
}

}  // namespace groupattn::kda_cuda::wgmma_image
