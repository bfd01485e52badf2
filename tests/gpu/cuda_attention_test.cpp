// GPU tier for the cuda attention engine: every case against the fp64 reference (TESTING.md pass
// rules), plus bitwise checks (native GQA vs K/V copied up, determinism) and declines.
#include <gtest/gtest.h>

#include <limits>

#if GROUPATTN_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/host_params.h"
#include "attention/engines/cuda/launch.h"
#include "gpu/cuda_attention_harness.h"

namespace groupattn::test {
namespace {

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// The head ratios of TESTING.md: Hq/Hkv != Hkv, MQA, a non-power-of-two group.
const std::vector<std::pair<int64_t, int64_t>> kHeadRatios = {{8, 4},  {8, 2}, {64, 8},
                                                              {32, 2}, {8, 1}, {12, 4}};

// Whether the pinned engine serves case c on this device: "cuda-decode" declines D 256 on an A100
// and D 128/256 on sm86/89, whose CTAs get too little shared memory for the decode kernel. An sm90
// device fits every decode head dim, so a decline there fails the test instead of skipping.
bool engine_serves(const Case& c, const char* engine) {
  auto p = make_problem(c);
  RunOptions o;
  o.engine = engine;
  const char* name = nullptr;
  const Status s = attention_engine_for(p->device_params(), o, &name);
  EXPECT_TRUE(s.ok() || !have_sm90_device()) << describe(c) << ": " << s.to_string();
  return s.ok();
}

TEST_F(CudaAttention, HeadRatiosPrefillCausal) {
  for (auto [hq, hkv] : kHeadRatios) {
    Case c;
    c.hq = hq, c.hkv = hkv, c.d = 64;
    c.q_lens = {70, 70};
    c.k_lens = {70, 70};
    c.causal = true;
    check_case(c);
  }
}

TEST_F(CudaAttention, HeadRatiosDecodePagedSplit) {
  for (auto [hq, hkv] : kHeadRatios) {
    Case c;
    c.hq = hq, c.hkv = hkv, c.d = 128;
    c.q_lens = {3, 3};
    c.k_lens = {300, 41};
    c.kv = KvKind::kPaged;
    c.causal = true;
    c.num_splits = 3;
    check_case(c);
  }
}

TEST_F(CudaAttention, HeadDimsAndDtypes) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {32, 64, 128, 256}) {
      Case c;
      c.dtype = dt, c.d = d, c.hq = 6, c.hkv = 2;
      c.q_lens = {65};
      c.k_lens = {129};  // Sq < Sk, causal
      c.causal = true;
      check_case(c);
      c.q_lens = {130};
      c.k_lens = {63};  // Sq > Sk: the first rows see no key
      check_case(c);
      c.causal = false;
      check_case(c);
    }
  }
}

// Key tiles are 128 keys at D 64 and 64 otherwise (launch.h, tile_keys); query tiles 64 or 128
// packed rows (8/2: 4 rows per token).
TEST_F(CudaAttention, LengthsAroundTiles) {
  for (int64_t d : {64, 128, 256}) {
    for (int n : {1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257}) {
      Case c;
      c.dtype = DType::kF16;
      c.hq = 8, c.hkv = 2, c.d = d;
      c.q_lens = {n};
      c.k_lens = {n};
      c.causal = n % 2 == 1;
      c.seed = static_cast<uint64_t>(d * 1000 + n);
      check_case(c);
    }
  }
}

// 128-row tiles (4 warps x two m16 tiles; launch.h's tile_rows picks them when a sequence has
// >= 128 packed rows and D <= 128): lengths around the tile and its 32-row warp slices, a warp whose
// second m-tile is past the end, packed rows not a multiple of 16, split-KV partials, varlen with
// short sequences inside a 128-row tile (inactive warps), paged K/V.
TEST_F(CudaAttention, LengthsAround128RowTiles) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {32, 64, 128}) {
      for (int n : {128, 129, 150, 257}) {
        Case c;
        c.dtype = dt, c.d = d, c.hq = 2, c.hkv = 2;  // MHA: packed rows == tokens
        c.q_lens = {n};
        c.k_lens = {n};
        c.causal = n % 2 == 1;
        c.seed = static_cast<uint64_t>(d * 1000 + n);
        check_case(c);
      }
    }
  }
  Case c;
  c.hq = 6, c.hkv = 2, c.d = 128;  // group 3: 43 tokens = 129 packed rows
  c.q_lens = {43};
  c.k_lens = {200};
  c.causal = true;
  check_case(c);
  c.hq = c.hkv = 4;
  c.q_lens = {130};
  c.k_lens = {2000};
  c.num_splits = 3;  // partials from 128-row tiles, then the combine
  check_case(c);
  c.num_splits = 0;
  c.causal = false;
  check_case(c);
  c.hq = 8, c.hkv = 2, c.d = 64;
  c.q_varlen = true;
  c.kv = KvKind::kVarlen;
  c.q_lens = {200, 5, 0, 130};
  c.k_lens = {250, 5, 3, 100};  // the last has Sq > Sk: its first rows see no key
  c.causal = true;
  check_case(c);
  c.q_varlen = false;
  c.q_lens = {70, 70};
  c.k_lens = {90, 300};
  c.kv = KvKind::kPaged;
  c.page_size = 16;
  check_case(c);
}

TEST_F(CudaAttention, VarlenWithEmptySequences) {
  for (bool causal : {false, true}) {
    Case c;
    c.hq = 12, c.hkv = 4, c.d = 64;
    c.q_lens = {5, 0, 77, 1, 64, 3};
    c.k_lens = {5, 3, 77, 0, 130, 2};  // sequence 3 has no keys; sequence 5 has Sq > Sk
    c.q_varlen = true;
    c.kv = KvKind::kVarlen;
    c.causal = causal;
    check_case(c);
  }
}

TEST_F(CudaAttention, WindowSoftcapScale) {
  Case c;
  c.hq = 8, c.hkv = 2, c.d = 128;
  c.q_lens = {150};
  c.k_lens = {150};
  // The last pair: windows near INT64_MAX (the fuzzer's find in the reference) mean unbounded.
  const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
  for (auto [wl, wr] : std::vector<std::pair<int64_t, int64_t>>{{32, 0}, {16, 8}, {-1, 5}, {70, -1}, {huge, huge}}) {
    c.window_left = wl, c.window_right = wr;
    check_case(c);
  }
  c.window_left = c.window_right = -1;
  c.causal = true;
  c.softcap = 5.f;
  c.scale = 0.3f;
  check_case(c);
}

