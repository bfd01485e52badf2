# Shared by scripts/run, scripts/test and scripts/gpu-check: configure and build into a folder.
ga_jobs() { nproc 2>/dev/null || echo 2; }

# ga_configure_and_build BUILD_DIR [extra cmake args...]
ga_configure_and_build() {
  local dir=$1
  shift
  local gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
  else
    cmake -S . -B "$dir" "$@" >/dev/null
  fi
  cmake --build "$dir" -j "$(ga_jobs)"
}
