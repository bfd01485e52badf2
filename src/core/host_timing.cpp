#include "core/host_timing.h"

#include <chrono>

namespace groupattn::host_timing {

Marks& thread_marks() {
  thread_local Marks marks;
  return marks;
}

void record(const char* name, bool first) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  Marks& m = thread_marks();
  if (first) m.count = 0;
  if (m.count >= kMaxMarks) return;
  m.names[m.count] = name;
  m.ns[m.count] = now;
  ++m.count;
}

}  // namespace groupattn::host_timing
