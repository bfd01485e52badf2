// Where the time of one sm90 decode CTA goes, without counters (docs/DECODE_SM90.md section 20,
// "Decode phase stamps"). Compiles the swap-AB decode kernel with GROUPATTN_DECODE_PHASE_STAMPS (so
// each CTA writes clock64 stamps at its phase points, decode_phase_stamps.cuh), builds a batched
// bf16 decode problem (Hq / Hkv, D 128, B sequences in a cache of L keys, one new token, per-sequence
// lengths in cache_seqlens on the device, equal or mixed), and launches it through the engine's
// launcher (launch_decode_head_dim, which also runs the combine) twice, as sm90_engine.cu would:
//   list      the work-list mode: P = list_plane_wave, list_slot_bound(P, B) slots, its workspace
//             (decode_work_list.h), list_heads_fastest / list_uniform_fast as the engine's switches
//             (GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST, ..._UNIFORM_FAST; default on)
//   ordinary  the split planner's count (auto_decode_splits), cluster_reduction's choice, the split
//             workspace (split_workspace.h)
// and prints per mode the launcher's time (mean of 10; the combine alone, mean of 10), the stamped
// launch's time, per phase the median / p10 / p90 over CTAs with work and over empty CTAs, the gap
// between a freed CTA slot on an SM and the next CTA's entry there, the span from the first entry to
// the last end, and the timelines of a few SMs. Standalone: headers, plus the split planner's
// self-contained split_planner.cpp on the nvcc line (auto_decode_splits calls it); no library. Whether the
// engine itself takes the list for the problem is list_plan's gate in sm90_engine.cu (it does for
// the documented runs); here the list is always run.
//
//   (one line) nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude -Isrc -DGROUPATTN_WITH_CUDA=1
//   --expt-relaxed-constexpr
//        -DGROUPATTN_DECODE_PHASE_STAMPS scripts/decode-phase-stamps.cu
//        src/attention/engines/cuda/split_planner.cpp -o build-gpu/decode-phase-stamps
//   build-gpu/decode-phase-stamps [--heads 8/1] [--batch 32] [--kv-len 32768] [--mixed 0|1]
//                                 [--mode both|list|ordinary] [--sms 0,66] [--ctas 12]
// --mixed 1: the lengths of bench/matrices.py mixed_lengths(32, 32768) (seed 0) for B 32 x L 32768;
// other shapes: a fixed LCG draw from [1, L] with the first sequence L (mixed_lengths' rule).
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

#include "attention/engines/cuda/split_workspace.h"
#include "attention/engines/sm90/decode_kernel.cuh"
#include "attention/engines/sm90/decode_split_plan.h"
#include "attention/engines/cuda/decode_work_list.h"
#include "attention/engines/sm90/engine_checks.h"
#include "attention/engines/sm90/tma_desc.h"

// The launcher's host_timing marks are off (host_timing::enabled stays false), so record is never
// called; defined here because the library that holds it is not linked.
namespace groupattn::host_timing {
void record(const char*, bool) {}
}  // namespace groupattn::host_timing

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

constexpr int kHeadDim = 128;
using T = __nv_bfloat16;

struct Problem {
  int hq = 8, hkv = 1, batch = 32, kv_len = 32768;
  bool mixed = false;
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
};

