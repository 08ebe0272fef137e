// Batched matrix product of many small matrices: a (..., M, K) @ b (..., K, N).
// Attention's q·kᵀ and p·v use it, and PaTH's per-chunk products
// (positional/householder.cpp), which are of the same size.
//
// Why not just torch::matmul: at the default size (batch 64, 4 heads, length
// 16, head width 16) attention multiplies 256 matrices of 16 x 16. LibTorch's
// CPU bmm without MKL loops over the batch, and every item costs tensor
// selects, checks and a BLAS call for 8 kFLOP of work: 250 us for q·kᵀ, 5%
// of the machine's peak. The six attention products per layer and step then
// took about a quarter of a training step. The kernel here packs each item's
// right factor into a small contiguous block and multiplies it with register
// accumulators over 8-float vectors (AVX2 where the CPU has it): 45 us for
// the same q·kᵀ (posenc bench measures the effect on whole steps).
//
// It runs only where it was measured to win: CPU, float32, no autocast, the
// same leading dims on both sides, N ≤ 64 and M·K·N ≤ 2^17. Everything else
// (CUDA, bf16, long sequences, broadcasting) goes to torch::matmul. Gradients
// go through the same function, so the backward products are fast too.
#pragma once

#include <torch/torch.h>

namespace posenc {

/// Same value and gradients as torch::matmul(a, b) for a (..., M, K), b (..., K, N).
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

/// Whether batched_matmul(a, b) takes the small-matrix kernel (the dispatch rule; tested directly).
bool uses_small_matmul_kernel(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace posenc
