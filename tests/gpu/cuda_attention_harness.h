// Test harness for the cuda attention engine: builds a random problem (batched / varlen / paged,
// optionally strided) as host tensors, mirrors it on the device, runs the fp64 reference on the
// host copies and the cuda engine on the device, and compares with TESTING.md's pass rules.
#pragma once

#if GROUPATTN_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/device_tensor.h"
#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {

enum class KvKind { kBatched, kVarlen, kPaged };

struct Case {
  DType dtype = DType::kBF16;
  int64_t hq = 8, hkv = 2, d = 128;
  std::vector<int> q_lens = {1};  // per sequence; batched Q needs them all equal
  std::vector<int> k_lens = {1};  // per sequence; batched K uses seqlens_k when they differ
  bool q_varlen = false;
  KvKind kv = KvKind::kBatched;
  int page_size = 16;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  float scale = NAN;
  int num_splits = 0;
  bool strided = false;  // pad every stride (16-byte multiples), LSE too
  bool kv_fp8 = false;   // f8e4m3 K/V with fp32 scales per (sequence, KV head), uniform in [0.25, 1)
  // Batched K/V with seqlens_k: only the rows the sequences' keys use are drawn, the rows past them
  // are NaN (what expect_ignores_stale_rows sets) -- for B x 32K caches of mostly short sequences,
  // where drawing the dead rows (~30 ns an element) was most of a test's host time. Other inputs
  // than check's draw (tools/cli_problem.cpp) for the same seed.
  bool stale_rows_nan = false;
  uint64_t seed = 1;
};

std::string describe(const Case& c);
// An empty host tensor with t's dtype, shape and strides (HostTensor copies alias their view).
HostTensor like(const HostTensor& t);

// One problem's tensors on the host, and their device mirrors after upload().
struct Problem {
  Case c;
  HostTensor q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table, k_scale, v_scale;
  std::unique_ptr<DeviceTensor> dq, dk, dv, dout, dlse, dcu_q, dcu_k, dseqlens_k, dblock_table, dk_scale, dv_scale;

  AttentionParams host_params();
  AttentionParams device_params() const;
  void upload();
};

// Random problem for `c`, uploaded. make_copied_up: K/V (and indices) are the given problem's with
// KV head h / group copied to head h, so Hkv == Hq (MHA) with the same math per query head.
std::unique_ptr<Problem> make_problem(const Case& c);
// The host tensors alone (no device needed); make_problem is this plus upload(). The draw is
// check's (tools/cli_problem.cpp), bit for bit; the last case's draw is kept, and a call for a case
// with the same inputs (whatever its mask, scale or num_splits) returns a copy instead of drawing.
std::unique_ptr<Problem> make_host_problem(const Case& c);
std::unique_ptr<Problem> make_copied_up(const Problem& gqa);
std::unique_ptr<Problem> make_host_copied_up(const Problem& gqa);  // the host tensors alone

// A compute capability 9.0 device is current (the sm90 engines' tests skip otherwise).
bool have_sm90_device();

// Runs the engine on the device (outputs NaN-poisoned first) and downloads O and LSE into
// got_out / got_lse (shaped like p.out / p.lse). Returns the engine's status. `engine` pins a
// device engine by name ("cuda" unless given).
Status run_cuda(Problem& p, HostTensor* got_out, HostTensor* got_lse, const char* engine = "cuda");

// The pinned engine declines `c` (the call fails) with `reason` in its message.
void expect_declines(const Case& c, const char* engine, const std::string& reason);

// Runs the reference on the host copies into p.out / p.lse.
Status run_reference(Problem& p);
// The same for a p of make_problem / make_host_problem with its inputs as drawn, or with stale K/V
// rows (rows no sequence's keys use) overwritten: the reference reads only the keys each query row
// sees (reference.cpp attend_row), so those rows do not change its bits. Computed once for the last
// case drawn and mask (whatever num_splits) and copied after that. A p whose live inputs were
// changed needs run_reference.
Status run_case_reference(Problem& p);

// The pass rules; adds a gtest failure with `label` on any violation.
void expect_matches_reference(const Problem& p, const HostTensor& got_out, const HostTensor& got_lse,
                              const std::string& label);

// Native GQA == the same engine on K/V copied up to every query head (make_copied_up): O and LSE
// bitwise equal (the head mapping reads the right KV head, and nothing depends on the group size).
void expect_gqa_equals_copied_up(const Case& c, const char* engine = "cuda");

// Whole check: reference vs the pinned device engine (default "cuda"), guards, NaN-free.
void check_case(const Case& c, const char* engine = "cuda");

// Case c (batched K/V with seqlens_k, or paged) with every K/V cache row no sequence reads set to
// NaN -- batched: the rows past each sequence's length; paged: every page slot outside the
// sequences' keys, spare pages included -- against the reference of the same problem: stale cache
// contents must not reach O or LSE (a tile holding the last key also holds such rows, and P = 0
// times NaN is NaN).
void expect_ignores_stale_rows(const Case& c, const char* engine);

// Forces one engine measurement switch through its set_*_mode hook (0 off, 1 on) for a scope; -1
// (the environment's value) after, also when an assertion leaves the scope early.
class ForcedSwitch {
 public:
  ForcedSwitch(void (*set)(int), int mode) : set_(set) { set_(mode); }
  ~ForcedSwitch() { set_(-1); }
  ForcedSwitch(const ForcedSwitch&) = delete;
  ForcedSwitch& operator=(const ForcedSwitch&) = delete;

 private:
  void (*set_)(int);
};

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
