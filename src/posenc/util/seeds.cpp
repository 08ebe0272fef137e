#include "posenc/util/seeds.h"

namespace posenc {

uint64_t mix_seed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (uint64_t p : parts) {
    uint64_t z = (h ^ p) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    h = z ^ (z >> 31);
  }
  return h;
}

}  // namespace posenc
