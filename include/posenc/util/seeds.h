// Deterministic seeds: every batch, evaluation set and randomized position draw
// is a pure function of a few integers, so runs resume bit-for-bit.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace posenc {

/// A deterministic 64-bit seed from several integers (splitmix64 mixing).
uint64_t mix_seed(std::initializer_list<uint64_t> parts);

}  // namespace posenc
