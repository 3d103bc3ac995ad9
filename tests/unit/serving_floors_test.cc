// The broker's durable floors file (core/serving_floors.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serving_floors.h"

using namespace sluice;
using namespace sluice::core;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("sluice-floors-" + std::to_string(::getpid()) + "-" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};
}  // namespace

TEST(ServingFloors, absent_file_is_empty) {
  TempDir d;
  auto f = load_floors(floors_path(d.path.string()));
  ASSERT_TRUE(f) << f.error().to_string();
  EXPECT_TRUE(f->empty());
}

TEST(ServingFloors, round_trip_creates_the_directory) {
  TempDir d;
  const auto path = floors_path(d.path.string());
  EXPECT_EQ(path, (d.path / "broker" / "floors").string());
  ServingFloors in;
  in[StreamKey{"t", "n", "a"}] = ServingFloor{Incarnation{1'700'000'000'000'000}, Incarnation{42}};
  in[StreamKey{"t", "n", "b"}] = ServingFloor{Incarnation{0}, std::nullopt};
  in[StreamKey{"u", "m", "c"}] = ServingFloor{std::nullopt, Incarnation{0}};
  ASSERT_TRUE(store_floors(path, in));
  auto out = load_floors(path);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(*out, in);
  // Replacing keeps one file and no temp.
  in[StreamKey{"t", "n", "a"}].deleted = Incarnation{1'700'000'000'000'000};
  ASSERT_TRUE(store_floors(path, in));
  EXPECT_EQ(*load_floors(path), in);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(ServingFloors, a_damaged_file_is_refused_naming_the_line) {
  TempDir d;
  const auto path = floors_path(d.path.string());
  ASSERT_TRUE(store_floors(path, {}));
  {
    std::ofstream o(path, std::ios::app);
    o << "t\tn\ts\t12x\t-\n";
  }
  auto f = load_floors(path);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::corrupt_data);
  EXPECT_NE(f.error().message.find("line 2"), std::string::npos) << f.error().message;
  std::ofstream(path, std::ios::trunc) << "something else\n";
  EXPECT_FALSE(load_floors(path));
}

// Appends are how the broker records raised floors between rewrites: the last line of a
// name holds, and a file read back after appends equals the floors as raised.
TEST(ServingFloors, appended_lines_supersede_earlier_ones) {
  TempDir d;
  const auto path = floors_path(d.path.string());
  ServingFloors in;
  in[StreamKey{"t", "n", "a"}] = ServingFloor{Incarnation{5}, std::nullopt};
  ASSERT_TRUE(store_floors(path, in));
  ServingFloors raised;
  raised[StreamKey{"t", "n", "a"}] = ServingFloor{Incarnation{5}, Incarnation{5}};
  raised[StreamKey{"t", "n", "b"}] = ServingFloor{Incarnation{7}, std::nullopt};
  ASSERT_TRUE(append_floors(path, raised));
  FloorsFileState st;
  auto out = load_floors(path, &st);
  ASSERT_TRUE(out) << out.error().to_string();
  in.insert_or_assign(StreamKey{"t", "n", "a"}, raised[StreamKey{"t", "n", "a"}]);
  in.insert_or_assign(StreamKey{"t", "n", "b"}, raised[StreamKey{"t", "n", "b"}]);
  EXPECT_EQ(*out, in);
  EXPECT_TRUE(st.exists);
  EXPECT_FALSE(st.torn_tail);
  EXPECT_EQ(st.lines, 3u);
}

// A crash during an append leaves a line without its newline, or NUL bytes: that append's
// fdatasync never returned, so nothing acted on it. The file still loads (what was durable
// before it), and says it must be rewritten before the next append.
TEST(ServingFloors, an_unfinished_append_is_ignored_and_reported) {
  TempDir d;
  const auto path = floors_path(d.path.string());
  ServingFloors in;
  in[StreamKey{"t", "n", "a"}] = ServingFloor{Incarnation{5}, std::nullopt};
  ASSERT_TRUE(store_floors(path, in));
  {
    std::ofstream o(path, std::ios::app | std::ios::binary);
    o << "t\tn\ta\t5\t";  // cut before the newline
  }
  FloorsFileState st;
  auto out = load_floors(path, &st);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(*out, in);
  EXPECT_TRUE(st.torn_tail);
  ASSERT_TRUE(store_floors(path, in));
  {
    std::ofstream o(path, std::ios::app | std::ios::binary);
    o << std::string(8, '\0') << "n\tb\t7\t-\n";  // a block the kernel never wrote, then one it did
  }
  out = load_floors(path, &st);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(*out, in);
  EXPECT_TRUE(st.torn_tail);
  // A whole bad line is still damage (a_damaged_file_is_refused_naming_the_line).
}
