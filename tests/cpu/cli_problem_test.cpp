// The CLI's problem-size gate (tools/cli_problem.cpp, read_options): it refuses problems whose
// largest host tensor would pass 2^32 elements, counting the query side with Hq heads and K/V with
// Hkv heads. It once multiplied the key length by Hq and refused the benchmark's own 64/8
// 32 x 32K paged decode (1.07e9 elements per K/V tensor) as 8.6e9.
#include "cli_problem.h"

#include <gtest/gtest.h>

#include "groupattn/groupattn.h"

#include <string>
#include <vector>

namespace groupattn::cli {
namespace {

bool read(std::vector<std::string> words, Options* o, std::string* error) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::vector<FlagSpec> spec = shape_flags();
  spec.push_back({"op", true, "op"});
  Args args;
  if (!args.parse(static_cast<int>(argv.size()), argv.data(), 0, spec, error)) return false;
  return read_options(args, o, error);
}

TEST(CliProblem, KvTensorsCountKvHeadsNotQueryHeads) {
  Options o;
  std::string error;
  EXPECT_TRUE(read({"--op", "decode", "--heads", "64/8", "--batch", "32", "--kv-len", "32768", "--paged", "64"}, &o,
                   &error))
      << error;
  EXPECT_TRUE(read({"--op", "decode", "--heads", "64/8", "--batch", "1", "--kv-len", "131072"}, &o, &error)) << error;
}

TEST(CliProblem, RefusesAKvTensorPast2To32ElementsNamingTheFlags) {
  Options o;
  std::string error;
  // 64 x 65536 keys x 8 KV heads x 128 = 4.3e9 elements in K.
  EXPECT_FALSE(read({"--op", "decode", "--heads", "64/8", "--batch", "64", "--kv-len", "65536"}, &o, &error));
  EXPECT_NE(error.find("--kv-len"), std::string::npos) << error;
  EXPECT_NE(error.find("accepted: up to 4294967296"), std::string::npos) << error;
  // The query side alone: 2 x 2^20 rows x 64 heads x 128 = 1.7e10 elements in Q.
  EXPECT_FALSE(read({"--op", "prefill", "--heads", "64/8", "--batch", "2", "--seq-len", "1048576"}, &o, &error));
}

// --varlen packs the batched prefill problem as [B * S, H, D] with one cu_seqlens for Q and K/V:
// the same values as the batched problem of the same seed, and a problem validation accepts.
TEST(CliProblem, VarlenPacksTheBatchedPrefill) {
  Options o;
  std::string error;
  ASSERT_TRUE(read({"--varlen", "--heads", "8/2", "--batch", "3", "--seq-len", "40"}, &o, &error)) << error;
  EXPECT_EQ(o.op, "prefill");
  EXPECT_TRUE(o.varlen);
  apply_attention_defaults(&o, false);
  const AttnData v = make_attention(o, false);
  o.varlen = false;
  const AttnData b = make_attention(o, false);
  ASSERT_EQ(v.q.view().rank, 3);
  EXPECT_EQ(v.q.view().shape[0], 3 * 40);
  EXPECT_EQ(v.params.max_seqlen_q, 40);
  EXPECT_EQ(v.cu_seqlens.at({3}), 120.0);
  EXPECT_TRUE(validate_attention(v.params).ok());
  EXPECT_EQ(v.q.values(), b.q.values());
  EXPECT_EQ(v.k.values(), b.k.values());
  EXPECT_EQ(v.v.values(), b.v.values());
}

TEST(CliProblem, VarlenIsPrefillOnly) {
  Options o;
  std::string error;
  EXPECT_FALSE(read({"--varlen", "--op", "decode", "--kv-len", "100"}, &o, &error));
  EXPECT_NE(error.find("--varlen: prefill only"), std::string::npos) << error;
}

// --seqlens passes the contiguous decode cache's lengths as seqlens_k (every sequence --kv-len keys),
// which serving engines pass and which turns on the engines' device-side plans: the same values as
// without it, and a problem validation accepts. Decode only.
TEST(CliProblem, SeqlensPassesEqualLengthsToDecode) {
  Options o;
  std::string error;
  ASSERT_TRUE(read({"--seqlens", "--op", "decode", "--heads", "8/2", "--batch", "3", "--kv-len", "100"}, &o, &error))
      << error;
  EXPECT_TRUE(o.seqlens);
  apply_attention_defaults(&o, true);
  const AttnData s = make_attention(o, true);
  o.seqlens = false;
  const AttnData n = make_attention(o, true);
  ASSERT_TRUE(s.seqlens_k.defined());
  EXPECT_FALSE(n.seqlens_k.defined());
  EXPECT_EQ(s.seqlens_k.at({2}), 100.0);
  EXPECT_EQ(s.params.max_seqlen_k, 100);
  EXPECT_TRUE(validate_attention(s.params).ok());
  EXPECT_EQ(s.k.values(), n.k.values());
  EXPECT_EQ(s.q.values(), n.q.values());
  EXPECT_FALSE(read({"--seqlens", "--op", "prefill", "--seq-len", "100"}, &o, &error));
  EXPECT_NE(error.find("--seqlens: decode only"), std::string::npos) << error;
}

}  // namespace
}  // namespace groupattn::cli
