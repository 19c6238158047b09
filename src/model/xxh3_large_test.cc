#include "model/xxh3_large.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <vector>

namespace strata {
namespace {

// The dispatched hash is libxxhash's XXH3-64 at every length class (xxHash switches
// algorithms at 16, 128 and 240 bytes, and the vector loop runs over 1 KiB stripes blocks).
TEST(Xxh3Large, SameValueAsLibxxhash) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(3 << 20);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{100}, size_t{128},
                   size_t{239}, size_t{240}, size_t{1023}, size_t{1024}, size_t{65537},
                   size_t{1} << 20, buf.size() - 3}) {
    for (size_t off : {size_t{0}, size_t{3}}) {
      EXPECT_EQ(xxh3_64_large(buf.data() + off, n), XXH3_64bits(buf.data() + off, n))
          << "n " << n << " offset " << off;
    }
  }
}

}  // namespace
}  // namespace strata
