#include "posenc/train/data_parallel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // the base of both backends, and its options
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "posenc/compat.h"
#include "posenc/errors.h"
#include "posenc/util/tensor_values.h"
#include "posenc/util/text.h"

// Gloo needs libgloo-dev's headers as well as LibTorch's USE_C10D_GLOO
// (-DPOSENC_GLOO=OFF: off, to try a build without it).
#if defined(USE_C10D_GLOO) && !defined(POSENC_NO_GLOO) && __has_include(<gloo/config.h>)
#define POSENC_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#else
#define POSENC_HAS_GLOO 0
#endif
// NCCL likewise needs nccl.h besides LibTorch's USE_C10D_NCCL: a pip LibTorch
// defines the macro for its users but ships the header in its nvidia-nccl
// package, which CMakeLists.txt adds where it finds it (-DPOSENC_NCCL=OFF: off).
#if defined(USE_C10D_NCCL) && !defined(POSENC_NO_NCCL) && __has_include(<nccl.h>)
#define POSENC_HAS_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define POSENC_HAS_NCCL 0
#endif

namespace posenc {

bool backend_built(CollectiveBackend backend) {
  if (backend == CollectiveBackend::Gloo) return POSENC_HAS_GLOO;
  if (backend == CollectiveBackend::Nccl) return POSENC_HAS_NCCL;
  return false;
}

using Backend = POSENC_C10D_BACKEND_BASE;
using Clock = std::chrono::steady_clock;

CollectiveBackend resolve_backend(CollectiveBackend requested, c10::Device device) {
  const CollectiveBackend backend = requested != CollectiveBackend::Auto ? requested
                                    : device.is_cuda()                   ? CollectiveBackend::Nccl
                                                                         : CollectiveBackend::Gloo;
  if (backend == CollectiveBackend::Nccl && !device.is_cuda())
    throw ConfigError("train.backend=nccl serves CUDA devices only; this run trains on " + device.str() +
                      " (use gloo or auto)");
  if (backend == CollectiveBackend::Gloo && !backend_built(backend))
    throw ConfigError(
        "train.backend=gloo: this posenc was built without Gloo, the CPU's data-parallel backend (it needs "
        "libgloo-dev's headers, which scripts/setup.sh installs on Debian; a build against a pip CUDA LibTorch "
        "has none: there, train data parallel on CUDA)");
  if (backend == CollectiveBackend::Nccl && !backend_built(backend))
    throw ConfigError(
        "train.backend=nccl: this posenc was built without NCCL (Debian's LibTorch has none; with a CUDA "
        "LibTorch, the build found no nccl.h: see the NCCL line of cmake's output), so use train.backend=gloo");
  return backend;
}

namespace {

/// "rank 1: the gradient all-reduce failed: <why> (rank 0 ended or lost its connection)".
/// LibTorch's message in one line without its C++ backtrace ("Exception raised
/// from ...", "frame #..."), which says nothing to a user.
std::string without_backtrace(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = torch_error ? torch_error->what_without_backtrace() : e.what();
  for (const char* cut : {"Exception raised from", "frame #"})
    if (const auto at = what.find(cut); at != std::string::npos) what.resize(at);
  return one_line(what, 160);
}

[[noreturn]] void collective_failed(int rank, int world, const std::string& what, const std::exception& e) {
  const std::string who = world == 2 ? fmt::format("rank {}", 1 - rank) : std::string("another rank");
  throw CollectiveError(
      fmt::format("rank {}: {} with the other ranks failed: {} ({} ended, hung or lost its "
                  "connection; its own output says why)",
                  rank, what, without_backtrace(e), who));
}

c10::intrusive_ptr<c10d::Store> rendezvous(const Launch& launch, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(launch.master_port);
  opts.isServer = launch.rank == 0;
  opts.numWorkers = static_cast<size_t>(launch.world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
#if POSENC_TCPSTORE_HAS_USE_LIBUV
  opts.useLibUV = false;
#endif
  const std::string where = fmt::format("{}:{}", launch.master_addr, launch.master_port);
  // A name that does not resolve never will: LibTorch would retry it, with a
  // warning a second, for the whole timeout.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(launch.master_addr.c_str(), nullptr, &hints, &found); rc != 0)
    throw ConfigError(
        fmt::format("MASTER_ADDR={}: the name does not resolve ({}); set it to rank 0's host name or "
                    "address",
                    launch.master_addr, ::gai_strerror(rc)));
  ::freeaddrinfo(found);
  try {
    return c10::make_intrusive<c10d::TCPStore>(launch.master_addr, opts);
  } catch (const std::exception& e) {
    const std::string why = without_backtrace(e);
    if (launch.rank == 0 && why.find("in use") != std::string::npos)
      throw ConfigError(
          fmt::format("MASTER_PORT={}: the port is already in use on this machine, where rank 0 "
                      "serves the rendezvous; choose another port",
                      launch.master_port));
    if (launch.rank == 0)
      throw CollectiveError(
          fmt::format("rank 0: the rendezvous at {} failed: {} (all {} ranks must start within "
                      "train.collective_timeout_s={})",
                      where, why, launch.world_size, timeout.count() / 1000));
    throw CollectiveError(
        fmt::format("rank {}: cannot join rank 0's rendezvous at {}: {} (is rank 0 running, and "
                    "is MASTER_ADDR reachable from here?)",
                    launch.rank, where, why));
  }
}

#if POSENC_HAS_GLOO
std::string own_host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

/// Whether `host` resolves to an address other than loopback that a socket
/// here can bind to: what Gloo's default device needs of this machine's own
/// name for other machines to reach it. (Debian writes "127.0.1.1 NAME" into
/// /etc/hosts: Gloo would bind to loopback and advertise it.)
bool binds_reachably(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool binds = false;
  for (const addrinfo* a = found; a != nullptr && !binds; a = a->ai_next) {
    const bool loopback = (a->ai_family == AF_INET &&
                           (ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127) ||
                          (a->ai_family == AF_INET6 &&
                           IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr));
    if (loopback) continue;
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    binds = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0, as getaddrinfo left it
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return binds;
}

/// The address of this machine that the kernel would send from to reach
/// `addr` ("" if there is no route). A UDP connect sends nothing.
std::string address_towards(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), "9", &hints, &found) != 0) return "";
  std::string local;
  for (const addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage me{};
    socklen_t len = sizeof me;
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      const void* raw = me.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&me)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&me)->sin6_addr);
      if (::inet_ntop(me.ss_family, raw, text, sizeof text) != nullptr) local = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return local;
}