// 32/8 (group 4) x new tokens 1..4 (4..16 packed rows) run the decode kernel at D 128 (launch.h,
// use_decode_kernel: at most 16 rows), 5 and 16 tokens (20, 64 rows) the tile kernel.
TEST_F(CudaAttention, DecodePagedPageSizesSplits) {
  for (int page : {1, 16, 64}) {
    for (int splits : {1, 3, 0}) {
      for (int sq : {1, 2, 4, 5, 16}) {
        Case c;
        c.hq = 32, c.hkv = 8, c.d = 128;
        c.q_lens = {sq, sq, sq};
        c.k_lens = {1000, 17, 300};
        c.kv = KvKind::kPaged;
        c.page_size = page;
        c.causal = true;
        c.num_splits = splits;
        c.seed = static_cast<uint64_t>(page * 10 + splits);
        check_case(c);
      }
    }
  }
}

// Multi-token decode (2..4 new tokens, D 64/128/256): up to 16 packed rows (token x query head of
// one KV group) run the decode kernel, more the tile kernel (launch.h, use_decode_kernel); both
// sides of the cut here (8/4 x 2: 4 rows ... 32/1 x 4: 128 rows). Causal among the new tokens;
// group 3 (12/4) splits a token's heads between MMA row groups, a 1-key cache leaves all but the
// last token without a visible key.
TEST_F(CudaAttention, MultiTokenDecodeHeadRatiosAndDims) {
  std::vector<std::pair<int64_t, int64_t>> ratios = kHeadRatios;
  ratios.push_back({32, 1});
  for (int64_t d : {64, 128, 256}) {
    for (auto [hq, hkv] : ratios) {
      for (int sq : {2, 3, 4}) {
        for (int splits : {1, 3}) {
          Case c;
          c.dtype = d == 128 ? DType::kF16 : DType::kBF16;
          c.hq = hq, c.hkv = hkv, c.d = d;
          c.q_lens = {sq, sq, sq};
          c.k_lens = {700, 33, 1};
          c.kv = KvKind::kPaged;
          c.page_size = sq == 3 ? 1 : 16;
          c.causal = true;
          c.num_splits = splits;
          c.seed = static_cast<uint64_t>(d * 100 + hq * 10 + sq + splits);
          check_case(c);
        }
      }
    }
  }
}

// Multi-token decode at lengths around the decode kernel's 16-key sub-tile, 64-key block and ring
// (and shorter than the new tokens: the first rows see no key), batched K/V with seqlens_k,
// splits 1 / 3 / auto; page size 64 for the last.
TEST_F(CudaAttention, MultiTokenDecodeLengthsAroundSubTilesAndRing) {
  const std::vector<int> lens = {0, 1, 3, 15, 16, 17, 63, 64, 65, 127, 129, 191, 192, 193, 255, 257, 319, 321, 1025};
  for (int64_t d : {64, 128, 256}) {
    for (int sq : {2, 4}) {
      for (int splits : {1, 3, 0}) {
        Case c;
        c.hq = 8, c.hkv = 2, c.d = d;
        c.q_lens = std::vector<int>(lens.size(), sq);
        c.k_lens = lens;
        c.causal = true;
        c.num_splits = splits;
        c.seed = static_cast<uint64_t>(d + sq * 7 + splits);
        check_case(c);
      }
    }
    Case c;
    c.hq = 64, c.hkv = 8, c.d = d;
    c.q_lens = {4, 4, 4, 4};
    c.k_lens = {63, 65, 193, 1025};
    c.kv = KvKind::kPaged;
    c.page_size = 64;
    c.causal = true;
    c.num_splits = 0;
    check_case(c);
  }
}

// Multi-token decode with windows (starting inside sub-tiles and moving with the token), softcap,
// scale, non-causal; varlen Q with 0..4 tokens per sequence; varlen and strided K/V.
TEST_F(CudaAttention, MultiTokenDecodeWindowSoftcapVarlenStrided) {
  for (int page : {1, 64}) {
    Case c;
    c.hq = 12, c.hkv = 4, c.d = 128;
    c.q_lens = {4, 4};
    c.k_lens = {1000, 90};
    c.kv = KvKind::kPaged;
    c.page_size = page;
    c.causal = true;
    c.window_left = 203;
    c.softcap = 5.f;
    c.scale = 0.3f;
    c.num_splits = 3;
    check_case(c);
    c.causal = false;
    c.window_left = 40;
    c.window_right = 2;  // the last tokens' windows reach past the cache end
    c.softcap = 0.f;
    c.num_splits = 0;
    check_case(c);
  }
  Case v;
  v.hq = 16, v.hkv = 2, v.d = 64;
  v.q_varlen = true;
  v.q_lens = {4, 0, 3, 1, 4};
  v.k_lens = {300, 50, 0, 129, 2};  // the last: 4 tokens on 2 keys, its first 2 rows see none
  v.kv = KvKind::kPaged;
  v.causal = true;
  v.num_splits = 3;
  check_case(v);
  v.kv = KvKind::kVarlen;
  v.num_splits = 0;
  check_case(v);
  v.num_splits = 1;
  check_case(v);
  Case st;
  st.hq = 8, st.hkv = 2, st.d = 256;
  st.strided = true;
  st.q_lens = {3, 3};
  st.k_lens = {400, 77};
  st.causal = true;
  st.num_splits = 3;
  check_case(st);
  st.kv = KvKind::kPaged;
  check_case(st);
}

// 8/1 x 2 tokens (16 rows: decode kernel) and x 4 (32 rows: tile kernel).
TEST_F(CudaAttention, DecodeLongAutoSplitAllDims) {
  for (int64_t d : {64, 128, 256}) {
    for (int sq : {2, 4}) {
      Case c;
      c.hq = 8, c.hkv = 1, c.d = d;
      c.q_lens = {sq};
      c.k_lens = {3001};
      c.causal = true;
      c.num_splits = 0;  // automatic: one tile row per KV head leaves the machine idle -> splits
      check_case(c);
      c.kv = KvKind::kPaged;
      c.page_size = 16;
      check_case(c);
    }
  }
}

// Above 16 splits the combine runs one CTA per row (combine_wide_kernel): forced counts on both
// sides of the cut and up to the cap, through the decode kernel (1 token, group 8) and the tile
// kernel (4 tokens: 32 rows), with sequences far shorter than the split count (empty splits).
TEST_F(CudaAttention, WideCombineManySplits) {
  for (int64_t d : {64, 128, 256}) {
    for (int splits : {16, 17, 40, 128}) {
      for (int sq : {1, 4}) {
        Case c;
        c.hq = 8, c.hkv = 1, c.d = d;
        c.q_lens = {sq, sq, sq};
        c.k_lens = {9000, 60, 2500};
        c.causal = true;
        c.num_splits = splits;
        check_case(c);
      }
    }
  }
}

