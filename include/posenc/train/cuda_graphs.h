// CUDA graphs: a piece of GPU work (a training step, an evaluation forward)
// captured once per input shape and replayed.
//
// At posenc's model sizes a GPU step is bound by kernel launches, not by
// arithmetic: a few hundred small kernels, each costing the host microseconds
// to launch. A CUDA graph records them once and replays them with one launch.
// The work must then be the same every time for a given key (its shapes), and
// read its inputs from, and write its outputs to, tensors that outlive the
// capture ("static" tensors, refilled in place between replays): a capture
// records addresses, not values. Nothing in it may read a value back to the
// host, copy from the host, or decide on the host from the data.
//
// Builds without CUDA support (the CPU LibTorch of Debian, or a CUDA LibTorch
// configured without -DPOSENC_CUDA=ON) run the work eagerly every time.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace posenc {

/// Whether this build can capture CUDA graphs.
bool cuda_graphs_compiled();

class GraphCache {
 public:
  /// `eager_calls`: how many times a key's work runs eagerly (on a side stream,
  /// as CUDA's capture rules want the lazy initialisations done before) before
  /// it is captured.
  explicit GraphCache(int eager_calls = 1);
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  /// Runs `work` for `key`: eagerly for its first eager_calls calls, then
  /// captured (and run once) on the next, replayed after that. Every graph
  /// shares one memory pool; static tensors must be allocated outside `work`'s
  /// captured call. An exception thrown while capturing ends the capture and
  /// propagates (the work has not run).
  void run(const std::string& key, const std::function<void()>& work);

  /// Graphs captured so far.
  size_t size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace posenc
