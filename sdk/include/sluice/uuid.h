// Random identifiers: directory.id, cluster.id.
#pragma once

#include <string>

namespace sluice {

// A random (version 4) UUID, lowercase, 36 characters, from the OS's CSPRNG.
std::string random_uuid_v4();

// True for the 8-4-4-4-12 hexadecimal form.
bool is_uuid(const std::string& s);

}  // namespace sluice
