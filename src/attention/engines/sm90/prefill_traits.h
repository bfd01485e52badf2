// Shapes of the sm90 prefill kernel (issue 3), shared by the host and the device code. No CUDA
// types here. The second product is RS: P stays in registers as the A operand (wgmma m64nDk16,
// one instruction per 16 keys over all D), so no P buffer: the shared memory holds Q and the
// K/V stages. (The first cut sent P through shared memory with two stages: 182 TFLOP/s against
// 202 for this form on 64/8 B2 S8192 causal, docs/PREFILL_SM90.md.)
//
//   query tile  kBlockM rows of one query head (prefill_tile: 128, or 192 at D 64): 64 per
//               consumer warpgroup (wgmma M = 64), so 2 or 3 consumer warpgroups
//   KV tile     kBlockN keys x kHeadDim (S = Q K^T is m64nNk16, N = keys): prefill_tile()
//   stages      kStages K+V tiles in flight (TMA, mbarrier ring): prefill_tile()
//   threads     kBlockM / 64 consumer warpgroups + one producer warpgroup (128: one thread issues
//               the TMA copies; a whole warpgroup so that setmaxnreg can move its registers to the
//               consumers, 24 / 240 with two consumer warpgroups, 24 / 160 with three. The
//               overlapped loop holds S (N / 2), O (D / 2) and P (N / 4) registers at once: it
//               needs the consumers' budget above the 168 (128) at entry, which ptxas honours only
//               with the hang guard's trap out of line (hw::hang_trap))
// Operand forms, verified on the H200 by the probe's test g and this kernel's GPU tier: S = Q K^T
// is SS with both operands K-major (Q from its TMA boxes, K from its); O += P V is RS with B = V
// read MN-major (imm-trans-b = 1) over all 64-wide d boxes (LBO = their distance).
#pragma once

#include <cstddef>
#include <cstdint>

