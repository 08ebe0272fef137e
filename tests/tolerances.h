// The suite's tolerances, each with the error model it comes from.
//
// u32 = 2^-24 ~ 6.0e-8 is float32's unit roundoff, u64 = 2^-53 ~ 1.1e-16
// float64's, u_bf16 = 2^-8 ~ 3.9e-3 bfloat16's. A sum of n products of size
// at most s has a rounding error of at most n * u * n * s in the worst case and
// about sqrt(n) * u * s for the blocked and pairwise sums that OpenBLAS and
// ATen use; which kernel runs (AVX2, AVX-512, portable) changes the order of
// the sum and so the error, but not its size. `scripts/test-kernel-paths.sh`
// runs the suites that use these under three kernel paths.
//
// A check of "these differ" (EXPECT_FALSE(allclose(...))) passes its tolerance
// to say how far apart is "different": it must be far above the rounding of
// the computation and far below the difference the property predicts.
#pragma once

namespace tolerance {

/// A float64 computation of values of size <= 100 in at most ~1e3 operations:
/// the error is below 1e3 * u64 * 100 ~ 1e-11, so 1e-9 leaves 100x. A float32
/// computation cannot meet it, so a check at this tolerance also checks that
/// the computation ran in float64.
inline constexpr double kFloat64 = 1e-9;

/// A float64 closed form evaluated two ways in a handful of operations (an lr
/// schedule, a rotation angle, a slope): below 10 * u64 * |x| for |x| <= 10.
inline constexpr double kFloat64Closed = 1e-12;

/// A float32 value of size <= 2 after at most 8 roundings (a table computed in
/// float64 and cast, a rotation of a pair, exp of a distance): 8 * u32 * 2 ~ 1e-6.
inline constexpr double kFloat32Value = 1e-6;

/// A float32 sum or dot product of at most 64 terms of size <= 1, or a value a
/// few such products deep (a bias through an MLP, one attention head): the
/// worst case 64 * u32 * 64 * 1 is 2.5e-4, the blocked sums' ~sqrt(64) * 64 * u32
/// ~ 3e-5 relative to the largest term; values here are O(1) with terms of
/// 1/8 or less, measured errors are ~1e-6, and 1e-5 leaves 10x.
inline constexpr double kFloat32Sum = 1e-5;

/// The outputs of a small model (2-3 pre-LN blocks of width <= 64, softmax,
/// LayerNorm) computed two mathematically equal ways (a KV cache against the
/// whole sequence, padded against unpadded, fused against explicit attention,
/// CPU against CUDA): each block adds about kFloat32Sum relative error and
/// LayerNorm's division by a standard deviation of ~0.1 amplifies it by ~10.
inline constexpr double kFloat32Model = 1e-4;

/// Gradients of such a model, relative to its largest gradient: the backward
/// pass is about twice as deep as the forward, and the gradient of a small
/// entry carries the absolute error of the large ones: 10x kFloat32Model.
inline constexpr double kFloat32Gradient = 1e-3;

/// bfloat16 against float32 for values of size <= 1 after a few roundings:
/// 5 * u_bf16 ~ 2e-2.
inline constexpr double kBf16 = 2e-2;

/// A value quoted with 3 decimals (a tutorial's printout): half a unit of the
/// last printed digit.
inline constexpr double kPrinted3 = 5e-4;

/// A value quoted with 4 decimals (a hand-worked number): one unit of the last
/// digit, as the quoted value may itself have been rounded from a rounded one.
inline constexpr double kPrinted4 = 1e-4;

}  // namespace tolerance
