#include "catalog_image.h"

#include <algorithm>

#include "sluice/levels.h"

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
      // Replaces that one shard of that one incarnation; a change to an incarnation the image
      // no longer holds (deleted and recreated since) changes nothing.
      for (const auto& a : ev.assignments) {
        auto st = img.streams.find(a.key);
        if (st == img.streams.end() || st->second.incarnation != a.incarnation) continue;
        auto& v = img.assignments[a.key];
        auto it = std::find_if(v.begin(), v.end(), [&](const Assignment& x) { return x.shard == a.shard; });
        if (it == v.end())
          v.push_back(a);
        else if (it->incarnation == a.incarnation && a.version >= it->version)
          *it = a;
      }
      break;
    default:
      break;
  }
  if (ev.seq > img.seq) img.seq = ev.seq;
}

}  // namespace sluice::core
