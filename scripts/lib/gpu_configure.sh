# Shared by scripts/gpu-check, gpu-reliability and cp-check: configure a Release build for the GPU
# machine. GoogleTest: an installed package, else .gtest-src (a copy of /usr/src/googletest carried
# there, git-ignored) built once into a prefix inside the build dir (newer trees define the GTest::
# aliases themselves, so they are not built in-tree). NCCL: the nvidia-nccl-cu13 pip wheel when
# importable. The Python module is built when nanobind, pytest and numpy import, so ctest runs
# pytest against torch there.
#
#   ga_gpu_configure BUILD_DIR LOG_FILE ARCHS      -> exit status of cmake's configure
ga_gpu_configure() {
  local build=$1 log=$2 archs=$3
  local jobs gen=() args=()
  jobs=$(nproc 2>/dev/null || echo 4)
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  : >"$log"
  if [[ -d .gtest-src ]]; then
    local prefix="$PWD/$build/gtest-install"
    if [[ ! -f "$prefix/.done" ]]; then
      { cmake -S .gtest-src -B "$build/gtest-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
          -DCMAKE_INSTALL_PREFIX="$prefix" &&
        cmake --build "$build/gtest-build" -j "$jobs" && cmake --install "$build/gtest-build" &&
        touch "$prefix/.done"; } >>"$log" 2>&1 || echo "gpu_configure: building .gtest-src FAILED" >>"$log"
    fi
    args+=(-DCMAKE_PREFIX_PATH="$prefix")
  fi
  local nccl
  nccl=$(python3 -c "import nvidia.nccl as m, os; f = getattr(m, '__file__', None); print(os.path.dirname(f) if f else list(m.__path__)[0])" 2>/dev/null || true)
  [[ -n "$nccl" ]] && args+=(-DGROUPATTN_NCCL_ROOT="$nccl")
  local py=OFF
  python3 -c "import nanobind, pytest, numpy" >/dev/null 2>&1 && py=ON
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGROUPATTN_CUDA_ARCHS="$archs" \
    -DGROUPATTN_BUILD_PYTHON=$py "${args[@]}" >>"$log" 2>&1
}