// One-token decode (every sequence has one query token, D 64/128/256) runs the decode kernel
// (decode_kernel.cuh) up to group 16 (48/3 fills its 16 rows exactly): 16-key sub-tiles split
// between 4 warps, splits in 64-key blocks. Groups above 16 (32/1, 34/2) run the tile kernel
// (launch.h, use_decode_kernel), the decode kernel at those groups is checked through "cuda-decode".
TEST_F(CudaAttention, OneTokenDecodeHeadRatiosAndDims) {
  std::vector<std::pair<int64_t, int64_t>> ratios = kHeadRatios;
  ratios.insert(ratios.end(), {{32, 1}, {48, 3}, {34, 2}});
  for (int64_t d : {64, 128, 256}) {
    for (auto [hq, hkv] : ratios) {
      for (int splits : {1, 3}) {
        Case c;
        c.dtype = d == 128 ? DType::kF16 : DType::kBF16;
        c.hq = hq, c.hkv = hkv, c.d = d;
        c.q_lens = {1, 1, 1};
        c.k_lens = {700, 33, 1};
        c.kv = KvKind::kPaged;
        c.causal = true;
        c.num_splits = splits;
        check_case(c);
        if (hq / hkv > 16 && engine_serves(c, "cuda-decode")) check_case(c, "cuda-decode");
      }
    }
  }
}

// Lengths around the decode kernel's boundaries: a 16-key sub-tile, a 64-key block (one step of
// the 4 warps), the ring (5 stages at D 64, 3 at D 128/256: 320 and 192 keys before a warp's ring
// wraps), an empty cache; batched K/V with seqlens_k, every split count.
TEST_F(CudaAttention, OneTokenDecodeLengthsAroundSubTilesAndRing) {
  const std::vector<int> lens = {0, 1, 15, 16, 17, 63, 64, 65, 127, 129, 191, 192, 193, 255, 257, 319, 321, 1025};
  for (int64_t d : {64, 128, 256}) {
    for (int splits : {1, 3, 0}) {
      Case c;
      c.hq = 8, c.hkv = 2, c.d = d;
      c.q_lens = std::vector<int>(lens.size(), 1);
      c.k_lens = lens;
      c.causal = splits != 3;  // one token: causal changes nothing but the code path
      c.num_splits = splits;
      c.seed = static_cast<uint64_t>(d + splits);
      check_case(c);
    }
  }
}

// Windows start and end inside sub-tiles (a warp's first sub-tile is not warp 0's), softcap,
// scale; varlen Q with zero-length queries; varlen K/V; strided views.
TEST_F(CudaAttention, OneTokenDecodeWindowSoftcapVarlenStrided) {
  for (int page : {1, 64}) {
    Case c;
    c.hq = 12, c.hkv = 4, c.d = 128;
    c.q_lens = {1, 1};
    c.k_lens = {1000, 90};
    c.kv = KvKind::kPaged;
    c.page_size = page;
    c.window_left = 203;
    c.softcap = 5.f;
    c.scale = 0.3f;
    c.num_splits = 3;
    check_case(c);
    c.window_left = -1;
    c.window_right = 0;
    c.softcap = 0.f;
    c.num_splits = 0;
    check_case(c);
  }
  Case v;
  v.hq = 16, v.hkv = 1, v.d = 64;
  v.q_varlen = true;
  v.q_lens = {1, 0, 1, 1};
  v.k_lens = {300, 50, 0, 129};
  v.kv = KvKind::kPaged;
  v.num_splits = 3;
  check_case(v);
  v.kv = KvKind::kVarlen;
  v.num_splits = 0;
  check_case(v);
  Case st;
  st.hq = 8, st.hkv = 2, st.d = 256;
  st.strided = true;
  st.q_lens = {1, 1};
  st.k_lens = {400, 77};
  st.num_splits = 3;
  check_case(st);
  st.kv = KvKind::kPaged;
  check_case(st);
}

// The decode kernel launched directly (as the engine's run() would, with an explicit split count),
// for token counts the engine sends to the tile kernel today (kDecodeMaxTokens): the kernel takes
// any count, and these tests keep it so for when the choice changes.
template <class T>
Status launch_decode_for(int64_t d, const cuda_engine::KernelParams& kp) {
  switch (d) {
    case 64:
      return cuda_engine::launch_decode<T, 64>(kp, nullptr, false);
    case 128:
      return cuda_engine::launch_decode<T, 128>(kp, nullptr, false);
    case 256:
      return cuda_engine::launch_decode<T, 256>(kp, nullptr, false);
    default:
      return Status(StatusCode::kInvalidArgument, "no decode kernel for head dim " + std::to_string(d));
  }
}

Status run_decode_kernel(Problem& p, HostTensor* got_out, HostTensor* got_lse) {
  const Case& c = p.c;
  if (c.num_splits < 1) return Status(StatusCode::kInvalidArgument, "run_decode_kernel takes an explicit split count");
  p.dout->poison();
  p.dlse->poison();
  cuda_engine::KernelParams kp = cuda_engine::kernel_params_from(p.device_params());
  const int64_t max_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
  const int64_t total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), int64_t{0});
  kp.m_blocks = static_cast<int>((max_q * (c.hq / c.hkv) + cuda_engine::kDecodeRows - 1) / cuda_engine::kDecodeRows);
  kp.num_splits = c.num_splits;
  void* ws = nullptr;
  if (kp.num_splits > 1) {
    if (cudaMalloc(&ws, cuda_engine::split_workspace_bytes(kp.num_splits, total_q, c.hq, c.d)) != cudaSuccess)
      return Status(StatusCode::kInternal, "cudaMalloc of the split workspace failed");
    cuda_engine::set_split_workspace(&kp, ws, total_q, c.d);
  }
  Status s = c.dtype == DType::kBF16 ? launch_decode_for<__nv_bfloat16>(c.d, kp) : launch_decode_for<__half>(c.d, kp);
  if (cudaDeviceSynchronize() != cudaSuccess && s.ok()) s = Status(StatusCode::kInternal, "decode kernel failed");
  if (ws != nullptr) cudaFree(ws);
  GA_RETURN_IF_ERROR(s);
  p.dout->download(got_out);
  p.dlse->download(got_lse);
  return Status::Ok();
}

