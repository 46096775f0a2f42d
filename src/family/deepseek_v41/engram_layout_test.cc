// Engram primes, offsets and multipliers vs the published values (model-spec.md §3.4, tokenizer-and-chat.md §4).
#include "family/deepseek_v41/engram_layout.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

using V = std::vector<int64_t>;

TEST(EngramLayout, V41PrimesAndOffsetsMatchSpec) {
  const EngramLayout e = compute_engram_layout(v41_flash_config());
  ASSERT_EQ(e.layers.size(), 2u);
  EXPECT_EQ(e.cols, 24);
  // model-spec.md §3.4(b) prime table (sympy).
  EXPECT_EQ(e.layers[0].primes,
            (V{16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183,
               16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321,
               16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463}));
  EXPECT_EQ(e.layers[1].primes,
            (V{16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
               16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
               16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889}));
  EXPECT_EQ(e.layers[0].rows, 384006168);
  EXPECT_EQ(e.layers[1].rows, 384016682);
  EXPECT_EQ(e.layers[0].offsets,
            (V{0, 16000057, 32000136, 48000217, 64000314, 80000435, 96000564, 112000697, 128000880,
               144001069, 160001276, 176001487, 192001740, 208002017, 224002306, 240002613, 256002934,
               272003273, 288003654, 304004047, 320004446, 336004849, 352005258, 368005705}));
  EXPECT_EQ(e.layers[1].offsets,
            (V{0, 16000477, 32000964, 48001463, 64001970, 80002481, 96003054, 112003663, 128004290,
               144004957, 160005626, 176006319, 192007016, 208007727, 224008456, 240009215, 256009984,
               272010765, 288011564, 304012377, 320013196, 336014037, 352014914, 368015793}));
}

TEST(EngramLayout, V41MultipliersMatchPublished) {
  // model-spec.md §3.4(c), tokenizer-and-chat.md §4.1 (numpy 1.24.2 and six ports).
  const EngramLayout e = compute_engram_layout(v41_flash_config());
  EXPECT_EQ(e.layers[0].multipliers, (V{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(e.layers[1].multipliers, (V{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramLayout, SeedSequenceAndPcg64Internals) {
  // tokenizer-and-chat.md §4.2.
  uint64_t s[4];
  numpy_seed_sequence_state(10007, s);
  EXPECT_EQ(s[0], 0x77d32a348ad70d07ULL);
  EXPECT_EQ(s[1], 0x993ed609b84a4fa5ULL);
  EXPECT_EQ(s[2], 0xd5f972dec8698e49ULL);
  EXPECT_EQ(s[3], 0x7d79ebaebcf148deULL);
  numpy_seed_sequence_state(140098, s);
  EXPECT_EQ(s[0], 0xdb5869feeeccf2beULL);
  EXPECT_EQ(s[1], 0xad465727d9cf3645ULL);
  EXPECT_EQ(s[2], 0x5155d26378b6bab4ULL);
  EXPECT_EQ(s[3], 0x9f9e49df66ff1c85ULL);

  NumpyPcg64 a(10007);
  const unsigned __int128 st = (static_cast<unsigned __int128>(0x3b34af7676e8ddd5ULL) << 64) | 0x556a026c98a77d27ULL;
  const unsigned __int128 inc = (static_cast<unsigned __int128>(0xabf2e5bd90d31c92ULL) << 64) | 0xfaf3d75d79e291bdULL;
  EXPECT_TRUE(a.state() == st);
  EXPECT_TRUE(a.inc() == inc);
  EXPECT_EQ(a.next_uint64(), 15187255322829266483ULL);
  EXPECT_EQ(a.next_uint64(), 959186003677246517ULL);
  EXPECT_EQ(a.next_uint64(), 7126631698937927467ULL);
  EXPECT_EQ(a.next_uint64(), 14663106486854050627ULL);
  NumpyPcg64 b(140098);
  EXPECT_EQ(b.next_uint64(), 13420388419549774097ULL);
  EXPECT_EQ(b.next_uint64(), 10208617735032736636ULL);
  EXPECT_EQ(b.next_uint64(), 6128116274024149523ULL);
  EXPECT_EQ(b.next_uint64(), 16373808781820707998ULL);
  NumpyPcg64 c(10007);
  EXPECT_EQ(c.integers(46539438283891), 38316048023122);
  EXPECT_EQ(c.integers(46539438283891), 2419938046656);
}

TEST(EngramLayout, PrimesAreTheConsecutivePrimesAboveTheVocab) {
  // tokenizer-and-chat.md §3.5: the net effect is the consecutive primes above engram_vocab_size - 1,
  // assigned in (layer, order, head) order. Checked here for the tiny preset by plain trial division.
  const Config c = preset_config(Preset::tiny, Variant::v41);
  const EngramLayout e = compute_engram_layout(c);
  int64_t p = c.engram_vocab_size - 1;
  for (const auto& l : e.layers) {
    int64_t sum = 0;
    for (int64_t got : l.primes) {
      do {
        ++p;
        bool prime = p > 1;
        for (int64_t d = 2; d * d <= p; ++d) prime = prime && p % d != 0;
        if (prime) break;
      } while (true);
      EXPECT_EQ(got, p);
      sum += got;
    }
    EXPECT_EQ(l.rows, sum);
  }
  EXPECT_EQ(c.engram_num_embeddings[0], e.layers[0].rows);
}

}  // namespace
}  // namespace dsv4::family
