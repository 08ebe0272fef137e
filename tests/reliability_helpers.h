// What the reliability and fuzz tests share: a scratch directory, a tiny
// run's config file, and the check that an error is one line naming its cause.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/train/data_parallel.h"
#include "posenc/util/io.h"

/// Skips the rest of a test that needs data parallel on the CPU where this
/// build has no Gloo (e.g. one against a pip CUDA LibTorch).
#define POSENC_SKIP_WITHOUT_GLOO()                                                                   \
  if (!posenc::backend_built(posenc::CollectiveBackend::Gloo))                                       \
  GTEST_SKIP() << "this posenc was built without Gloo (LibTorch's Gloo and libgloo-dev's headers): " \
                  "no data parallel on the CPU"

namespace posenc::testing {

/// A directory removed when the test ends.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name) : dir(fresh_dir(name)) { std::filesystem::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

/// Writes a tiny run's config file (the small_config of helpers.h) and returns its path.
inline std::string write_config(const Scratch& s, const std::string& name, const std::vector<std::string>& extra = {}) {
  const std::string file = s.path(name);
  write_file_atomic(file, config_to_json(small_config(s.dir / "unused", extra)).dump(2));
  return file;
}

/// A run of two training steps (seconds), for the commands that read a
/// checkpoint, not a trained model: an ordering encoder, or a copy decoder or
/// encoder_decoder (one decoder block); eval.lengths [8], 8 examples a length.
/// Returns the run directory.
inline std::string train_tiny(const Scratch& s, const std::string& kind) {
  std::vector<std::string> extra = {"train.steps=2",       "train.eval_every=2", "train.checkpoint_every=2",
                                    "train.val_samples=8", "eval.lengths=[8]",   "eval.samples_per_length=8"};
  if (kind != "encoder") {
    extra.insert(extra.end(), {"task.type=copy", "task.vocab_size=16", "model.kind=" + kind});
    if (kind == "encoder_decoder") extra.push_back("model.decoder_layers=1");
  }
  const std::string config = write_config(s, kind + ".json", extra);
  const std::string dir = s.path("run_" + kind);
  const auto r = run_cli("train " + config + " --out " + dir);
  EXPECT_EQ(r.code, 0) << r.output;
  return dir;
}

/// One error line holding `fragment`; no backtrace, no library exception names.
inline void expect_one_line_error(const std::string& output, const std::string& fragment) {
  const auto at = output.find("error: ");
  ASSERT_NE(at, std::string::npos) << output;
  EXPECT_EQ(output.find("error: ", at + 1), std::string::npos) << "more than one error line:\n" << output;
  const std::string line = output.substr(at, output.find('\n', at) - at);
  EXPECT_NE(line.find(fragment), std::string::npos) << output;
  for (const char* leak : {"terminate called", "json.exception", "c10::Error", "Exception raised from", "frame #"})
    EXPECT_EQ(output.find(leak), std::string::npos) << leak << " in:\n" << output;
}

}  // namespace posenc::testing
