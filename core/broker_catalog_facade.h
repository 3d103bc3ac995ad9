// The catalog as the API plugin sees it through a broker (Node::catalog()): the metadata
// store, with names validated, and a create or delete that answers only once this broker has
// applied it, so the caller can publish right after a 201 (docs/architecture.md "Broker
// runtime"). Thread-safety: as the wrapped store's.
#pragma once

#include <cstdint>
#include <memory>

#include "sluice/metadata.h"

namespace sluice::core {

class BrokerRuntime;

// `broker` and `inner` must outlive the facade. `timeout_ms` bounds the wait for this
// broker to apply a change (then: timeout, the change itself happened).
std::unique_ptr<MetadataStore> make_catalog_facade(BrokerRuntime& broker, MetadataStore& inner,
                                                   std::int64_t timeout_ms);

}  // namespace sluice::core
