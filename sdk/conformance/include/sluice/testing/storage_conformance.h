// The storage conformance kit: a GoogleTest suite that checks a StorageEngine against
// sluice/storage.h, clause by clause. Part of the SDK package (target
// Sluice::storage_conformance); docs/plugin-sdk.md "Checking a storage engine" shows how
// an author runs it.
//
// An author supplies a factory and instantiates the suite once per configuration:
//
//   #include "sluice/testing/storage_conformance.h"
//
//   sluice::testing::StorageConformanceParams my_params() {
//     sluice::testing::StorageConformanceParams p;
//     p.name = "my-storage";
//     p.open = [](sluice::PluginHost& host, const std::string& dir) {
//       return std::unique_ptr<sluice::StorageEngine>(new MyEngine(host, dir));
//     };
//     p.opt_outs.no_groups = true;   // only what the engine really does not implement
//     return p;
//   }
//   INSTANTIATE_STORAGE_CONFORMANCE(MyStorage, my_params());
//
// and links Sluice::storage_conformance plus GTest::gtest_main.
//
// Every test runs on a fresh temporary directory and a fresh engine. A test that needs a
// hook the params do not supply, or that covers a feature the engine opts out of, is
// reported as SKIPPED with the reason (GTEST_SKIP): never passed silently. An opted-out
// feature is still checked for an honest answer: its calls must return
// Errc::not_supported (a definite error), never success and never another code.
//
// Thread-safety: the suite calls the engine from the test thread and, where the contract
// says "any thread", from a few threads of its own. The hooks are called from the test
// thread only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::testing {

// Features an engine may leave out. Each is a documented answer, not a weakening: the
// tests of an opted-out feature assert the not_supported answer, then report SKIPPED.
struct StorageOptOuts {
  // Data does not survive destroying the engine and opening a new one on the same
  // directory (an in-memory engine). Skips every test that restarts the engine.
  bool no_restart_persistence = false;
  // Consumer groups: group_fetch, group_ack, group_nack, group_position, dead_letters and
  // replay_dead_letters answer not_supported (list_groups may answer an empty list).
  bool no_groups = false;
  // Groups work, but dead letters do not: dead_letters and replay_dead_letters answer
  // not_supported, and a record is never moved to dead letters.
  bool no_dead_letters = false;
  // A batch with producer_id != 0 is refused with not_supported (never appended without
  // the de-duplication the contract promises).
  bool no_idempotent_producers = false;
};

struct StorageConformanceParams {
  // Shown in test output.
  std::string name;

  // Required. Opens an engine that keeps its data under `dir` (an empty temporary
  // directory per test; the same directory again when a test restarts the engine). `host`
  // lives until after the engine is destroyed; its config_* lookups answer from `config`
  // below, and data_dir() is `dir`. May throw (a test failure).
  std::function<std::unique_ptr<StorageEngine>(PluginHost& host, const std::string& dir)> open;
  std::map<std::string, std::string> config;

  // Optional; without it the crash tests are SKIPPED. Power loss of the engine open on
  // `dir`: every byte not yet made durable (fdatasync) is dropped (a torn part of them may
  // be kept, as a real power loss can), and every later I/O of that engine fails. The kit
  // then destroys the engine (its calls may fail, must not hang or crash) and calls `open`
  // on `dir` again, which must start like a new process.
  std::function<void(const std::string& dir)> crash;

  // Optional; without it the failed-write test is SKIPPED. fail = true: from now on every
  // write or sync of the engine open on `dir` fails with an I/O error; false: I/O works
  // again (the engine itself is not told).
  std::function<void(const std::string& dir, bool fail)> fail_io;

  StorageOptOuts opt_outs;
};

void PrintTo(const StorageConformanceParams& p, std::ostream* os);

// The value-parameterized fixture behind every test of the kit.
class StorageConformance : public ::testing::TestWithParam<StorageConformanceParams> {
 public:
  StorageConformance();
  ~StorageConformance() override;

 protected:
  void SetUp() override;
  void TearDown() override;

  const StorageConformanceParams& params() const { return GetParam(); }
  const StorageOptOuts& opt_outs() const { return GetParam().opt_outs; }
  StorageEngine& engine() { return *engine_; }
  const std::string& dir() const { return dir_; }

  // Shuts the engine down, destroys it, and opens a new one on the same directory.
  void restart();
  // params().crash, then destroys the engine and opens a new one on the same directory.
  void crash_and_restart();
  // open_shard with a default StreamSpec; fails the test (and returns null) on error.
  std::shared_ptr<ShardLog> open(const ShardRef& ref);

 private:
  class Host;
  std::unique_ptr<Host> host_;
  std::string dir_;
  std::unique_ptr<StorageEngine> engine_;
};

namespace conformance_internal {
// Referenced by INSTANTIATE_STORAGE_CONFORMANCE so that the linker keeps every test of
// the static library (tests register themselves from static initializers).
int link_all_tests();
}  // namespace conformance_internal

}  // namespace sluice::testing

// Instantiates the whole suite for one engine configuration, at namespace scope outside
// namespace sluice::testing. `NAME` prefixes the test names
// (NAME/StorageConformance.<Test>/0); `PARAMS` is a StorageConformanceParams.
#define INSTANTIATE_STORAGE_CONFORMANCE(NAME, PARAMS)                                         \
  [[maybe_unused]] static const int sluice_storage_conformance_link_##NAME =                  \
      ::sluice::testing::conformance_internal::link_all_tests();                              \
  using StorageConformance = ::sluice::testing::StorageConformance;                           \
  INSTANTIATE_TEST_SUITE_P(NAME, StorageConformance, ::testing::Values(PARAMS))
