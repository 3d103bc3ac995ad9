// postgres-meta is not implemented yet (issue 5). Nothing here is built into a plugin.
namespace sluice::postgres_meta {
const char* status() { return "not implemented (issue 5)"; }
}  // namespace sluice::postgres_meta
