// Flag validators whose messages say what is wrong with the value as typed.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "commands.h"
#include "posenc/errors.h"
#include "posenc/util/io.h"

namespace posenc::cli {

CLI::Validator integer_in(int64_t min, int64_t max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || end == value.c_str() || *end != '\0')
          return "'" + value + "' is not an integer (expected a whole number in " + range + ")";
        if (errno == ERANGE || x < min || x > max) return value + " is out of range " + range;
        return "";
      },
      "INT in " + range);
}

CLI::Validator number_in(double min, double max) {
  const std::string range = "[" + fmt::format("{}", min) + ", " + fmt::format("{}", max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        if (value.empty() || end == value.c_str() || *end != '\0')
          return "'" + value + "' is not a number (expected one in " + range + ")";
        // NaN fails every comparison, so a plain range check lets it through.
        if (!std::isfinite(x)) return value + " is not a finite number (expected one in " + range + ")";
        if (x < min || x > max) return value + " is out of range " + range;
        return "";
      },
      "NUMBER in " + range);
}

// CLI11 puts the flag's name before the message: the message does not repeat it.
CLI::Validator non_empty_utf8(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string {
        if (value.empty()) return "must not be empty";
        const std::string bad = utf8_problem(value);
        return bad.empty() ? "" : bad + " (" + what + " must be UTF-8 text)";
      },
      what == "paths" ? "PATH" : "TEXT");
}

void require_distinct(const std::vector<int64_t>& values, const std::string& flag) {
  for (size_t i = 0; i < values.size(); ++i)
    if (std::find(values.begin(), values.begin() + i, values[i]) != values.begin() + i)
      throw ConfigError(flag + ": " + std::to_string(values[i]) + " appears twice");
}

}  // namespace posenc::cli