namespace groupattn::sm90_engine {

// The query tile of the packed-decode mode (docs/DECODE_SM90.md section 12) and of prefill at D 128
// and 256; prefill_tile(64).block_m is 192.
inline constexpr int kPrefillBlockM = 128;

// The query and KV tiles per head dim (D == Dv), the one place they are chosen. The shared memory
// holds Q (block_m x D) and kStages stages of K and V (2 x block_n x D), 16-bit:
//   D 128:     128 rows x 128 keys, 3 stages (Q 32 KB + 3 x 64 KB = 224 KB). A 176-key tile for full
//              attention (FA3's width at d 128, 2 stages) measured 14-19 % slower with combined stage
//              barriers (session 4) and, with split ones, as fast as the plain 128-key grid on long
//              rows and 2-4 % slower at S 2048, so 2-10 % slower than the persistent form (session 22,
//              docs/PREFILL_SM90.md "Head dim 128 with 176-key tiles"; code in c7b774a).
//   D 64:      192 rows (three consumer warpgroups) x 128 keys, 3 stages (Q 24 KB + 3 x 32 KB =
//              120 KB). Per 128 keys a warpgroup's two products take 512 tensor cycles at D 64
//              against ~530 cycles of ex2 (64 per thread at the SM's 16 per cycle) plus the max /
//              sum chains: with two warpgroups one's softmax no longer fits under the other's
//              products (it does at D 128, 1024 cycles); a third warpgroup gives it two. Consumers
//              at 160 registers (S 64 + O 32 + P 32). docs/PREFILL_SM90.md, "Head dim 64".
//   D 256:     3 stages of 128 keys (3 x 128 KB) do not fit in 227 KB. 64 keys, 2 stages: Q 64 KB
//              + 2 x 64 KB = 192 KB. Per consumer thread O is 128 registers, S 32 and P 16; the
//              overlapped loop compiles without spills. FA3's 80 keys (2 stages, 224 KB) spilled
//              32-36 bytes in this loop (ptxas, consumers at 240 registers); it compiles without
//              spills as a second form with fewer long-lived values (kPrefillTileD256N80 below,
//              PrefillTraitsBase::kTrimLiveValues), behind a switch until measured.
// split_kv: K and V of a stage have their own full / empty barriers, so a stage's K half is
// refilled as soon as every warp's S product that read it is done, while its V half waits for
// the O product one tile later. With one barrier pair per stage and 2 stages, tile i + 2 could
// only start loading once tile i's O product (issued in iteration i + 1) was done, just when
// warpgroup 0 needs tile i + 2's K: no prefetch slack, the load latency paid on every tile (ncu
// at d 256: a third of the stall cycles on the L1TEX scoreboard of the mbarrier try_wait).
// Split, each half has about one tile of slack (docs/PREFILL_SM90.md, "Head dim 256: the load
// stall"). D 64 / 128 keep the combined form: with 3 stages they already have a tile of slack.
struct PrefillTile {
  int block_m, block_n, stages;
  bool split_kv;
};
constexpr PrefillTile prefill_tile(int head_dim) {
  return head_dim == 256  ? PrefillTile{kPrefillBlockM, 64, 2, true}
         : head_dim == 64 ? PrefillTile{192, 128, 3, false}
                          : PrefillTile{kPrefillBlockM, 128, 3, false};
}

// The second D 256 prefill form (PrefillTraitsD256N80; GROUPATTN_SM90_PREFILL_D256_N80, default on
// since session 11; docs/PREFILL_SM90.md, "Head dim 256 with 80-key tiles"): 80 keys, 2 stages, split
// K/V barriers (Q 64 KB + 2 x 80 KB = 224 KB, FA3's d256 width). The fixed per-tile work of a
// consumer thread (row max / sum shuffles, the 128-FMUL O rescale, barriers and waits) is spread over
// 5 k-steps of the O product instead of 4. An 80-row box is 10 whole 1024-byte swizzle atoms, so
// every box and stage stays 1024-aligned.
inline constexpr PrefillTile kPrefillTileD256N80{kPrefillBlockM, 80, 2, true};
// The KV tile of a prefill launch: the head dim's, or the 80-key D 256 form's.
constexpr PrefillTile prefill_launch_tile(int head_dim, bool d256_n80) {
  return head_dim == 256 && d256_n80 ? kPrefillTileD256N80 : prefill_tile(head_dim);
}

// The KV tile of the packed-decode mode (the sm90 decode engine's multi-token form), chosen apart
// from prefill_tile: decode streams the cache once, so what counts is the bytes in flight per SM
// (one CTA per SM), not the prefill's arithmetic per tile (docs/DECODE_SM90.md sections 12, 16).
//   D 128: prefill's 128 keys x 3 stages (Q 32 KB + 3 x 64 KB = 224 KB; measured, section 12).
//   D 64:  128 keys x 6 stages (Q 16 KB + 6 x 32 KB = 208 KB): the combined barriers refill a
//          stage only after the O product one tile later, so about stages - 2 tiles are in flight;
//          6 keep ~128 KB in flight per SM, D 128's 64 KB would stream at latency with 3 x 32 KB.
//   D 256: prefill's 64 keys x 2 stages, split K/V barriers (Q 64 KB + 2 x 64 KB = 192 KB; 3
//          stages do not fit): with combined barriers tile i + 2 could only start loading after
//          tile i's O product, no slack at all; split, the K half of a stage refills after S.
constexpr PrefillTile packed_decode_tile(int head_dim) {
  // Two consumer warpgroups of 64 packed rows at every head dim (prefill's d64 takes 192 rows).
  return head_dim == 64 ? PrefillTile{kPrefillBlockM, 128, 6, false} : prefill_tile(head_dim);
}

// kHeadDim_: D == Dv, 64, 128 or 256 (one, two or four 64-wide, 128-byte swizzle blocks of d).
// kPackedDecode_: the sm90 decode engine's multi-token path (issue 9; docs/DECODE_SM90.md sections
// 12 and 16; head dims 64, 128 and 256, KV tile packed_decode_tile). The kernel's 128 rows are then
// the packed query rows r = token * group + head-in-group of
// one KV head (group x new tokens; several row blocks when wider), loaded by the consumer threads
// (any group, no Q tensor map); the grid is (row block x split, KV head, sequence), each CTA takes
// its split's KV tiles (the decode engine's planner) and writes O / LSE or the split's fp32
// partials for the combine kernel. K/V come as 64-row TMA boxes (kBlockN / 64 per tile, so a
// page of 64 keys holds one box), the decode engine's tensor maps. When the CTA's rows fit in one
// warpgroup (group x tokens <= 64), the second consumer warpgroup exits at once and the first runs
// without pingpong turns.
// kFp8Kv_ (packed decode only): an f8e4m3 K/V cache (docs/DECODE_SM90.md sections 13 and 17). TMA
// brings fp8 tiles ([128 keys][128 d] bytes, two 64-row boxes each, 128B-swizzled) into an fp8 ring
// of kFp8Stages, kFp8PrefetchTiles more tiles ahead are prefetched into L2; the producer
// warpgroup's four warps widen each into the 16-bit tiles the GEMMs read (the layout TMA gives the
// 16-bit path): two converted K tiles (each freed as soon as every warpgroup's S = Q K^T that read
// it is done) and two converted V tiles (each freed when its O += P V is done). Two K tiles let the
// converters widen K(t + 1) while S(t) runs; with one (section 13) K(t + 1) could only start once
// S(t) was done, and the consumers' next S waited for the widening on every tile.
//   shared memory: Q 32 KB + converted K 2 x 32 KB + converted V 2 x 32 KB + fp8 2 x 32 KB = 224 KB
// The producer warpgroup then needs registers to convert: 56 / 224 instead of 24 / 240.
// kD256N80_: the 80-key D 256 prefill form (kPrefillTileD256N80). PrefillTraits and
// PrefillTraitsD256N80 below are the names the kernels are instantiated with (distinct types, so
// the default kernels keep their symbols).
// kSF16_ (fp8 only, the default there): S = Q K^T in f16 too (section 28 of DECODE_SM90.md): K
// widens to f16 in one instruction a pair, and a bf16 Q enters f16 scaled by 2^e (load_packed_q).
template <class T, int kHeadDim_, bool kPackedDecode_, bool kFp8Kv_, bool kD256N80_, bool kSF16_ = kFp8Kv_>
struct PrefillTraitsBase {
  using Element = T;
  static constexpr bool kPackedDecode = kPackedDecode_;
  static constexpr bool kFp8Kv = kFp8Kv_;
  static constexpr bool kSF16 = kSF16_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr PrefillTile kTile = kD256N80_        ? kPrefillTileD256N80
                                       : kPackedDecode_ ? packed_decode_tile(kHeadDim_)
                                                        : prefill_tile(kHeadDim_);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kRowsPerWg = 64;
  static constexpr int kConsumerWgs = kBlockM / kRowsPerWg;  // 2 or 3
  static constexpr int kStages = kFp8Kv ? 2 : kTile.stages;  // fp8: converted V tiles
  // K and V of a stage guarded by separate barriers (16-bit K/V; prefill_tile, packed_decode_tile).
  static constexpr bool kSplitKv = !kFp8Kv && kTile.split_kv;
  // O leaves through shared memory (each consumer warpgroup's own Q rows, free once its last S
  // product is done) as whole 16-byte chunks, a warp writing whole rows: the accumulator layout
  // stored directly gives 4-byte stores that half-fill their 32-byte sectors (ncu at d 128 / 256:
  // 50 % excess sectors). Prefill only: packed decode writes rows of several heads (and fp32
  // partials) and keeps the direct stores.
  static constexpr bool kStagedEpilogue = !kPackedDecode;
  // Where the consumer waits for the next tile's K: between tile i's softmax and the
  // wgmma_wait<0> of tile i-1's O product (instead of at the top of the next iteration). The wait
  // loop is a basic-block boundary, and ptxas (nvcc 13) schedules WARPGROUP.DEPBAR at the top of
  // its block: with nothing in between it hoisted the wait for the O product above the whole
  // softmax (SASS of every prefill and packed-decode kernel at bf45fed: 0 of the 66 MUFU.EX2
  // between wait_group 1 and wait_group 0), so the intra-warpgroup overlap did not exist in the
  // binary. Pinned, all 66 sit before it. The overlap keeps tile i-1's P registers (N / 4) in
  // flight through the softmax: D 64's three warpgroups at 160 registers spilled 4 bytes with it
  // until the tile skip below moved its loop bound into a lane-0 shuffle; now 0 (ptxas, nvcc 13;
  // docs/PREFILL_SM90.md, "The intra-warpgroup overlap in SASS").
  static constexpr bool kPinnedOverlap = true;
  // A consumer warpgroup computes only the KV tiles up to the last key its last row sees; the CTA's
  // later tiles it passes (waits for them, takes its GEMM turn without issuing, releases the stage).
  // D 64's 192-row tiles span 1.5 KV tiles of 128 keys, so with causal masking the CTA range
  // (up to its last row's key) computed 1.183x the needed work at S2048 (1.066 per warpgroup), and
  // a warpgroup wholly past the sequence's last row computed every tile. Three warpgroups only:
  // with 128 rows and 128 keys both warpgroups end on the same tile when Sq == Sk.
  static constexpr bool kSkipUnseenTiles = !kPackedDecode && kConsumerWgs == 3;
  // The consumer holds fewer values through its loop (prefill_kernel.cuh, consume): its warpgroup
  // and warp indices as lane 0's (ptxas then derives the turn barriers and the warpgroup's rows in
  // uniform registers) and the LSE column re-derived after the loop. The 80-key form only: its S
  // (40), P (20) and O (128) registers leave ~50 of the consumers' 240, and ptxas spilled 32 / 36
  // bytes without these (nvcc 13; 0 with them). The other forms keep their SASS.
  static constexpr bool kTrimLiveValues = kD256N80_;
  static constexpr int kConsumerWarps = 4 * kConsumerWgs;
  static constexpr int kConsumerThreads = 32 * kConsumerWarps;
  static constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
  static constexpr int kProducerWarp = kConsumerWarps;     // its first warp
  // Registers after setmaxnreg (multiples of 8); at entry every thread has kEntryRegs.
  static constexpr uint32_t kProducerRegs = kFp8Kv ? 56 : 24;
  static constexpr uint32_t kConsumerRegs = kFp8Kv ? 224 : kConsumerWgs == 3 ? 160 : 240;
  static constexpr uint32_t kEntryRegs = (65536 / kThreads) / 8 * 8;  // 168 at 384 threads, 128 at 512

