# Shared by scripts/run, scripts/test and scripts/gpu-check: configure and build into a folder.
ga_jobs() { nproc 2>/dev/null || echo 2; }

# ga_configure_and_build BUILD_DIR [extra cmake args...]
ga_configure_and_build() {
  local dir=$1
  shift
  local gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # The Python module is built (and its tests registered) when nanobind and pytest are importable.
  local py=OFF
  python3 -c "import nanobind, pytest, numpy" >/dev/null 2>&1 && py=ON
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGROUPATTN_BUILD_PYTHON=$py "$@"
  else
    cmake -S . -B "$dir" "$@" >/dev/null
  fi
  cmake --build "$dir" -j "$(ga_jobs)"
}
