// Where the time of one sm90 prefill CTA goes, without counters (docs/PREFILL_SM90.md, "Where a
// short CTA's time goes"). Compiles the prefill kernel with GROUPATTN_PREFILL_PHASE_STAMPS (so each
// CTA writes clock64 stamps at its phase points, prefill_phase_stamps.cuh), launches it through the
// engine's launcher (launch_prefill_traits, the grid order sm90_prefill_engine.cu picks) on a
// batched bf16 problem, causal and full, and prints per phase the median / p10 / p90 over CTAs,
// the gap between consecutive CTAs on one SM, a least-squares fit of CTA time = a + b x KV tiles
// (a: the per-CTA fixed cost), and the timeline of a few SMs. Standalone: headers only, no library.
//
//   (one line) nvcc -std=c++17 -arch=sm_90a -O3 -Iinclude -Isrc -DGROUPATTN_WITH_CUDA=1
//   --expt-relaxed-constexpr
//        -DGROUPATTN_PREFILL_PHASE_STAMPS scripts/prefill-phase-stamps.cu -o build-gpu/prefill-phase-stamps
//   build-gpu/prefill-phase-stamps [--heads 64/8] [--head-dim 128|256] [--batch 8] [--seq-len 2048]
//                                  [--mode both|causal|full] [--sms 0,1,66] [--ctas 8]
//   GROUPATTN_SM90_PREFILL_Q_AHEAD=1 in the environment: the form that prefetches a later CTA's Q;
//   GROUPATTN_SM90_PREFILL_EARLY_LOADS (default on, =0 off): thread 0 issues Q and the first KV tile before the CTA
//   barrier (the "producer's first TMA" stamp is then thread 0's, before that barrier);
//   GROUPATTN_SM90_PREFILL_STSM_EPILOGUE (default on, =0 off): the staged epilogue's shared-memory writes by stmatrix;
//   GROUPATTN_SM90_PREFILL_TMA_STORE_O=1: O leaves by TMA stores, each consumer warp its 16 rows (d 128 / 256); the
//   "epilogue end" stamps are then warp 0's of each warpgroup after its stores' shared-memory reads;
//   GROUPATTN_SM90_PREFILL_D256_N80=1 (head dim 256): the 80-key form (PrefillTraitsD256N80).
#ifndef GROUPATTN_PREFILL_PHASE_STAMPS
#error "build with -DGROUPATTN_PREFILL_PHASE_STAMPS (see the file's first lines)"
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

#include "attention/engines/sm90/prefill_kernel.cuh"
#include "attention/engines/sm90/tma_desc.h"

namespace ga = groupattn;
namespace st = groupattn::sm90_engine::prefill_stamps;
using Rec = std::vector<unsigned long long>;

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

struct Problem {
  int hq = 64, hkv = 8, d = 128, batch = 8, seq = 2048;
};

struct Stats {
  double p10, med, p90;
};
static Stats stats(std::vector<double> v) {
  if (v.empty()) return {NAN, NAN, NAN};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)]; };
  return {at(0.1), at(0.5), at(0.9)};
}

