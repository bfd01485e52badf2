// groupattn: the command-line front end. `check` runs a problem on one or all engines against the
// fp64 reference; `bench` times a problem on a GPU engine; `engines` lists the engines of this build.
#include <cstdio>
#include <cstring>

#include "cli_bench.h"
#include "cli_check.h"

namespace {
void usage(FILE* f) {
  std::fprintf(f,
               "usage: groupattn <command> [flags]\n"
               "commands:\n"
               "  check     run a decode, prefill and/or KDA problem on an engine against the fp64 reference\n"
               "            (groupattn check --help lists the flags)\n"
               "  bench     time a prefill, decode or KDA problem on a GPU engine: CUDA-graph replay over rotating\n"
               "            inputs, TFLOP/s or GB/s, per-call wall time (groupattn bench --help lists the flags)\n"
               "  engines   list the engines of each op and what they support\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "check") == 0) return groupattn::cli::run_check(argc, argv, 2);
  if (std::strcmp(argv[1], "bench") == 0) return groupattn::cli::run_bench(argc, argv, 2);
  if (std::strcmp(argv[1], "engines") == 0) return groupattn::cli::run_engines(argc, argv, 2);
  std::fprintf(stderr, "groupattn: unknown command '%s' (accepted: check, bench, engines)\n", argv[1]);
  return 2;
}
