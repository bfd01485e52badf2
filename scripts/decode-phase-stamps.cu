// Where the time of one sm90 decode CTA goes, without counters (docs/DECODE_SM90.md section 20,
// "Decode phase stamps", and section 24, "Next measurement"). Compiles the swap-AB decode kernel with
// GROUPATTN_DECODE_PHASE_STAMPS (so each CTA writes clock64 stamps at its phase points,
// decode_phase_stamps.cuh), builds a batched bf16 decode problem (Hq / Hkv, D 64 / 128 / 256, B
// sequences in a cache of L keys, one new token, per-sequence lengths in cache_seqlens on the device,
// equal or mixed, or none as the CLI's rows), and launches it through the engine's launcher
// (launch_decode_head_dim, which also runs the combine) as sm90_engine.cu would:
//   list      the work-list mode: P = list_plane_wave, list_slot_bound(P, B) slots, its workspace
//             (decode_work_list.h), list_heads_fastest / list_uniform_fast as the engine's switches
//             (GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST, ..._UNIFORM_FAST; default on); needs the
//             lengths on the device and B >= 2. GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE=1: in the band
//             P / 2 < B <= P, the engine's near-wave wave and guard instead (list_near_wave)
//   ordinary  the split planner's count (auto_decode_splits), cluster_reduction's choice (and the
//             launcher's: the workspace where the clusters do not fit), the split workspace
// and prints per mode the launcher's time (mean of 10, inputs L2-warm; the combine alone, mean of
// 10), the stamped launches' time (each after an L2 flush: the K/V from HBM, as the CLI's rotating
// inputs), per phase the median / p10 / p90 over CTAs with work and over empty CTAs, the span from
// the first entry to the last end, the timelines of a few SMs, and a compact table: each phase's
// median in us after the kernel's first entry, pooled over --reps stamped launches, then the first
// TMA's and a refill's issue -> landing. --suite section24 runs section 24's five one-token rows
// (no cache_seqlens, so the ordinary plan, as the CLI) and prints that table with one column a row.
// Standalone: headers, plus the split planner's self-contained split_planner.cpp on the nvcc line
// (auto_decode_splits calls it); no library. Whether the engine itself takes the list for the
// problem is list_plan's gate in sm90_engine.cu; here the list is run whenever asked.
//
//   (one line) nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude -Isrc -DGROUPATTN_WITH_CUDA=1
//   --expt-relaxed-constexpr
//        -DGROUPATTN_DECODE_PHASE_STAMPS [-DGROUPATTN_DECODE_STAMPS_VARIANT=1|2]
//        scripts/decode-phase-stamps.cu src/attention/engines/cuda/split_planner.cpp -o
//        build-gpu/decode-phase-stamps
//   build-gpu/decode-phase-stamps [--heads 8/1] [--head-dim 128] [--batch 32] [--kv-len 32768]
//                                 [--mixed 0|1] [--seqlens 1|0] [--mode both|list|ordinary]
//                                 [--reps 5] [--flush 1|0] [--sms 0,66] [--ctas 12]
//   build-gpu/decode-phase-stamps --suite section24 [--reps 5] [--verbose 0|1]
// --mixed 1: the lengths of bench/matrices.py mixed_lengths(32, 32768) (seed 0) for B 32 x L 32768;
// other shapes: a fixed LCG draw from [1, L] with the first sequence L (mixed_lengths' rule).
// Variant (decode_phase_stamps.cuh): 0 the library's prologue, 1 without its prefetch.tensormap, 2 with
// a TMA L2 prefetch of each CTA's first tile before the CTA barrier; printed in the first line.
#ifndef GROUPATTN_DECODE_PHASE_STAMPS
#error "build with -DGROUPATTN_DECODE_PHASE_STAMPS (see the file's first lines)"
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/cuda/split_workspace.h"
#include "attention/engines/sm90/decode_kernel.cuh"
#include "attention/engines/sm90/decode_split_plan.h"
#include "attention/engines/sm90/engine_checks.h"
#include "attention/engines/sm90/tma_desc.h"

// The launcher's host_timing marks are off (host_timing::enabled stays false), so record is never
// called; defined here because the library that holds it is not linked.
namespace groupattn::host_timing {
void record(const char*, bool) {}
}  // namespace groupattn::host_timing
// The cluster launch's switch (sm90_engine.cu; on in the library since session 12): the tool launches
// through the runtime's cudaLaunchKernelEx, which changes host time only, not the device-side stamps.
namespace groupattn::sm90_engine {
bool decode_driver_launch() { return false; }
}  // namespace groupattn::sm90_engine

namespace ga = groupattn;
namespace s90 = groupattn::sm90_engine;
namespace st = groupattn::sm90_engine::decode_stamps;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define CHECK_STATUS(expr)                                                                     \
  do {                                                                                         \
    const ga::Status s_ = (expr);                                                              \
    if (!s_.ok()) {                                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.message().c_str()); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void fill_bf16(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(static_cast<float>(h & 0xffffu) / 32768.f - 1.f);
  }
}

// The tool's kernels besides the decode's: an L2 flush (reads a buffer larger than L2, so the next
// launch's K/V come from HBM as the CLI's rotating inputs' do) and a probe whose entry time
// (globaltimer) marks when the next kernel in the stream starts: after the combine, or in the
// cluster / one-split modes right after the decode grid.
__global__ void flush_l2(const uint4* x, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // (keeps the loads)
}
__global__ void probe_entry(unsigned long long* at) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  *at = t;
}

using T = __nv_bfloat16;

struct Problem {
  int hq = 8, hkv = 1, batch = 32, kv_len = 32768, d = 128;
  bool mixed = false;
  bool seqlens = true;  // lengths on the device (cache_seqlens); false: none, as the CLI's rows
};

