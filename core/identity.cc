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
