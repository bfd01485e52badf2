#include "cli_args.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

namespace groupattn::cli {

namespace {
bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}
bool parse_uint64(const std::string& s, uint64_t* out) {
  // strtoull alone would accept leading spaces and a sign (negating "-1" to 2^64 - 1).
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}
bool parse_float(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}
bool split2(const std::string& s, char sep, std::string* a, std::string* b) {
  const size_t pos = s.find(sep);
  if (pos == std::string::npos) return false;
  // `a` may alias `s` (parse splits a flag's name in place): take both halves before assigning.
  std::string head = s.substr(0, pos), tail = s.substr(pos + 1);
  *a = std::move(head);
  *b = std::move(tail);
  return true;
}
}  // namespace

bool Args::parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs, std::string* error) {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "' (flags start with --; see --help)";
      return false;
    }
    std::string name = arg.substr(2), value;
    const bool inline_value = split2(name, '=', &name, &value);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      std::string names;
      for (const FlagSpec& s : specs) names += (names.empty() ? "--" : ", --") + s.name;
      *error = "unknown flag --" + name + " (accepted: " + names + ")";
      return false;
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= argc) {
        *error = "flag --" + name + " needs a value (" + spec->help + ")";
        return false;
      }
      value = argv[++i];
    } else if (!spec->takes_value && inline_value) {
      *error = "flag --" + name + " takes no value";
      return false;
    }
    values_[name] = value;
  }
  return true;
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

bool Args::get_int(const std::string& name, int64_t* out, std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  if (!parse_int(*v, out)) {
    *error = "--" + name + ": '" + *v + "' is not an integer";
    return false;
  }
  return true;
}

bool Args::get_uint64(const std::string& name, uint64_t* out, std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  if (!parse_uint64(*v, out)) {
    *error = "--" + name + ": '" + *v + "' is not an integer in 0.." +
             std::to_string(std::numeric_limits<uint64_t>::max());
    return false;
  }
  return true;
}

bool Args::get_float(const std::string& name, double* out, std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  if (!parse_float(*v, out)) {
    *error = "--" + name + ": '" + *v + "' is not a number";
    return false;
  }
  return true;
}

bool Args::get_ratio(const std::string& name, int64_t* a, int64_t* b, std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  std::string sa, sb;
  if (!split2(*v, '/', &sa, &sb)) sa = sb = *v;
  if (!parse_int(sa, a) || !parse_int(sb, b)) {
    *error = "--" + name + ": '" + *v + "' is not of the form Q/KV (for example 64/8) or N";
    return false;
  }
  return true;
}

bool Args::get_pair(const std::string& name, int64_t* a, int64_t* b, std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  std::string sa, sb;
  if (!split2(*v, ',', &sa, &sb) || !parse_int(sa, a) || !parse_int(sb, b)) {
    *error = "--" + name + ": '" + *v + "' is not of the form LEFT,RIGHT (for example 128,0)";
    return false;
  }
  return true;
}

bool Args::get_choice(const std::string& name, const std::vector<std::string>& accepted, std::string* out,
                      std::string* error) const {
  auto v = get(name);
  if (!v) return true;
  std::string list;
  for (const std::string& a : accepted) {
    if (a == *v) {
      *out = *v;
      return true;
    }
    list += (list.empty() ? "" : ", ") + a;
  }
  *error = "--" + name + ": '" + *v + "' not accepted (accepted: " + list + ")";
  return false;
}

std::string format_help(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? " V" : "");
    if (left.size() < 24) left.resize(24, ' ');
    out += left + " " + s.help + "\n";
  }
  return out;
}

}  // namespace groupattn::cli
