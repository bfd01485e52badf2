// A small flag parser for the groupattn CLI: `--name value` and `--switch`, every flag declared
// with its help text, unknown flags and malformed values rejected with a message naming them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace groupattn::cli {

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value;
  std::string help;
};

class Args {
 public:
  // Parses argv[first..argc) against `specs`. On error returns false and sets *error.
  bool parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs, std::string* error);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string& name) const;

  // Typed readers: on a malformed value they set *error (naming the flag) and return false.
  bool get_int(const std::string& name, int64_t* out, std::string* error) const;
  // Decimal digits only, 0..2^64-1 (no sign): the whole range of a 64-bit seed.
  bool get_uint64(const std::string& name, uint64_t* out, std::string* error) const;
  bool get_float(const std::string& name, double* out, std::string* error) const;
  // "64/8" -> (64, 8); "16" -> (16, 16).
  bool get_ratio(const std::string& name, int64_t* a, int64_t* b, std::string* error) const;
  // "128,0" -> (128, 0).
  bool get_pair(const std::string& name, int64_t* a, int64_t* b, std::string* error) const;
  // Value must be one of `accepted`.
  bool get_choice(const std::string& name, const std::vector<std::string>& accepted, std::string* out,
                  std::string* error) const;

 private:
  std::map<std::string, std::string> values_;
};

std::string format_help(const std::vector<FlagSpec>& specs);

}  // namespace groupattn::cli
