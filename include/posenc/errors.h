// Every error type posenc throws on purpose, and the exit status the CLI gives
// each (`posenc` documents them: 0 done, 1 failure, 2 bad input, 3 diverged,
// 128 + signal when stopped). Each type says what went wrong, so a caller can
// tell a bad config from a held lock or a missing GPU. No torch here.
#pragma once

#include <stdexcept>
#include <string>

namespace posenc {

/// Exit status of each kind of outcome (src/cli/main.cpp maps errors to them).
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDiverged = 3;

/// A user-facing error in a config, a flag or a file: the message names where.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A config whose parts are each valid but do not fit together in one model
/// (e.g. an embedding-time scheme with embedded-QKV attention). A comparison
/// grid skips such a combination instead of failing.
class IncompatibleConfig : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// A file could not be written or read: "cannot write PATH: No space left on device".
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Another posenc process holds the directory (its train.lock or compare.lock).
class LockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The device asked for is not there (train.device=cuda without a visible GPU).
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The loss or the gradient norm became NaN or inf: the run stopped, its last
/// finite checkpoint (if any) is kept, and diverged.json says what happened.
class Diverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown where a loop honours a stop request; the CLI exits with 128 + signal
/// (130 for SIGINT, 143 for SIGTERM), as a shell reports a process killed by it.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }
  int exit_code() const { return 128 + signal_; }

 private:
  int signal_;
};

}  // namespace posenc
