// The CLI's flag parser (tools/cli_args.h). Found by fuzz/cli_args_fuzz.cpp: an inline value
// (--name=value) threw std::out_of_range out of the parser and terminated the CLI.
#include "cli_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace groupattn::cli {
namespace {

bool parse(Args* args, std::vector<std::string> words, std::string* error) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return args->parse(static_cast<int>(argv.size()), argv.data(), 0,
                     {{"window", true, "LEFT,RIGHT"}, {"causal", false, "causal mask"}}, error);
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

}  // namespace
}  // namespace groupattn::cli
