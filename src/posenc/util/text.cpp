#include "posenc/util/text.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include <fmt/format.h>

namespace posenc {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string one_line(const std::string& message, size_t max_chars) {
  std::string out;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n' || byte == '\r' || byte == '\t' || byte == ' ') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += byte >= 0x20 && byte < 0x7f ? c : '?';
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

namespace {

size_t columns(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // count lead bytes only
  return n;
}

}  // namespace

std::string render_text(const Table& rows, size_t left_columns) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], columns(row[c]));
  }
  std::ostringstream out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - columns(row[c]), ' ');
      if (c > 0) out << "  ";
      if (c < left_columns)
        out << row[c] << (c + 1 < row.size() ? pad : "");
      else
        out << pad << row[c];
    }
    out << "\n";
  }
  return out.str();
}

std::string render_markdown(const Table& rows, size_t left_columns) {
  std::ostringstream out;
  for (size_t r = 0; r < rows.size(); ++r) {
    out << "|";
    for (const auto& cell : rows[r]) {
      std::string escaped;
      for (char ch : cell) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
      out << " " << escaped << " |";
    }
    out << "\n";
    if (r == 0) {
      out << "|";
      for (size_t c = 0; c < rows[0].size(); ++c) out << (c < left_columns ? "---|" : "---:|");
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace posenc