c10::intrusive_ptr<Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const Launch& launch,
                                      std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::string& addr = launch.master_addr;
  // Which address of this machine Gloo binds to is this rank's own affair: a
  // failure here is named as such, not blamed on the other ranks.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    try {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("rank {}: GLOO_SOCKET_IFNAME={}: Gloo cannot use that interface here: {}",
                                    launch.rank, ifname, without_backtrace(e)));
    }
  } else if (addr == "localhost" || addr.rfind("127.", 0) == 0) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else if (const std::string host = own_host_name(); binds_reachably(host)) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  } else {
    // Gloo's default binds to the address of this machine's own name: where
    // that name gives none, or only loopback, it binds to loopback, which no
    // other machine can reach. Take the address this machine reaches
    // MASTER_ADDR from instead.
    const std::string local = address_towards(addr);
    if (local.empty())
      throw ConfigError(
          fmt::format("rank {}: this machine's own name \"{}\" gives Gloo no address that other machines can "
                      "reach, and no route to MASTER_ADDR={} gives one either: add the name to /etc/hosts with this "
                      "machine's address, or set GLOO_SOCKET_IFNAME to the network interface to use (e.g. eth0)",
                      launch.rank, host, addr));
    spdlog::warn(
        "rank {}: this machine's own name \"{}\" gives no address that other machines can reach (none, or "
        "loopback); Gloo binds to {}, the address from which it reaches MASTER_ADDR={} (GLOO_SOCKET_IFNAME picks "
        "another)",
        launch.rank, host, local, addr);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, launch.rank, launch.world_size, options);
}
#endif

#if POSENC_HAS_NCCL
c10::intrusive_ptr<Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const Launch& launch,
                                      std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, launch.rank, launch.world_size, options);
}
#endif

}  // namespace

struct DataParallel::Impl {
  /// Parameters grouped into flat buffers of at most `bucket_bytes` each (a
  /// parameter larger than that gets a bucket of its own). A member type, not
  /// an anonymous one: Impl has external linkage.
  struct Bucket {
    std::vector<size_t> members;  ///< indices into the parameter list
    at::Tensor flat;              ///< (numel [+ 1 for the stop flag in the last bucket])
  };

  Launch launch;
  std::string backend_name;
  c10::Device device = c10::kCPU;
  int64_t bucket_bytes = 0;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> group;
  std::vector<Bucket> buckets;
  double allreduce_seconds = 0;

