// The CLI's problem-size gate (tools/cli_problem.cpp, read_options): it refuses problems whose
// largest host tensor would pass 2^32 elements, counting the query side with Hq heads and K/V with
// Hkv heads. It once multiplied the key length by Hq and refused the benchmark's own 64/8
// 32 x 32K paged decode (1.07e9 elements per K/V tensor) as 8.6e9.
#include "cli_problem.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace groupattn::cli
