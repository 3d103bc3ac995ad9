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
#include <utility>

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
  id.marked_ = kv["storage.marked"] == "true";
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

std::string DataDirIdentity::bind_storage_dir(const std::string& storage_dir, bool configured) {
  std::lock_guard lk(mu_);
  const fs::path marker = fs::path(storage_dir) / "storage.properties";
  // Any error but "not there" stops the start with the identity untouched: an unreadable
  // storage.dir (permissions after a restore, EIO) is not an empty one.
  auto fail = [&](const std::string& what, const std::error_code& ec) {
    throw std::runtime_error(what + ": " + ec.message() + " (directory.id " + directory_id_ + " unchanged)");
  };
  auto missing = [](const std::error_code& ec) { return ec == std::errc::no_such_file_or_directory; };
  const bool marked_before = marked_;
  std::error_code ec;
  const auto st = fs::status(storage_dir, ec);
  if (ec && !missing(ec)) fail("cannot inspect storage.dir " + storage_dir, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st))
    throw std::runtime_error("storage.dir " + storage_dir + " is not a directory");
  // A configured storage.dir that does not exist is a disk not mounted or a typo, not a
  // lost disk: a replaced disk is an empty directory (docs/operations.md).
  if (!exists && configured && !fresh_)
    throw std::runtime_error("storage.dir " + storage_dir + " does not exist, and data.dir " + dir_ +
                             " was formatted before (directory.id " + directory_id_ +
                             "): is its disk mounted? If this broker's shard copies are gone, create it "
                             "empty: the broker then gets a new directory.id and rejoins as a new replica");
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
      if (recorded == directory_id_) {
        pending_storage_dir_ = storage_dir;  // records storage.marked if a crash lost it
        return "";
      }
      throw std::runtime_error(
          "storage.dir " + storage_dir + " holds the shard copies of directory.id " +
          (recorded.empty() ? std::string("(none recorded)") : recorded) + " (" + marker.string() +
          "), but data.dir " + dir_ + " is directory.id " + directory_id_ + "; refusing to start. " +
          (fresh_ ? "If the copies are this node's (its data.dir was lost and formatted now), remove " +
                        marker.string() + " and start again: they are then this directory's, and rejoin "
                        "as a new replica's; if another node uses this storage.dir, fix storage.dir"
                  : "They are not this directory's: another node's, or this broker's from before it got "
                    "a new directory.id (a disk mounted again after its replacement). Move them aside "
                    "and start with an empty storage.dir"));
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
  // Copies without a marker are adopted only before this data.dir ever marked one (an older
  // build made them). After, they are no one's known copies: a disk from before a
  // replacement, say, whose records this directory.id does not vouch for.
  if (has_copies && marked_)
    throw std::runtime_error("storage.dir " + storage_dir + " holds shard copies but no storage.properties, "
                             "and data.dir " + dir_ + " (directory.id " + directory_id_ +
                             ") marked its storage.dir before: these copies are not known to be this "
                             "directory's (a disk from before a replacement?). Move them aside and start "
                             "with an empty storage.dir; refusing to start");
  // The marker is written later, by commit_storage_dir, once the start cannot be refused any
  // more (a refused start leaves no marker behind); the new id now, before anything uses it.
  const bool lost = !has_copies && !fresh_;
  const std::string old = directory_id_;
  if (lost) {
    directory_id_ = random_uuid_v4();
    marked_ = false;  // no marker names the new id yet
    try {
      write_locked();
    } catch (...) {
      directory_id_ = old;
      throw;
    }
  }
  pending_storage_dir_ = storage_dir;
  drop_copy_marks_ = lost;
  if (lost)
    return "storage.dir " + storage_dir + " holds no shard copies under data.dir " + dir_ +
           ", which was formatted before: this broker's shard copies are gone (a replaced or wiped disk" +
           (!marked_before ? std::string(", or a broker that held none when it was upgraded to this build") : "") +
           "). New directory.id " + directory_id_ + " (was " + old +
           "): it rejoins each shard as a new replica, and the control plane no longer takes it for "
           "the copies it recorded under the old id. Single-replica shards it held are empty now";
  if (has_copies)
    return "storage.dir " + storage_dir + " holds shard copies but no storage.properties (an older build, or "
           "a data.dir formatted now): they are recorded as the copies of directory.id " + directory_id_;
  return "";
}

void DataDirIdentity::commit_storage_dir() {
  std::lock_guard lk(mu_);
  if (pending_storage_dir_.empty()) return;
  const std::string storage_dir = std::exchange(pending_storage_dir_, std::string());
  if (auto made = create_directories_durably(storage_dir); !made)
    throw std::runtime_error("cannot create storage.dir " + storage_dir + ": " + made.error().message);
  if (std::exchange(drop_copy_marks_, false)) {
    // A mark left behind would make a new replicated copy read as lost, and refuse a new
    // single-replica one (docs/operations.md "Storage directory identity"): removed durably,
    // before any shard opens.
    std::error_code rm_ec;  // (storage.dir exists now: created above if it was gone)
    fs::remove_all(fs::path(storage_dir) / ".replicas", rm_ec);
    if (rm_ec)
      throw std::runtime_error("cannot remove the shard copies' marks " + storage_dir + "/.replicas: " +
                               rm_ec.message());
    if (auto s = fsync_directory(storage_dir); !s)
      throw std::runtime_error("cannot sync storage.dir " + storage_dir + ": " + s.error().message);
  }
  const fs::path marker = fs::path(storage_dir) / "storage.properties";
  std::error_code ec;
  if (!fs::exists(marker, ec)) {
    std::ostringstream o;
    o << "# Sluice: whose shard copies this storage directory holds. Do not edit or copy.\n"
      << "version=1\n"
      << "node.id=" << node_id_.value() << "\n"
      << "directory.id=" << directory_id_ << "\n";
    write_file_durably(marker.string(), o.str());  // the file, then its directory, synced
  }
  if (!marked_) {
    marked_ = true;
    try {
      write_locked();
    } catch (...) {
      marked_ = false;
      throw;
    }
  }
}

void DataDirIdentity::write_locked() {
  std::ostringstream o;
  o << "# Sluice node identity. Do not edit: directory.id says which disk this is.\n"
    << "version=1\n"
    << "node.id=" << node_id_.value() << "\n"
    << "directory.id=" << directory_id_ << "\n";
  if (!cluster_id_.empty()) o << "cluster.id=" << cluster_id_ << "\n";
  // bind_storage_dir wrote storage.properties into storage.dir (older builds ignore it).
  if (marked_) o << "storage.marked=true\n";
  write_file_durably((fs::path(dir_) / "meta.properties").string(), o.str());
}

}  // namespace sluice::core