void run_mode(const Problem& pr, const Buffers& buf, bool list, int sms, const std::vector<int>& show_sms,
              int show_ctas) {
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
  kp.seqlens_k = buf.seqlens;
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
  const int plane_wave = ga::cuda_engine::list_plane_wave(sms, s90::split_wave_of(shape), pr.hkv, m_blocks);
  const int64_t slots = ga::cuda_engine::list_slot_bound(plane_wave, pr.batch);
  void* ws = nullptr;
  int64_t ctas = 0;
  if (list) {
    const size_t bytes = ga::cuda_engine::list_workspace_bytes(slots, 1, pr.hq, kHeadDim, pr.batch);
    CHECK(cudaMalloc(&ws, bytes));
    kp.num_splits = static_cast<int>(slots);
    kp.cluster_reduce = false;
    ga::cuda_engine::set_split_workspace(&kp, ws, 1, kHeadDim);  // partial_rows = max_q x Hq
    kp.seq_splits = reinterpret_cast<int32_t*>(static_cast<char*>(ws) +
                                               ga::cuda_engine::list_partials_bytes(slots, 1, pr.hq, kHeadDim));
    kp.list_plane_wave = plane_wave;
    kp.list_heads_fastest =
        env_on("GROUPATTN_SM90_DECODE_LIST_HEADS_FASTEST", true) && slots * m_blocks <= s90::kMaxGridYZ;
    kp.list_uniform_fast = env_on("GROUPATTN_SM90_DECODE_LIST_UNIFORM_FAST", true);
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
  const bool combines = list || (splits > 1 && !kp.cluster_reduce);
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  time_of(3, decode);
  const double us_plain = time_of(10, decode);
  // The combine alone (after a decode launch wrote the partials and, list mode, the counts).
  const double us_combine =
      combines ? time_of(10, [&] { return s90::launch_split_combine<T, kHeadDim>(kp, stream); }) : 0.0;
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &dbuf, sizeof(dbuf)));
  CHECK(cudaMemset(dbuf, 0, rec_bytes));
  const double us_stamped = time_of(1, decode);
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  std::vector<unsigned long long> h(static_cast<size_t>(ctas) * st::kSlots);
  CHECK(cudaMemcpy(h.data(), dbuf, rec_bytes, cudaMemcpyDeviceToHost));
  std::vector<T> o_host(static_cast<size_t>(pr.batch) * pr.hq * kHeadDim);
  CHECK(cudaMemcpy(o_host.data(), buf.o, o_host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  int nonfinite = 0;
  for (const T& x : o_host) nonfinite += !std::isfinite(__bfloat162float(x));

  std::printf("\n== decode bf16 %d/%d d%d B%d x %d one token, %s lengths; mode %s\n", pr.hq, pr.hkv, kHeadDim,
              pr.batch, pr.kv_len, pr.mixed ? "mixed" : "equal", list ? "WORK LIST" : "ORDINARY");
  if (list) {
    std::printf(
        "list: P %d, slots %lld per plane, grid %lld CTAs (%s), uniform shortcut %d; planner's ordinary "
        "count %d\n",
        plane_wave, static_cast<long long>(slots), static_cast<long long>(ctas),
        kp.list_heads_fastest ? "heads fastest" : "plane-major", kp.list_uniform_fast ? 1 : 0, splits);
  } else {
    std::printf("ordinary: %d splits, %s, grid %lld CTAs, column tile %d\n", splits,
                splits == 1         ? "no combine"
                : kp.cluster_reduce ? "cluster reduction (if the clusters fit)"
                                    : "workspace + combine",
                static_cast<long long>(ctas), col_tile);
  }
  std::printf(
      "launcher time: %.2f us unstamped (decode%s, mean of 10); combine alone %.2f us (mean of 10); "
      "stamped %.2f us (one launch); O non-finite: %d\n",
      us_plain, combines ? " + combine" : "", us_combine, us_stamped, nonfinite);

  // Per SM: its CTAs in entry order.
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
      if (r[st::kKind] == st::kKindWork && dn >= 5000.0) ghz_v.push_back((r[st::kEnd] - r[st::kStart]) / dn);
    }
  }
  const double ghz = ghz_v.empty() ? 1.755 : stats(ghz_v).med;
  auto us = [&](double cycles) { return cycles / (ghz * 1000.0); };
  std::printf(
      "SMs seen %zu, CTAs without a record %d, SM clock %.3f GHz (clock64 / globaltimer, median over "
      "working CTAs%s)\n",
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
          if (tiles > 1) work[kPerTile].v.push_back(us(at(st::kLoopEnd) - at(st::kFirstTile)) / (tiles - 1));
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
  std::vector<int> timeline_sms = show_sms;
  bool shown_empty = false;
  for (int sm : show_sms)
    shown_empty |= sm >= 0 && sm < static_cast<int>(empties_per_sm.size()) && empties_per_sm[sm] > 0;
  for (size_t m = 0; m < empties_per_sm.size() && !shown_empty; ++m) {
    if (empties_per_sm[m] > 0) timeline_sms.push_back(static_cast<int>(m)), shown_empty = true;
  }
  for (int sm : timeline_sms) {
    if (sm < 0 || sm >= static_cast<int>(by_sm.size())) continue;
    const auto& v = by_sm[sm];
    std::printf(
        "SM %d timeline (%zu CTAs; first %d): cta kind seq @entry tiles | plan range barrier prod1 Q "
        "first loop end (us from entry)\n",
        sm, v.size(), show_ctas);
    for (size_t i = 0; i < v.size() && static_cast<int>(i) < show_ctas; ++i) {
      const unsigned long long* r = rec(v[i]);
      const double s = static_cast<double>(r[st::kStart]);
      auto rel = [&](int slot) { return r[slot] == 0 ? NAN : us(static_cast<double>(r[slot]) - s); };
      const char* kind = r[st::kKind] == st::kKindWork        ? "work"
                         : r[st::kKind] == st::kKindEmptySlot ? "emptyslot"
                                                              : "emptycols";
      std::printf("  %6lld %-9s %4lld @%8.2f %4llu | %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %8.2f %8.2f\n",
                  static_cast<long long>(v[i]), kind, static_cast<long long>(r[st::kSeq]),
                  (r[st::kStartNs] - ns0) / 1000.0, r[st::kTiles], rel(st::kPlanDone), rel(st::kRangeKnown),
                  rel(st::kBarrier), rel(st::kProducerFirst), rel(st::kQReady), rel(st::kFirstTile),
                  rel(st::kLoopEnd), rel(st::kEnd));
    }
  }
  CHECK(cudaFree(dbuf));
  if (ws != nullptr) CHECK(cudaFree(ws));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
  Problem pr;
  std::string mode = "both";
  std::vector<int> sms_shown = {0, 66};
  int show = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], val = argv[i + 1];
    if (a == "--heads") {
      std::sscanf(val.c_str(), "%d/%d", &pr.hq, &pr.hkv);
    } else if (a == "--batch") {
      pr.batch = std::atoi(val.c_str());
    } else if (a == "--kv-len") {
      pr.kv_len = std::atoi(val.c_str());
    } else if (a == "--mixed") {
      pr.mixed = std::atoi(val.c_str()) != 0;
    } else if (a == "--mode") {
      mode = val;
    } else if (a == "--ctas") {
      show = std::atoi(val.c_str());
    } else if (a == "--sms") {
      sms_shown.clear();
      for (size_t p = 0; p < val.size();) {
        sms_shown.push_back(std::atoi(val.c_str() + p));
        const size_t c = val.find(',', p);
        p = c == std::string::npos ? val.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (pr.hkv <= 0 || pr.hq % pr.hkv != 0 || pr.hq / pr.hkv > s90::kMaxCols || pr.batch < 2 ||
      pr.batch > ga::cuda_engine::kListMaxBatch || pr.kv_len < 1) {
    std::fprintf(stderr, "need Hq a multiple of Hkv (group <= %d), 2 <= batch <= %d, kv-len >= 1\n",
                 s90::kMaxCols, ga::cuda_engine::kListMaxBatch);
    return 2;
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::vector<int> lens = lengths_of(pr);
  Buffers buf;
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
  std::printf("lengths (%s): total %lld keys, K+V %.1f MB read; first 8:", pr.mixed ? "mixed" : "equal",
              total_keys, 2.0 * total_keys * pr.hkv * kHeadDim * sizeof(T) / 1e6);
  for (int b = 0; b < std::min(8, pr.batch); ++b) std::printf(" %d", lens[b]);
  std::printf("; %d SMs\n", sms);
  if (mode == "both" || mode == "list") run_mode(pr, buf, true, sms, sms_shown, show);
  if (mode == "both" || mode == "ordinary") run_mode(pr, buf, false, sms, sms_shown, show);
  CHECK(cudaFree(buf.q));
  CHECK(cudaFree(buf.k));
  CHECK(cudaFree(buf.v));
  CHECK(cudaFree(buf.o));
  CHECK(cudaFree(buf.lse));
  CHECK(cudaFree(buf.seqlens));
  return 0;
}