  void wait(const std::string& what, c10::intrusive_ptr<c10d::Work> work) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      collective_failed(launch.rank, launch.world_size, what, e);
    }
  }

  std::vector<Bucket> make_buckets(const std::vector<at::Tensor>& tensors, bool with_flag) const {
    std::vector<Bucket> out;
    std::vector<int64_t> numels;
    int64_t filled = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      TORCH_CHECK(tensors[i].scalar_type() == at::kFloat, "data parallel training expects float32 parameters");
      const int64_t bytes = tensors[i].numel() * 4;
      if (out.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
        out.emplace_back();
        numels.push_back(0);
        filled = 0;
      }
      out.back().members.push_back(i);
      numels.back() += tensors[i].numel();
      filled += bytes;
    }
    for (size_t b = 0; b < out.size(); ++b) {
      const int64_t extra = with_flag && b + 1 == out.size() ? 1 : 0;
      out[b].flat = torch::zeros({numels[b] + extra}, torch::TensorOptions().device(device).dtype(torch::kFloat));
    }
    return out;
  }
};

DataParallel::DataParallel(const Launch& launch, CollectiveBackend backend, c10::Device device, double bucket_mb,
                           int64_t timeout_s)
    : impl_(std::make_unique<Impl>()) {
  impl_->launch = launch;
  impl_->backend_name = name_of(resolve_backend(backend, device));
  impl_->device = device;
  impl_->bucket_bytes = std::max<int64_t>(4, static_cast<int64_t>(bucket_mb * 1024 * 1024));
  const std::chrono::milliseconds timeout(timeout_s * 1000);
  impl_->store = rendezvous(launch, timeout);
  try {
#if POSENC_HAS_GLOO
    if (impl_->backend_name == "gloo") impl_->group = make_gloo(impl_->store, launch, timeout);
#endif
#if POSENC_HAS_NCCL
    if (impl_->backend_name == "nccl") impl_->group = make_nccl(impl_->store, launch, timeout);
#endif
  } catch (const ConfigError&) {
    throw;  // this rank's own set-up, named by make_gloo
  } catch (const std::exception& e) {
    collective_failed(launch.rank, launch.world_size, "connecting " + impl_->backend_name, e);
  }
  TORCH_CHECK(impl_->group, "no process group for backend ", impl_->backend_name);
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return impl_->launch.rank; }
int DataParallel::world_size() const { return impl_->launch.world_size; }
const std::string& DataParallel::backend() const { return impl_->backend_name; }
double DataParallel::allreduce_seconds() const { return impl_->allreduce_seconds; }

void DataParallel::broadcast_from_rank0(const std::vector<at::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  for (auto& bucket : impl_->make_buckets(tensors, /*with_flag=*/false)) {
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      const auto n = tensors[i].numel();
      bucket.flat.narrow(0, offset, n).view_as(tensors[i]).copy_(tensors[i]);
      offset += n;
    }
    std::vector<at::Tensor> one{bucket.flat};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    impl_->wait("broadcasting rank 0's parameters", impl_->group->broadcast(one, options));
    offset = 0;
    for (size_t i : bucket.members) {
      const auto n = tensors[i].numel();
      tensors[i].copy_(bucket.flat.narrow(0, offset, n).view_as(tensors[i]));
      offset += n;
    }
  }
}

int DataParallel::average_gradients(const std::vector<at::Tensor>& parameters, int stop_signal) {
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  if (impl_->buckets.empty()) impl_->buckets = impl_->make_buckets(parameters, /*with_flag=*/true);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& bucket : impl_->buckets) {
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      const auto& p = parameters[i];
      auto slot = bucket.flat.narrow(0, offset, p.numel()).view_as(p);
      if (p.grad().defined())
        slot.copy_(p.grad());
      else
        slot.zero_();
      offset += p.numel();
    }
    if (&bucket == &impl_->buckets.back()) bucket.flat[-1].fill_(static_cast<float>(stop_signal));
    std::vector<at::Tensor> one{bucket.flat};
    works.push_back(impl_->group->allreduce(one));  // SUM (all-reduce's default op)
  }
  for (auto& work : works) impl_->wait("the gradient all-reduce", work);
  const int total_signal = static_cast<int>(impl_->buckets.back().flat[-1].item<float>());
  const double ranks = static_cast<double>(impl_->launch.world_size);
  for (auto& bucket : impl_->buckets) {
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      const auto& p = parameters[i];
      if (p.grad().defined()) p.grad().copy_(bucket.flat.narrow(0, offset, p.numel()).view_as(p) / ranks);
      offset += p.numel();
    }
  }
  impl_->allreduce_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (total_signal == 0) return 0;
  if (stop_signal != 0) return stop_signal;  // this rank was asked itself
  // One rank was asked (or several with the same signal): the sum is that signal.
  return total_signal == SIGINT || total_signal == SIGTERM || total_signal == SIGHUP ? total_signal : SIGTERM;
}

std::vector<double> DataParallel::sum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble)).to(impl_->device);
  std::vector<at::Tensor> one{t};
  impl_->wait("summing the loss and accuracy tallies", impl_->group->allreduce(one));
  return tensor_values(t);
}

}  // namespace posenc
