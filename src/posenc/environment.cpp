#include "posenc/environment.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <torch/version.h>

namespace posenc {

std::string version_line() { return std::string("posenc ") + build_commit() + " (LibTorch " + TORCH_VERSION + ")"; }

std::string live_blas() {
  std::error_code ec;
  const auto target = std::filesystem::canonical("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", ec);
  return ec ? std::string("unknown") : target.string();
}

std::string blas_kernels() {
  // OpenBLAS exports its choice; LibTorch's BLAS calls reach whatever
  // libblas.so.3 is loaded, so the symbol is looked up in the whole process.
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = core_name ? core_name() : nullptr;
  return name && *name ? std::string(name) : std::string("unknown");
}

CpuVectorUnits cpu_vector_units() {
  CpuVectorUnits units;
#if defined(__x86_64__)
  // GCC's checks include the operating system's support (XCR0) for the wider registers.
  __builtin_cpu_init();
  units.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  units.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl");
#endif
  return units;
}

namespace {
/// How wide a vector unit OpenBLAS's x86-64 kernels of this name use: 0 below
/// AVX2 (SSE or AVX), 1 AVX2 with FMA, 2 AVX-512; -1 for a name not listed
/// here (not OpenBLAS, or kernels newer than this list: left alone).
int kernel_width(const std::string& kernels) {
  for (const char* name : {"Katmai", "Coppermine",  "Northwood", "Prescott",  "Banias",       "Atom",       "Core2",
                           "Penryn", "Dunnington",  "Nehalem",   "Athlon",    "Opteron_SSE3", "Opteron",    "Barcelona",
                           "Nano",   "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver",   "Steamroller"})
    if (kernels == name) return 0;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (kernels == name) return 1;
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (kernels == name) return 2;
  return -1;
}
}  // namespace

std::vector<std::string> faster_blas_kernels(const std::string& picked, const CpuVectorUnits& units) {
  const int width = kernel_width(picked);
  std::vector<std::string> candidates;
  if (width < 0) return candidates;
  if (units.avx512 && units.avx2_fma && width < 2) candidates.emplace_back("SkylakeX");
  if (units.avx2_fma && width < 1) candidates.emplace_back("Haswell");
  return candidates;
}

namespace {
std::string replaced_kernels;  ///< OpenBLAS's own pick, where use_the_cpus_blas_kernels replaced it
}  // namespace

void use_the_cpus_blas_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string picked = blas_kernels();
  const auto candidates = faster_blas_kernels(picked, cpu_vector_units());
  // An OpenBLAS built for several CPUs chooses its kernels when it is loaded,
  // reading OPENBLAS_CORETYPE; these two (exported by such builds) drop that
  // choice and make it again. No matrix product has run yet.
  using Hook = void (*)();
  const auto forget = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  const auto choose = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (candidates.empty() || !forget || !choose) return;
  const auto choose_as = [&](const std::string& kernels) {
    ::setenv("OPENBLAS_CORETYPE", kernels.c_str(), 1);
    forget();
    choose();
    // Not left set: a process started elsewhere (a Slurm task on another
    // node, a data-parallel rank on another host) must not be made to load
    // kernels its CPU may lack. Every posenc process makes this choice itself.
    ::unsetenv("OPENBLAS_CORETYPE");
  };
  for (const auto& kernels : candidates) {
    choose_as(kernels);
    if (blas_kernels() == kernels) {
      replaced_kernels = picked;
      return;
    }
  }
  choose_as(picked);  // this OpenBLAS has none of them under those names: back to its own pick
}

std::string replaced_blas_kernels() { return replaced_kernels; }

nlohmann::json numeric_environment(const std::string& device) {
  nlohmann::json facts = {{"posenc", build_commit()},
                          {"device", device},
                          {"libtorch", TORCH_VERSION},
                          {"blas", live_blas()},
                          {"blas_kernels", blas_kernels()}};
  if (!replaced_kernels.empty()) facts["blas_kernels_replaced"] = replaced_kernels;
  for (const char* name : {"OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY"})
    if (const char* value = std::getenv(name)) facts[name] = value;
  return facts;
}

namespace {
const char* malloc_mode = "default";
bool denormals_flushed = false;
}  // namespace

const char* tune_malloc_for_training() {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (std::getenv(name)) return malloc_mode = "user";
  // Blocks up to 32 MB (glibc's ceiling for this setting) come from the heap, not from mmap...
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  // ...and up to 1 GB of free memory at the top of the heap stays mapped between steps.
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  malloc_mode = mmap_ok && trim_ok ? "tuned" : "default";
#endif
  return malloc_mode;
}

bool flush_denormals() {
  // Softmax over a steep bias (ALiBi's -m|i-j| reaches -255 at length 512) leaves
  // probabilities and gradients below 1e-38, and x86 arithmetic on such
  // subnormal floats is many times slower: ALiBi's step at length 512 took 1.5x
  // none's without this. Flushing them to zero changes values below 1.2e-38 only.
  // It holds for the calling thread, the one that runs the ops at one intra-op thread.
  return denormals_flushed = at::globalContext().setFlushDenormal(true);
}

void log_environment() {
  const std::string blas = live_blas();
  spdlog::info("posenc={} libtorch={} cuda={} threads={} blas={} ({} kernels) malloc={} denormals={}", build_commit(),
               TORCH_VERSION, torch::cuda::is_available() ? "yes" : "no", torch::get_num_threads(), blas,
               blas_kernels(), malloc_mode, denormals_flushed ? "flushed" : "kept");
  if (!replaced_kernels.empty())
    spdlog::info(
        "OpenBLAS took this CPU for an older one and picked its {} kernels; posenc switched it to its {} "
        "kernels, which this CPU runs (set OPENBLAS_CORETYPE to choose)",
        replaced_kernels, blas_kernels());
  if (blas.find("openblas") == std::string::npos && blas != "unknown")
    spdlog::warn("the live BLAS is not OpenBLAS: matrix products run ~15x slower (install libopenblas0-openmp)");
}

}  // namespace posenc
