// posenc inspect SCHEME --length L --heads H --dim D [--set option=value ...] [--json FILE]
#include <cstdio>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/positional/inspect.h"

namespace posenc::cli {

void setup_inspect(CLI::App& app, InspectOptions& o) {
  app.add_option("scheme", o.scheme, "scheme name (posenc list)")->required();
  app.add_option("--length", o.length, "number of positions")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--heads", o.heads, "attention heads")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app.add_option("--dim", o.dim, "model width D")->check(CLI::Range(int64_t{2}, int64_t{1} << 16));
  app.add_option("--set", o.overrides, "scheme option: name=value (repeatable), e.g. layout=interleaved");
  app.add_option("--seed", o.seed, "seed of the initial learned parameters");
  app.add_option("--json", o.json, "write the JSON here (default: standard output)");
}

int run_inspect(const InspectOptions& o) {
  InspectRequest r;
  r.scheme = o.scheme;
  r.length = o.length;
  r.heads = o.heads;
  r.dim = o.dim;
  r.seed = o.seed;
  json options = json::object();
  for (const auto& s : o.overrides) apply_override(options, s);
  r.options = options;
  const std::string text = inspect_scheme(r).dump() + "\n";
  if (o.json.empty()) std::fputs(text.c_str(), stdout);
  else write_file_atomic(o.json, text);
  return 0;
}

}  // namespace posenc::cli
