// `groupattn bench`: time one prefill, decode or KDA problem on one of our GPU engines under the
// benchmark protocol (../shared/BENCHMARKING.md): correctness against the fp64 reference first,
// rotating random-normal input sets over 1 GiB, CUDA-graph replay timed with events (median and
// p20-p80 over rounds), per-call wall time beside it, TFLOP/s (prefill) or effective GB/s.
#pragma once

namespace groupattn::cli {

int run_bench(int argc, char** argv, int first);

}  // namespace groupattn::cli
