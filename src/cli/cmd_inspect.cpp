// posenc inspect SCHEME --length L --heads H --dim D [--set option=value ...] [--json FILE]
// posenc inspect --checkpoint FILE [--input-scheme | --with-scheme] [--block N] [--length L] [--json FILE]  (the trained scheme)
#include <cstdio>

#include "commands.h"
#include "posenc/analysis/trained.h"
#include "posenc/config.h"
#include "posenc/positional/inspect.h"

namespace posenc::cli {

void setup_inspect(CLI::App& app, InspectOptions& o) {
  app.add_option("scheme", o.scheme, "scheme name (posenc list); or give --checkpoint");
  auto* checkpoint = app.add_option("--checkpoint", o.checkpoint, "describe the scheme of this trained model instead")
                         ->check(CLI::ExistingFile);
  auto* input = app.add_flag("--input-scheme", o.input_slot,
                             "with --checkpoint: describe its model.positional.input scheme (before block 1) instead "
                             "of model.positional.type")
                    ->needs(checkpoint);
  app.add_flag("--with-scheme", o.with_slot,
               "with --checkpoint: describe its model.positional.with scheme (beside model.positional.type in the "
               "same attention) instead of model.positional.type")
      ->needs(checkpoint)
      ->excludes(input);
  app.add_option("--block", o.block,
                 "with --checkpoint: describe the instance block N (1 = the first) runs, for a scheme not shared "
                 "across layers (model.positional.share_across_layers false); default: the first it acts at")
      ->check(integer_in(1, 1024))
      ->needs(checkpoint);
  app.add_option("--length", o.length, "number of positions")->check(integer_in(1, int64_t{1} << 16));
  app.add_option("--heads", o.heads, "attention heads")->check(integer_in(1, 1024));
  app.add_option("--dim", o.dim, "model width D")->check(integer_in(2, int64_t{1} << 16));
  app.add_option("--set", o.overrides, "scheme option: name=value (repeatable), e.g. layout=interleaved");
  app.add_option("--seed", o.seed, "seed of the initial learned parameters");
  app.add_option("--json", o.json, "write the JSON here (default: standard output)")->check(non_empty_utf8());
}

int run_inspect(const InspectOptions& o) {
  if (o.scheme.empty() == o.checkpoint.empty())
    throw ConfigError("inspect: give either a scheme name or --checkpoint FILE (not both)");
  check_json_target(o.json, "inspect");
  if (!o.checkpoint.empty()) {
    const SchemeSlot slot = o.input_slot ? SchemeSlot::Input : o.with_slot ? SchemeSlot::With : SchemeSlot::Type;
    emit_json(inspect_checkpoint(o.checkpoint, o.length, slot, o.block), o.json, "inspect");
    return 0;
  }
  InspectRequest r;
  r.scheme = o.scheme;
  r.length = o.length;
  r.heads = o.heads;
  r.dim = o.dim;
  r.seed = o.seed;
  json options = json::object();
  for (const auto& s : o.overrides) apply_override(options, s);
  r.options = options;
  emit_json(inspect_scheme(r), o.json, "inspect");
  return 0;
}

}  // namespace posenc::cli
