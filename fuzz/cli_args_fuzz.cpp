// libFuzzer target: the CLI's flag parser and typed option readers (tools/cli_args.h).
// The input is split at NUL bytes into argv strings and parsed against the flag set of
// `groupattn check`; then every typed reader is asked for every flag, as the CLI does. Oracles:
// no crash or UB whatever the input; a successful parse only records declared flags; every
// failure comes with a message; an accepted uint64 prints back as its value (no sign, no spaces).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_args.h"

using groupattn::cli::Args;
using groupattn::cli::FlagSpec;

namespace {

// The shape of `groupattn check`'s flag set: value flags and switches.
const std::vector<FlagSpec>& specs() {
  static const std::vector<FlagSpec> s = {
      {"op", true, "op"},          {"engine", true, "engine"},  {"heads", true, "Q/KV"},
      {"head-dim", true, "D"},     {"window", true, "L,R"},     {"softcap", true, "cap"},
      {"scale", true, "scale"},    {"dtype", true, "dtype"},    {"splits", true, "splits"},
      {"causal", false, "causal"}, {"no-causal", false, "off"}, {"seed", true, "seed"},
      {"help", false, "help"}};
  return s;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz oracle failed: %s\n", what);
  std::abort();
}

void expect_error_set(bool ok, const std::string& err) {
  if (!ok && err.empty()) fail("a reader failed without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // argv[0] is the program, argv[1] the subcommand; parsing starts at 2 like the CLI's.
  std::vector<std::string> strings = {"groupattn", "check"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      strings.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) strings.push_back(cur);
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  Args args;
  std::string err;
  const bool parsed = args.parse(static_cast<int>(strings.size()), argv.data(), 2, specs(), &err);
  if (!parsed) {
    if (err.empty()) fail("parse failed without a message");
    return 0;
  }
  for (const FlagSpec& s : specs()) {
    int64_t a = 0, b = 0;
    uint64_t u = 0;
    double x = 0;
    std::string choice;
    err.clear();
    expect_error_set(args.get_int(s.name, &a, &err), err);
    err.clear();
    expect_error_set(args.get_float(s.name, &x, &err), err);
    err.clear();
    const bool u_ok = args.get_uint64(s.name, &u, &err);
    expect_error_set(u_ok, err);
    if (u_ok && args.has(s.name)) {
      const std::string v = *args.get(s.name);
      const size_t digits = v.find_first_not_of('0');
      if (std::to_string(u) != (digits == std::string::npos ? "0" : v.substr(digits)))
        fail("an accepted uint64 does not print back as its text");
    }
    err.clear();
    expect_error_set(args.get_ratio(s.name, &a, &b, &err), err);
    err.clear();
    expect_error_set(args.get_pair(s.name, &a, &b, &err), err);
    err.clear();
    expect_error_set(args.get_choice(s.name, {"bf16", "f16", "f32"}, &choice, &err), err);
  }
  // Only declared flags are ever recorded.
  for (const char* undeclared : {"", "-", "--", "kv-len", "=", "heads=1"}) {
    if (args.has(undeclared)) fail("an undeclared flag was recorded");
  }
  std::string help = groupattn::cli::format_help(specs());
  if (help.empty()) fail("empty help");
  return 0;
}
