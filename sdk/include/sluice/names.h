// Name rules for tenants, namespaces and streams.
//
// A valid name is 1..255 bytes of [A-Za-z0-9._-] whose first byte is a letter, a digit or
// '_'. That excludes, by construction: the empty name, "." and "..", '/', NUL, control
// characters, whitespace, and names that could collide with storage's reserved entries
// (".deleted", ".delete-marker", ...), which all start with '.'.
//
// Because the alphabet is closed, a valid name is its own safe path component: storage
// uses it verbatim and must still call validate_name() before building any path (defence
// in depth; a bug above must not become a path traversal).
#pragma once

#include <string_view>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

inline constexpr std::size_t kMaxNameBytes = 255;

// What is being named, used only to make the error message precise.
enum class NameKind { tenant, ns, stream, group, cache, counter };
std::string_view to_string(NameKind);

// Returns Errc::invalid_name with a message that says what is wrong (never echoing raw
// control bytes back).
Result<void> validate_name(NameKind kind, std::string_view name);
Result<void> validate_stream_key(const StreamKey& key);

}  // namespace sluice
