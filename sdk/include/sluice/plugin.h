// The plugin boundary.
//
// A plugin is a shared library exporting exactly one C symbol, `sluice_plugin_entry`,
// which returns a pointer to a static `sluice_plugin_descriptor`. The descriptor is a plain
// C struct whose first two fields never move, so a host can always read the ABI version
// of any plugin, old or new, before it trusts anything else in it.
//
// The host checks, in order: abi_version, struct_size, compiler and standard-library
// identity (C++ objects cross the boundary, so both sides must agree on layout and
// std::string ABI), kind, then calls `create`. Any mismatch is a one-line error naming the
// file and the reason; it is never a crash.
//
// Lifetime: every object `create` returns is destroyed through `destroy` while the
// library is still loaded. The host keeps the library alive in the deleter of the object.
//
// A plugin author writes, in exactly one translation unit:
//
//   SLUICE_PLUGIN(sluice::PluginKind::storage, "fs-storage", &create_fn, &destroy_fn)
//
// where create_fn has signature  void* (sluice::PluginHost&, std::string* error)
// and returns a pointer to the kind's interface (StorageEngine*, MetadataStore*,
// ApiServer*), or nullptr with *error set.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/config.hpp>  // BOOST_SYMBOL_EXPORT

namespace sluice {

// Bump on any change to the descriptor or to any header in sdk/include/sluice, then run
// `./dev abi-lock`: ctest (sdk.abi_lock) fails, naming the header, until both are done.
inline constexpr std::uint32_t kPluginAbiVersion = 28;
inline constexpr const char* kSdkVersion = "0.1.0";

enum class PluginKind : std::uint32_t { metadata = 1, storage = 2, api = 3 };
std::string_view to_string(PluginKind);

#define SLUICE_STRINGIFY2(x) #x
#define SLUICE_STRINGIFY(x) SLUICE_STRINGIFY2(x)
#if defined(__clang__)
#define SLUICE_COMPILER_ID "clang " __clang_version__
#elif defined(__GNUC__)
#define SLUICE_COMPILER_ID "gcc " __VERSION__
#else
#define SLUICE_COMPILER_ID "unknown"
#endif
#if defined(__GLIBCXX__)
#define SLUICE_STDLIB_ID                                                    \
  "libstdc++ " SLUICE_STRINGIFY(_GLIBCXX_RELEASE) " cxx11abi=" SLUICE_STRINGIFY( \
      _GLIBCXX_USE_CXX11_ABI)
#elif defined(_LIBCPP_VERSION)
#define SLUICE_STDLIB_ID "libc++ " SLUICE_STRINGIFY(_LIBCPP_VERSION)
#else
#define SLUICE_STDLIB_ID "unknown"
#endif

class PluginHost;

}  // namespace sluice

extern "C" {
struct sluice_plugin_descriptor {
  // --- never move these two ---
  std::uint32_t abi_version;
  std::uint32_t struct_size;
  // ---
  const char* sdk_version;
  const char* compiler_id;
  const char* stdlib_id;
  std::uint32_t kind;  // sluice::PluginKind
  const char* name;
  void* (*create)(sluice::PluginHost& host, std::string* error);
  void (*destroy)(void* object);
};
typedef const sluice_plugin_descriptor* (*sluice_plugin_entry_fn)();
}

#define SLUICE_PLUGIN_ENTRY_SYMBOL "sluice_plugin_entry"

#define SLUICE_PLUGIN(KIND, NAME, CREATE, DESTROY)                                        \
  extern "C" BOOST_SYMBOL_EXPORT const sluice_plugin_descriptor* sluice_plugin_entry() {  \
    static const sluice_plugin_descriptor d = {                                          \
        ::sluice::kPluginAbiVersion, sizeof(sluice_plugin_descriptor), ::sluice::kSdkVersion, \
        SLUICE_COMPILER_ID,         SLUICE_STDLIB_ID,                                     \
        static_cast<std::uint32_t>(KIND), NAME, CREATE, DESTROY};                         \
    return &d;                                                                           \
  }
