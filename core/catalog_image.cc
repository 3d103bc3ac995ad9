#include "catalog_image.h"

#include <algorithm>

namespace sluice::core {

namespace {
void raise(std::map<StreamKey, Incarnation>& m, const StreamKey& key, Incarnation to) {
  auto [it, fresh] = m.emplace(key, to);
  if (!fresh) it->second = std::max(it->second, to);
}
}  // namespace

CatalogImage image_from_snapshot(const CatalogSnapshot& snap, const std::vector<FeatureInfo>& features) {
  CatalogImage img;
  img.seq = snap.seq;
  for (const auto& s : snap.streams) img.streams[s.key] = s;
  for (const auto& a : snap.assignments) img.assignments[a.key].push_back(a);
  for (const auto& t : snap.tombstones) raise(img.tombstones, t.key, t.deleted_up_to);
  for (const auto& f : snap.finalized_features) img.finalized[f] = ChangeSeq{0};
  for (const auto& f : features)
    if (f.finalized) img.finalized[f.name] = f.finalized_seq;
  return img;
}

void replay(CatalogImage& img, const ChangeEvent& ev) {
  switch (ev.kind) {
    case ChangeEvent::Kind::stream_created:
      img.streams[ev.stream.key] = ev.stream;
      img.assignments[ev.stream.key] = ev.assignments;
      break;
    case ChangeEvent::Kind::stream_deleted: {
      const auto& key = ev.stream.key;
      if (auto it = img.streams.find(key); it != img.streams.end() && it->second.incarnation == ev.stream.incarnation) {
        img.streams.erase(it);
        img.assignments.erase(key);
      }
      if (ev.tombstone)
        raise(img.tombstones, key, ev.tombstone->deleted_up_to);
      else if (img.is_finalized(kStreamIncarnations))
        raise(img.untombstoned_deletes, key, ev.stream.incarnation);
      break;
    }
    case ChangeEvent::Kind::feature_finalized:
      img.finalized.emplace(ev.feature, ev.seq);
      break;
    case ChangeEvent::Kind::shard_changed:
      // The one assignment as an update_shard left it; only for the incarnation held (a
      // change of an older incarnation that arrives late changes nothing).
      for (const auto& changed : ev.assignments) {
        auto it = img.assignments.find(changed.key);
        if (it == img.assignments.end()) continue;
        for (auto& a : it->second)
          if (a.shard == changed.shard && a.incarnation == changed.incarnation) a = changed;
      }
      break;
    default:
      break;
  }
  if (ev.seq > img.seq) img.seq = ev.seq;
}

}  // namespace sluice::core