// bench/matrices.py mixed_lengths(32, 32768), seed 0 (Python's random; copied as numbers).
constexpr int kBenchMixed32x32K[32] = {32768, 29959, 18057, 3932,  28618, 14290, 4270,  21965,
                                       9231,  21404, 8547,  9418,  15252, 12272, 19414, 14388,
                                       5803,  25463, 25008, 32370, 6976,  29793, 13799, 26666,
                                       28503, 24466, 21470, 6778,  27666, 13998, 546,   20015};

std::vector<int> lengths_of(const Problem& pr) {
  std::vector<int> len(pr.batch, pr.kv_len);
  if (!pr.mixed) return len;
  if (pr.batch == 32 && pr.kv_len == 32768)
    return std::vector<int>(kBenchMixed32x32K, kBenchMixed32x32K + 32);
  uint64_t x =
      0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(pr.batch) << 32) ^ static_cast<uint64_t>(pr.kv_len);
  for (int b = 1; b < pr.batch; ++b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    len[b] = 1 + static_cast<int>((x >> 33) % static_cast<uint64_t>(pr.kv_len));
  }
  return len;
}

struct Stats {
  double p10, med, p90;
  size_t n;
};
Stats stats(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return {NAN, NAN, NAN, 0};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)]; };
  return {at(0.1), at(0.5), at(0.9), v.size()};
}

bool env_on(const char* name, bool fallback) {
  const char* s = std::getenv(name);
  return s == nullptr ? fallback : std::atoi(s) != 0;
}

struct Buffers {
  T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  int32_t* seqlens = nullptr;
  const uint4* flush = nullptr;  // null: no L2 flush before the stamped launches
  size_t flush_words = 0;
  unsigned* sink = nullptr;
  unsigned long long* probe = nullptr;
};

struct RunOptions {
  int sms = 0;
  std::vector<int> show_sms;
  int show_ctas = 12;
  int reps = 5;
  bool verbose = true;  // the per-phase p10 / median / p90 tables and the SM timelines
};

// The compact table: per row, the median over working CTAs (pooled over the stamped launches) of an
// absolute time (us after that launch's first entry: the CTA's entry by globaltimer plus its clock64
// phase) or of a duration inside one CTA.
enum CompactRow {
  kAtEntry,
  kAtBarrierInit,
  kAtTmapPrefetch,
  kAtRange,
  kAtBarrier,
  kAtProducerBarrier,
  kAtIssueStart,
  kAtFirstIssued,
  kAtQ,
  kAtFirstLanded,
  kAtScores,
  kAtSecondLanded,
  kAtRefillIssued,
  kAtRefillLanded,
  kAtLastIssued,
  kAtLoopEnd,
  kAtEnd,
  kAtLastEnd,  // the launch's last working CTA's end (median over launches)
  kAtNext,     // the next kernel's entry (probe; median over launches)
  kDurBarrierToIssue,
  kDurIssue,
  kDurFirstFlight,
  kDurRefillFlight,
  kDurRefillWaited,
  kDurPerTile,
  kDurEpilogue,
  kCompactRows
};
const char* const kCompactNames[kCompactRows] = {
    "kernel entry (CTA)",
    "barrier init done (thread 0)",
    "tensor maps prefetched (prod. lane 0)",
    "tile range known",
    "CTA barrier passed (thread 0)",
    "barrier passed (producer lane 0)",
    "first TMA: about to issue",
    "first TMA: issued",
    "Q in shared memory",
    "first tile landed (1st full wait)",
    "first S^T = K Q^T done",
    "second tile landed",
    "refill (tile = stages) issued",
    "refill landed",
    "last TMA issued",
    "last tile done (loop end)",
    "epilogue writes done",
    "last CTA's end (per launch)",
    "next kernel's entry (after combine)",
    "d: barrier -> first TMA about to issue",
    "d: first TMA's issue instructions",
    "d: first TMA issued -> landed",
    "d: refill issued -> landed",
    "d: refill: consumer waited (wait->land)",
    "d: per tile after the first",
    "d: loop end -> epilogue end",
};
struct Compact {
  std::string title;
  std::vector<double> v[kCompactRows];
};

