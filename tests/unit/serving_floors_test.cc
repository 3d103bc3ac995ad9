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
