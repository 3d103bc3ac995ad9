// The small SDK helpers the host and the plugins share: split_list, the Prometheus text
// writer, valid_feature_name and durable directory creation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "sluice/durable_fs.h"
#include "sluice/features.h"
#include "sluice/metrics_text.h"
#include "sluice/strings.h"
#include "sluice/transport.h"

namespace fs = std::filesystem;
using namespace sluice;

TEST(SplitList, TrimsDropsEmptiesAndKeepsOrder) {
  EXPECT_EQ(split_list("b, a,,\tc "), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_TRUE(split_list("").empty());
  EXPECT_TRUE(split_list(" , ,").empty());
  EXPECT_EQ(split_list("one"), (std::vector<std::string>{"one"}));
  EXPECT_EQ(split_list("a b,c"), (std::vector<std::string>{"a b", "c"}));
}

TEST(FeatureNames, StructuralRule) {
  EXPECT_TRUE(valid_feature_name("stream_incarnations"));
  EXPECT_TRUE(valid_feature_name(std::string(64, 'a')));
  EXPECT_FALSE(valid_feature_name(std::string(65, 'a')));
  EXPECT_FALSE(valid_feature_name(""));
  EXPECT_FALSE(valid_feature_name("Stream"));
  EXPECT_FALSE(valid_feature_name("a-b"));
  EXPECT_FALSE(valid_feature_name("../x"));
}

TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value(R"(a"b\c)"), R"(a\"b\\c)");
  EXPECT_EQ(escape_label_value("line\nnext"), "line\\nnext");
  EXPECT_EQ(escape_label_value("plain"), "plain");
}

TEST(MetricsText, WritesFamiliesAndSamples) {
  MetricsWriter w;
  w.family("x_total", "Things.", MetricType::counter);
  w.sample("x_total", {{"stream", "or\"ders"}, {"shard", "0"}}, std::uint64_t{7});
  w.single("y", "A gauge.", MetricType::gauge, std::int64_t{-3});
  EXPECT_EQ(std::move(w).str(),
            "# HELP x_total Things.\n# TYPE x_total counter\n"
            "x_total{stream=\"or\\\"ders\",shard=\"0\"} 7\n"
            "# HELP y A gauge.\n# TYPE y gauge\ny -3\n");
}

class DurableDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sluice-durable-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(DurableDirs, CreatesEveryMissingLevelAndSaysSo) {
  const auto deep = root_ / "a" / "b" / "c";
  auto r = create_directories_durably(deep.string());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(*r);
  EXPECT_TRUE(fs::is_directory(deep));
  auto again = create_directories_durably(deep.string());
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);  // nothing new
  auto trailing = create_directories_durably((root_ / "a" / "d").string() + "/");
  ASSERT_TRUE(trailing) << trailing.error().message;
  EXPECT_TRUE(fs::is_directory(root_ / "a" / "d"));
}

TEST_F(DurableDirs, RefusesAFileInTheWayNamingIt) {
  fs::create_directories(root_);
  std::ofstream(root_ / "file") << "x";
  auto r = create_directories_durably((root_ / "file" / "sub").string());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::storage_failure);
  EXPECT_NE(r.error().message.find("file"), std::string::npos) << r.error().message;
  EXPECT_FALSE(create_directories_durably(""));
}

TEST_F(DurableDirs, FsyncDirectoryNamesAMissingPath) {
  auto r = fsync_directory((root_ / "missing").string());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("missing"), std::string::npos);
}

// A peer request is answered exactly once, whatever happens to its responder: a dropped
// responder answers `unavailable`, and one that is overwritten answers before it takes the
// other's request (else the requester would wait for its timeout).
TEST(PeerResponder, AnswersEveryRequestExactlyOnce) {
  int answers = 0;
  std::vector<Errc> errors;
  auto fn = [&](Result<std::string> r) {
    ++answers;
    if (!r.ok()) errors.push_back(r.error().code);
  };
  { PeerResponder dropped(fn); }
  EXPECT_EQ(answers, 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], Errc::unavailable);

  {
    PeerResponder a(fn);
    PeerResponder b(fn);
    b = std::move(a);  // b's own request is answered now
    EXPECT_EQ(answers, 2);
    b(std::string("payload"));
    b(std::string("again"));  // ignored
    EXPECT_EQ(answers, 3);
  }
  EXPECT_EQ(answers, 3);  // moved-from and answered responders say nothing more

  {
    PeerResponder a(fn);
    PeerResponder c(std::move(a));
  }
  EXPECT_EQ(answers, 4);
  EXPECT_EQ(errors.size(), 3u);
}
