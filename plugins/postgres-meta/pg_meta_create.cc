// PgMetaStore::create_stream. The creates waiting on one instance are grouped into one
// serializable write (README.md "How each rule is enforced"; the statements are prepared in
// pg_meta_pool.cc) of two round trips (WriteBatch, pg_meta_store_internal.h):
//   1. BEGIN; the level declaration; LOCK TABLE counter; EXECUTE sl_create_read: every row
//      the creates decide on, read after the lock;
//   2. per accepted create, in queue order, the next sequence number, the stream, its
//      assignments and its change; one NOTIFY (and the prune); COMMIT.
// The decisions are the features.h / catalog_rules.h functions, made in C++ for each create
// in turn as if the creates ran one after another: a create refused by a check (no
// namespace, name taken, feature not finalized, placement) takes no sequence number and
// does not affect the others, and a later create of a name an earlier one in the batch took
// answers already_exists. So the batch is what serial creates would have written, the
// sequence stays gap-free and in commit order, and one lock hand-off, one commit and one
// feed wake-up serve the whole batch. If the write itself fails for a reason that may
// concern one create only (a trigger, a constraint), each create is retried alone to get
// its own answer. The database's triggers (schema.cc) still re-check every insert.
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <pqxx/pqxx>

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::postgres_meta {

using namespace detail;

struct PgMetaStore::PendingCreate {
  const StreamKey& key;
  const StreamSpec& spec;
  std::optional<Result<StreamInfo>> result;  // create_mu_
};

namespace {

// At most this many creates in one write (bounds the statement and the lock hold time).
constexpr std::size_t kMaxBatch = 64;

template <class I>
std::string num(I v) {
  return std::to_string(v);
}

// A text[] literal: {"a","b"} with " and \ escaped.
std::string text_array(const std::vector<std::string>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += i ? ",\"" : "\"";
    for (char c : v[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

struct KeyRead {
  bool ns_exists = false;
  bool taken = false;
  std::optional<Incarnation> tombstone;
};

// What sl_create_read returns (pg_meta_pool.cc).
struct CreateRead {
  std::uint64_t last_seq = 0;
  std::int64_t clock_us = 0;
  std::set<std::string, std::less<>> finalized;
  std::vector<KeyRead> keys;
  std::vector<BrokerInfo> brokers;  // by id
};

CreateRead read_create(const pqxx::result& rs, std::size_t nkeys) {
  CreateRead out;
  out.keys.resize(nkeys);
  bool got_counter = false;
  for (const auto& r : rs) {
    const std::string what = r[0].as<std::string>();
    if (what == "s") {
      got_counter = true;
      out.last_seq = u64(r[1]);
      out.clock_us = i64(r[2]);
      for (auto& f : split_csv(r[4].is_null() ? "" : r[4].as<std::string>())) out.finalized.insert(f);
    } else if (what == "k") {
      const auto i = static_cast<std::size_t>(i64(r[1]));
      if (i < 1 || i > nkeys) throw std::runtime_error("sl_create_read: bad key ordinal");
      KeyRead& k = out.keys[i - 1];
      if (!r[2].is_null()) k.tombstone = Incarnation{u64(r[2])};
      const std::int64_t bits = i64(r[3]);
      k.ns_exists = (bits & 1) != 0;
      k.taken = (bits & 2) != 0;
    } else {
      BrokerInfo b;
      b.id = NodeId{static_cast<std::uint32_t>(i64(r[1]))};
      b.registered_seq = ChangeSeq{u64(r[2])};
      b.live = i64(r[3]) != 0;
      b.address = r[4].as<std::string>();
      b.directory_id = r[5].as<std::string>();
      b.version = r[6].as<std::string>();
      b.features = split_csv(r[7].is_null() ? "" : r[7].as<std::string>());
      b.peer_address = r[8].is_null() ? std::string() : r[8].as<std::string>();
      out.brokers.push_back(std::move(b));
    }
  }
  if (!got_counter) throw std::runtime_error("sl_create_read returned no counter row");
  std::sort(out.brokers.begin(), out.brokers.end(),
            [](const BrokerInfo& a, const BrokerInfo& b) { return a.id.value() < b.id.value(); });
  return out;
}

}  // namespace

Result<StreamInfo> PgMetaStore::create_stream(const StreamKey& key, const StreamSpec& spec) {
  PG_META_TRY(validate_stream_key(key));
  PG_META_TRY(validate_stream_spec(spec));
  // Below level 16 this instance behaves as a build without replicated shards.
  if (spec.replication_factor > 1 && cfg_.level < kReplicatedShardsLevel)
    return Error(Errc::conflict, "replication_factor " + std::to_string(spec.replication_factor) +
                                     " needs metadata level " +
                                     std::to_string(kReplicatedShardsLevel.value()) +
                                     "; this instance runs at level " +
                                     std::to_string(cfg_.level.value()));
  if (auto s = check_started(); !s.ok()) return s.error();
  PendingCreate me{key, spec, std::nullopt};
  std::unique_lock lk(create_mu_);
  create_queue_.push_back(&me);
  // The caller that finds no batch in flight runs the next one (its own create may wait for
  // a later batch if the queue is long); the others wait for their answer.
  while (!me.result) {
    if (create_running_) {
      create_cv_.wait(lk);
      continue;
    }
    create_running_ = true;
    std::vector<PendingCreate*> batch;
    while (!create_queue_.empty() && batch.size() < kMaxBatch) {
      batch.push_back(create_queue_.front());
      create_queue_.pop_front();
    }
    lk.unlock();
    create_batch(batch);  // sets every result; create_mu_ is not held across the database
    lk.lock();
    create_running_ = false;
    create_cv_.notify_all();
  }
  return std::move(*me.result);
}

std::size_t PgMetaStore::queued_creates() const {
  std::lock_guard lk(create_mu_);
  return create_queue_.size();
}

void PgMetaStore::create_batch(const std::vector<PendingCreate*>& batch) {
  const FeatureSpec* feature = find_feature(kStreamIncarnations);
  // Below the feature's level this instance behaves as a build that never heard of
  // incarnations: a plain insert at 0, the tombstone ignored, no level declared (the
  // database's trigger refuses it once the feature is finalized).
  const bool knows_incarnations = feature && cfg_.level >= feature->required_level;
  std::vector<std::optional<Result<StreamInfo>>> out(batch.size());
  // Refused because an earlier create of this batch took the name: that refusal stands only
  // if the batch commits (a lost COMMIT leaves it as uncertain as the create it deferred to).
  std::vector<bool> after_batch_write(batch.size(), false);
  auto r = run<Unit>(Mode::write, [&](WriteBatch& b) -> Result<Unit> {
    for (auto& o : out) o.reset();  // a retried attempt decides again
    std::fill(after_batch_write.begin(), after_batch_write.end(), false);
    std::vector<std::string> tenants, nss, names;
    for (auto* p : batch) {
      tenants.push_back(p->key.tenant);
      nss.push_back(p->key.ns);
      names.push_back(p->key.name);
    }
    const CreateRead rd = read_create(
        b.first("EXECUTE sl_create_read(" + b.lit(text_array(tenants)) + ", " +
                b.lit(text_array(nss)) + ", " + b.lit(text_array(names)) + ", " +
                num(static_cast<std::int64_t>(cfg_.session_timeout.count())) + ")"),
        batch.size());
    std::uint64_t seq = rd.last_seq;
    std::set<std::string> taken_here;  // names created earlier in this batch
    std::string writes;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const StreamKey& key = batch[i]->key;
      const StreamSpec& spec = batch[i]->spec;
      const KeyRead& kr = rd.keys[i];
      const bool replicated = spec.replication_factor > 1;
      auto refuse = [&](Error e) { out[i].emplace(std::move(e)); };
      if (replicated && !rd.finalized.count(kReplicatedShards)) {
        refuse(Error(Errc::conflict,
                     "replication_factor " + std::to_string(spec.replication_factor) +
                         " needs the fleet feature replicated_shards, which is not finalized "
                         "(POST /v1/features/replicated_shards/finalize)"));
        continue;
      }
      // As raft-meta's check_replicated_create: without per-creation incarnations a delayed
      // update_shard for a deleted replicated stream would pass its re-creation's
      // compare-and-set (both incarnation 0, version 1).
      if (replicated && !rd.finalized.count(kStreamIncarnations)) {
        refuse(Error(Errc::conflict,
                     "replication_factor " + std::to_string(spec.replication_factor) +
                         " needs the fleet feature stream_incarnations, which is not finalized "
                         "(POST /v1/features/stream_incarnations/finalize)"));
        continue;
      }
      if (!kr.ns_exists) {
        refuse(Error(Errc::not_found, "no namespace " + key.tenant + "/" + key.ns));
        continue;
      }
      if (kr.taken || !taken_here.insert(key.to_string()).second) {
        after_batch_write[i] = !kr.taken;
        refuse(Error(Errc::already_exists, "stream " + key.to_string() + " exists"));
        continue;
      }
      // The control plane clock is the database's (one clock for every instance).
      StreamInfo info;
      info.key = key;
      info.spec = spec;
      info.created_at_us = rd.clock_us;
      if (knows_incarnations) {
        const bool finalized = rd.finalized.count(kStreamIncarnations) > 0;
        // The rules of features.h, decided inside this write.
        const std::uint64_t proposed = propose_incarnation(finalized, rd.clock_us);
        info.incarnation =
            decide_create_incarnation(proposed, /*flagged=*/false, finalized, kr.tombstone);
      }
      // Placement: the shared rules (features.h place_shards; catalog_rules.h
      // place_replicas for a replicated stream), as raft-meta's proposer.
      std::vector<std::vector<NodeId>> placed(spec.shards);
      if (replicated) {
        auto p = place_replicas(key, spec.shards, spec.replication_factor, rd.brokers, rd.finalized);
        if (!p.ok()) {
          taken_here.erase(key.to_string());
          refuse(p.error());
          continue;
        }
        placed = std::move(p.value());
      } else {
        const auto leaders = place_shards(key, spec.shards, rd.brokers, rd.finalized);
        for (std::uint32_t s = 0; s < spec.shards; ++s)
          if (leaders[s].value() != 0) placed[s] = {leaders[s]};
      }
      const std::uint64_t my_seq = seq + 1;
      info.created_seq = ChangeSeq{my_seq};
      const std::string key_lits = b.lit(key.tenant) + ", " + b.lit(key.ns) + ", " + b.lit(key.name);
      std::string mine = "EXECUTE sl_insert_stream(" + key_lits + ", " + num(info.incarnation.value()) +
                         ", " + num(spec.shards) + ", " + num(spec.retention.max_bytes) + ", " +
                         num(spec.retention.max_age_ms) + ", " +
                         b.lit(std::string(to_string(spec.default_ack))) + ", " + num(my_seq) +
                         ", " + num(rd.clock_us) + ", " + num(spec.replication_factor) + ", " +
                         num(spec.min_insync) + ");\n";
      std::vector<Assignment> as;
      std::optional<Error> failed;
      for (std::uint32_t s = 0; s < spec.shards && !failed; ++s) {
        Assignment a;
        a.key = key;
        a.shard = ShardIndex{s};
        a.incarnation = info.incarnation;
        a.generation = first_generation(ChangeSeq{my_seq});
        if (!placed[s].empty()) {
          a.leader = placed[s].front();
          a.replicas = placed[s];
        }
        if (replicated) {
          if (auto st = start_replicated_shard(a, rd.brokers); !st.ok()) {
            failed = st.error();
            break;
          }
        }
        mine += "EXECUTE sl_insert_assignment(" + key_lits + ", " + num(s) + ", " +
                num(a.incarnation.value()) + ", " + num(a.generation.value()) + ", " +
                num(a.leader.value()) + ", " + b.lit(pg_array(a.replicas)) + ", " +
                num(a.leader_epoch.value()) + ", " + b.lit(encode_in_sync(a.in_sync)) + ", " +
                num(a.version.value()) + ");\n";
        as.push_back(std::move(a));
      }
      if (failed) {
        taken_here.erase(key.to_string());
        refuse(std::move(*failed));
        continue;
      }
      mine += change_sql(b.tx(), my_seq, ChangeEvent::Kind::stream_created,
                         stream_change_payload(info, as, std::nullopt));
      writes += mine;
      writes += ";\n";
      seq = my_seq;
      out[i].emplace(std::move(info));
    }
    if (seq != rd.last_seq) {
      b.then("EXECUTE sl_advance_seq(" + num(seq - rd.last_seq) + ");\n" + writes +
             notify_and_prune_sql(b.tx(), seq));
    }
    return Unit{};
  });
  if (r.ok()) {
    std::lock_guard lk(create_mu_);
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i]->result = std::move(out[i]);
    return;
  }
  // The write failed as a whole. A lost commit (uncertain) concerns every create the last
  // attempt wrote, but not one it refused on what the database held: that one's statements
  // were never sent, so its refusal (already_exists, not_found, ...) stands, definite. A
  // create refused because an earlier one of this batch took its name is as uncertain as
  // that one. An unreachable database
  // concerns every create alike; anything else (a trigger or constraint refusing one
  // insert) is found again by each create alone, so each gets its own answer.
  if (r.error().outcome == Outcome::uncertain) {
    std::lock_guard lk(create_mu_);
    for (std::size_t i = 0; i < batch.size(); ++i)
      batch[i]->result = out[i] && !out[i]->ok() && !after_batch_write[i] ? std::move(out[i])
                                                                          : std::optional<Result<StreamInfo>>(r.error());
    return;
  }
  if (batch.size() == 1 || r.error().code == Errc::unavailable) {
    std::lock_guard lk(create_mu_);
    for (auto* p : batch) p->result = r.error();
    return;
  }
  for (auto* p : batch) create_batch({p});
}

}  // namespace sluice::postgres_meta