void check_decode_kernel(const Case& c) {
  const std::string label = describe(c) + " (decode kernel, direct)";
  auto p = make_problem(c);
  ASSERT_TRUE(run_case_reference(*p).ok()) << label;
  HostTensor out = like(p->out), lse = like(p->lse);
  const Status s = run_decode_kernel(*p, &out, &lse);
  ASSERT_TRUE(s.ok()) << label << ": " << s.to_string();
  expect_matches_reference(*p, out, lse, label);
  EXPECT_TRUE(p->dout->guards_intact()) << label << ": write outside out";
  EXPECT_TRUE(p->dlse->guards_intact()) << label << ": write outside lse";
}

TEST_F(CudaAttention, DecodeKernelDirectUpTo16Tokens) {
  // Head ratios x head dims x 5 / 8 / 16 tokens (64/8 x 16: 8 CTAs per KV head; 12/4: a token's
  // heads straddle two CTAs), paged page sizes 1 / 16 / 64, splits 1 / 3 over the same inputs (one
  // draw and one reference; session 11: the seed had the split count in it before).
  std::vector<std::pair<int64_t, int64_t>> ratios = kHeadRatios;
  ratios.push_back({32, 1});
  for (int64_t d : {64, 128, 256}) {
    for (auto [hq, hkv] : ratios) {
      for (int sq : {5, 8, 16}) {
        for (int splits : {1, 3}) {
          Case c;
          c.dtype = d == 128 ? DType::kF16 : DType::kBF16;
          c.hq = hq, c.hkv = hkv, c.d = d;
          c.q_lens = {sq, sq, sq};
          c.k_lens = {700, 33, 9};  // 9 keys: the first rows of 16 tokens see none
          c.kv = KvKind::kPaged;
          c.page_size = sq == 5 ? 1 : sq == 8 ? 16 : 64;
          c.causal = true;
          c.num_splits = splits;
          c.seed = static_cast<uint64_t>(d * 100 + hq * 10 + sq);
          check_decode_kernel(c);
        }
      }
    }
  }
  // Lengths around the sub-tile, block and ring; batched K/V with seqlens_k; windows, softcap.
  // Split counts innermost (one reference per mask).
  const std::vector<int> lens = {0, 1, 15, 16, 17, 63, 64, 65, 127, 129, 191, 192, 193, 255, 257, 319, 321, 1025};
  for (int64_t d : {64, 128, 256}) {
    Case c;
    c.hq = 8, c.hkv = 2, c.d = d;
    c.q_lens = std::vector<int>(lens.size(), 16);
    c.k_lens = lens;
    c.causal = true;
    for (bool masked : {false, true}) {
      if (masked) {
        c.window_left = 100;
        c.softcap = 5.f;
        c.scale = 0.3f;
      }
      for (int splits : {1, 3}) {
        c.num_splits = splits;
        check_decode_kernel(c);
      }
    }
  }
}

// Native GQA == K/V copied up, bitwise, through the decode kernel launched directly at 8 and 16
// tokens (the engine sends the native side of these to the tile kernel, the copied-up side of 8 and
// 16 tokens to the decode kernel).
TEST_F(CudaAttention, DecodeKernelDirectGqaEqualsCopiedUpBitwise) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{64, 8}, {12, 4}}) {
      for (int sq : {8, 16}) {
        for (int splits : {1, 3}) {
          for (int64_t d : {64, 128, 256}) {
            Case c;
            c.dtype = dt, c.hq = hq, c.hkv = hkv, c.d = d;
            c.q_lens = {sq, sq};
            c.k_lens = {700, 9};
            c.kv = KvKind::kPaged;
            c.causal = true;
            c.num_splits = splits;
            auto gqa = make_problem(c);
            auto mha = make_copied_up(*gqa);
            HostTensor o1 = like(gqa->out), l1 = like(gqa->lse), o2 = like(mha->out), l2 = like(mha->lse);
            ASSERT_TRUE(run_decode_kernel(*gqa, &o1, &l1).ok()) << describe(c);
            ASSERT_TRUE(run_decode_kernel(*mha, &o2, &l2).ok()) << describe(c);
            EXPECT_TRUE(bitwise_equal(o1, o2)) << describe(c) << ": O differs";
            EXPECT_TRUE(bitwise_equal(l1, l2)) << describe(c) << ": LSE differs";
          }
        }
      }
    }
  }
}

// The decode kernel's row cut (launch.h, use_decode_kernel: at most kDecodeMaxPackedRows = 16
// packed rows of the longest sequence) from both sides, each head dim, against the reference:
// 15 / 16 rows (decode kernel) and 17 / 18 / 20 / 32 rows (tile kernel), reached through the
// group (15/1, 16/1, 17/1 x 1 token), the tokens (4/4 x 16, 17; 4/1 x 4, 5) and both (5/1 x 3,
// 8/1 x 2, group 3 x 5, 6; 32/2 x 2); a cache shorter than the tokens (first rows see no key);
// splits 1 / 3 / auto; paged and batched K/V. Then varlen Q, where the longest sequence decides
// (8/1 x {2, 1}: 16 rows; x {2, 3}: 24). Each side is also run on the other kernel through the
// pinned engines.
TEST_F(CudaAttention, DecodeKernelRowCutBothSides) {
  struct Shape {
    int64_t hq, hkv;
    int tokens;
  };
  const std::vector<Shape> shapes = {{15, 1, 1}, {16, 1, 1}, {17, 1, 1}, {4, 4, 16}, {4, 4, 17}, {4, 1, 4},
                                     {4, 1, 5},  {5, 1, 3},  {8, 1, 2},  {6, 2, 5},  {6, 2, 6},  {32, 2, 2}};
  for (int64_t d : {64, 128, 256}) {
    for (const Shape& sh : shapes) {
      const int64_t rows = sh.tokens * (sh.hq / sh.hkv);
      ASSERT_EQ(cuda_engine::use_decode_kernel(static_cast<int>(d), rows), rows <= 16)
          << "the cut moved: update this test's shapes to straddle it again";
      for (int splits : {1, 3, 0}) {
        Case c;
        c.dtype = splits == 3 ? DType::kF16 : DType::kBF16;
        c.hq = sh.hq, c.hkv = sh.hkv, c.d = d;
        c.q_lens = {sh.tokens, sh.tokens};
        c.k_lens = {900, 7};  // 7 keys: the first rows of 8+ tokens see none
        c.kv = splits == 0 ? KvKind::kBatched : KvKind::kPaged;
        c.page_size = 16;
        c.causal = true;
        c.num_splits = splits;
        c.seed = static_cast<uint64_t>(d * 1000 + rows * 10 + splits);
        check_case(c);
        if (splits == 3) {
          check_case(c, "cuda-tile");
          if (sh.tokens <= cuda_engine::kDecodePinnedMaxTokens && engine_serves(c, "cuda-decode"))
            check_case(c, "cuda-decode");
        }
      }
    }
  }
  for (auto q_lens : {std::vector<int>{2, 1}, std::vector<int>{2, 3}}) {
    Case v;
    v.hq = 8, v.hkv = 1, v.d = 128;
    v.q_varlen = true;
    v.q_lens = q_lens;
    v.k_lens = {500, 2};
    v.kv = KvKind::kPaged;
    v.causal = true;
    v.num_splits = 3;
    check_case(v);
    check_case(v, "cuda-tile");
    if (engine_serves(v, "cuda-decode")) check_case(v, "cuda-decode");
  }
}