template <class Traits>
static void run_mode(const Problem& pr, bool causal, const std::vector<int>& show_sms, int show_ctas) {
  using T = __nv_bfloat16;
  const size_t q_elems = size_t{1} * pr.batch * pr.seq * pr.hq * pr.d;
  const size_t kv_elems = size_t{1} * pr.batch * pr.seq * pr.hkv * pr.d;
  T *q, *k, *v, *o;
  float* lse;
  CHECK(cudaMalloc(&q, q_elems * sizeof(T)));
  CHECK(cudaMalloc(&k, kv_elems * sizeof(T)));
  CHECK(cudaMalloc(&v, kv_elems * sizeof(T)));
  CHECK(cudaMalloc(&o, q_elems * sizeof(T)));
  CHECK(cudaMalloc(&lse, size_t{1} * pr.hq * pr.batch * pr.seq * sizeof(float)));
  fill_bf16<<<1024, 256>>>(q, q_elems, 1u);
  fill_bf16<<<1024, 256>>>(k, kv_elems, 2u);
  fill_bf16<<<1024, 256>>>(v, kv_elems, 3u);
  CHECK(cudaGetLastError());

  ga::cuda_engine::KernelParams kp;
  kp.q = q;
  kp.k = k;
  kp.v = v;
  kp.out = o;
  kp.lse = lse;
  // [B, S, H, D] element strides; LSE [Hq, B * S].
  kp.q_batch_stride = int64_t{pr.seq} * pr.hq * pr.d, kp.q_row_stride = int64_t{pr.hq} * pr.d,
  kp.q_head_stride = pr.d;
  kp.k_batch_stride = int64_t{pr.seq} * pr.hkv * pr.d, kp.k_row_stride = int64_t{pr.hkv} * pr.d,
  kp.k_head_stride = pr.d;
  kp.v_batch_stride = kp.k_batch_stride, kp.v_row_stride = kp.k_row_stride, kp.v_head_stride = pr.d;
  kp.o_batch_stride = kp.q_batch_stride, kp.o_row_stride = kp.q_row_stride, kp.o_head_stride = pr.d;
  kp.lse_head_stride = int64_t{pr.batch} * pr.seq, kp.lse_row_stride = 1;
  kp.batch = pr.batch, kp.seqlen_q = pr.seq, kp.seqlen_k = pr.seq;
  kp.heads_q = pr.hq, kp.heads_kv = pr.hkv, kp.group = pr.hq / pr.hkv;
  kp.scale = 1.f / std::sqrt(static_cast<float>(pr.d));
  kp.causal = causal;
  kp.num_splits = 1;
  kp.m_blocks = (pr.seq + Traits::kBlockM - 1) / Traits::kBlockM;

  auto map_of = [&](const T* base, int heads, int box_rows, CUtensorMap* m) {
    ga::sm90_engine::KvMapShape s;
    s.base = base;
    s.d = pr.d, s.heads = heads, s.rows = pr.seq, s.outer = pr.batch;
    s.head_stride = pr.d, s.row_stride = int64_t{heads} * pr.d,
    s.outer_stride = int64_t{pr.seq} * heads * pr.d;
    CHECK_STATUS(ga::sm90_engine::encode_kv_map(s, box_rows, m));
  };
  CUtensorMap qm, km, vm, om;
  map_of(q, pr.hq, Traits::kQBoxRows, &qm);
  map_of(k, pr.hkv, Traits::kBlockN, &km);
  map_of(v, pr.hkv, Traits::kBlockN, &vm);
  ga::sm90_engine::PrefillLaunch l;
  l.q_tmap = &qm, l.k_tmap = &km, l.v_tmap = &vm, l.head_dim = pr.d;
  const int64_t kv_seq_bytes = int64_t{2} * pr.seq * pr.hkv * pr.d * 2;  // the engine's heads_fastest rule
  l.heads_fastest = causal && kv_seq_bytes <= (int64_t{16} << 20) && kp.m_blocks <= 65535;
  const char* ahead = std::getenv("GROUPATTN_SM90_PREFILL_Q_AHEAD");  // as the engine reads it
  l.q_prefetch_ahead = ahead != nullptr && std::atoi(ahead) != 0;
  const char* early = std::getenv("GROUPATTN_SM90_PREFILL_EARLY_LOADS");
  l.early_first_loads = early == nullptr || std::atoi(early) != 0;  // the engine's default: on
  const char* stsm = std::getenv("GROUPATTN_SM90_PREFILL_STSM_EPILOGUE");
  l.stsm_epilogue = stsm == nullptr || std::atoi(stsm) != 0;  // the engine's default: on (d 128 / 256)
  const char* tma_o = std::getenv("GROUPATTN_SM90_PREFILL_TMA_STORE_O");
  if (tma_o == nullptr || std::atoi(tma_o) != 0) {  // the engine's default: on (d 128 / 256); batched Q as here
    map_of(o, pr.hq, Traits::kOBoxRows, &om);
    l.o_tmap = &om;
    l.tma_store_o = true;
  }

  const int ctas = kp.m_blocks * pr.hq * pr.batch;
  unsigned long long* dbuf;
  CHECK(cudaMalloc(&dbuf, size_t{1} * ctas * st::kSlots * sizeof(unsigned long long)));
  unsigned long long* null_buf = nullptr;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_launches = [&](int n) {
    CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < n; ++i) CHECK_STATUS(ga::sm90_engine::launch_prefill_traits<Traits>(kp, l, stream));
    CHECK(cudaEventRecord(e1, stream));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return 1000.0 * ms / n;
  };
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  time_launches(3);
  const double us_plain = time_launches(10);
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &dbuf, sizeof(dbuf)));
  CHECK(cudaMemset(dbuf, 0, size_t{1} * ctas * st::kSlots * sizeof(unsigned long long)));
  const double us_stamped = time_launches(1);
  CHECK(cudaMemcpyToSymbol(st::g_stamps, &null_buf, sizeof(null_buf)));
  std::vector<unsigned long long> h(size_t{1} * ctas * st::kSlots);
  CHECK(cudaMemcpy(h.data(), dbuf, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::vector<T> o_sample(1 << 20);
  CHECK(cudaMemcpy(o_sample.data(), o, o_sample.size() * sizeof(T), cudaMemcpyDeviceToHost));
  int nonfinite = 0;
  for (const T& x : o_sample) nonfinite += !std::isfinite(__bfloat162float(x));

  std::printf(
      "\n== prefill bf16 %d/%d d%d B%d S%d %s: %d CTAs (%s), %d threads, Q ahead %d, early loads %d, stsm "
      "epilogue %d, TMA store of O %d, %d-key tiles\n",
      pr.hq, pr.hkv, pr.d, pr.batch, pr.seq, causal ? "causal" : "full", ctas,
      l.heads_fastest ? "heads fastest" : "query tiles fastest", Traits::kThreads, l.q_prefetch_ahead ? 1 : 0,
      l.early_first_loads ? 1 : 0, l.stsm_epilogue ? 1 : 0, l.tma_store_o && Traits::kTmaStoreO ? 1 : 0,
      Traits::kBlockN);
  std::printf(
      "kernel time: %.1f us unstamped (mean of 10), %.1f us stamped (one launch); O sample non-finite: %d\n",
      us_plain, us_stamped, nonfinite);

  // Per SM: its CTAs in start order. The SM clock in GHz from clock64 against globaltimer over the SM's span.
  auto rec = [&](int c) { return &h[size_t{1} * c * st::kSlots]; };
  int max_sm = 0;
  for (int c = 0; c < ctas; ++c) max_sm = std::max<int>(max_sm, static_cast<int>(rec(c)[st::kSmId]));
  std::vector<std::vector<int>> by_sm(max_sm);
  int missing = 0;
  for (int c = 0; c < ctas; ++c) {
    const unsigned long long* r = rec(c);
    if (r[st::kSmId] == 0 || r[st::kEpiEnd0] == 0 || r[st::kEpiEnd1] == 0) {
      ++missing;
      continue;
    }
    by_sm[r[st::kSmId] - 1].push_back(c);
  }
  std::vector<double> ghz_v;
  unsigned long long ns0 = ~0ull, ns1 = 0;
  for (auto& v : by_sm) {
    std::sort(v.begin(), v.end(), [&](int a, int b) { return rec(a)[st::kStart] < rec(b)[st::kStart]; });
    if (v.empty()) continue;
    ns0 = std::min(ns0, rec(v.front())[st::kStartNs]);
    ns1 = std::max(ns1, rec(v.back())[st::kEndNs]);
    if (v.size() < 2) continue;
    const double dc = static_cast<double>(rec(v.back())[st::kStart] - rec(v.front())[st::kStart]);
    const double dn = static_cast<double>(rec(v.back())[st::kStartNs] - rec(v.front())[st::kStartNs]);
    if (dn > 0) ghz_v.push_back(dc / dn);
  }
  const double ghz = stats(ghz_v).med;
  auto us = [&](double cycles) { return cycles / (ghz * 1000.0); };
  std::printf(
      "SMs seen %zu, CTAs without a full record %d, SM clock %.3f GHz (clock64 / globaltimer, median over "
      "SMs)\n",
      by_sm.size(), missing, ghz);

  // Phases per CTA (us).
  struct Phase {
    const char* name;
    std::vector<double> v;
  };
  std::vector<Phase> ph = {{"entry -> consumers ready (init, __syncthreads, setmaxnreg)", {}},
                           {"entry -> producer's first TMA", {}},
                           {"consumers ready -> Q landed", {}},
                           {"entry -> first KV stage landed", {}},
                           {"Q landed -> first stage landed (~0: Q was the later)", {}},
                           {"first stage -> first S done, wg0", {}},
                           {"first S done wg0 -> wg1", {}},
                           {"first S done -> loop end, wg0", {}},
                           {"  per computed tile after the first, wg0", {}},
                           {"loop end -> epilogue end, wg0", {}},
                           {"loop end -> epilogue end, wg1", {}},
                           {"producer's last TMA -> CTA's last epilogue end", {}},
                           {"entry -> last epilogue end (CTA time)", {}},
                           {"outside the loop: CTA time - wg0 loop", {}},
                           {"gap: last epilogue end -> next CTA's entry, same SM", {}},
                           {"first TMA -> Q landed", {}},
                           {"first TMA -> first K (stage) landed", {}}};
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  std::vector<double> by_tiles_sum(1024, 0.0), by_tiles_n(1024, 0.0);
  double busy_cycles = 0, gap_cycles = 0;
  for (auto& v : by_sm) {
    for (size_t i = 0; i < v.size(); ++i) {
      const unsigned long long* r = rec(v[i]);
      const double s = static_cast<double>(r[st::kStart]);
      const double end = static_cast<double>(std::max(r[st::kEpiEnd0], r[st::kEpiEnd1]));
      const double tiles = static_cast<double>(r[st::kTiles]);
      auto at = [&](int slot) { return static_cast<double>(r[slot]); };
      ph[0].v.push_back(us(at(st::kReady) - s));
      ph[1].v.push_back(us(at(st::kProducerStart) - s));
      ph[2].v.push_back(us(at(st::kQLanded) - at(st::kReady)));
      ph[3].v.push_back(us(at(st::kFirstK) - s));
      ph[4].v.push_back(us(at(st::kFirstK) - at(st::kQLanded)));
      ph[5].v.push_back(us(at(st::kFirstS0) - at(st::kFirstK)));
      ph[6].v.push_back(us(at(st::kFirstS1) - at(st::kFirstS0)));
      ph[7].v.push_back(us(at(st::kLoopEnd0) - at(st::kFirstS0)));
      if (tiles > 1) ph[8].v.push_back(us(at(st::kLoopEnd0) - at(st::kFirstS0)) / (tiles - 1));
      ph[9].v.push_back(us(at(st::kEpiEnd0) - at(st::kLoopEnd0)));
      ph[10].v.push_back(us(at(st::kEpiEnd1) - at(st::kLoopEnd1)));
      ph[11].v.push_back(us(end - at(st::kProducerDone)));
      ph[12].v.push_back(us(end - s));
      ph[13].v.push_back(us(end - s - (at(st::kLoopEnd0) - at(st::kFirstS0))));
      ph[15].v.push_back(us(at(st::kQLanded) - at(st::kProducerStart)));
      ph[16].v.push_back(us(at(st::kFirstK) - at(st::kProducerStart)));
      busy_cycles += end - s;
      if (i + 1 < v.size()) {
        const double g = static_cast<double>(rec(v[i + 1])[st::kStart]) - end;
        ph[14].v.push_back(us(g));
        gap_cycles += g;
      }
      sx += tiles, sy += us(end - s), sxx += tiles * tiles, sxy += tiles * us(end - s), n += 1;
      if (tiles < 1024)
        by_tiles_sum[static_cast<size_t>(tiles)] += us(end - s), by_tiles_n[static_cast<size_t>(tiles)] += 1;
    }
  }
  std::printf("%-56s %9s %9s %9s\n", "phase (us per CTA)", "p10", "median", "p90");
  for (const Phase& p : ph) {
    const Stats s = stats(p.v);
    std::printf("%-56s %9.3f %9.3f %9.3f\n", p.name, s.p10, s.med, s.p90);
  }
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - b * sx) / n;
  if (causal) {
    std::printf(
        "fit CTA time = a + b x tiles over %d CTAs: a = %.3f us (per-CTA fixed cost), b = %.3f us per tile\n",
        static_cast<int>(n), a, b);
  } else {
    std::printf("(full: every CTA has the same tiles, no fit; mean CTA time %.3f us, %.0f tiles)\n", sy / n,
                sx / n);
  }
  std::printf("mean CTA time by tiles:");
  for (int t = 0; t < 1024; ++t)
    if (by_tiles_n[t] > 0) std::printf(" %d:%.2f", t, by_tiles_sum[t] / by_tiles_n[t]);
  std::printf(
      "\nSM time between the first entry and the last epilogue end (globaltimer): %.1f us; of the SMs' "
      "summed time inside that, in CTAs %.1f %%, in gaps between CTAs %.2f %%\n",
      (ns1 - ns0) / 1000.0, 100.0 * us(busy_cycles) / (by_sm.size() * (ns1 - ns0) / 1000.0),
      100.0 * us(gap_cycles) / (by_sm.size() * (ns1 - ns0) / 1000.0));

  // Timeline of a few SMs: each CTA's entry (us from the kernel's first entry, globaltimer) and its
  // phase points (us from its entry, clock64).
  for (int sm : show_sms) {
    if (sm < 0 || sm >= static_cast<int>(by_sm.size())) continue;
    std::printf(
        "SM %d timeline (%zu CTAs; first %d): entry@us tiles | ready Q K0 S0 S1 loop0 loop1 epi0 epi1 "
        "prod_done (us from entry) | gap to next\n",
        sm, by_sm[sm].size(), show_ctas);
    const auto& v = by_sm[sm];
    for (size_t i = 0; i < v.size() && static_cast<int>(i) < show_ctas; ++i) {
      const unsigned long long* r = rec(v[i]);
      const double s = static_cast<double>(r[st::kStart]);
      auto rel = [&](int slot) { return us(static_cast<double>(r[slot]) - s); };
      const double end = static_cast<double>(std::max(r[st::kEpiEnd0], r[st::kEpiEnd1]));
      const double gap = i + 1 < v.size() ? us(static_cast<double>(rec(v[i + 1])[st::kStart]) - end) : NAN;
      std::printf(
          "  cta %6d @%8.2f %3llu | %6.2f %6.2f %6.2f %6.2f %6.2f %7.2f %7.2f %7.2f %7.2f %7.2f | %5.2f\n",
          v[i], (r[st::kStartNs] - ns0) / 1000.0, r[st::kTiles], rel(st::kReady), rel(st::kQLanded),
          rel(st::kFirstK), rel(st::kFirstS0), rel(st::kFirstS1), rel(st::kLoopEnd0), rel(st::kLoopEnd1),
          rel(st::kEpiEnd0), rel(st::kEpiEnd1), rel(st::kProducerDone), gap);
    }
  }
  CHECK(cudaFree(dbuf));
  CHECK(cudaFree(q));
  CHECK(cudaFree(k));
  CHECK(cudaFree(v));
  CHECK(cudaFree(o));
  CHECK(cudaFree(lse));
  CHECK(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
  Problem pr;
  std::string mode = "both";
  std::vector<int> sms = {0, 1, 66};
  int show = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], val = argv[i + 1];
    if (a == "--heads") {
      std::sscanf(val.c_str(), "%d/%d", &pr.hq, &pr.hkv);
    } else if (a == "--head-dim") {
      pr.d = std::atoi(val.c_str());
    } else if (a == "--batch") {
      pr.batch = std::atoi(val.c_str());
    } else if (a == "--seq-len") {
      pr.seq = std::atoi(val.c_str());
    } else if (a == "--mode") {
      mode = val;
    } else if (a == "--ctas") {
      show = std::atoi(val.c_str());
    } else if (a == "--sms") {
      sms.clear();
      for (size_t p = 0; p < val.size();) {
        sms.push_back(std::atoi(val.c_str() + p));
        const size_t c = val.find(',', p);
        p = c == std::string::npos ? val.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (pr.hkv <= 0 || pr.hq % pr.hkv != 0 || (pr.d != 128 && pr.d != 256)) {
    std::fprintf(stderr, "need Hq a multiple of Hkv and head dim 128 or 256\n");
    return 2;
  }
  const char* n80_env = std::getenv("GROUPATTN_SM90_PREFILL_D256_N80");
  const bool n80 = n80_env != nullptr && std::atoi(n80_env) != 0;
  for (int pass = 0; pass < 2; ++pass) {
    const bool causal = pass == 0;
    if ((causal && mode == "full") || (!causal && mode == "causal")) continue;
    if (pr.d == 128) {
      run_mode<ga::sm90_engine::PrefillTraits<__nv_bfloat16, 128>>(pr, causal, sms, show);
    } else if (n80) {  // as the engine reads GROUPATTN_SM90_PREFILL_D256_N80 (default off)
      run_mode<ga::sm90_engine::PrefillTraitsD256N80<__nv_bfloat16>>(pr, causal, sms, show);
    } else {
      run_mode<ga::sm90_engine::PrefillTraits<__nv_bfloat16, 256>>(pr, causal, sms, show);
    }
  }
  return 0;
}