template <int kHeadDim>
Compact run_mode(const Problem& pr, const Buffers& buf, bool list, const RunOptions& opt) {
  const int sms = opt.sms;
  const int group = pr.hq / pr.hkv;
  // The engine's geometry (sm90_engine.cu geometry()): one new token, group columns per KV head.
  const int col_tile = s90::column_tile(group);
  const int m_blocks = (group + col_tile - 1) / col_tile;
  const int n_blocks = (pr.kv_len + s90::kBlockKV - 1) / s90::kBlockKV;

  ga::cuda_engine::KernelParams kp;
  kp.q = buf.q, kp.k = buf.k, kp.v = buf.v, kp.out = buf.o, kp.lse = buf.lse;
  // Q / O [B, 1, Hq, D], K / V [B, L, Hkv, D] element strides; LSE [Hq, B].
  kp.q_batch_stride = int64_t{pr.hq} * kHeadDim, kp.q_row_stride = int64_t{pr.hq} * kHeadDim,
  kp.q_head_stride = kHeadDim;
  kp.k_batch_stride = int64_t{pr.kv_len} * pr.hkv * kHeadDim, kp.k_row_stride = int64_t{pr.hkv} * kHeadDim,
  kp.k_head_stride = kHeadDim;
  kp.v_batch_stride = kp.k_batch_stride, kp.v_row_stride = kp.k_row_stride, kp.v_head_stride = kHeadDim;
  kp.o_batch_stride = kp.q_batch_stride, kp.o_row_stride = kp.q_row_stride, kp.o_head_stride = kHeadDim;
  kp.lse_head_stride = pr.batch, kp.lse_row_stride = 1;
  kp.seqlens_k = pr.seqlens ? buf.seqlens : nullptr;
  kp.batch = pr.batch, kp.seqlen_q = 1, kp.seqlen_k = pr.kv_len;
  kp.heads_q = pr.hq, kp.heads_kv = pr.hkv, kp.group = group;
  kp.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kp.causal = true;  // (one token at the end of its sequence: sees every key, as attention_with_kvcache)
  kp.m_blocks = m_blocks;

  // The split planner (sm90_engine.cu num_splits_for) and, as the engine, the list's P and slots.
  s90::DecodeSplitShape shape;
  shape.sm_count = sms;
  shape.batch = pr.batch, shape.kv_heads = pr.hkv, shape.m_blocks = m_blocks, shape.n_blocks = n_blocks;
  shape.head_dim = kHeadDim, shape.col_tile = col_tile;
  const int splits = s90::auto_decode_splits(shape);
  const int split_wave = s90::split_wave_of(shape);
  int plane_wave = ga::cuda_engine::list_plane_wave(sms, split_wave, pr.hkv, m_blocks);
  // GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE=1: the band P / 2 < B <= P at the engine's near-wave wave
  // (decode_work_list.h list_near_wave; docs/DECODE_SM90.md section 25), with its guard.
  bool near_guard = false;
  if (list && env_on("GROUPATTN_SM90_DECODE_LIST_NEAR_WAVE", false) &&
      !ga::cuda_engine::list_serves_batch(pr.batch, plane_wave)) {
    const ga::cuda_engine::NearWave nw = ga::cuda_engine::list_near_wave(
        sms, split_wave, s90::decode_tile(kHeadDim, false).ctas_per_sm, pr.hkv, m_blocks, pr.batch);
    if (nw.plane_wave > 0) plane_wave = nw.plane_wave, near_guard = nw.near_uniform_guard;
  }
  const int64_t slots = ga::cuda_engine::list_slot_bound(plane_wave, pr.batch);
  void* ws = nullptr;
  // GROUPATTN_SM90_DECODE_EARLY_TILES=0: the producer warp issues every tile (the engine's switch).
  kp.early_first_tiles = env_on("GROUPATTN_SM90_DECODE_EARLY_TILES", true);
  int64_t ctas = 0;
  if (list) {
    const size_t bytes = ga::cuda_engine::list_workspace_bytes(slots, 1, pr.hq, kHeadDim, pr.batch);
    CHECK(cudaMalloc(&ws, bytes));
    kp.num_splits = static_cast<int>(slots);
    kp.cluster_reduce = false;
    ga::cuda_engine::set_split_workspace(&kp, ws, 1, kHeadDim);  // partial_rows = max_q x Hq
    kp.seq_splits = reinterpret_cast<int32_t*>(
        static_cast<char*>(ws) + ga::cuda_engine::list_partials_bytes(slots, 1, pr.hq, kHeadDim));
    kp.list_plane_wave = plane_wave;
    kp.list_heads_fastest =
        env_on("GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST", true) && slots * m_blocks <= s90::kMaxGridYZ;
    kp.list_uniform_fast = env_on("GROUPATTN_SM90_DECODE_LIST_UNIFORM_FAST", true);
    kp.list_near_wave = near_guard;
    ctas = int64_t{m_blocks} * slots * pr.hkv;
  } else {
    kp.num_splits = splits;
    const int64_t tiles_per_split = (n_blocks + splits - 1) / splits;
    kp.cluster_reduce = s90::cluster_reduction(splits, int64_t{pr.batch} * pr.hkv * m_blocks * splits,
                                               tiles_per_split, sms, kHeadDim, false, false);
    if (splits > 1) {  // (also in cluster mode: the launcher falls back to it where clusters do not fit)
      CHECK(cudaMalloc(&ws, ga::cuda_engine::split_workspace_bytes(splits, pr.batch, pr.hq, kHeadDim)));
      ga::cuda_engine::set_split_workspace(&kp, ws, pr.batch, kHeadDim);
    }
    ctas = int64_t{m_blocks} * splits * pr.hkv * pr.batch;
  }

  CUtensorMap km, vm;
  auto map_of = [&](const T* base, CUtensorMap* m) {
    s90::KvMapShape s;
    s.base = base;
    s.d = kHeadDim, s.heads = pr.hkv, s.rows = pr.kv_len, s.outer = pr.batch;
    s.head_stride = kHeadDim, s.row_stride = int64_t{pr.hkv} * kHeadDim, s.outer_stride = kp.k_batch_stride;
    CHECK_STATUS(s90::encode_kv_map(s, s90::kBlockKV, m));
  };
  map_of(buf.k, &km);
  map_of(buf.v, &vm);
  s90::DecodeLaunch l;
  l.k_tmap = &km, l.v_tmap = &vm, l.col_tile = col_tile, l.head_dim = kHeadDim;
  // The launcher's own answer in cluster mode (it takes the workspace where the clusters do not fit).
  bool cluster = false;
  if (kp.cluster_reduce) {
    s90::DecodeLaunch plan = l;
    plan.plan_cluster = &cluster;
    CHECK_STATUS((s90::launch_decode_head_dim<T, kHeadDim>(kp, plan, nullptr)));
  }

  unsigned long long* dbuf;
  const size_t rec_bytes = static_cast<size_t>(ctas) * st::kSlots * sizeof(unsigned long long);
  CHECK(cudaMalloc(&dbuf, rec_bytes));
  unsigned long long* null_buf = nullptr;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_of = [&](int n, auto&& launch) {
    CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < n; ++i) CHECK_STATUS(launch());
    CHECK(cudaEventRecord(e1, stream));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return 1000.0 * ms / n;
  };
  auto decode = [&] { return s90::launch_decode_head_dim<T, kHeadDim>(kp, l, stream); };
  const bool combines = list || (splits > 1 && !cluster);
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  time_of(3, decode);
  const double us_plain = time_of(10, decode);
  // The combine alone (after a decode launch wrote the partials and, list mode, the counts).
  const double us_combine =
      combines ? time_of(10, [&] { return s90::launch_split_combine<T, kHeadDim>(kp, stream); }) : 0.0;
  // The stamped launches: each after an L2 flush, then the probe kernel.
  const int reps = std::max(1, opt.reps);
  std::vector<std::vector<unsigned long long>> recs(reps);
  std::vector<unsigned long long> probe_ns(reps, 0);
  double us_stamped = 0.0;
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &dbuf, sizeof(dbuf)));
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaMemset(dbuf, 0, rec_bytes));
    if (buf.flush != nullptr) flush_l2<<<4 * sms, 512, 0, stream>>>(buf.flush, buf.flush_words, buf.sink);
    CHECK(cudaGetLastError());
    us_stamped += time_of(1, decode) / reps;
    probe_entry<<<1, 1, 0, stream>>>(buf.probe);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(stream));
    recs[r].resize(static_cast<size_t>(ctas) * st::kSlots);
    CHECK(cudaMemcpy(recs[r].data(), dbuf, rec_bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&probe_ns[r], buf.probe, sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  }
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  std::vector<T> o_host(static_cast<size_t>(pr.batch) * pr.hq * kHeadDim);
  CHECK(cudaMemcpy(o_host.data(), buf.o, o_host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  int nonfinite = 0;
  for (const T& x : o_host) nonfinite += !std::isfinite(__bfloat162float(x));

  char title[160];
  std::snprintf(title, sizeof(title), "%d/%d d%d B%d x %d", pr.hq, pr.hkv, kHeadDim, pr.batch, pr.kv_len);
  std::printf("\n== decode bf16 %s one token, %s lengths%s; mode %s; stamps variant %d\n", title,
              pr.mixed ? "mixed" : "equal",
              pr.seqlens ? " (cache_seqlens on the device)" : " (no cache_seqlens)",
              list ? "WORK LIST" : "ORDINARY", st::kVariant);
  if (list) {
    std::printf(
        "list: P %d, slots %lld per plane, grid %lld CTAs (%s), uniform shortcut %d; planner's ordinary "
        "count %d\n",
        plane_wave, static_cast<long long>(slots), static_cast<long long>(ctas),
        kp.list_heads_fastest ? "heads fastest" : "plane-major", kp.list_uniform_fast ? 1 : 0, splits);
  } else {
    std::printf("ordinary: %d splits of <= %d tiles, %s, grid %lld CTAs, column tile %d\n", splits,
                (n_blocks + splits - 1) / splits,
                splits == 1         ? "no combine"
                : cluster           ? "cluster reduction (clusters of the splits)"
                : kp.cluster_reduce ? "workspace + combine (cluster rule, but the clusters do not fit)"
                                    : "workspace + combine",
                static_cast<long long>(ctas), col_tile);
  }
  std::printf(
      "launcher time: %.2f us unstamped (decode%s, mean of 10, inputs L2-warm); combine alone %.2f us (mean "
      "of 10); stamped %.2f us (mean of %d launches%s); O non-finite: %d\n",
      us_plain, combines ? " + combine" : "", us_combine, us_stamped, reps,
      buf.flush != nullptr ? ", each after an L2 flush" : "", nonfinite);

  Compact compact;
  compact.title = std::string(title) + (list ? " list" : "");
  for (int rep = 0; rep < reps; ++rep) {
    const std::vector<unsigned long long>& h = recs[rep];
    auto rec = [&](int64_t c) { return &h[static_cast<size_t>(c) * st::kSlots]; };
    int max_sm = 0, missing = 0;
    for (int64_t c = 0; c < ctas; ++c) max_sm = std::max<int>(max_sm, static_cast<int>(rec(c)[st::kSmId]));
    std::vector<std::vector<int64_t>> by_sm(max_sm);
    for (int64_t c = 0; c < ctas; ++c) {
      const unsigned long long* r = rec(c);
      if (r[st::kSmId] == 0 || r[st::kEnd] == 0 || r[st::kKind] == 0) {
        ++missing;
        continue;
      }
      by_sm[r[st::kSmId] - 1].push_back(c);
    }
    // The SM clock: clock64 against globaltimer over each working CTA of >= 5 us, median.
    std::vector<double> ghz_v;
    unsigned long long ns0 = ~0ull, ns1 = 0, ns1_work = 0, ns1_empty = 0;
    for (auto& v : by_sm) {
      std::sort(v.begin(), v.end(),
                [&](int64_t a, int64_t b) { return rec(a)[st::kStart] < rec(b)[st::kStart]; });
      for (int64_t c : v) {
        const unsigned long long* r = rec(c);
        ns0 = std::min(ns0, r[st::kStartNs]);
        ns1 = std::max(ns1, r[st::kEndNs]);
        (r[st::kKind] == st::kKindWork ? ns1_work : ns1_empty) =
            std::max(r[st::kKind] == st::kKindWork ? ns1_work : ns1_empty, r[st::kEndNs]);
        const double dn = static_cast<double>(r[st::kEndNs] - r[st::kStartNs]);
        if (r[st::kKind] == st::kKindWork && dn >= 5000.0)
          ghz_v.push_back((r[st::kEnd] - r[st::kStart]) / dn);
      }
    }
    const double ghz = ghz_v.empty() ? 1.755 : stats(ghz_v).med;
    auto us = [&](double cycles) { return cycles / (ghz * 1000.0); };

    // The compact table's samples of this launch.
    for (auto& v : by_sm) {
      for (int64_t c : v) {
        const unsigned long long* r = rec(c);
        if (r[st::kKind] != st::kKindWork) continue;
        const double entry_at = (r[st::kStartNs] - ns0) / 1000.0;
        auto at = [&](int slot) {
          return r[slot] == 0
                     ? NAN
                     : entry_at + us(static_cast<double>(r[slot]) - static_cast<double>(r[st::kStart]));
        };
        auto dur = [&](int from, int to) {
          return r[from] == 0 || r[to] == 0 ? NAN
                                            : us(static_cast<double>(r[to]) - static_cast<double>(r[from]));
        };
        std::vector<double>* v = compact.v;
        v[kAtEntry].push_back(entry_at);
        v[kAtBarrierInit].push_back(at(st::kBarrierInit));
        v[kAtTmapPrefetch].push_back(at(st::kTmapPrefetch));
        v[kAtRange].push_back(at(st::kRangeKnown));
        v[kAtBarrier].push_back(at(st::kBarrier));
        v[kAtProducerBarrier].push_back(at(st::kProducerBarrier));
        v[kAtQ].push_back(at(st::kQReady));
        v[kAtLoopEnd].push_back(at(st::kLoopEnd));
        v[kAtEnd].push_back(at(st::kEnd));
        v[kDurEpilogue].push_back(dur(st::kLoopEnd, st::kEnd));
        const double tiles = static_cast<double>(r[st::kTiles]);
        if (tiles < 1) continue;
        v[kAtIssueStart].push_back(at(st::kProducerIssue));
        v[kAtFirstIssued].push_back(at(st::kProducerFirst));
        v[kAtFirstLanded].push_back(at(st::kFirstTile));
        v[kAtScores].push_back(at(st::kScoresFirst));
        v[kAtSecondLanded].push_back(at(st::kSecondTile));
        v[kAtRefillIssued].push_back(at(st::kRefillIssued));
        v[kAtRefillLanded].push_back(at(st::kRefillLanded));
        v[kAtLastIssued].push_back(at(st::kProducerLast));
        v[kDurBarrierToIssue].push_back(dur(st::kProducerBarrier, st::kProducerIssue));
        v[kDurIssue].push_back(dur(st::kProducerIssue, st::kProducerFirst));
        v[kDurFirstFlight].push_back(dur(st::kProducerFirst, st::kFirstTile));
        v[kDurRefillFlight].push_back(dur(st::kRefillIssued, st::kRefillLanded));
        v[kDurRefillWaited].push_back(dur(st::kRefillWait, st::kRefillLanded));
        if (tiles > 1) v[kDurPerTile].push_back(dur(st::kFirstTile, st::kLoopEnd) / (tiles - 1));
      }
    }
    if (ns1_work > 0) compact.v[kAtLastEnd].push_back((ns1_work - ns0) / 1000.0);
    if (probe_ns[rep] > ns0) compact.v[kAtNext].push_back((probe_ns[rep] - ns0) / 1000.0);
    if (!opt.verbose || rep + 1 < reps) continue;

    // The detailed tables: the last stamped launch.
    std::printf(
        "last stamped launch: SMs seen %zu, CTAs without a record %d, SM clock %.3f GHz (clock64 / "
        "globaltimer, median over working CTAs%s)\n",
        by_sm.size(), missing, ghz, ghz_v.empty() ? "; none long enough, assumed" : "");
    struct Phase {
      const char* name;
      std::vector<double> v;
    };
    enum {
      kPlan,
      kRange,
      kBarrierP,
      kProdFirst,
      kFirstLanded,
      kQ,
      kFirst,
      kLoop,
      kPerTile,
      kEpi,
      kDrain,
      kCta,
      kGap,
      kEntryAt,
      kEndAt,
      kNumWork
    };
    std::vector<Phase> work = {{"entry -> plan done (fold_list_slot returned)", {}},
                               {"entry -> sequence and tile range known", {}},
                               {"range known -> CTA barrier passed", {}},
                               {"entry -> producer's first TMA issued", {}},
                               {"first TMA -> first tile landed (consumer's wait)", {}},
                               {"entry -> Q in shared memory", {}},
                               {"entry -> first tile landed", {}},
                               {"first tile landed -> loop end", {}},
                               {"  per tile after the first", {}},
                               {"loop end -> epilogue end (partials / O written)", {}},
                               {"producer's last TMA -> loop end", {}},
                               {"entry -> epilogue end (CTA time)", {}},
                               {"gap: slot freed -> this CTA's entry, same SM", {}},
                               {"entry, us after the kernel's first entry (ns)", {}},
                               {"end, us after the kernel's first entry (ns)", {}}};
    enum { kEPlan, kEExit, kELife, kEGap, kEEntryAt, kNumEmpty };
    std::vector<Phase> empty = {{"entry -> plan done", {}},
                                {"plan done -> exit", {}},
                                {"entry -> exit (the empty CTA's life)", {}},
                                {"gap: slot freed -> this CTA's entry, same SM", {}},
                                {"entry, us after the kernel's first entry (ns)", {}}};
    std::vector<int> empties_per_sm, works_per_sm;
    for (auto& v : by_sm) {
      int n_empty = 0, n_work = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        const unsigned long long* r = rec(v[i]);
        auto at = [&](int slot) { return static_cast<double>(r[slot]); };
        const double s = at(st::kStart);
        // The latest end on this SM before this entry (two CTAs can share an SM).
        double freed = -1;
        for (size_t j = 0; j < i; ++j) {
          const double e = static_cast<double>(rec(v[j])[st::kEnd]);
          if (e <= s) freed = std::max(freed, e);
        }
        const double entry_at = (r[st::kStartNs] - ns0) / 1000.0;
        if (r[st::kKind] == st::kKindWork) {
          ++n_work;
          const double tiles = at(st::kTiles);
          if (r[st::kPlanDone] != 0) work[kPlan].v.push_back(us(at(st::kPlanDone) - s));
          work[kRange].v.push_back(us(at(st::kRangeKnown) - s));
          work[kBarrierP].v.push_back(us(at(st::kBarrier) - at(st::kRangeKnown)));
          if (tiles > 0) {
            work[kProdFirst].v.push_back(us(at(st::kProducerFirst) - s));
            work[kFirstLanded].v.push_back(us(at(st::kFirstTile) - at(st::kProducerFirst)));
            work[kFirst].v.push_back(us(at(st::kFirstTile) - s));
            work[kLoop].v.push_back(us(at(st::kLoopEnd) - at(st::kFirstTile)));
            if (tiles > 1)
              work[kPerTile].v.push_back(us(at(st::kLoopEnd) - at(st::kFirstTile)) / (tiles - 1));
            work[kDrain].v.push_back(us(at(st::kLoopEnd) - at(st::kProducerLast)));
          }
          work[kQ].v.push_back(us(at(st::kQReady) - s));
          work[kEpi].v.push_back(us(at(st::kEnd) - at(st::kLoopEnd)));
          work[kCta].v.push_back(us(at(st::kEnd) - s));
          if (freed >= 0) work[kGap].v.push_back(us(s - freed));
          work[kEntryAt].v.push_back(entry_at);
          work[kEndAt].v.push_back((r[st::kEndNs] - ns0) / 1000.0);
        } else {
          ++n_empty;
          if (r[st::kPlanDone] != 0) {
            empty[kEPlan].v.push_back(us(at(st::kPlanDone) - s));
            empty[kEExit].v.push_back(us(at(st::kEnd) - at(st::kPlanDone)));
          }
          empty[kELife].v.push_back(us(at(st::kEnd) - s));
          if (freed >= 0) empty[kEGap].v.push_back(us(s - freed));
          empty[kEEntryAt].v.push_back(entry_at);
        }
      }
      empties_per_sm.push_back(n_empty);
      works_per_sm.push_back(n_work);
    }
    auto print = [&](const char* title, const std::vector<Phase>& ph) {
      std::printf("%-52s %6s %9s %9s %9s\n", title, "CTAs", "p10", "median", "p90");
      for (const Phase& p : ph) {
        const Stats s = stats(p.v);
        if (s.n == 0) continue;
        std::printf("%-52s %6zu %9.3f %9.3f %9.3f\n", p.name, s.n, s.p10, s.med, s.p90);
      }
    };
    print("CTAs with work (us)", work);
    std::vector<int> hist(8, 0);
    for (int n : works_per_sm) ++hist[std::min(n, 7)];
    std::printf("SMs by working CTAs run (0, 1, .., 7+):");
    for (int n : hist) std::printf(" %d", n);
    std::printf(" (SMs that ran no CTA at all are not seen)\n");
    if (!empty[kELife].v.empty()) {
      print("empty CTAs (us)", empty);
      int sms_with = 0, most = 0;
      for (int n : empties_per_sm) sms_with += n > 0, most = std::max(most, n);
      std::printf("empty CTAs ran on %d SMs, at most %d on one SM\n", sms_with, most);
      // Whether the empty CTAs slow the working CTA beside them: working CTAs on SMs that ran empty
      // CTAs against the others.
      std::vector<double> tile_with, tile_without, cta_with, cta_without;
      for (size_t m = 0; m < by_sm.size(); ++m) {
        for (int64_t c : by_sm[m]) {
          const unsigned long long* r = rec(c);
          if (r[st::kKind] != st::kKindWork || r[st::kTiles] < 2) continue;
          const double cta = us(static_cast<double>(r[st::kEnd] - r[st::kStart]));
          const double tile =
              us(static_cast<double>(r[st::kLoopEnd] - r[st::kFirstTile])) / (r[st::kTiles] - 1.0);
          (empties_per_sm[m] > 0 ? tile_with : tile_without).push_back(tile);
          (empties_per_sm[m] > 0 ? cta_with : cta_without).push_back(cta);
        }
      }
      const Stats tw = stats(tile_with), two = stats(tile_without), cw = stats(cta_with),
                  cwo = stats(cta_without);
      std::printf(
          "working CTAs on SMs with empty CTAs (%zu) / without (%zu): per tile median %.4f / %.4f us, CTA "
          "time median %.2f / %.2f us\n",
          tw.n, two.n, tw.med, two.med, cw.med, cwo.med);
    }
    std::printf("span, first entry -> last end (globaltimer): %.2f us; last working CTA's end %.2f us%s",
                (ns1 - ns0) / 1000.0, (ns1_work - ns0) / 1000.0, ns1_empty > 0 ? "" : "\n");
    if (ns1_empty > 0) std::printf(", last empty CTA's end %.2f us\n", (ns1_empty - ns0) / 1000.0);

    // Timelines: each CTA's entry (us after the kernel's first entry, globaltimer) and its phase
    // points (us after its entry, clock64).
    // Plus the first SM that ran empty CTAs, if none of the requested did.
    std::vector<int> timeline_sms = opt.show_sms;
    bool shown_empty = false;
    for (int sm : opt.show_sms)
      shown_empty |= sm >= 0 && sm < static_cast<int>(empties_per_sm.size()) && empties_per_sm[sm] > 0;
    for (size_t m = 0; m < empties_per_sm.size() && !shown_empty; ++m) {
      if (empties_per_sm[m] > 0) timeline_sms.push_back(static_cast<int>(m)), shown_empty = true;
    }
    for (int sm : timeline_sms) {
      if (sm < 0 || sm >= static_cast<int>(by_sm.size())) continue;
      const auto& v = by_sm[sm];
      std::printf(
          "SM %d timeline (%zu CTAs; first %d): cta kind seq @entry tiles | init tmap plan range barrier "
          "pbar issue prod1 Q first S^T second refill-iss refill-land loop end (us from entry)\n",
          sm, v.size(), opt.show_ctas);
      for (size_t i = 0; i < v.size() && static_cast<int>(i) < opt.show_ctas; ++i) {
        const unsigned long long* r = rec(v[i]);
        const double s = static_cast<double>(r[st::kStart]);
        auto rel = [&](int slot) { return r[slot] == 0 ? NAN : us(static_cast<double>(r[slot]) - s); };
        const char* kind = r[st::kKind] == st::kKindWork        ? "work"
                           : r[st::kKind] == st::kKindEmptySlot ? "emptyslot"
                                                                : "emptycols";
        std::printf(
            "  %6lld %-9s %4lld @%8.2f %4llu | %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f "
            "%5.2f %5.2f "
            "%5.2f %5.2f %8.2f %8.2f\n",
            static_cast<long long>(v[i]), kind, static_cast<long long>(r[st::kSeq]),
            (r[st::kStartNs] - ns0) / 1000.0, r[st::kTiles], rel(st::kBarrierInit), rel(st::kTmapPrefetch),
            rel(st::kPlanDone), rel(st::kRangeKnown), rel(st::kBarrier), rel(st::kProducerBarrier),
            rel(st::kProducerIssue), rel(st::kProducerFirst), rel(st::kQReady), rel(st::kFirstTile),
            rel(st::kScoresFirst), rel(st::kSecondTile), rel(st::kRefillIssued), rel(st::kRefillLanded),
            rel(st::kLoopEnd), rel(st::kEnd));
      }
    }

  }  // reps
  CHECK(cudaFree(dbuf));
  if (ws != nullptr) CHECK(cudaFree(ws));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaStreamDestroy(stream));
  return compact;
}

