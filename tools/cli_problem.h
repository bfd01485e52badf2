// The problem pieces `groupattn check` and `groupattn bench` share: the shape flags and their
// parsing, the host problems built from them (random normal inputs), labels, and the comparison
// against the fp64 reference (tolerances of TESTING.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_args.h"
#include "common/host_tensor.h"
#include "groupattn/groupattn.h"

namespace groupattn::cli {

struct Options {
  std::string op = "all", engine;
  int64_t hq = 0, hkv = 0, d = 0, dv = 0, batch = 0, seq_len = 0, kv_len = 0, new_tokens = 0, page = 0;
  int64_t wl = -1, wr = -1, splits = 0, repeat = 0;
  uint64_t seed = 1;  // the full 64-bit range: the GPU fuzz tier's case seeds are uint64
  int causal = -1;  // -1 = op default
  double softcap = 0, scale = NAN, lower_bound = -5;
  DType dtype = DType::kBF16;
  bool kv_fp8 = false;  // --kv-dtype f8e4m3: an fp8 KV cache with fp32 scales per (sequence, KV head)
  bool varlen = false;  // --varlen (prefill): the batch packed as one varlen batch, cu_seqlens_q/k
  bool seqlens = false;  // --seqlens (decode, contiguous cache): seqlens_k = --kv-len for every sequence
  std::string gate = "lower-bound";
  bool l2norm = true, beta_sigmoid = true, initial_state = true, k_first = false;
};

// The problem-shape flags (--heads .. --k-first), in help order; check and bench add their own.
std::vector<FlagSpec> shape_flags();

// Reads --op, --engine, the shape flags, --repeat and --seed (the ones present in the parsed spec);
// infers --op from shape flags when it is not given. On error sets *err.
bool read_options(const Args& a, Options* o, std::string* err);

// Defaults of check's default problems (decode 32/8 d128 2 x 4096 new 1; prefill 16/4 d128 1 x 512;
// both causal unless --no-causal; KDA 4/8 K = V = 128 1 x 250).
void apply_attention_defaults(Options* o, bool decode);
void apply_kda_defaults(Options* o);
std::string attention_label(const Options& o, bool decode);
std::string kda_label(const Options& o);

struct AttnData {
  test::HostTensor q, k, v, out, lse, seqlens_k, block_table, k_scale, v_scale, cu_seqlens;
  AttentionParams params;  // host views
};
// Batched (prefill, decode), paged (decode with --paged: pages of a shuffled pool) or varlen
// (prefill with --varlen: B sequences of --seq-len tokens packed as [B * S, H, D], one cu_seqlens
// serving Q and K/V; the same memory and, for one seed, the same values as the batched problem).
// fill_inputs = false leaves q/k/v unfilled (bench fills them on the device).
AttnData make_attention(const Options& o, bool decode, bool fill_inputs = true);

struct KdaData {
  test::HostTensor q, k, v, g, beta, out, A_log, dt_bias, h0, ht;
  KdaParams params;
};
// fill_inputs = false leaves q/k/v/g/beta/h0 unfilled (A_log and dt_bias are always filled).
// Standard deviation of the random keys of a KDA problem (depends on l2norm).
double kda_key_stddev(const Options& o);
KdaData make_kda(const Options& o, bool fill_inputs = true);

bool is_host_engine(const std::string& name);
// The engines to try: all available (--engine all), the one named, or "" (automatic choice).
std::vector<std::string> engines_to_run(Op op, const std::string& requested);

struct Comparison {
  double rel = NAN, max_abs = NAN, aux = NAN;  // aux: LSE error (attention) or state error (KDA)
  bool pass = false;
};
// Largest |a - b| over entries where both are finite; infinite when finiteness differs.
double lse_error(const std::vector<double>& out, const std::vector<double>& ref);
Comparison compare_attention(const std::vector<double>& o, const std::vector<double>& lse,
                             const std::vector<double>& ref_o, const std::vector<double>& ref_lse, DType dtype);
Comparison compare_kda(const std::vector<double>& o, const std::vector<double>& state,
                       const std::vector<double>& ref_o, const std::vector<double>& ref_state);
// A state tensor [N, HV, K, V] (K-first) or [N, HV, V, K] read as K-first, row-major.
std::vector<double> kda_state_k_first(const test::HostTensor& ht, bool k_first);

std::string format_number(double x);

}  // namespace groupattn::cli