  static constexpr int kSwizzleElems = 64;                   // 16-bit elements per 128-byte row
  static constexpr int kDBlocks = kHeadDim / kSwizzleElems;  // 1, 2 or 4
  // Q: kDBlocks blocks of [kBlockM rows][64 d]; each block is kConsumerWgs TMA boxes of 64 rows.
  static constexpr int kQBoxRows = kRowsPerWg;
  static constexpr int kQBlockBytes = kBlockM * 128;
  // O by TMA store (kLaunchTmaStoreO): each consumer warp stores its own 16 rows of the staged O
  // (store_o_staged writes a warp's rows only), one box {64 d, 1 head, 16 rows, 1} per d block,
  // from a 2048-byte-aligned place of the 128B-swizzled Q layout (whole 1024-byte swizzle atoms).
  static constexpr int kOBoxRows = 16;
  // Which prefill kernels have a second form with the TMA store of O (sm90_prefill_kernel<Traits,
  // true>): D 128 and 256. D 64's consumers (160 registers) spilled 20 bytes in it (nvcc 13); D 64
  // keeps the 16-byte stores.
  static constexpr bool kTmaStoreO = kStagedEpilogue && kConsumerWgs == 2;
  static constexpr int kQBytes = kDBlocks * kQBlockBytes;
  // K or V tile: kDBlocks blocks of [kBlockN keys][64 d], each one TMA box of kBlockN rows, or
  // (kPackedDecode) kKvSubBoxes stacked boxes of 64 rows: the same bytes in the same 128B-swizzled
  // layout, since a box of 64 rows is 8 whole 1024-byte swizzle atoms.
  static constexpr int kKvBoxBytes = kBlockN * 128;
  static constexpr int kKvBoxRows = kPackedDecode ? 64 : kBlockN;
  static constexpr int kKvSubBoxes = kBlockN / kKvBoxRows;
  static constexpr int kTileBytes = kDBlocks * kKvBoxBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K then V