// The compact table: one column per run, a row per phase (see CompactRow).
void print_compact(const std::vector<Compact>& runs) {
  if (runs.empty()) return;
  std::printf(
      "\n== phases, median over working CTAs of all stamped launches; us after the launch's first entry "
      "(d: durations inside a CTA)\n%-40s",
      "phase");
  for (const Compact& c : runs) std::printf(" %20s", c.title.c_str());
  std::printf("\n");
  for (int row = 0; row < kCompactRows; ++row) {
    std::printf("%-40s", kCompactNames[row]);
    for (const Compact& c : runs) {
      const Stats s = stats(c.v[row]);
      if (s.n == 0) {
        std::printf(" %20s", "-");
      } else {
        std::printf(" %20.2f", s.med);
      }
    }
    std::printf("\n");
  }
  std::printf("%-40s", "samples (CTA x launch) with tiles");
  for (const Compact& c : runs) std::printf(" %20zu", stats(c.v[kAtFirstIssued]).n);
  std::printf("\n");
}

// One problem: its buffers, then the modes asked; returns the compact columns.
template <int kHeadDim>
std::vector<Compact> run_problem(const Problem& pr, const std::string& mode, const RunOptions& opt,
                                 Buffers buf) {
  const std::vector<int> lens = lengths_of(pr);
  const size_t q_elems = size_t{1} * pr.batch * pr.hq * kHeadDim;
  const size_t kv_elems = size_t{1} * pr.batch * pr.kv_len * pr.hkv * kHeadDim;
  CHECK(cudaMalloc(&buf.q, q_elems * sizeof(T)));
  CHECK(cudaMalloc(&buf.k, kv_elems * sizeof(T)));
  CHECK(cudaMalloc(&buf.v, kv_elems * sizeof(T)));
  CHECK(cudaMalloc(&buf.o, q_elems * sizeof(T)));
  CHECK(cudaMalloc(&buf.lse, size_t{1} * pr.hq * pr.batch * sizeof(float)));
  CHECK(cudaMalloc(&buf.seqlens, size_t{1} * pr.batch * sizeof(int32_t)));
  CHECK(cudaMemcpy(buf.seqlens, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  fill_bf16<<<1024, 256>>>(buf.q, q_elems, 1u);
  fill_bf16<<<1024, 256>>>(buf.k, kv_elems, 2u);
  fill_bf16<<<1024, 256>>>(buf.v, kv_elems, 3u);
  CHECK(cudaGetLastError());
  long long total_keys = 0;
  for (int x : lens) total_keys += x;
  std::printf("\nlengths (%s): total %lld keys, K+V %.1f MB read; first 8:", pr.mixed ? "mixed" : "equal",
              total_keys, 2.0 * total_keys * pr.hkv * kHeadDim * sizeof(T) / 1e6);
  for (int b = 0; b < std::min(8, pr.batch); ++b) std::printf(" %d", lens[b]);
  std::printf("; %d SMs\n", opt.sms);
  std::vector<Compact> out;
  // The list needs the lengths on the device and two or more sequences (list_plan's gate).
  const bool list_ok = pr.seqlens && pr.batch >= 2;
  if ((mode == "both" || mode == "list") && !list_ok) {
    std::printf("(work list skipped: it needs --seqlens 1 and --batch >= 2)\n");
  }
  if ((mode == "both" || mode == "list") && list_ok) out.push_back(run_mode<kHeadDim>(pr, buf, true, opt));
  if (mode == "both" || mode == "ordinary") out.push_back(run_mode<kHeadDim>(pr, buf, false, opt));
  CHECK(cudaFree(buf.q));
  CHECK(cudaFree(buf.k));
  CHECK(cudaFree(buf.v));
  CHECK(cudaFree(buf.o));
  CHECK(cudaFree(buf.lse));
  CHECK(cudaFree(buf.seqlens));
  return out;
}

std::vector<Compact> run_any(const Problem& pr, const std::string& mode, const RunOptions& opt,
                             const Buffers& buf) {
  switch (pr.d) {
    case 64:
      return run_problem<64>(pr, mode, opt, buf);
    case 256:
      return run_problem<256>(pr, mode, opt, buf);
    default:
      return run_problem<128>(pr, mode, opt, buf);
  }
}

int main(int argc, char** argv) {
  Problem pr;
  std::string mode = "both", suite;
  RunOptions opt;
  opt.show_sms = {0, 66};
  bool flush = true, verbose_set = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], val = argv[i + 1];
    if (a == "--heads") {
      std::sscanf(val.c_str(), "%d/%d", &pr.hq, &pr.hkv);
    } else if (a == "--head-dim") {
      pr.d = std::atoi(val.c_str());
    } else if (a == "--batch") {
      pr.batch = std::atoi(val.c_str());
    } else if (a == "--kv-len") {
      pr.kv_len = std::atoi(val.c_str());
    } else if (a == "--mixed") {
      pr.mixed = std::atoi(val.c_str()) != 0;
    } else if (a == "--seqlens") {
      pr.seqlens = std::atoi(val.c_str()) != 0;
    } else if (a == "--mode") {
      mode = val;
    } else if (a == "--suite") {
      suite = val;
    } else if (a == "--reps") {
      opt.reps = std::atoi(val.c_str());
    } else if (a == "--flush") {
      flush = std::atoi(val.c_str()) != 0;
    } else if (a == "--verbose") {
      opt.verbose = std::atoi(val.c_str()) != 0, verbose_set = true;
    } else if (a == "--ctas") {
      opt.show_ctas = std::atoi(val.c_str());
    } else if (a == "--sms") {
      opt.show_sms.clear();
      for (size_t p = 0; p < val.size();) {
        opt.show_sms.push_back(std::atoi(val.c_str() + p));
        const size_t c = val.find(',', p);
        p = c == std::string::npos ? val.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  // Section 24's one-token rows (docs/DECODE_SM90.md), as the CLI runs them: no cache_seqlens, so
  // the ordinary plan (workspace + combine or cluster, as the engine chooses).
  std::vector<Problem> problems;
  if (suite == "section24") {
    const int rows[5][5] = {{16, 1, 64, 32, 4096},
                            {16, 1, 64, 1, 8192},
                            {8, 1, 128, 1, 8192},
                            {64, 8, 128, 1, 8192},
                            {32, 2, 256, 1, 8192}};
    for (const auto& r : rows) {
      Problem x;
      x.hq = r[0], x.hkv = r[1], x.d = r[2], x.batch = r[3], x.kv_len = r[4];
      x.mixed = false, x.seqlens = false;
      problems.push_back(x);
    }
    mode = "ordinary";
    if (!verbose_set) opt.verbose = false;
  } else if (!suite.empty()) {
    std::fprintf(stderr, "unknown suite %s (section24)\n", suite.c_str());
    return 2;
  } else {
    problems.push_back(pr);
  }
  for (const Problem& x : problems) {
    if (x.hkv <= 0 || x.hq % x.hkv != 0 || x.hq / x.hkv > s90::kMaxCols || x.batch < 1 ||
        x.batch > ga::cuda_engine::kListMaxBatch || x.kv_len < 1 || (x.d != 64 && x.d != 128 && x.d != 256)) {
      std::fprintf(stderr,
                   "need Hq a multiple of Hkv (group <= %d), 1 <= batch <= %d, kv-len >= 1, head dim 64, "
                   "128 or 256\n",
                   s90::kMaxCols, ga::cuda_engine::kListMaxBatch);
      return 2;
    }
  }
  CHECK(cudaDeviceGetAttribute(&opt.sms, cudaDevAttrMultiProcessorCount, 0));
  Buffers shared;
  int l2_bytes = 0;
  CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
  if (flush) {  // 4x L2 (>= 256 MiB), read through before each stamped launch
    const size_t bytes = std::max<size_t>(size_t{256} << 20, size_t{4} * static_cast<size_t>(l2_bytes));
    uint4* f = nullptr;
    CHECK(cudaMalloc(&f, bytes));
    CHECK(cudaMemset(f, 1, bytes));
    shared.flush = f, shared.flush_words = bytes / sizeof(uint4);
  }
  CHECK(cudaMalloc(&shared.sink, sizeof(unsigned)));
  CHECK(cudaMalloc(&shared.probe, sizeof(unsigned long long)));
  std::printf(
      "decode-phase-stamps: stamps variant %d (%s), %d stamped launches a mode%s, L2 %d MB\n", st::kVariant,
      st::kVariant == st::kVariantNoTmapPrefetch ? "no prefetch.tensormap"
      : st::kVariant == st::kVariantTmaL2First   ? "TMA L2 prefetch of the first tile before the barrier"
                                                 : "the library's prologue",
      std::max(1, opt.reps), flush ? ", each after an L2 flush" : "", l2_bytes >> 20);
  std::vector<Compact> all;
  for (const Problem& x : problems) {
    std::vector<Compact> c = run_any(x, mode, opt, shared);
    all.insert(all.end(), c.begin(), c.end());
  }
  print_compact(all);
  if (shared.flush != nullptr) CHECK(cudaFree(const_cast<uint4*>(shared.flush)));
  CHECK(cudaFree(shared.sink));
  CHECK(cudaFree(shared.probe));
  return 0;
}

// Head dims 64 and 256: decode_kernel.cuh declares them extern (the library builds them in their
// own translation units); this standalone tool instantiates them here.
namespace groupattn::sm90_engine {
template Status launch_decode_head_dim<__nv_bfloat16, 64>(const cuda_engine::KernelParams&,
                                                          const DecodeLaunch&, cudaStream_t);
template Status launch_decode_head_dim<__nv_bfloat16, 256>(const cuda_engine::KernelParams&,
                                                           const DecodeLaunch&, cudaStream_t);
}  // namespace groupattn::sm90_engine
