// Directories that survive a power cut.
//
// A SIGKILL keeps the page cache; a power cut does not. A new file or directory exists
// after a power cut only once the directory that holds its name has been fsynced. Every
// directory the host or a plugin creates for data goes through create_directories_durably,
// which creates the missing levels top-down and fsyncs each new directory and then its
// parent before going deeper, so that no name is ever left depending on an unsynced parent.
//
// Errors are definite (storage_failure) and name the path. Thread-safety: pure system calls.
#pragma once

#include <string>

#include "sluice/error.h"

namespace sluice {

// fsync(2) of a directory, so that the names in it (created, renamed, removed) are durable.
Result<void> fsync_directory(const std::string& path);

// Like std::filesystem::create_directories, then durable: every directory it created is
// fsynced, and so is the parent of each. Existing directories are left as they are.
// Returns whether it created anything.
Result<bool> create_directories_durably(const std::string& path);

}  // namespace sluice
