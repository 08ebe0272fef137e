#include "posenc/train/cuda_graphs.h"

#include <map>
#include <utility>

#include "posenc/compat.h"

#if defined(POSENC_WITH_CUDA)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace posenc {

#if defined(POSENC_WITH_CUDA)

bool cuda_graphs_compiled() { return true; }

struct GraphCache::Impl {
  int eager_calls = 1;
  std::map<std::string, int> calls;
  std::map<std::string, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
  bool has_pool = false;
  decltype(std::declval<at::cuda::CUDAGraph>().pool()) pool{};
  std::unique_ptr<c10::cuda::CUDAStream> side;

  c10::cuda::CUDAStream& side_stream() {
    if (!side) side = std::make_unique<c10::cuda::CUDAStream>(c10::cuda::getStreamFromPool(/*isHighPriority=*/false));
    return *side;
  }
};

GraphCache::GraphCache(int eager_calls) : impl_(std::make_unique<Impl>()) { impl_->eager_calls = eager_calls; }
GraphCache::~GraphCache() = default;

size_t GraphCache::size() const { return impl_->graphs.size(); }

void GraphCache::run(const std::string& key, const std::function<void()>& work) {
  Impl& s = *impl_;
  if (auto it = s.graphs.find(key); it != s.graphs.end()) {
    it->second->replay();  // on the current stream
    return;
  }
  int& calls = s.calls[key];
  // The side stream starts after everything queued so far and the current
  // stream waits for it: a host synchronisation, but only on the few calls
  // that warm up or capture a key.
  torch::cuda::synchronize();
  if (calls < s.eager_calls) {
    ++calls;
    {
      const c10::cuda::CUDAStreamGuard on_side(s.side_stream());
      work();
    }
    torch::cuda::synchronize();
    return;
  }
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    const c10::cuda::CUDAStreamGuard on_side(s.side_stream());
    if (s.has_pool)
      graph->capture_begin(s.pool);
    else
      graph->capture_begin();
    try {
      work();
    } catch (...) {
      try {
        graph->capture_end();
      } catch (...) {
      }
      (void)cudaGetLastError();  // the failed capture's error must not surface at a later call
      throw;
    }
    graph->capture_end();
  }
  // capture_begin set the CUDA generator's seed and offset tensors for the
  // capture (LibTorch's CUDAGeneratorState::capture_prologue: offset 0) with
  // kernels on the side stream; the replay below sets them to the run's offset
  // on the current stream. Nothing orders the two streams, so on a GPU busy
  // with other processes the side stream's write could land last and the
  // replay draw its dropout masks from offset 0 (seen on an H200: two runs of
  // one config with train.deterministic parted at capture steps). Wait for it.
  torch::cuda::synchronize();
  if (!s.has_pool) {
    s.pool = graph->pool();
    s.has_pool = true;
  }
  graph->replay();  // capturing recorded the work without running it
  s.graphs.emplace(key, std::move(graph));
}

#else

bool cuda_graphs_compiled() { return false; }

struct GraphCache::Impl {};

GraphCache::GraphCache(int) : impl_(std::make_unique<Impl>()) {}
GraphCache::~GraphCache() = default;

size_t GraphCache::size() const { return 0; }

void GraphCache::run(const std::string&, const std::function<void()>& work) { work(); }

#endif

}  // namespace posenc
