// Node and directory identity, persisted in <data.dir>/meta.properties
// (seed: kraft-cluster-id-discovery).
//
//   version=1
//   node.id=1
//   directory.id=6f1c...-....        random UUID v4, written when the directory is formatted
//   cluster.id=0b8e...-....          absent until learned from the metadata store
//
// Rules:
//   * node.id and directory.id exist from the first start. A replica whose directory was
//     wiped comes back with a new directory.id, which is how the control plane tells it is
//     not the old replica (seed: kafka-15495). So does one whose storage.dir lost its shard
//     copies (bind_storage_dir): otherwise directory.id never changes.
//   * cluster.id is learned from the metadata store and written (fsync'ed, atomically via
//     rename) *before* anything uses it. Once written it never changes: a store offering
//     another id is refused with an error naming both.
//   * A data directory whose node.id differs from the configured one is refused.
//
// Thread-safety: adopt_cluster_id and the getters are safe from any thread.
#pragma once

#include <mutex>
#include <string>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice::core {

class DataDirIdentity {
 public:
  // Opens (formatting if needed) the directory; a missing directory is created durably
  // (sluice/durable_fs.h: each new level fsynced into its parent). Throws
  // std::runtime_error with a one-line reason (unreadable, malformed, node.id mismatch).
  static DataDirIdentity open_or_format(const std::string& dir, NodeId configured_node);

  NodeId node_id() const { return node_id_; }
  std::string directory_id() const { return directory_id_; }
  std::string cluster_id() const;
  const std::string& dir() const { return dir_; }
  bool freshly_formatted() const { return fresh_; }

  // Persists the id (if new) before returning ok. cluster_id_mismatch if another id is
  // already recorded.
  Result<void> adopt_cluster_id(const std::string& id);

  // Ties storage.dir, where the shard copies are, to this directory.id, through
  // <storage.dir>/storage.properties (docs/operations.md "Storage directory identity").
  // Called once at start, before the directory id is used. storage.dir may be a disk of its
  // own: replaced or wiped, it comes back empty while meta.properties keeps the directory.id
  // that the catalog records beside its replicas, and the broker would lead with empty
  // copies (seed kafka-15495). So a storage.dir that is missing or empty (lost+found aside)
  // under a data directory formatted by an earlier start gets a new directory.id, written to
  // meta.properties before the marker. One with entries but no marker (made by an older
  // build) is adopted. Returns a line for the log ("" when there was nothing to do). Throws
  // std::runtime_error when the marker names another directory.id or cannot be written.
  // `configured`: storage.dir was set (a missing one is then refused, not taken for lost).
  // Copies without a marker are adopted only while meta.properties has no storage.marked
  // (the first start of this build); after, they are refused (a disk from before a
  // replacement). The marker itself is written by commit_storage_dir.
  std::string bind_storage_dir(const std::string& storage_dir, bool configured = false);
  // Once the start can no longer be refused (before any shard opens): creates storage.dir,
  // writes its storage.properties durably, then storage.marked. Throws on I/O failure.
  void commit_storage_dir();

  DataDirIdentity(DataDirIdentity&& o) noexcept
      : dir_(std::move(o.dir_)), node_id_(o.node_id_), directory_id_(std::move(o.directory_id_)),
        cluster_id_(std::move(o.cluster_id_)), fresh_(o.fresh_), marked_(o.marked_),
        pending_storage_dir_(std::move(o.pending_storage_dir_)), drop_copy_marks_(o.drop_copy_marks_) {}

 private:
  DataDirIdentity() = default;
  void write_locked();  // throws on I/O failure

  std::string dir_;
  NodeId node_id_;
  std::string directory_id_;
  std::string cluster_id_;
  bool fresh_ = false;
  bool marked_ = false;  // meta.properties storage.marked: a storage.properties names this id
  std::string pending_storage_dir_;  // bind_storage_dir's, for commit_storage_dir
  // The copies were lost and the id is new: commit_storage_dir removes fs-storage's marks
  // of the old copies (<storage.dir>/.replicas, docs/replication.md "A lost shard copy"),
  // which would otherwise make every new copy read as a lost one.
  bool drop_copy_marks_ = false;
  mutable std::mutex mu_;
};

// Writes `content` to `path` crash-safely: temp file, fsync, rename, fsync directory.
// Throws std::system_error.
void write_file_durably(const std::string& path, const std::string& content);

}  // namespace sluice::core
