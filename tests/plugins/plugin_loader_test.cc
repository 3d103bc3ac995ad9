// The loader reports every broken plugin with one clear line and never crashes.
#include "plugin_loader.h"

#include <gtest/gtest.h>

#include <fstream>

#include "sluice/storage.h"
#include "support/test_host.h"

using sluice::PluginKind;
using sluice::StorageEngine;
using sluice::core::PluginError;
using sluice::core::PluginLoader;

namespace {

std::string load_error(const std::string& name, PluginKind kind, sluice::PluginHost& host,
                       const std::string& dir = TEST_PLUGIN_DIR) {
  PluginLoader loader(dir);
  try {
    loader.load<StorageEngine>(name, kind, host);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

void expect_one_line_naming_file(const std::string& msg, const std::string& name) {
  EXPECT_NE(msg.find("libsluice-" + name + ".so"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace

TEST(PluginLoader, GoodPluginLoadsAndIsDestroyedBeforeItsLibraryUnloads) {
  sluice::testing::TestHost host;
  PluginLoader loader(TEST_PLUGIN_DIR);
  auto engine = loader.load<StorageEngine>("test-good", PluginKind::storage, host);
  ASSERT_TRUE(engine);
  auto r = engine->open_shard({}, {});
  EXPECT_FALSE(r.ok());
  engine.reset();  // destroy() runs inside the library, then the library is released
  EXPECT_TRUE(host.logged("engine destroyed"));
}

TEST(PluginLoader, MissingPluginNamesTheFile) {
  sluice::testing::TestHost host;
  const auto msg = load_error("no-such-plugin", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "no-such-plugin");
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
}

TEST(PluginLoader, WrongKindIsRefused) {
  sluice::testing::TestHost host;
  const auto msg = load_error("test-api-kind", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "test-api-kind");
  EXPECT_NE(msg.find("wrong kind: 'test-api-kind' is of kind api, but kind storage is needed"),
            std::string::npos) << msg;
}

TEST(PluginLoader, AbiMismatchIsRefusedBeforeCreate) {
  sluice::testing::TestHost host;
  const auto msg = load_error("test-bad-abi", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "test-bad-abi");
  EXPECT_NE(msg.find("ABI mismatch: plugin has ABI version 999"), std::string::npos) << msg;
  EXPECT_FALSE(host.logged("engine destroyed"));  // create() never ran
}

TEST(PluginLoader, StandardLibraryMismatchIsRefused) {
  sluice::testing::TestHost host;
  const auto msg = load_error("test-bad-stdlib", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "test-bad-stdlib");
  EXPECT_NE(msg.find("standard library 'libc++ 15000'"), std::string::npos) << msg;
}

TEST(PluginLoader, CreateFailureCarriesThePluginsReason) {
  sluice::testing::TestHost host;
  const auto msg = load_error("test-create-fails", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "test-create-fails");
  EXPECT_NE(msg.find("storage.dir is not writable"), std::string::npos) << msg;
}

TEST(PluginLoader, LibraryWithoutEntryPointIsNotAPlugin) {
  sluice::testing::TestHost host;
  const auto msg = load_error("test-not-a-plugin", PluginKind::storage, host);
  expect_one_line_naming_file(msg, "test-not-a-plugin");
  EXPECT_NE(msg.find("not a Sluice plugin"), std::string::npos) << msg;
}

TEST(PluginLoader, FileThatIsNotALibraryIsRefused) {
  sluice::testing::TestHost host;
  const std::string dir = host.data_dir();
  std::ofstream(dir + "/libsluice-garbage.so") << "this is not an ELF file";
  const auto msg = load_error("garbage", PluginKind::storage, host, dir);
  expect_one_line_naming_file(msg, "garbage");
  EXPECT_NE(msg.find("cannot load"), std::string::npos) << msg;
}

TEST(PluginLoader, PluginNameCannotBeAPath) {
  sluice::testing::TestHost host;
  const auto msg = load_error("../etc/evil", PluginKind::storage, host);
  EXPECT_NE(msg.find("not a plain name"), std::string::npos) << msg;
}
