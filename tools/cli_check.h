// `groupattn check` and `groupattn engines`.
#pragma once

namespace groupattn::cli {

int run_check(int argc, char** argv, int first);
int run_engines(int argc, char** argv, int first);

}  // namespace groupattn::cli
