// CatalogFsm: the database image (snapshot and restore) and the state hash.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include <sqlite3.h>

#include <cstring>

namespace sluice::raft_meta {

using namespace catalog_db;

std::string CatalogFsm::snapshot() const {
  if (held_) return {};
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db_, "main", &size, 0);
  if (!p) return {};
  std::string out(reinterpret_cast<const char*>(p), static_cast<std::size_t>(size));
  sqlite3_free(p);
  return out;
}

Result<void> CatalogFsm::restore(std::string_view image) {
  bump_generation();  // also on failure: harmless, and nothing to reason about
  if (image.empty()) return Error(Errc::corrupt_data, "empty catalog snapshot");
  sqlite3* fresh = nullptr;
  try {
    fresh = open_memory_db();
  } catch (const std::exception& e) {
    return internal_error(e);
  }
  auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  if (!buf) {
    close_db(fresh);
    return Error(Errc::internal, "out of memory restoring the catalog snapshot");
  }
  std::memcpy(buf, image.data(), image.size());
  int rc = sqlite3_deserialize(fresh, "main", buf, static_cast<sqlite3_int64>(image.size()),
                               static_cast<sqlite3_int64>(image.size()),
                               SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
  if (rc != SQLITE_OK) {  // sqlite frees buf on failure with FREEONCLOSE
    close_db(fresh);
    return Error(Errc::corrupt_data, "catalog snapshot is not a SQLite database");
  }
  sqlite3* old = db_;
  db_ = fresh;
  std::string version;
  try {
    version = meta_get("schema_version");
  } catch (const std::exception&) {
  }
  if (version == "1" || version == "2" || version == "3" || version == "4" || version == "5") {
    const std::string from = version;
    try {
      exec(db_, "SAVEPOINT upgrade");
      if (version == "1") upgrade_schema_1_to_2();
      if (version == "1" || version == "2") upgrade_schema_2_to_3();
      if (version != "4" && version != "5") upgrade_schema_3_to_4();
      if (version != "5") upgrade_schema_4_to_5();
      upgrade_schema_5_to_6();
      exec(db_, "RELEASE upgrade");
      version = meta_get("schema_version");
    } catch (const std::exception&) {
      version = from + " (upgrade failed)";
    }
  }
  if (version != std::to_string(kCatalogSchemaVersion)) {
    db_ = old;
    close_db(fresh);
    return Error(Errc::corrupt_data,
                 "catalog snapshot has schema version '" + version + "', this build reads " +
                     std::to_string(kCatalogSchemaVersion));
  }
  close_db(old);
  held_.reset();
  seq_ahead_ = !meta_get("applied_seq").empty();
  // A snapshot of a group whose floor is above this member's level holds it: its state
  // may hold results of entries this member cannot decide.
  if (level_floor() > capability_)
    held_ = Held{applied_index(),
                 "the snapshot's level floor is " + std::to_string(level_floor().value()) +
                     ", this member runs at level " + std::to_string(capability_.value()) +
                     "; upgrade this member",
                 level_floor()};
  return {};
}

std::uint64_t CatalogFsm::state_hash() const {
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&](const void* data, std::size_t n) {
    auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  static const char* const kDumps[] = {
      "SELECT * FROM meta ORDER BY key",
      "SELECT * FROM tenants ORDER BY name",
      "SELECT * FROM namespaces ORDER BY tenant, name",
      "SELECT * FROM streams ORDER BY tenant, ns, name",
      "SELECT * FROM changes ORDER BY seq",
      "SELECT * FROM tombstones ORDER BY tenant, ns, name",
      "SELECT * FROM features ORDER BY name",
      "SELECT * FROM brokers ORDER BY id",
      "SELECT * FROM assignments ORDER BY tenant, ns, name, shard",
      "SELECT * FROM members ORDER BY id",
      "SELECT * FROM caches ORDER BY tenant, ns, name",
      "SELECT * FROM cache_tombstones ORDER BY tenant, ns, name",
      "SELECT * FROM counters ORDER BY tenant, ns, name",
      "SELECT * FROM counter_tombstones ORDER BY tenant, ns, name",
  };
  for (const char* sql : kDumps) {
    mix(sql, std::strlen(sql));
    Stmt s(db_, sql);
    int cols = sqlite3_column_count(s.raw());
    while (s.step()) {
      for (int c = 0; c < cols; ++c) {
        int type = sqlite3_column_type(s.raw(), c);
        unsigned char tag = static_cast<unsigned char>(type);
        mix(&tag, 1);
        if (type == SQLITE_INTEGER) {
          std::int64_t v = s.i64(c);
          unsigned char le[8];
          for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(v) >> (8 * i));
          mix(le, 8);
        } else if (type != SQLITE_NULL) {
          std::string v = s.text(c);
          std::uint64_t n = v.size();
          unsigned char le[8];
          for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
          mix(le, 8);
          mix(v.data(), v.size());
        }
      }
    }
  }
  return h;
}

}  // namespace sluice::raft_meta
