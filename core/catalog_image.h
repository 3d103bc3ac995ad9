// The catalog as one broker has applied it: an image built from a snapshot, then advanced by
// replaying the change feed (docs/architecture.md "Broker runtime"; the KRaft model of
// STYLE.md: state changes by replay, decisions by pure functions). The serving plan
// (serving_plan.h) decides from it.
//
// Thread-safety: a plain value; the broker's control thread owns its copy.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/fleet_info.h"
#include "sluice/metadata.h"

namespace sluice::core {

struct CatalogImage {
  ChangeSeq seq;                                         // every change up to seq is in
  std::map<StreamKey, StreamInfo> streams;               // the current incarnation of each name
  std::map<StreamKey, std::vector<Assignment>> assignments;
  std::map<StreamKey, Incarnation> tombstones;           // "every incarnation <= N is deleted"
  // Deletes the control plane ordered without a tombstone: a delete (of incarnation 0)
  // applied after stream_incarnations was finalized removes that legacy data too (felix:
  // "That data goes the next time the name is deleted after the finalize"). Only the feed
  // carries these; a snapshot cannot, which is why the broker's floors keep them.
  std::map<StreamKey, Incarnation> untombstoned_deletes;
  // Finalized features and the change that finalized each (0: finalized, change unknown).
  std::map<std::string, ChangeSeq, std::less<>> finalized;

  bool is_finalized(std::string_view feature) const { return finalized.find(feature) != finalized.end(); }
};

// The image of a snapshot. `features` (list_features) supplies the finalize seqs the
// snapshot lacks; pass empty if unavailable (then each seq is 0).
CatalogImage image_from_snapshot(const CatalogSnapshot& snap, const std::vector<FeatureInfo>& features);

// Replays one change into the image. Stream, tombstone, shard and feature events change it;
// the rest (tenants, namespaces, brokers, caches) hold no shard data and are skipped.
void replay(CatalogImage& image, const ChangeEvent& ev);

}  // namespace sluice::core
