// posenc attention CHECKPOINT [--length L] [--kind K] [--index I] [--json FILE]
#include <cstdio>

#include "commands.h"
#include "posenc/analysis/trained.h"
#include "posenc/config.h"

namespace posenc::cli {

void setup_attention(CLI::App& app, AttentionOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a trained run")->required()->check(CLI::ExistingFile);
  app.add_option(
         "--length", o.length,
         "the example's length in the task's unit (ordering: tokens; SCAN: actions; translation: target tokens)")
      ->check(integer_in(2, 4096));
  app.add_option("--kind", o.kind, "ordering: sorted (the default), shuffle, adjacent_swap, random_swap or reverse")
      ->check(non_empty_utf8("kinds"));
  app.add_option("--index", o.index, "which example of that kind in the fixed evaluation set")
      ->check(integer_in(0, int64_t{1} << 40));
  app.add_option("--json", o.json, "write the JSON here (default: standard output)")->check(non_empty_utf8());
}

int run_attention(const AttentionOptions& o) {
  check_json_target(o.json, "attention");
  AttentionRequest r;
  r.length = o.length;
  r.kind_given = !o.kind.empty();
  if (r.kind_given) r.kind = o.kind;
  r.index = o.index;
  emit_json(attention_example(o.checkpoint, r), o.json, "attention");
  return 0;
}

}  // namespace posenc::cli
