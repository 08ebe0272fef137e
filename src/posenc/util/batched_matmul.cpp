#include "posenc/util/batched_matmul.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>

#include "posenc/compat.h"

namespace posenc {
namespace {

constexpr int64_t kMaxN = 64;          // widest right factor the kernel handles (8 vectors of 8 floats)
constexpr int64_t kMaxWork = 1 << 17;  // M·K·N above which BLAS's per-item overhead no longer dominates

// The same source compiled twice, for AVX2+FMA CPUs and for the baseline; the
// loader picks one at start-up. Elsewhere one plain version.
#if defined(__GNUC__) && defined(__x86_64__) && defined(__ELF__)
#define POSENC_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define POSENC_VECTOR_CLONES
#endif

// 8 floats; unaligned loads and stores through float pointers are allowed.
typedef float Vec8 __attribute__((vector_size(32), aligned(4), may_alias));

/// c (M x 8V, row stride ldc) = a (M x K, strides ar, ac) · b (K x 8V, contiguous).
/// R rows of c live in R·V vector registers while k runs.
template <int V>
POSENC_VECTOR_CLONES void multiply_item(const float* a, int64_t ar, int64_t ac, const float* b, float* c, int64_t ldc,
                                        int64_t M, int64_t K) {
  constexpr int R = 8 / V;  // 8 accumulators whatever the width
  for (int64_t i = 0; i < M; i += R) {
    const int rows = static_cast<int>(std::min<int64_t>(R, M - i));
    Vec8 acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = Vec8{};
    for (int64_t k = 0; k < K; ++k) {
      Vec8 bk[V];
      for (int v = 0; v < V; ++v) bk[v] = *reinterpret_cast<const Vec8*>(b + k * 8 * V + 8 * v);
      for (int r = 0; r < R; ++r) {
        const float x = r < rows ? a[(i + r) * ar + k * ac] : 0.0f;
        for (int v = 0; v < V; ++v) acc[r][v] += x * bk[v];
      }
    }
    for (int r = 0; r < rows; ++r)
      for (int v = 0; v < V; ++v) *reinterpret_cast<Vec8*>(c + (i + r) * ldc + 8 * v) = acc[r][v];
  }
}

using ItemKernel = void (*)(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t, int64_t);

ItemKernel kernel_for_vectors(int64_t vectors) {
  switch (vectors) {
    case 1: return multiply_item<1>;
    case 2: return multiply_item<2>;
    case 3: return multiply_item<3>;
    case 4: return multiply_item<4>;
    case 5: return multiply_item<5>;
    case 6: return multiply_item<6>;
    case 7: return multiply_item<7>;
    case 8: return multiply_item<8>;
  }
  TORCH_CHECK(false, "batched_matmul: no kernel for ", vectors, " vectors per row");
}

/// Offsets (in elements) of every batch item of t, leading dims flattened in row-major order.
std::vector<int64_t> item_offsets(const torch::Tensor& t) {
  const int64_t lead = t.dim() - 2;
  std::vector<int64_t> offsets{0};
  for (int64_t d = 0; d < lead; ++d) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * t.size(d));
    for (int64_t base : offsets)
      for (int64_t i = 0; i < t.size(d); ++i) next.push_back(base + i * t.stride(d));
    offsets.swap(next);
  }
  return offsets;
}

/// The kernel without autograd: out (..., M, N), contiguous.
torch::Tensor small_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  std::vector<int64_t> out_shape(a.sizes().begin(), a.sizes().end());
  out_shape.back() = N;
  auto out = torch::empty(out_shape, a.options());
  const auto a_items = item_offsets(a), b_items = item_offsets(b);
  const int64_t items = static_cast<int64_t>(a_items.size());
  const int64_t vectors = (N + 7) / 8, padded = 8 * vectors;
  const ItemKernel kernel = kernel_for_vectors(vectors);
  const int64_t ar = a.stride(-2), ac = a.stride(-1), br = b.stride(-2), bc = b.stride(-1);
  const float* a_data = a.data_ptr<float>();
  const float* b_data = b.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, kMaxWork / std::max<int64_t>(1, M * K * N));
  at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> packed(K * padded, 0.0f);               // b's item, rows padded to 8V floats
    std::vector<float> scratch(padded == N ? 0 : M * padded);  // c's item when N is not a multiple of 8
    for (int64_t item = begin; item < end; ++item) {
      const float* bi = b_data + b_items[item];
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) packed[k * padded + j] = bi[k * br + j * bc];
      float* ci = out_data + item * M * N;
      if (padded == N) {
        kernel(a_data + a_items[item], ar, ac, packed.data(), ci, N, M, K);
      } else {
        kernel(a_data + a_items[item], ar, ac, packed.data(), scratch.data(), padded, M, K);
        for (int64_t i = 0; i < M; ++i) std::copy_n(scratch.data() + i * padded, N, ci + i * N);
      }
    }
  });
  return out;
}

class SmallMatmul : public torch::autograd::Function<SmallMatmul> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return small_matmul(a, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& a = saved[0];
    const torch::Tensor& b = saved[1];
    const torch::Tensor& g = grads[0];  // (..., M, N)
    torch::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) grad_a = batched_matmul(g, b.transpose(-2, -1));  // (..., M, K)
    if (ctx->needs_input_grad(1)) grad_b = batched_matmul(a.transpose(-2, -1), g);  // (..., K, N)
    return {grad_a, grad_b};
  }
};

}  // namespace

bool uses_small_matmul_kernel(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.dim() < 3 || a.dim() != b.dim()) return false;
  if (!a.device().is_cpu() || !b.device().is_cpu() || a.layout() != torch::kStrided || b.layout() != torch::kStrided)
    return false;
  if (a.scalar_type() != torch::kFloat || b.scalar_type() != torch::kFloat) return false;
  if (compat::autocast_enabled(at::kCPU)) return false;  // matmul would run in the autocast dtype
  if (a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2)) return false;  // no broadcasting
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (b.size(-2) != K || M == 0 || K == 0 || N == 0 || a.numel() == 0) return false;
  return N <= kMaxN && M * K * N <= kMaxWork;
}

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!uses_small_matmul_kernel(a, b)) return torch::matmul(a, b);
  if (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) return SmallMatmul::apply(a, b);
  return small_matmul(a, b);
}

}  // namespace posenc
