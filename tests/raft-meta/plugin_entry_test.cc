// The built plugin library: descriptor, create/destroy, configuration errors as values.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "sluice/metadata.h"
#include "sluice/plugin.h"
#include "test_host.h"

namespace {

using sluice::testing::TestHost;

const sluice_plugin_descriptor* load(void** handle) {
  *handle = dlopen(RAFT_META_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) return nullptr;
  auto entry = reinterpret_cast<sluice_plugin_entry_fn>(dlsym(*handle, SLUICE_PLUGIN_ENTRY_SYMBOL));
  return entry ? entry() : nullptr;
}

TEST(RaftMetaPlugin, DescriptorCreateStartDestroy) {
  void* handle = nullptr;
  const sluice_plugin_descriptor* d = load(&handle);
  ASSERT_NE(d, nullptr) << dlerror();
  EXPECT_EQ(d->abi_version, sluice::kPluginAbiVersion);
  EXPECT_EQ(d->struct_size, sizeof(sluice_plugin_descriptor));
  EXPECT_EQ(d->kind, static_cast<std::uint32_t>(sluice::PluginKind::metadata));
  EXPECT_STREQ(d->name, "raft-meta");

  {
    TestHost bad(std::map<std::string, std::string>{{"raft.snapshot_threshold", "lots"}});
    std::string error;
    EXPECT_EQ(d->create(bad, &error), nullptr);
    EXPECT_NE(error.find("raft-meta"), std::string::npos) << error;
  }
  {
    TestHost host(std::map<std::string, std::string>{{"raft.address", "127.0.0.1:0"}, {"metadata.rpc_address", "127.0.0.1:0"}});
    std::string error;
    void* obj = d->create(host, &error);
    ASSERT_NE(obj, nullptr) << error;
    auto* store = static_cast<sluice::MetadataStore*>(obj);
    ASSERT_TRUE(store->start().ok());
    EXPECT_TRUE(store->create_tenant("acme").ok());
    EXPECT_EQ(store->status().backend, "raft");
    EXPECT_EQ(store->status().cluster_id, host.cluster_id());
    d->destroy(obj);
  }
  dlclose(handle);
}

}  // namespace