// The pinned engines decline what their kernel cannot serve, with the reason.
TEST_F(CudaAttention, PinnedDecodeEngineDeclines) {
  Case c;
  c.hq = 8, c.hkv = 2, c.d = 32;  // the tile kernel only
  c.q_lens = {1};
  c.k_lens = {100};
  expect_declines(c, "cuda-decode", "head dim");
  c.d = 128;
  c.q_lens = {17};  // past the direct-launch tests' range
  c.k_lens = {100};
  expect_declines(c, "cuda-decode", "new tokens");
  check_case(c, "cuda-tile");
}

TEST_F(CudaAttention, DecodeBatchedCacheWithSeqlensAndVarlenQ) {
  Case c;
  c.hq = 16, c.hkv = 4, c.d = 128;
  c.q_lens = {2, 2, 2};
  c.k_lens = {500, 0, 77};
  c.causal = true;
  c.num_splits = 3;
  check_case(c);
  c.q_lens = {1, 16, 4};
  c.q_varlen = true;
  c.kv = KvKind::kPaged;
  c.k_lens = {500, 16, 77};
  check_case(c);
}

// The D 256 decode kernel's split-V form (decode_kernel.cuh DecodeTraits::kSplitV: 8 warps, a pair
// per 16-key sub-tile, P V split by head-dim half; GROUPATTN_CUDA_DECODE_D256_SPLIT_V, off by
// default) against the fp64 reference, and bitwise equal to the 4-warp form (every O column goes
// through the same operations in the same order): contiguous with seqlens_k, paged 16 and 1;
// splits 1, 3 and automatic; one new token (16 rows at 32/2, 4 at 8/2) through the engine, 16 new
// tokens (64 rows, 4 m-blocks) through the kernel launched directly; lengths around the sub-tile,
// the 64-key block and a pair's 3-stage ring (192 keys), an empty cache, and a long one.
TEST_F(CudaAttention, DecodeD256SplitVMatchesReferenceAndFourWarpForm) {
  const std::vector<int> lens = {4099, 0, 1, 15, 17, 64, 191, 193, 257, 1025};
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{32, 2}, {8, 2}}) {
    for (KvKind kv : {KvKind::kBatched, KvKind::kPaged}) {
      for (int page : kv == KvKind::kPaged ? std::vector<int>{16, 1} : std::vector<int>{16}) {
        for (int splits : {1, 3, 0}) {
          Case c;
          c.hq = hq, c.hkv = hkv, c.d = 256;
          c.q_lens = std::vector<int>(lens.size(), 1);
          c.k_lens = lens;
          c.kv = kv;
          c.page_size = page;
          c.causal = true;
          c.num_splits = splits;
          c.seed = static_cast<uint64_t>(hq + page);
          {
            ForcedSwitch on(cuda_engine::set_cuda_decode_split_v_mode, 1);
            check_case(c);
          }
          auto p = make_problem(c);
          HostTensor o1 = like(p->out), l1 = like(p->lse), o0 = like(p->out), l0 = like(p->lse);
          {
            ForcedSwitch on(cuda_engine::set_cuda_decode_split_v_mode, 1);
            ASSERT_TRUE(run_cuda(*p, &o1, &l1).ok()) << describe(c);
            HostTensor o = like(p->out), l = like(p->lse);
            ASSERT_TRUE(run_cuda(*p, &o, &l).ok()) << describe(c);
            EXPECT_TRUE(bitwise_equal(o, o1) && bitwise_equal(l, l1))
                << describe(c) << ": split-V not repeatable";
          }
          {
            ForcedSwitch off(cuda_engine::set_cuda_decode_split_v_mode, 0);
            ASSERT_TRUE(run_cuda(*p, &o0, &l0).ok()) << describe(c);
          }
          EXPECT_TRUE(bitwise_equal(o1, o0)) << describe(c) << ": O differs from the 4-warp form";
          EXPECT_TRUE(bitwise_equal(l1, l0)) << describe(c) << ": LSE differs from the 4-warp form";
        }
      }
    }
  }
  // 16 new tokens, windows and softcap (masked sub-tiles inside the ring), paged 1 and 16.
  ForcedSwitch on(cuda_engine::set_cuda_decode_split_v_mode, 1);
  for (int page : {1, 16}) {
    for (int splits : {1, 3}) {
      Case c;
      c.hq = 8, c.hkv = 2, c.d = 256;
      c.q_lens = {16, 16, 16};
      c.k_lens = {700, 33, 9};
      c.kv = KvKind::kPaged;
      c.page_size = page;
      c.causal = true;
      c.window_left = page == 1 ? 100 : -1;
      c.softcap = page == 1 ? 5.f : 0.f;
      c.num_splits = splits;
      c.seed = static_cast<uint64_t>(700 + page);
      check_decode_kernel(c);
    }
  }
}

// The decode work list for batches of mixed lengths (cuda/decode_work_list.h, shared with the sm90
// engine; docs/ENGINES.md "Mixed lengths: the work list"), forced on (GROUPATTN_CUDA_DECODE_WORK_LIST
// is off by default). Taken only above kListMinKvBytes of K/V (from the longest length), where the
// ordinary plan has at most kListMaxPlanSplits splits and the batch is one list_plane_wave_for
// serves: on 132 SMs 8/1 d128 B32 (ordinary 8 splits; one wave of P 264, the longest sequence cut
// at the cap of 16), 32/2 d64 B32 (4 splits; P 132), 32/2 d256 B22 (3 splits; one CTA an SM, P
// 66), 64/8 d128 B24 (4 splits; the several-wave plan of P 16, 121 empty slots a plane). Lengths
// end mid-tile, on a tile and on one key; empty sequences give O = 0, LSE = -inf. Shapes no larger
// than the K/V threshold needs (192-432 MiB bound, ~40K keys in all).
struct WorkListShape {
  int64_t hq, hkv, d;
  int batch, longest;
};
const std::vector<WorkListShape> kWorkListShapes = {
    {8, 1, 128, 32, 12288}, {32, 2, 64, 32, 12288}, {32, 2, 256, 22, 6144}, {64, 8, 128, 24, 4608}};

