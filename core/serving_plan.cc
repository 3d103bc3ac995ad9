#include "serving_plan.h"

#include "sluice/catalog_rules.h"
#include "sluice/features.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace sluice::core {

namespace {

std::string inc_str(Incarnation i) { return std::to_string(i.value()); }

template <class M>
const typename M::mapped_type* lookup(const M& m, const StreamKey& key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

struct Word {
  Incarnation up_to;
  std::string source;
};

// The highest delete word for a name, and where it comes from.
std::optional<Word> delete_word(const CatalogImage& img, const StreamKey& key, const ServingFloor* floor) {
  std::optional<Word> w;
  auto take = [&](const Incarnation* i, const char* source) {
    if (i && (!w || *i > w->up_to)) w = Word{*i, source};
  };
  take(lookup(img.tombstones, key), "its tombstone");
  take(lookup(img.untombstoned_deletes, key), "a delete after stream_incarnations was finalized");
  take(floor && floor->deleted ? &*floor->deleted : nullptr,
       "a delete this broker applied earlier (its durable floor)");
  return w;
}

std::string refusal(const CatalogImage& img, const StreamInfo& s, const std::optional<Word>& w,
                    std::optional<Incarnation> served) {
  const std::string name = "stream " + s.key.to_string() + " incarnation " + inc_str(s.incarnation);
  if (w && s.incarnation <= w->up_to)
    return name + " is at or below " + w->source + " (every incarnation up to " + inc_str(w->up_to) +
           " is deleted); not serving it (a restored control plane?)";
  if (served && s.incarnation < *served)
    return name + " is lower than incarnation " + inc_str(*served) +
           " that this broker has served; not serving it (a restored control plane?)";
  if (auto f = img.finalized.find(kStreamIncarnations);
      s.incarnation.value() == 0 && f != img.finalized.end() && f->second.value() > 0 && s.created_seq > f->second)
    // Apply stored 0 so members agree (felix), but serving it would reopen any legacy data of
    // the name: refused identically on every broker (both seqs are replicated).
    return "stream " + s.key.to_string() + " was created at incarnation 0 (change " +
           std::to_string(s.created_seq.value()) + ") after stream_incarnations was finalized (change " +
           std::to_string(f->second.value()) +
           "), by a member that predates incarnations; upgrade that member, then delete and recreate "
           "the stream";
  return {};
}

void close_all(ServingPlan& out, const StreamKey& key, const HeldStream& h, const std::string& why) {
  for (std::uint32_t i = 0; i < h.open.size(); ++i)
    if (h.open[i]) out.close.push_back({ShardRef{key, ShardIndex{i}, h.incarnation}, why});
}

void plan_name(const CatalogImage& img, const ServingNode& node, const HeldStream* h, const ServingFloor* floor,
               const StreamKey& key, bool full, ServingPlan& out) {
  const bool data = node.role == DataRole::broker;
  ServingFloor next = floor ? *floor : ServingFloor{};

  const auto w = delete_word(img, key, floor);
  if (w && data) {
    const bool raised = !next.deleted || w->up_to > *next.deleted;
    if (raised) next.deleted = w->up_to;
    if (raised || full) out.remove.push_back({key, w->up_to, "deleted by " + w->source});
  }

  const StreamInfo* s = lookup(img.streams, key);
  if (!s) {
    if (h) {
      close_all(out, key, *h, "the catalog no longer has the stream");
      out.forget.push_back(key);
    }
  } else {
    std::optional<Incarnation> served = floor ? floor->served : std::nullopt;
    if (h && (!served || h->incarnation > *served)) served = h->incarnation;

    StreamServing sv;
    sv.info = *s;
    sv.serve.assign(s->spec.shards, false);
    sv.hold.assign(s->spec.shards, false);
    sv.refused = refusal(img, *s, w, served);
    const auto* assigned = lookup(img.assignments, key);
    if (!sv.refused.empty()) {
      if (assigned) sv.assignments = *assigned;
      if (h) close_all(out, key, *h, "incarnation " + inc_str(s->incarnation) + " of the name is refused");
    } else {
      const bool same = h && h->incarnation == s->incarnation;
      if (h && !same)
        close_all(out, key, *h, "superseded by incarnation " + inc_str(s->incarnation));
      // Effective assignment per shard: the image's, unless what is held outranks it.
      std::vector<std::optional<Assignment>> eff(s->spec.shards);
      if (assigned)
        for (const auto& a : *assigned)
          if (a.shard.value() < s->spec.shards) eff[a.shard.value()] = a;
      if (same)
        for (const auto& ha : h->assignments) {
          if (ha.shard.value() >= s->spec.shards) continue;
          auto& e = eff[ha.shard.value()];
          if (!e) {
            e = ha;
            continue;
          }
          const bool newer_state = e->incarnation == ha.incarnation && e->generation == ha.generation &&
                                   e->version > ha.version;
          if (!newer_state && !assignment_supersedes(e->incarnation, e->generation, ha.incarnation, ha.generation))
            e = ha;
        }
      for (std::uint32_t i = 0; i < s->spec.shards; ++i) {
        if (!eff[i]) continue;
        sv.assignments.push_back(*eff[i]);
        const auto& rs = eff[i]->replicas;
        const bool leads = data && eff[i]->leader == node.id;
        const bool replica = data && (leads || std::find(rs.begin(), rs.end(), node.id) != rs.end());
        const bool is_open = same && i < h->open.size() && h->open[i];
        sv.serve[i] = leads;
        sv.hold[i] = replica;
        const ShardRef ref{key, ShardIndex{i}, s->incarnation};
        if (replica && !is_open)
          out.open.push_back({ref, leads ? "assigned to this broker" : "a replica on this broker"});
        if (!replica && is_open)
          out.close.push_back({ref, "assigned to broker " + std::to_string(eff[i]->leader.value())});
        if (data && !replica && s->spec.replication_factor > 1 && !rs.empty() && (is_open || full))
          out.drop.push_back({ref, "the replica list is " + replica_ids_text(rs) +
                                       " (version " + std::to_string(eff[i]->version.value()) + ")"});
      }
      if (data && (!next.served || s->incarnation > *next.served)) next.served = s->incarnation;
    }
    out.streams.emplace(key, std::move(sv));
  }
  if (next != (floor ? *floor : ServingFloor{})) out.floors[key] = next;
}

}  // namespace

ServingPlan plan_serving(const CatalogImage& image, const ServingNode& node, const HeldStreams& held,
                         const ServingFloors& floors, const std::optional<StreamKey>& only) {
  ServingPlan out;
  std::vector<StreamKey> scope;
  if (only) {
    scope.push_back(*only);
  } else {
    // Every name of five sorted maps, in order, each once: merged rather than inserted into
    // a set (a start with 100,000 tombstones spent a tenth of its time in that set).
    const auto add = [&scope](const auto& sorted_map) {
      std::vector<StreamKey> keys;
      keys.reserve(sorted_map.size());
      for (const auto& [k, v] : sorted_map) keys.push_back(k);
      std::vector<StreamKey> merged;
      merged.reserve(scope.size() + keys.size());
      std::set_union(std::make_move_iterator(scope.begin()), std::make_move_iterator(scope.end()),
                     std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()),
                     std::back_inserter(merged));
      scope = std::move(merged);
    };
    add(image.streams);
    add(image.tombstones);
    add(image.untombstoned_deletes);
    add(held);
    add(floors);
  }
  for (const auto& key : scope)
    plan_name(image, node, lookup(held, key), lookup(floors, key), key, !only, out);
  return out;
}

}  // namespace sluice::core
