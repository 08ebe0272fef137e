// What `posenc inspect` reports of each scheme at initialization (inspect.cpp).
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/positional/inspect.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

TEST(Inspect, ReportsWhatEachSchemeContributes) {
  for (const auto& name : scheme_names()) {
    const auto out = inspect_scheme({name, 7, 2, 8});
    const auto caps = posenc::testing::scheme_with(name, {8, 2, 4, 0})->capabilities();
    EXPECT_EQ(out.contains("embedding"), caps.embed) << name;
    EXPECT_EQ(out.contains("bias"), caps.bias) << name;
    EXPECT_EQ(out.contains("rotated_ones"), caps.rotate) << name;
    EXPECT_EQ(out.contains("score_terms_of_ones"), caps.score_terms) << name;
    EXPECT_EQ(out.contains("reweighted_ones"), caps.reweight) << name;
    for (const char* key : {"bias", "score_terms_of_ones", "reweighted_ones"})
      if (out.contains(key)) {  // (H, L, L)
        EXPECT_EQ(out[key].size(), 2u) << name << " " << key;
        EXPECT_EQ(out[key][0].size(), 7u) << name << " " << key;
        EXPECT_EQ(out[key][0][6].size(), 7u) << name << " " << key;
      }
    if (caps.embed) {
      EXPECT_EQ(out["embedding"][6].size(), 8u) << name;
    }
  }
  EXPECT_THROW(inspect_scheme({"rope", 7, 3, 8}), ConfigError);
  EXPECT_THROW(inspect_scheme({"rope", 7, 2, 8, {{"bogus", 1}}}), ConfigError);
}

}  // namespace POSENC_TEST_UNIT
