// Per-stage host timing of one op call (issue 11): where the microseconds of a small call go
// (validation, selection, planning, tensor maps, each launch). Off unless a tool turns it on
// (`groupattn bench --host-breakdown`); then each mark stores a steady_clock reading in a
// thread-local list that the tool reads after the call. When off, a mark is one relaxed atomic
// load and a not-taken branch: no clock read, no store, no string.
//
// A call's marks: begin() at the op's entry (clears the list), then mark(stage) at the end of
// each stage; a stage's time is its mark minus the one before. Stage names are string literals.
#pragma once

#include <atomic>
#include <cstdint>

namespace groupattn::host_timing {

inline constexpr int kMaxMarks = 24;

struct Marks {
  int count = 0;
  const char* names[kMaxMarks] = {};
  int64_t ns[kMaxMarks] = {};  // steady_clock, nanoseconds
};

// Whether marks are recorded, process-wide (set by the tool before timed calls, cleared after).
inline std::atomic<bool> enabled{false};

// This thread's marks of its latest op call.
Marks& thread_marks();
// Appends (name, now) to this thread's list; `first` clears it first. Marks past kMaxMarks drop.
void record(const char* name, bool first);

inline void begin(const char* name) {
  if (__builtin_expect(enabled.load(std::memory_order_relaxed), 0)) record(name, true);
}

inline void mark(const char* name) {
  if (__builtin_expect(enabled.load(std::memory_order_relaxed), 0)) record(name, false);
}

}  // namespace groupattn::host_timing
