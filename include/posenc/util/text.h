// Plain-text helpers shared by the commands: durations and tables (rows of
// cells, header first) rendered for the terminal or as Markdown.
#pragma once

#include <string>
#include <vector>

namespace posenc {

/// "m:ss", or "h:mm:ss" from an hour on.
std::string format_duration(double seconds);

/// "512 KiB", "3.2 GiB", "14.6 TiB".
std::string format_bytes(double bytes);

/// A library's message fit for one error line: line breaks and runs of blanks
/// become one space, bytes outside printable ASCII become '?', and past
/// `max_chars` it is cut with "...". For messages that may quote a damaged file.
std::string one_line(const std::string& message, size_t max_chars = 200);

/// The items with `separator` between them: join({"a", "b"}, ", ") == "a, b".
std::string join(const std::vector<std::string>& items, const std::string& separator);
/// The words of `text`, split at runs of whitespace: split_words(" a  b\n") == {"a", "b"}.
std::vector<std::string> split_words(const std::string& text);

using Table = std::vector<std::vector<std::string>>;

/// Aligned columns, two spaces apart: the first `left_columns` left-aligned,
/// the rest right-aligned. Widths count UTF-8 code points ("±" is one column).
std::string render_text(const Table& rows, size_t left_columns);

/// A Markdown table; '|' inside a cell is escaped.
std::string render_markdown(const Table& rows, size_t left_columns);

}  // namespace posenc
