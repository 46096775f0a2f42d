// The bytes `dsv4 synth` writes by default (--profile random, seed 0) stay what they were: a digest of
// every written file of the tiny presets, pinned.
//
// The expected digests were computed with the tree of commit 6e36e91 (before the writers took their
// bytes from a TensorSource), by `dsv4 synth --preset tiny [--variant v4-0731] [--format exl3] --out D
// --no-sync` and the same listing as digest_of_files below: for each file under D except tokenizer.json
// (a copy of the embedded tokenizer, not synthesized), in byte order of its relative path, the line
// "<path> <sha256 hex>\n"; the digest is the SHA-256 of those lines. A change of these bytes must also
// bump kSynthFormatVersion (synth.h) and then update the pins here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/synth_exl3.h"

namespace dsv4::family {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("dsv4_family_pin_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::string digest_of_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "tokenizer.json")
      files.push_back(fs::relative(e.path(), dir).generic_string());
  std::sort(files.begin(), files.end());
  std::string lines;
  for (const std::string& f : files) {
    auto h = sha256_file_hex((fs::path(dir) / f).string());
    EXPECT_TRUE(h.ok()) << f;
    lines += f + " " + (h.ok() ? *h : std::string("?")) + "\n";
  }
  return sha256_hex({reinterpret_cast<const uint8_t*>(lines.data()), lines.size()});
}

SynthOptions seed0() {
  SynthOptions o;
  o.sync = false;
  return o;
}

TEST(SynthPin, RandomProfileReleaseBytesUnchanged) {
  const std::string a = temp_dir("v41"), b = temp_dir("v4");
  ASSERT_TRUE(write_synthetic_checkpoint(preset_config(Preset::tiny, Variant::v41), a, seed0()).ok());
  ASSERT_TRUE(write_synthetic_checkpoint(preset_config(Preset::tiny, Variant::v4), b, seed0()).ok());
  EXPECT_EQ(digest_of_files(a), "5ed19659144442ba96d68190f626658e9d47503ba705cb5a8f2cd3133a5b7226") << "tiny v41";
  EXPECT_EQ(digest_of_files(b), "ddf417e6b877488d75f64e7655e79e24a84aa681867b97bc49e251101de842f8") << "tiny v4-0731";
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(SynthPin, RandomProfileExl3PackBytesUnchanged) {
  const std::string dir = temp_dir("exl3");
  Exl3SynthOptions o;
  o.sync = false;
  o.release_dir = dir + "/release-engram";  // as dsv4 synth places it by default
  ASSERT_TRUE(write_synthetic_exl3_pack(preset_config(Preset::tiny, Variant::v41), dir, o).ok());
  EXPECT_EQ(digest_of_files(dir), "abe59d542aab56d0bd81ebfb63f534292f524909989f3add51c5528fd4517e89");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::family