  // fp8 K/V: kStages counts the converted V tiles (the ring the consumers' stage index walks);
  // the converted K tiles are as many (K tile `stage` is read by the S product of the tiles in that
  // stage), the fp8 ring kFp8Stages deep. An fp8 tile is [kBlockN][128 d] bytes: 128-byte rows,
  // kKvSubBoxes boxes of 64 rows.
  // kKSlots: K tiles with their own barrier pair (k_full / k_empty): fp8, the converted K tiles;
  // kSplitKv, the K half of each stage (the stage layout is unchanged: K then V). Either way one
  // per stage, so the consumers' wait_k / release_k index them by the stage.
  static constexpr int kKSlots = kFp8Kv || kSplitKv ? kStages : 0;
  static constexpr int kFp8Stages = kFp8Kv ? 2 : 0;
  // fp8: tiles prefetched into L2 (cp.async.bulk.prefetch.tensor) beyond the kFp8Stages loaded into
  // shared memory. The two fp8 stages hold ~1.5 tiles (48 KB) in flight per SM, refilled only after
  // a tile is widened; a 16-bit stage pair streams with ~128 KB in flight. Prefetching tiles
  // t + 2 .. t + 1 + kFp8PrefetchTiles keeps ~4 tiles (128 KB) of HBM reads in flight while the
  // TMA loads themselves hit L2 (16 MB of L2 at 128 CTAs, of 50).
  static constexpr int kFp8PrefetchTiles = kFp8Kv ? 3 : 0;
  // The O += P V product in f16 whatever Q's type (fp8 K/V): V widened to f16 takes one conversion
  // per e4m3 pair where bf16 takes four instructions (widen_e4m3x2), and P in [0, 1] is rounded to
  // 2^-11 relative as an f16 against bf16's 2^-8. The price: a p below 2^-25 becomes 0 (bf16 keeps
  // it), at most 2^-18 of a row sum >= 1 per 128-key tile, and only for keys 17+ natural-log units
  // below the row's max. Exact either way: every e4m3 value is an f16. S = Q K^T: f16 as well with
  // kSF16 (the default for fp8), else Q's type.
  static constexpr bool kPvF16 = kFp8Kv;
  static constexpr int kFp8TileBytes = kBlockN * kHeadDim;
  static constexpr int kFp8StageBytes = 2 * kFp8TileBytes;  // K then V

