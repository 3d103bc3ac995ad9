#include "identity.h"

#include "sluice/durable_fs.h"
#include "sluice/uuid.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace sluice::core {

namespace fs = std::filesystem;

namespace {
void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "fsync " + path);
  }
  ::close(fd);
}

}  // namespace

void write_file_durably(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "create " + tmp);
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw std::system_error(e, std::generic_category(), "write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "fsync " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::system_error(errno, std::generic_category(), "rename " + tmp);
  fsync_path(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

DataDirIdentity DataDirIdentity::open_or_format(const std::string& dir, NodeId configured) {
  DataDirIdentity id;
  id.dir_ = dir;
  // Durable creation: a new directory's name survives a power cut only once its parent
  // is fsynced (docs/operations.md, "Power loss").
  if (auto made = create_directories_durably(dir); !made)
    throw std::runtime_error("cannot create data directory " + dir + ": " + made.error().message);
  const std::string path = (fs::path(dir) / "meta.properties").string();
  if (!fs::exists(path)) {
    id.node_id_ = configured;
    id.directory_id_ = random_uuid_v4();
    id.fresh_ = true;
    id.write_locked();
    return id;
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::map<std::string, std::string> kv;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": expected key=value");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (kv["version"] != "1")
    throw std::runtime_error(path + ": unsupported meta.properties version '" + kv["version"] + "'");
  try {
    id.node_id_ = NodeId{static_cast<std::uint32_t>(std::stoul(kv.at("node.id")))};
  } catch (const std::exception&) {
    throw std::runtime_error(path + ": missing or malformed node.id");
  }
  id.directory_id_ = kv["directory.id"];
  if (!is_uuid(id.directory_id_))
    throw std::runtime_error(path + ": missing or malformed directory.id");
  id.cluster_id_ = kv["cluster.id"];
  if (!id.cluster_id_.empty() && !is_uuid(id.cluster_id_))
    throw std::runtime_error(path + ": malformed cluster.id '" + id.cluster_id_ + "'");
  if (id.node_id_ != configured)
    throw std::runtime_error("data directory " + dir + " belongs to node.id " +
                             std::to_string(id.node_id_.value()) + " but this node is configured as node.id " +
                             std::to_string(configured.value()));
  return id;
}

std::string DataDirIdentity::cluster_id() const {
  std::lock_guard lk(mu_);
  return cluster_id_;
}

Result<void> DataDirIdentity::adopt_cluster_id(const std::string& cid) {
  std::lock_guard lk(mu_);
  if (!is_uuid(cid)) return Error(Errc::invalid_argument, "malformed cluster id '" + cid + "'");
  if (cluster_id_ == cid) return {};
  if (!cluster_id_.empty())
    return Error(Errc::cluster_id_mismatch,
                 "data directory " + dir_ + " belongs to cluster " + cluster_id_ +
                     ", but the metadata store is cluster " + cid + "; refusing to start");
  const std::string old = cluster_id_;
  cluster_id_ = cid;
  try {
    write_locked();
  } catch (const std::exception& e) {
    cluster_id_ = old;
    return Error(Errc::storage_failure, std::string("cannot persist cluster.id: ") + e.what());
  }
  return {};
}

std::string DataDirIdentity::bind_storage_dir(const std::string& storage_dir) {
  std::lock_guard lk(mu_);
  const fs::path marker = fs::path(storage_dir) / "storage.properties";
  // Any error but "not there" stops the start with the identity untouched: an unreadable
  // storage.dir (permissions after a restore, EIO) is not an empty one.
  auto fail = [&](const std::string& what, const std::error_code& ec) {
    throw std::runtime_error(what + ": " + ec.message() + " (directory.id " + directory_id_ + " unchanged)");
  };
  auto missing = [](const std::error_code& ec) { return ec == std::errc::no_such_file_or_directory; };
  std::error_code ec;
  const auto st = fs::status(storage_dir, ec);
  if (ec && !missing(ec)) fail("cannot inspect storage.dir " + storage_dir, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st))
    throw std::runtime_error("storage.dir " + storage_dir + " is not a directory");
  bool has_copies = false;
  if (exists) {
    const auto ms = fs::status(marker, ec);
    if (ec && !missing(ec)) fail("cannot inspect " + marker.string(), ec);
    if (fs::exists(ms)) {
      std::ifstream in(marker);
      if (!in) throw std::runtime_error("cannot read " + marker.string());
      std::string line, recorded;
      while (std::getline(in, line))
        if (line.rfind("directory.id=", 0) == 0) recorded = line.substr(13);
      if (recorded == directory_id_) return "";
      throw std::runtime_error(
          "storage.dir " + storage_dir + " holds the shard copies of directory.id " +
          (recorded.empty() ? std::string("(none recorded)") : recorded) + " (" + marker.string() +
          "), but data.dir " + dir_ + " is directory.id " + directory_id_ +
          ": two nodes share a storage.dir, or disks were swapped; refusing to start. If the copies "
          "are this node's (its data.dir was lost and formatted again), remove " + marker.string() +
          " and start again: they are then this directory's, and rejoin as a new replica's");
    }
    // Copies are fs-storage's tenant directories; its own bookkeeping (.clean-shutdown,
    // .deleted, .delete-pending, .corrupt) holds none, and neither does a new file
    // system's lost+found. So `rm -rf storage.dir/*` reads as empty, as it is.
    fs::directory_iterator it(storage_dir, ec);
    if (ec) fail("cannot list storage.dir " + storage_dir, ec);
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || name == "lost+found") continue;
      const bool dir = it->is_directory(ec);
      if (ec) fail("cannot inspect " + it->path().string(), ec);
      if (dir) has_copies = true;
    }
    if (ec) fail("cannot list storage.dir " + storage_dir, ec);
  }
  // What can fail comes before the id changes: the directory, and the marker's next
  // content, written durably beside it and renamed into place last. A crash anywhere only
  // repeats this at the next start (no marker yet).
  if (auto made = create_directories_durably(storage_dir); !made)
    throw std::runtime_error("cannot create storage.dir " + storage_dir + ": " + made.error().message +
                             " (directory.id " + directory_id_ + " unchanged)");
  const bool lost = !has_copies && !fresh_;
  const std::string old = directory_id_;
  const std::string next = lost ? random_uuid_v4() : directory_id_;
  std::ostringstream o;
  o << "# Sluice: whose shard copies this storage directory holds. Do not edit or copy.\n"
    << "version=1\n"
    << "node.id=" << node_id_.value() << "\n"
    << "directory.id=" << next << "\n";
  const std::string staged = marker.string() + ".next";
  write_file_durably(staged, o.str());
  if (lost) {
    directory_id_ = next;
    try {
      write_locked();
    } catch (...) {
      directory_id_ = old;
      throw;
    }
  }
  if (::rename(staged.c_str(), marker.c_str()) != 0)
    throw std::system_error(errno, std::generic_category(), "rename " + staged);
  fsync_path(storage_dir, O_RDONLY | O_DIRECTORY);
  if (lost)
    return "storage.dir " + storage_dir + " holds no shard copies under data.dir " + dir_ +
           ", which was formatted before: this broker's shard copies are gone (a replaced or wiped disk). "
           "New directory.id " + directory_id_ + " (was " + old +
           "): it rejoins each shard as a new replica, and the control plane no longer takes it for "
           "the copies it recorded under the old id";
  if (has_copies)
    return "storage.dir " + storage_dir + " holds shard copies but no storage.properties (an older build, or "
           "a data.dir formatted now): they are recorded as the copies of directory.id " + directory_id_;
  return "";
}

void DataDirIdentity::write_locked() {
  std::ostringstream o;
  o << "# Sluice node identity. Do not edit: directory.id says which disk this is.\n"
    << "version=1\n"
    << "node.id=" << node_id_.value() << "\n"
    << "directory.id=" << directory_id_ << "\n";
  if (!cluster_id_.empty()) o << "cluster.id=" << cluster_id_ << "\n";
  write_file_durably((fs::path(dir_) / "meta.properties").string(), o.str());
}

}  // namespace sluice::core
