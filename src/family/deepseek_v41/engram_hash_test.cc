// Engram hash rows (model-spec.md §3.4 d) against values computed separately with Python integers.
#include "family/deepseek_v41/engram_hash.h"

#include <gtest/gtest.h>

#include <vector>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

// Hash rows of layer 1 (the release's primes and offsets, multipliers given) for the history
// [5, 17, 99091, 0, 42, DEAD, 7, 8], pad 2; expected rows computed independently with Python
// integers from the §3.4(d) formula.
TEST(EngramHash, RowsMatchPythonIntegers) {
  const EngramLayout full = compute_engram_layout(v41_flash_config());
  ASSERT_EQ(full.max_ngram, 4);
  ASSERT_EQ(full.n_heads, 8);
  EngramLayerLayout L = full.layers[0];
  L.multipliers = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
  const std::vector<int64_t> c = {5, 17, 99091, 0, 42, -1, 7, 8};
  const std::vector<std::pair<int, std::vector<int64_t>>> expected = {
      {0, {5412672, 18319159, 35492627, 60880252, 74962984, 95657733, 98005115, 127351390, 143494632, 151789366,
           171410756, 185435171, 207165545, 218031260, 226330336, 247008214, 256353435, 276423911, 295874085,
           305599364, 322749888, 348475788, 367405771, 372009279}},
      {3, {11738160, 23620665, 43700001, 60873512, 64432073, 82097965, 107020968, 127614195, 135599064, 158317525,
           170641955, 191662395, 206638243, 214934571, 228389565, 245026344, 263356187, 281280287, 299041966,
           316124950, 327588402, 344895774, 361633050, 378717148}},
      {5, {4299726, 29253038, 43157972, 58397134, 65256332, 88876378, 100686433, 112312540, 129401291, 144510675,
           170979806, 184903880, 199719089, 215127204, 230239700, 250883315, 264341430, 275127613, 298781502,
           318608685, 331826823, 351654054, 365224186, 370096053}},
      {7, {11754974, 24210124, 42797160, 63493520, 78540315, 88889911, 110064958, 126757584, 135605195, 145083348,
           164967852, 181757862, 205070952, 216728673, 226216568, 247819755, 259027052, 282997982, 298992018,
           306989390, 322988036, 346986209, 354976429, 370975480}}};
  for (const auto& [p, rows] : expected) {
    std::vector<int64_t> got(24);
    engram_hash_rows(full, L, c.data(), p, 2, got.data());
    EXPECT_EQ(got, rows) << "position " << p;
  }
}

}  // namespace
}  // namespace dsv4::family
