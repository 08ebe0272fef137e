// Flag validators whose messages say what is wrong with the value as typed.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "commands.h"
#include "posenc/config.h"
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

CLI::Validator integer_as_declared(const OptionSpec& spec) {
  if (spec.kind != OptionKind::Int && spec.kind != OptionKind::IntList)
    throw std::logic_error(spec.name + " is not declared as an integer or a list of integers");
  return integer_in(static_cast<int64_t>(spec.min), static_cast<int64_t>(spec.max));
}

CLI::Validator integer_as_declared(const std::string& key) { return integer_as_declared(config_key(key)); }

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

namespace {

/// "8,,16" -> {"8", "", "16"}: unlike CLI11's split, empty items are kept so that they can be refused.
std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t comma = text.find(','); comma != std::string::npos; comma = text.find(',', start)) {
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  items.push_back(text.substr(start));
  return items;
}

/// Checks every item of one comma-separated value with `item`, and refuses an empty one.
CLI::Validator each_item(CLI::Validator item) {
  return CLI::Validator(
      [item](std::string& value) -> std::string {
        if (value.empty()) return "must not be empty";
        const auto items = split_items(value);
        for (size_t i = 0; i < items.size(); ++i) {
          if (items[i].empty())
            return "'" + value + "' has an empty item (item " + std::to_string(i + 1) + " of " +
                   std::to_string(items.size()) + "): remove the extra comma";
          std::string piece = items[i];
          const std::string problem = item(piece);
          if (!problem.empty()) return problem;
        }
        return "";
      },
      "");
}

/// Declares the flag as raw text (no CLI11 delimiter); `store` converts the checked items.
CLI::Option* add_raw_list(CLI::App& app, const std::string& name, const std::string& description, CLI::Validator item,
                          std::function<void(const std::vector<std::string>&)> store) {
  // "INT in [2, 1048576]" -> "INT,... in [2, 1048576]"; "FILE" -> "FILE,..."
  std::string items = item.get_description().empty() ? "TEXT" : item.get_description();
  items.insert(std::min(items.find(' '), items.size()), ",...");
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [store](const std::vector<std::string>& raw) {
            std::vector<std::string> all;
            for (const auto& value : raw)
              for (auto& piece : split_items(value)) all.push_back(std::move(piece));
            store(all);
          },
          description)
      ->check(each_item(item))
      ->type_name(items);
}

}  // namespace

CLI::Option* add_lengths_option(CLI::App& app, const std::string& name, std::vector<int64_t>& into,
                                const std::string& description) {
  const size_t most = config_key("eval.lengths").max_items;
  return add_raw_list(app, name, description, integer_as_declared("eval.lengths"),
                      [&into, name, most](const std::vector<std::string>& items) {
                        into.clear();
                        for (const auto& piece : items) {
                          const int64_t value = std::stoll(piece);  // checked against the bounds already
                          // Each length is measured once: a repeat is a slip (across repeated flags too).
                          if (std::find(into.begin(), into.end(), value) != into.end())
                            throw CLI::ValidationError(name, piece + " appears twice");
                          into.push_back(value);
                        }
                        if (into.size() > most)
                          throw CLI::ValidationError(name, std::to_string(into.size()) + " lengths, more than the " +
                                                               std::to_string(most) + " eval.lengths takes");
                      });
}

CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& into,
                             const std::string& description, CLI::Validator item) {
  return add_raw_list(app, name, description, std::move(item),
                      [&into](const std::vector<std::string>& items) { into = items; });
}

}  // namespace posenc::cli
