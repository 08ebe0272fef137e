// SCAN's commands and their action sequences, generated from the published
// grammar (tasks/scan.cpp; the task itself is in the registry as "scan").
#pragma once

#include <string>
#include <vector>

namespace posenc {

struct ScanExample {
  std::vector<std::string> command;  ///< words, e.g. {"jump", "twice"}
  std::vector<std::string> actions;  ///< e.g. {"JUMP", "JUMP"}
};

/// All 20,910 distinct commands, each once, in the grammar's order.
std::vector<ScanExample> scan_commands();

/// Words joined by single spaces.
std::string join_words(const std::vector<std::string>& words);

}  // namespace posenc
