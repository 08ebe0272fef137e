// The source tree's own rules, read from the files themselves:
//  - layers: every `#include "posenc/..."` points down (or within its folder),
//    never up and never sideways into a sibling folder of the same layer;
//  - only compat.h tests TORCH_VERSION (#if / #elif);
//  (that nothing refers to files outside the repository: tests/test_docs.cpp).
// A violation names the file, the line and the rule it breaks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace {
namespace fs = std::filesystem;

const fs::path kRoot = POSENC_SOURCE_DIR;

/// A file's layer and the folder that names it, from its path under
/// include/posenc/ or src/posenc/ ("util/io.h" -> util). Lower layers never
/// include higher ones:
///   0 util/, errors.h, compat.h, environment.h   no posenc dependencies
///   1 options.h, choices.h, positional/registry.h,
///     tasks/registry.h                           the torch-free name tables and their options
///   2 config*.h                                  typed config, overlays
///   3 tasks/, positional/                        (siblings: neither includes the other)
///   4 model/
///   5 train/
///   6 analysis/
///   7 bench/, experiments/                       (siblings)
///   8 the CLI (src/cli/)
struct Layer {
  int level = -1;
  std::string group;
};

Layer layer_of(const std::string& rel) {
  if (rel == "positional/registry.h" || rel == "tasks/registry.h" || rel == "options.h" || rel == "options.cpp" ||
      rel == "choices.h" || rel == "choices.cpp")
    return {1, "registries"};
  const auto slash = rel.find('/');
  if (slash == std::string::npos) {
    if (rel.rfind("config", 0) == 0) return {2, "config"};
    if (rel == "errors.h" || rel == "compat.h" || rel == "environment.h" || rel == "environment.cpp")
      return {0, "util"};
    return {};
  }
  static const std::map<std::string, int> folders = {{"util", 0},  {"tasks", 3},       {"positional", 3},
                                                     {"model", 4}, {"train", 5},       {"analysis", 6},
                                                     {"bench", 7}, {"experiments", 7}, {"cli", 8}};
  const std::string folder = rel.substr(0, slash);
  const auto it = folders.find(folder);
  return it == folders.end() ? Layer{} : Layer{it->second, folder};
}

struct Source {
  fs::path path;
  std::string rel;  ///< relative to include/posenc/ or src/posenc/ ("cli/..." for src/cli)
};

std::vector<Source> sources() {
  std::vector<Source> out;
  const std::vector<std::pair<fs::path, std::string>> roots = {
      {kRoot / "include" / "posenc", ""}, {kRoot / "src" / "posenc", ""}, {kRoot / "src" / "cli", "cli/"}};
  for (const auto& [root, prefix] : roots)
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && (e.path().extension() == ".h" || e.path().extension() == ".cpp"))
        out.push_back({e.path(), prefix + fs::relative(e.path(), root).generic_string()});
  return out;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Layering, EveryFileHasALayer) {
  const auto all = sources();
  ASSERT_GT(all.size(), 50u) << "found too few sources under " << kRoot;
  for (const auto& s : all) EXPECT_GE(layer_of(s.rel).level, 0) << s.path << ": no layer (add its folder to layer_of)";
}

TEST(Layering, IncludesPointDownOnly) {
  const std::regex include_line(R"re(^\s*#\s*include\s+"posenc/([^"]+)")re");
  for (const auto& s : sources()) {
    const Layer from = layer_of(s.rel);
    const auto lines = lines_of(s.path);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(lines[i], m, include_line)) continue;
      const Layer to = layer_of(m[1]);
      const std::string where = s.path.string() + ":" + std::to_string(i + 1) + " includes posenc/" + m[1].str();
      ASSERT_GE(to.level, 0) << where << ", which has no layer";
      EXPECT_LE(to.level, from.level) << where << ": an upward include (layer " << to.level << " " << to.group
                                      << " from layer " << from.level << " " << from.group << ")";
      if (to.level == from.level) {
        EXPECT_EQ(to.group, from.group) << where << ": a sideways include between sibling layers " << from.group
                                        << " and " << to.group;
      }
    }
  }
}

TEST(Layering, OnlyCompatTestsTheTorchVersion) {
  for (const auto& s : sources()) {
    if (s.rel == "compat.h") continue;
    const auto lines = lines_of(s.path);
    const std::regex version_test(R"re(^\s*#\s*(if|elif).*TORCH_VERSION)re");
    for (size_t i = 0; i < lines.size(); ++i)
      EXPECT_FALSE(std::regex_search(lines[i], version_test))
          << s.path << ":" << i + 1 << ": version differences belong in include/posenc/compat.h";
  }
}

}  // namespace

}  // namespace POSENC_TEST_UNIT