// The sm90 tests' lengths (sm90_decode_test.cpp work_list_lens), continued past 24 sequences with
// short ones and every 7th near the longest.
std::vector<int> work_list_lens(int batch, int longest) {
  const std::vector<int> base = {longest, 0, 1,   100, 4099, 0,  65,          700,  2048, 64, longest / 3 + 5,
                                 5,       3, 999, 0,   128,  63, longest - 1, 1500, 2,    0,  257,
                                 4096,    31};
  std::vector<int> lens;
  for (int i = 0; i < batch; ++i) {
    lens.push_back(i < static_cast<int>(base.size()) ? base[static_cast<size_t>(i)]
                   : i % 7 == 0                      ? longest - i
                                                     : (i * 37) % 900 + (i % 5 == 0 ? 0 : 1));
  }
  return lens;
}

Case work_list_case(const WorkListShape& sh, KvKind kv, int page) {
  Case c;
  c.hq = sh.hq, c.hkv = sh.hkv, c.d = sh.d;
  c.q_lens = std::vector<int>(static_cast<size_t>(sh.batch), 1);
  c.k_lens = work_list_lens(sh.batch, sh.longest);
  c.kv = kv;
  c.page_size = page;
  c.causal = true;
  c.num_splits = 0;  // automatic: a forced count never takes the list
  c.seed = static_cast<uint64_t>(sh.d + page + sh.batch);
  // Batched: only the rows the sequences' keys use are drawn, NaN past them (most of B x longest
  // rows; expect_ignores_stale_rows sets the same NaN).
  c.stale_rows_nan = kv == KvKind::kBatched;
  return c;
}

// The list's workspace for c (bf16, one new token), or 0 where this device's planner would not
// take it (list_plane_wave_for declines the batch).
size_t work_list_bytes(const Case& c) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  const int64_t batch = static_cast<int64_t>(c.k_lens.size());
  const int plane_wave =
      cuda_engine::list_plane_wave_for(sms, cuda_engine::decode_ctas_per_sm_for<__nv_bfloat16>(c.d), c.hkv, 1, batch);
  if (plane_wave <= 0) return 0;
  // (slots, max_q, heads_q, head_dim, batch): one new token a sequence.
  return cuda_engine::list_workspace_bytes(cuda_engine::list_slot_bound(plane_wave, batch), 1, c.hq, c.d,
                                           batch);
}

// Shapes [first, last) of kWorkListShapes, batched and paged 16 / 64 (two tests: each stays well
// inside gpu-check's 150 s per test; the host's random K/V of B x longest rows was most of it
// before Case::stale_rows_nan, session 11).
void expect_work_list_shapes_match_reference(size_t first, size_t last) {
  ForcedSwitch forced(cuda_engine::set_cuda_decode_work_list_mode, 1);
  for (size_t i = first; i < last; ++i) {
    for (KvKind kv : {KvKind::kBatched, KvKind::kPaged}) {
      for (int page : kv == KvKind::kPaged ? std::vector<int>{16, 64} : std::vector<int>{64}) {
        expect_ignores_stale_rows(work_list_case(kWorkListShapes[i], kv, page), "cuda");  // NaN in stale rows
      }
    }
  }
}

TEST_F(CudaAttention, WorkListMixedLengthsOneWave) { expect_work_list_shapes_match_reference(0, 2); }
TEST_F(CudaAttention, WorkListMixedLengthsD256AndSeveralWaves) {
  expect_work_list_shapes_match_reference(2, 4);
}

// The work list's D 256 shape (32/2 B22, paged 16) with the split-V form on (its list kernel,
// decode_split_v_list_kernel), against the reference with NaN in the stale rows.
TEST_F(CudaAttention, WorkListD256SplitV) {
  ForcedSwitch list(cuda_engine::set_cuda_decode_work_list_mode, 1);
  ForcedSwitch split_v(cuda_engine::set_cuda_decode_split_v_mode, 1);
  expect_ignores_stale_rows(work_list_case(kWorkListShapes[2], KvKind::kPaged, 16), "cuda");
}

// The list is what runs with the switch on (its workspace: partials of list_slot_bound slots of one
// token's rows, then the per-sequence {count, first slot}; no ordinary split count gives this
// size), and the ordinary plan with it off; both against the reference; the list bitwise the same
// over 3 runs (fixed chunk, slot order and combine order); paged 64 at every shape, batched at
// the first (the host's batched K/V is the slow part).
TEST_F(CudaAttention, WorkListIsTakenAndRepeatable) {
  for (const WorkListShape& sh : kWorkListShapes) {
    for (KvKind kv : {KvKind::kPaged, KvKind::kBatched}) {
      if (kv == KvKind::kBatched && &sh != &kWorkListShapes[0]) continue;
      const Case c = work_list_case(sh, kv, 64);
      auto p = make_problem(c);
      const size_t list_bytes = work_list_bytes(c);
      // The H200 takes the list at every shape above (the GPU tier's device); elsewhere the
      // planner may not, and only the results are checked.
      if (have_sm90_device()) {
        EXPECT_GT(list_bytes, 0u) << describe(c);
      }
      RunOptions opt;
      opt.engine = "cuda";
      for (int mode : {1, 0}) {
        ForcedSwitch forced(cuda_engine::set_cuda_decode_work_list_mode, mode);
        size_t bytes = 0;
        ASSERT_TRUE(attention_workspace_bytes(p->device_params(), opt, &bytes).ok());
        if (mode == 1 && list_bytes > 0) {
          EXPECT_EQ(bytes, list_bytes) << describe(c) << ": the work list is not taken";
        } else if (mode == 0 && list_bytes > 0) {
          EXPECT_NE(bytes, list_bytes) << describe(c) << ": the work list is taken with the switch off";
        }
        check_case(c);
        if (mode == 1) {
          HostTensor o0 = like(p->out), l0 = like(p->lse);
          ASSERT_TRUE(run_cuda(*p, &o0, &l0).ok());
          for (int run = 1; run < 3; ++run) {
            HostTensor o = like(p->out), l = like(p->lse);
            ASSERT_TRUE(run_cuda(*p, &o, &l).ok());
            ASSERT_TRUE(bitwise_equal(o, o0) && bitwise_equal(l, l0))
                << describe(c) << " run " << run << " differs";
          }
        }
      }
    }
  }
}

