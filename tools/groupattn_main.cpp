// groupattn: the command-line front end. `check` runs a problem on one or all engines against the
// fp64 reference; `engines` lists the engines of this build.
#include <cstdio>
#include <cstring>

#include "cli_check.h"

namespace {
void usage(FILE* f) {
  std::fprintf(f,
               "usage: groupattn <command> [flags]\n"
               "commands:\n"
               "  check     run a decode, prefill and/or KDA problem on an engine against the fp64 reference\n"
               "            (groupattn check --help lists the flags)\n"
               "  engines   list the engines of each op and what they support\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "check") == 0) return groupattn::cli::run_check(argc, argv, 2);
  if (std::strcmp(argv[1], "engines") == 0) return groupattn::cli::run_engines(argc, argv, 2);
  std::fprintf(stderr, "groupattn: unknown command '%s' (accepted: check, engines)\n", argv[1]);
  return 2;
}