  static constexpr int kQOffset = 0;
  static constexpr int kStageOffset = kQOffset + kQBytes;
  // 16-bit: kStages K+V stages. fp8: kStages converted V tiles, then the kKSlots converted K tiles.
  static constexpr int kStagesBytes = kFp8Kv ? (kStages + kKSlots) * kTileBytes : kStages * kStageBytes;
  static constexpr int kFp8Offset = kStageOffset + kStagesBytes;
  static constexpr int kBarOffset = kFp8Offset + kFp8Stages * kFp8StageBytes;
  // q_full, full[], empty[]; fp8 and kSplitKv: full[] / empty[] are the V tiles', then
  // k_full[kKSlots], k_empty[kKSlots]; fp8: then fp8_full[], fp8_empty[].
  // kEarlyFirstLoads: prefill (16-bit K/V) can have thread 0 issue the CTA's Q and first KV tile
  // right after it initialises the barriers, before the CTA's __syncthreads and setmaxnreg
  // (PrefillLaunch::early_first_loads). kFirstKBarrier: with combined stage barriers the first
  // tile's K then lands on a barrier of its own (first_k_full, after every other barrier), so the
  // first S product waits for Q and K only; split K/V stages have that already (k_full).
  static constexpr bool kEarlyFirstLoads = !kPackedDecode && !kFp8Kv;
  static constexpr bool kFirstKBarrier = kEarlyFirstLoads && !kSplitKv;
  static constexpr int kBarBytes =
      (1 + 2 * kStages + 2 * kKSlots + 2 * kFp8Stages + (kFirstKBarrier ? 1 : 0)) * 8;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBarOffset + kBarBytes) + 1024;  // + alignment slack
  // The persistent form (prefill_persistent.cuh; GROUPATTN_SM90_PREFILL_PERSISTENT): prefill at head
  // dim 128 with the TMA store of O. Its own kernel (sm90_prefill_persistent_kernel), so the plain
  // kernels keep their code. Its barriers follow the plain kernel's: wg_q_full and wg_q_empty per
  // consumer warpgroup, o_free per stage (O is staged in the K half of a work's last stage, which at
  // D 128 has the Q blocks' layout: 128 rows of 128 bytes per 64-d box).
  static constexpr bool kPersistentForm = !kPackedDecode && !kFp8Kv && !kD256N80_ && kHeadDim == 128;
  static constexpr int kPersistentBarBytes = (2 * kConsumerWgs + kStages) * 8;
  static constexpr size_t kPersistentSmemBytes = kSmemBytes + kPersistentBarBytes;
  // fp8: the converter warps (the whole producer warpgroup; thread u widens key row u of a tile).
  static constexpr int kConverterWarps = kFp8Kv ? 4 : 0;