// Equal lengths through the list (seqlens_k all equal: the host cannot tell; the plan's uniform
// shortcut, the ordinary plan's 8 splits of 17 / 16 tiles), and every sequence empty but one.
TEST_F(CudaAttention, WorkListUniformAndNearlyEmpty) {
  ForcedSwitch forced(cuda_engine::set_cuda_decode_work_list_mode, 1);
  Case c;
  c.hq = 8, c.hkv = 1, c.d = 128;
  c.q_lens = std::vector<int>(32, 1);
  c.k_lens = std::vector<int>(32, 8193);
  c.kv = KvKind::kPaged;
  c.page_size = 64;
  c.causal = true;
  c.num_splits = 0;
  if (have_sm90_device()) {
    auto p = make_problem(c);
    RunOptions opt;
    opt.engine = "cuda";
    size_t bytes = 0;
    ASSERT_TRUE(attention_workspace_bytes(p->device_params(), opt, &bytes).ok());
    EXPECT_EQ(bytes, work_list_bytes(c)) << describe(c) << ": the work list is not taken";
  }
  expect_ignores_stale_rows(c, "cuda");
  std::vector<int> lens(32, 0);
  lens[9] = 32768;
  c.k_lens = lens;
  c.page_size = 16;
  expect_ignores_stale_rows(c, "cuda");
}

TEST_F(CudaAttention, StridedViews) {
  Case c;
  c.hq = 8, c.hkv = 2, c.d = 64;
  c.strided = true;
  c.q_lens = {40, 40};
  c.k_lens = {90, 90};
  c.causal = true;
  check_case(c);
  c.q_varlen = true;
  c.kv = KvKind::kVarlen;
  c.q_lens = {40, 7};
  c.k_lens = {90, 300};
  c.num_splits = 3;
  check_case(c);
  c.q_varlen = false;
  c.q_lens = {4, 4};
  c.kv = KvKind::kPaged;
  check_case(c);
}

// Whether the "cuda" engine runs case c and its copied-up twin (group 1: rows = tokens) on
// different kernels: launch.h's rule on packed rows puts e.g. 64/8 x 4 tokens (32 rows) on the tile
// kernel and its twin (4 rows) on the decode kernel. (A device whose shared memory is too small for
// the decode kernel sends both sides to the tile kernel: same dtype and head dim.)
bool straddles_decode_cut(const Case& c) {
  const int64_t max_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
  const int d = static_cast<int>(c.d);
  return cuda_engine::use_decode_kernel(d, max_q * (c.hq / c.hkv)) != cuda_engine::use_decode_kernel(d, max_q);
}

// Native GQA and the same engine on K/V copied up to Hq heads: bitwise equal O and LSE, compared on
// one kernel. Either kernel's rows do not depend on the rows packed next to them, so both forms
// agree bitwise on each kernel; the two kernels sum in different orders, so a case whose two forms
// straddle the decode kernel's row cut (straddles_decode_cut) is compared on each pinned kernel
// ("cuda-tile", "cuda-decode") instead of through the automatic choice.
// One dtype's cases of GqaEqualsCopiedUpBitwise; returns how many straddle the decode kernel's row
// cut. Split by dtype into two tests: together they took 141 s of ctest's 150 s limit on the H200
// (and timed out once, session 8 call 1, at integ9 a8f83ec under GPU_CHECK_JOBS=8).
int gqa_equals_copied_up_cases(DType dt) {
  int straddling = 0;
  {
    std::vector<Case> cases;
    Case prefill;
    prefill.dtype = dt, prefill.hq = 12, prefill.hkv = 4, prefill.d = 128;
    prefill.q_lens = {100};
    prefill.k_lens = {130};
    prefill.causal = true;
    cases.push_back(prefill);
    for (int64_t d : {64, 256}) {  // their own key tiles (128 and 64 keys); D 64 crosses tile heights
      Case other = prefill;
      other.d = d;
      other.k_lens = {260};
      cases.push_back(other);
    }
    Case decode = prefill;
    decode.hq = 8, decode.hkv = 2;
    decode.q_lens = {4, 4};
    decode.k_lens = {700, 33};
    decode.kv = KvKind::kPaged;
    decode.num_splits = 3;
    cases.push_back(decode);  // 16 rows natively, 4 copied up: the decode kernel on both sides
    // 1..4 tokens at groups 8, 32 and 3: natively 3..128 packed rows, copied up 1..4. 64/8 x 1, 2
    // and 12/4 stay on the decode kernel on both sides (12/4: a token's heads straddle the MMA row
    // groups); 64/8 x 4 and 32/1 straddle the cut.
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{64, 8}, {32, 1}, {12, 4}}) {
      for (int sq : {1, 2, 4}) {
        for (int splits : {1, 3}) {
          Case one = decode;
          one.hq = hq, one.hkv = hkv;
          one.q_lens = {sq, sq};
          one.k_lens = {700, sq == 4 ? 2 : 33};  // 2 keys: 4 tokens' first 2 rows see none
          one.num_splits = splits;
          for (int64_t d : {64, 128, 256}) {
            one.d = d;
            cases.push_back(one);
          }
        }
      }
    }
    Case tile = decode;  // 16 tokens: 64 rows natively (tile kernel), 16 copied up (decode kernel)
    tile.q_lens = {16, 16};
    cases.push_back(tile);
    Case both_tile = decode;  // 17 tokens: the tile kernel on both sides, 128-row tiles natively
    both_tile.hq = 64, both_tile.hkv = 8;
    both_tile.q_lens = {17, 17};
    cases.push_back(both_tile);
    for (const Case& c : cases) {
      if (straddles_decode_cut(c)) {
        ++straddling;
        expect_gqa_equals_copied_up(c, "cuda-tile");
        if (engine_serves(c, "cuda-decode")) expect_gqa_equals_copied_up(c, "cuda-decode");
      } else {
        expect_gqa_equals_copied_up(c);
      }
    }
  }
  return straddling;
}

TEST_F(CudaAttention, GqaEqualsCopiedUpBitwiseBf16) {
  EXPECT_GT(gqa_equals_copied_up_cases(DType::kBF16), 0)
      << "no case straddles the decode kernel's row cut: the pinned comparisons ran nowhere";
}

TEST_F(CudaAttention, GqaEqualsCopiedUpBitwiseF16) {
  EXPECT_GT(gqa_equals_copied_up_cases(DType::kF16), 0)
      << "no case straddles the decode kernel's row cut: the pinned comparisons ran nowhere";
}

