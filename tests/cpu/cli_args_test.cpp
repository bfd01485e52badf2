// The CLI's flag parser (tools/cli_args.h). Found by fuzz/cli_args_fuzz.cpp: an inline value
// (--name=value) threw std::out_of_range out of the parser and terminated the CLI. --seed takes
// the whole uint64 range (the GPU fuzz tier prints 64-bit case seeds in its reproduction lines).
#include "cli_args.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace groupattn::cli {
namespace {

bool parse(Args* args, std::vector<std::string> words, std::string* error) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return args->parse(
      static_cast<int>(argv.size()), argv.data(), 0,
      {{"window", true, "LEFT,RIGHT"}, {"causal", false, "causal mask"}, {"seed", true, "seed"}}, error);
}

TEST(CliArgs, InlineValueIsSplitAtTheFirstEquals) {
  Args args;
  std::string error;
  ASSERT_TRUE(parse(&args, {"--window=128,0"}, &error)) << error;
  int64_t left = 0, right = 0;
  ASSERT_TRUE(args.get_pair("window", &left, &right, &error)) << error;
  EXPECT_EQ(left, 128);
  EXPECT_EQ(right, 0);
}

TEST(CliArgs, InlineValueOnASwitchIsAnError) {
  Args args;
  std::string error;
  EXPECT_FALSE(parse(&args, {"--causal=1"}, &error));
  EXPECT_NE(error.find("--causal"), std::string::npos) << error;
}

TEST(CliArgs, EmptyInlineValueIsKeptAndRejectedByTheReader) {
  Args args;
  std::string error;
  ASSERT_TRUE(parse(&args, {"--window="}, &error)) << error;
  int64_t left = 0, right = 0;
  EXPECT_FALSE(args.get_pair("window", &left, &right, &error));
  EXPECT_NE(error.find("--window"), std::string::npos) << error;
}

TEST(CliArgs, SeedTakesTheWholeUint64Range) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"1", 1},
      {"9223372036854775807", 9223372036854775807ull},  // INT64_MAX: the old limit
      {"9223372036854775808", 9223372036854775808ull},  // one past it
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
      {"007", 7}};
  for (const auto& [text, want] : cases) {
    Args args;
    std::string error;
    ASSERT_TRUE(parse(&args, {"--seed", text}, &error)) << error;
    uint64_t seed = 1;
    ASSERT_TRUE(args.get_uint64("seed", &seed, &error)) << text << ": " << error;
    EXPECT_EQ(seed, want) << text;
  }
}

TEST(CliArgs, SeedOutsideUint64IsRejectedNamingTheFlagAndTheRange) {
  for (const std::string text : {"-1", "18446744073709551616", "99999999999999999999999", "+5", " 5", "5 ",
                                 "0x10", "1e3", "", "seed"}) {
    Args args;
    std::string error;
    ASSERT_TRUE(parse(&args, {"--seed=" + text}, &error)) << error;
    uint64_t seed = 42;
    EXPECT_FALSE(args.get_uint64("seed", &seed, &error)) << "'" << text << "' accepted as " << seed;
    EXPECT_EQ(seed, 42u) << "a rejected value must leave the output alone";
    EXPECT_NE(error.find("--seed"), std::string::npos) << error;
    EXPECT_NE(error.find("0..18446744073709551615"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace groupattn::cli