  static_assert(sizeof(T) == 2, "wgmma path takes 16-bit inputs (bf16, fp16)");
  static_assert((kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256) && kBlockN % 16 == 0 && kBlockN <= 256,
                "tile shapes (a TMA box has <= 256 rows; P's k-steps are 16 keys)");
  static_assert(kRowsPerWg == 4 * kOBoxRows && (kOBoxRows * 128) % 1024 == 0,
                "one O box per consumer warp, whole swizzle atoms");
  static_assert(kQBlockBytes % 1024 == 0 && kKvBoxBytes % 1024 == 0 &&
                    (kRowsPerWg * 128) % 1024 == 0,
                "128B-swizzled operands start on 1024-byte boundaries (descriptor base offset 0)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
  static_assert(kBlockN % kKvBoxRows == 0 && (kKvBoxRows * 128) % 1024 == 0,
                "a KV tile is whole 64-row boxes (a paged cache's page_size is a multiple of 64)");
  static_assert(kStages >= 2, "the overlapped loop holds two stages at once: tile i's K, tile i-1's V");
  static_assert(!kSkipUnseenTiles || (!kSplitKv && !kFp8Kv),
                "passed tiles: one wait (wait_k) and one release per tile, the combined 16-bit stage");
  static_assert(!kSplitKv || !kFp8Kv, "split K/V barriers: 16-bit K/V (the fp8 path has its own K slot)");
  static_assert(kConsumerWgs == 2 || (kConsumerWgs == 3 && !kPackedDecode),
                "two consumer warpgroups, or three for prefill (turns: round robin, barrier ids in consume)");
  static_assert(128 * (kProducerRegs + kConsumerWgs * kConsumerRegs) <= kEntryRegs * kThreads, "setmaxnreg budget");
  static_assert(!kFp8Kv || (kPackedDecode && kHeadDim == 128 && kStages == 2 && kKSlots == kStages &&
                            kBlockN == 128 && kKvSubBoxes == 2),
                "fp8 K/V: packed decode at head dim 128, two converted K and V tiles, 128-key tiles of two "
                "boxes");
  static_assert(!kFp8Kv || kBlockN == 32 * kConverterWarps, "fp8 K/V: one converter thread per key row");
  static_assert(kFp8TileBytes % 1024 == 0 && kFp8Offset % 1024 == 0, "fp8 tiles are 128B-swizzled TMA boxes");
  static_assert(kStageOffset % 1024 == 0 && kStageBytes % 1024 == 0 && kTileBytes % 1024 == 0,
                "every K and V box of every stage starts on a 1024-byte boundary");
  static_assert(!kPersistentForm || (kConsumerWgs == 2 && !kSplitKv && kKvBoxBytes == kQBlockBytes &&
                                     kPersistentSmemBytes <= 227 * 1024),
                "the persistent form: two consumer warpgroups, combined stage barriers, O staged in a K half "
                "laid out as the Q blocks, within one CTA's shared memory");
  static_assert(!kD256N80_ || (kHeadDim == 256 && !kPackedDecode && !kFp8Kv && kSplitKv && kStages == 2),
                "the 80-key form: D 256 prefill, 16-bit K/V, two split stages");
  static_assert(!kSF16 || kFp8Kv, "S in f16 for an fp8 cache only");
};

template <class T, int kHeadDim_ = 128, bool kPackedDecode_ = false, bool kFp8Kv_ = false>
struct PrefillTraits : PrefillTraitsBase<T, kHeadDim_, kPackedDecode_, kFp8Kv_, false> {};

// The fp8 packed-decode form with S = Q K^T in Q's type (before session 19): the A/B switch
// GROUPATTN_SM90_DECODE_FP8_BF16_MMA (DecodeLaunch::fp8_bf16_mma), bf16 Q only.
template <class T>
struct PrefillTraitsFp8QTypeS : PrefillTraitsBase<T, 128, true, true, false, false> {};

// The 80-key D 256 prefill form (kPrefillTileD256N80): sm90_prefill_kernel<PrefillTraitsD256N80<T>, ...>.
template <class T>
struct PrefillTraitsD256N80 : PrefillTraitsBase<T, 256, false, false, true> {};

}  // namespace groupattn::sm90_engine