TEST_F(CudaAttention, DeterministicOver20Runs) {
  for (int sq : {16, 4, 1}) {  // tile kernel, then the decode kernel (4 tokens, 1 token)
    Case c;
    c.hq = 8, c.hkv = 2, c.d = 128;
    c.q_lens = {sq};
    c.k_lens = {4000};
    c.kv = KvKind::kPaged;
    c.causal = true;
    c.num_splits = 0;
    auto p = make_problem(c);
    HostTensor o0 = like(p->out), l0 = like(p->lse);
    ASSERT_TRUE(run_cuda(*p, &o0, &l0).ok());
    for (int run = 1; run < 20; ++run) {
      HostTensor o = like(p->out), l = like(p->lse);
      ASSERT_TRUE(run_cuda(*p, &o, &l).ok());
      ASSERT_TRUE(bitwise_equal(o, o0) && bitwise_equal(l, l0)) << "sq " << sq << " run " << run << " differs";
    }
  }
}

// A prefix of the batch gives bitwise the same rows as the whole batch.
TEST_F(CudaAttention, BatchPrefixSameRows) {
  Case whole;
  whole.hq = 8, whole.hkv = 2, whole.d = 64;
  whole.q_lens = {3, 3, 3};
  whole.k_lens = {200, 90, 400};
  whole.kv = KvKind::kPaged;
  whole.num_splits = 3;
  auto p = make_problem(whole);
  HostTensor o = like(p->out), l = like(p->lse);
  ASSERT_TRUE(run_cuda(*p, &o, &l).ok());
  // The prefix: the same problem with B = 1 (its K/V pool and block table row 0 are the same).
  AttentionParams a = p->device_params();
  a.q.shape[0] = 1;
  a.out.shape[0] = 1;
  a.block_table.shape[0] = 1;
  a.seqlens_k.shape[0] = 1;
  const int64_t rows = 3;
  a.lse.shape[1] = rows;
  p->dout->poison();
  p->dlse->poison();
  RunOptions opt;
  opt.engine = "cuda";
  ASSERT_TRUE(attention(a, opt).ok());
  HostTensor o1 = like(p->out), l1 = like(p->lse);
  p->dout->download(&o1);
  p->dlse->download(&l1);
  for_each_index({1, 3, whole.hq, whole.d},
                 [&](const std::vector<int64_t>& i) { ASSERT_EQ(o.at(i), o1.at(i)); });
  for_each_index({whole.hq, rows}, [&](const std::vector<int64_t>& i) { ASSERT_EQ(l.at(i), l1.at(i)); });
}

// The D 256 prefill's paired P V (attention_tile_kernel.cuh PairPvTraits, the default since
// session 13; GROUPATTN_CUDA_PREFILL_D256_PAIR_PV) and the one-warp form it replaces, each forced:
// both against the fp64 reference, the pair form bitwise equal to the one-warp form (each O element
// and row sum goes through the same operations in the same order) and to itself on a second run.
// Group 4 (8/2, 32/8): 16 tokens fill a D 256 tile, and keys come 64 a tile; a varlen batch holds
// lengths around both (1, 15-17, 31-33, 63-65, 129: tile rows past a short sequence's end, inactive
// warps and pairs), causal and full, bf16 and f16; then Sq != Sk both ways, softcap, split-KV
// partials and paged K/V.
using SwitchHook = void (*)(int);

void expect_form_matches_reference_and_per_row_form(const Case& c, SwitchHook form) {
  // the form, then the form it replaces: each against the reference, whichever is the default
  for (int mode : {1, 0}) {
    ForcedSwitch forced(form, mode);
    check_case(c);
  }
  auto p = make_problem(c);
  HostTensor o1 = like(p->out), l1 = like(p->lse), o2 = like(p->out), l2 = like(p->lse);
  HostTensor o0 = like(p->out), l0 = like(p->lse);
  {
    ForcedSwitch on(form, 1);
    ASSERT_TRUE(run_cuda(*p, &o1, &l1).ok()) << describe(c);
    ASSERT_TRUE(run_cuda(*p, &o2, &l2).ok()) << describe(c);
  }
  {
    ForcedSwitch off(form, 0);
    ASSERT_TRUE(run_cuda(*p, &o0, &l0).ok()) << describe(c);
  }
  EXPECT_TRUE(bitwise_equal(o1, o2) && bitwise_equal(l1, l2)) << describe(c) << ": form not repeatable";
  EXPECT_TRUE(bitwise_equal(o1, o0)) << describe(c) << ": O differs from the per-row form";
  EXPECT_TRUE(bitwise_equal(l1, l0)) << describe(c) << ": LSE differs from the per-row form";
}

void check_prefill_form(SwitchHook form, const std::vector<int64_t>& head_dims) {
  const std::vector<int> lens = {129, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : head_dims) {
      // 32/8 in bf16 only: the fp64 reference of its batch is most of the test's time
      for (auto [hq, hkv] : dt == DType::kBF16 ? std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {32, 8}}
                                                : std::vector<std::pair<int64_t, int64_t>>{{8, 2}}) {
        for (bool causal : {false, true}) {
          Case c;
          c.dtype = dt, c.d = d, c.hq = hq, c.hkv = hkv;
          c.q_lens = lens;
          c.k_lens = lens;
          c.q_varlen = true;
          c.kv = KvKind::kVarlen;
          c.causal = causal;
          c.seed = static_cast<uint64_t>(d + hq);
          expect_form_matches_reference_and_per_row_form(c, form);
        }
      }
    }
  }
  for (int64_t d : head_dims) {
    Case c;
    c.d = d, c.hq = 8, c.hkv = 2;
    c.q_lens = {130};
    c.k_lens = {63};  // Sq > Sk, causal: the first rows see no key
    c.causal = true;
    c.seed = static_cast<uint64_t>(d + 1);
    std::vector<Case> cases = {c};
    c.q_lens = {65};
    c.k_lens = {200};  // Sq < Sk, softcap
    c.softcap = 7.f;
    cases.push_back(c);
    c.softcap = 0.f;
    c.q_lens = {70, 70};
    c.k_lens = {200, 90};
    c.kv = KvKind::kPaged;
    c.page_size = 16;
    c.num_splits = 3;  // partials of each split, then the combine
    cases.push_back(c);
    for (const Case& e : cases) expect_form_matches_reference_and_per_row_form(e, form);
  }
}

TEST_F(CudaAttention, PrefillD256PairPvMatchesReferenceAndOneWarpForm) {
  check_prefill_form(cuda_engine::set_cuda_prefill_d256_pair_pv_mode, {256});
}

TEST_F(CudaAttention, DeclinesWithReason) {
  Case c;
  c.hq = 4, c.hkv = 2, c.d = 96;  // no instantiation for 96
  auto p = make_problem(c);
  RunOptions opt;
  opt.engine = "cuda";
  const Status s = attention(p->device_params(), opt);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("head dim"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
