#include "schema.h"

namespace sluice::postgres_meta {

namespace {

// Version 1: the catalog as a level-8 build knows it, plus the fleet tables and the change
// feed. `counter` is the single row every writing transaction locks first: it serializes
// catalog writes, so change sequence order is commit order and the feed never skips a row.
constexpr std::string_view kV1 = R"SQL(
CREATE TABLE cluster (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id text NOT NULL,
  created timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE counter (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  last_seq bigint NOT NULL,
  pruned_up_to bigint NOT NULL
);
INSERT INTO counter(singleton, last_seq, pruned_up_to) VALUES (true, 0, 0);
CREATE TABLE tenants (
  name text PRIMARY KEY,
  created_seq bigint NOT NULL
);
CREATE TABLE namespaces (
  tenant text NOT NULL REFERENCES tenants(name),
  name text NOT NULL,
  created_seq bigint NOT NULL,
  PRIMARY KEY (tenant, name)
);
CREATE TABLE streams (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  incarnation bigint NOT NULL DEFAULT 0 CHECK (incarnation >= 0),
  shards integer NOT NULL CHECK (shards >= 1),
  retention_max_bytes bigint NOT NULL,
  retention_max_age_ms bigint NOT NULL,
  default_ack text NOT NULL,
  created_seq bigint NOT NULL,
  created_at_us bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name),
  FOREIGN KEY (tenant, ns) REFERENCES namespaces(tenant, name)
);
CREATE TABLE tombstones (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  deleted_up_to bigint NOT NULL,
  seq bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name)
);
CREATE TABLE features (
  name text PRIMARY KEY,
  finalized_seq bigint NOT NULL
);
CREATE TABLE brokers (
  id bigint PRIMARY KEY CHECK (id > 0),
  address text NOT NULL,
  directory_id text NOT NULL,
  version text NOT NULL,
  features text[] NOT NULL,
  registered_seq bigint NOT NULL,
  last_heartbeat timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE assignments (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  shard integer NOT NULL,
  incarnation bigint NOT NULL,
  generation bigint NOT NULL,
  leader bigint NOT NULL,
  replicas bigint[] NOT NULL,
  PRIMARY KEY (tenant, ns, name, shard)
);
CREATE TABLE changes (
  seq bigint PRIMARY KEY,
  kind text NOT NULL,
  payload text NOT NULL,
  committed_at timestamptz NOT NULL DEFAULT now()
);
)SQL";

// Version 2: the incarnation rules inside the database. The SQL functions mirror
// features.h (tests/postgres-meta checks they agree); the triggers refuse what a
// pre-incarnation instance (which never sets sluice.writer_level) would write once
// stream_incarnations is finalized.
constexpr std::string_view kV2 = R"SQL(
CREATE FUNCTION next_incarnation(proposed bigint, tombstone bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE AS
  $$ SELECT GREATEST(proposed, COALESCE(tombstone + 1, 0)) $$;

CREATE FUNCTION decide_create_incarnation(proposed bigint, flagged boolean, finalized boolean,
                                          tombstone bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN NOT finalized OR (NOT flagged AND proposed = 0) THEN 0
                 ELSE GREATEST(proposed, COALESCE(tombstone + 1, 0)) END $$;

CREATE FUNCTION decide_delete_tombstone(deleted bigint, flagged boolean) RETURNS bigint
  LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN deleted = 0 AND NOT flagged THEN NULL ELSE deleted END $$;

-- The metadata level the writing session declared (SET LOCAL sluice.writer_level). A
-- build from before incarnations never sets it: level 8.
CREATE FUNCTION writer_level() RETURNS integer
  LANGUAGE sql STABLE AS
  $$ SELECT COALESCE(NULLIF(current_setting('sluice.writer_level', true), '')::integer, 8) $$;

CREATE FUNCTION streams_guard_insert() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  tomb bigint;
BEGIN
  IF EXISTS (SELECT 1 FROM features WHERE name = 'stream_incarnations') THEN
    IF writer_level() < 10 THEN
      RAISE EXCEPTION USING
        ERRCODE = 'SL001',
        MESSAGE = format('stream_incarnations is finalized: this instance predates incarnations '
                         '(writer level %s); upgrade it (refused create of %s/%s/%s)',
                         writer_level(), NEW.tenant, NEW.ns, NEW.name),
        HINT = 'every instance must run metadata level 10 or higher once stream_incarnations is finalized';
    END IF;
    SELECT deleted_up_to INTO tomb FROM tombstones
      WHERE tenant = NEW.tenant AND ns = NEW.ns AND name = NEW.name;
    IF tomb IS NOT NULL AND NEW.incarnation <= tomb THEN
      RAISE EXCEPTION USING
        ERRCODE = 'SL002',
        MESSAGE = format('incarnation %s of %s/%s/%s is not above its tombstone %s',
                         NEW.incarnation, NEW.tenant, NEW.ns, NEW.name, tomb);
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER streams_guard_insert BEFORE INSERT ON streams
  FOR EACH ROW EXECUTE FUNCTION streams_guard_insert();

-- A pre-incarnation instance deletes without a tombstone; refuse it for an incarnated stream.
CREATE FUNCTION streams_guard_delete() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF OLD.incarnation > 0 AND writer_level() < 10 THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL003',
      MESSAGE = format('stream %s/%s/%s has incarnation %s: this instance predates incarnations '
                       '(writer level %s) and cannot delete it; upgrade it',
                       OLD.tenant, OLD.ns, OLD.name, OLD.incarnation, writer_level());
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER streams_guard_delete BEFORE DELETE ON streams
  FOR EACH ROW EXECUTE FUNCTION streams_guard_delete();

-- Tombstones: deleted_up_to is only ever raised, and rows are kept forever.
CREATE FUNCTION tombstones_guard() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL004',
      MESSAGE = format('tombstone of %s/%s/%s is kept forever', OLD.tenant, OLD.ns, OLD.name);
  END IF;
  NEW.deleted_up_to := GREATEST(NEW.deleted_up_to, OLD.deleted_up_to);
  RETURN NEW;
END $$;
CREATE TRIGGER tombstones_guard BEFORE UPDATE OR DELETE ON tombstones
  FOR EACH ROW EXECUTE FUNCTION tombstones_guard();
)SQL";

// Version 3: after the finalize, a delete at incarnation 0 writes tombstone 0 (the three-
// argument rule of features.h, as raft-meta applies it to flagged entries). The C++ writer
// decides it; the database refuses, once stream_incarnations is finalized, any delete by a
// pre-incarnation instance (which would write no tombstone), as it refuses its creates.
constexpr std::string_view kV3 = R"SQL(
CREATE FUNCTION decide_delete_tombstone(deleted bigint, flagged boolean, finalized boolean)
  RETURNS bigint
  LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN deleted = 0 AND (NOT flagged OR NOT finalized) THEN NULL ELSE deleted END $$;

CREATE OR REPLACE FUNCTION streams_guard_delete() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF writer_level() < 10 AND
     (OLD.incarnation > 0 OR EXISTS (SELECT 1 FROM features WHERE name = 'stream_incarnations')) THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL003',
      MESSAGE = format('stream %s/%s/%s (incarnation %s): this instance predates incarnations '
                       '(writer level %s) and cannot delete it without a tombstone once '
                       'stream_incarnations is finalized; upgrade it',
                       OLD.tenant, OLD.ns, OLD.name, OLD.incarnation, writer_level());
  END IF;
  RETURN OLD;
END $$;
)SQL";

// Version 4 (level 16, replicated shards): a stream's replication factor and min_insync,
// each shard's leader epoch, in-sync set and version, and a broker's peer address. The
// defaults are what every older row meant (factor 1, no epoch, no in-sync set, version 0),
// so instances from before it keep working on the same tables. in_sync is the JSON array
// of {"broker","directory_id"} the SDK codec writes ('' when empty).
constexpr std::string_view kV4 = R"SQL(
ALTER TABLE streams
  ADD COLUMN replication_factor integer NOT NULL DEFAULT 1
    CHECK (replication_factor BETWEEN 1 AND 5),
  ADD COLUMN min_insync integer NOT NULL DEFAULT 1
    CHECK (min_insync BETWEEN 1 AND replication_factor);
ALTER TABLE assignments
  ADD COLUMN leader_epoch bigint NOT NULL DEFAULT 0 CHECK (leader_epoch >= 0),
  ADD COLUMN in_sync text NOT NULL DEFAULT '',
  ADD COLUMN version bigint NOT NULL DEFAULT 0 CHECK (version >= 0);
ALTER TABLE brokers
  ADD COLUMN peer_address text NOT NULL DEFAULT '';
)SQL";

// Version 5 (level 17, reassignment): a running reassignment's target replica list. The
// default (empty: no reassignment) is what every older row meant, and instances from before
// it read named columns, so they keep working on the same tables.
constexpr std::string_view kV5 = R"SQL(
ALTER TABLE assignments
  ADD COLUMN target_replicas bigint[] NOT NULL DEFAULT '{}';
)SQL";

// Version 6 (level 14 for caches): caches, their incarnations and their tombstones, with
// the rules of streams under `cache_incarnations` (docs/metadata-levels.md). The triggers
// mirror v2/v3 one to one (SL005..SL008 for SL001..SL004): a writer below level 14 (which
// includes every build from before caches were stored here; it never sets
// sluice.writer_level to 14 or more) is refused a cache create once cache_incarnations is
// finalized, and any cache delete once finalized or of an incarnated cache (it would write
// no tombstone); a create is never at or below its name's cache tombstone; cache
// tombstones are only raised and kept forever.
constexpr std::string_view kV6 = R"SQL(
CREATE TABLE caches (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  incarnation bigint NOT NULL DEFAULT 0 CHECK (incarnation >= 0),
  default_ttl_ms bigint NOT NULL CHECK (default_ttl_ms = -1 OR default_ttl_ms > 0),
  created_seq bigint NOT NULL,
  created_at_us bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name),
  FOREIGN KEY (tenant, ns) REFERENCES namespaces(tenant, name)
);
CREATE TABLE cache_tombstones (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  deleted_up_to bigint NOT NULL,
  seq bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name)
);

CREATE FUNCTION caches_guard_insert() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  tomb bigint;
BEGIN
  IF EXISTS (SELECT 1 FROM features WHERE name = 'cache_incarnations') THEN
    IF writer_level() < 14 THEN
      RAISE EXCEPTION USING
        ERRCODE = 'SL005',
        MESSAGE = format('cache_incarnations is finalized: this instance predates cache '
                         'incarnations (writer level %s); upgrade it (refused create of cache %s/%s/%s)',
                         writer_level(), NEW.tenant, NEW.ns, NEW.name),
        HINT = 'every instance must run metadata level 14 or higher once cache_incarnations is finalized';
    END IF;
    SELECT deleted_up_to INTO tomb FROM cache_tombstones
      WHERE tenant = NEW.tenant AND ns = NEW.ns AND name = NEW.name;
    IF tomb IS NOT NULL AND NEW.incarnation <= tomb THEN
      RAISE EXCEPTION USING
        ERRCODE = 'SL006',
        MESSAGE = format('incarnation %s of cache %s/%s/%s is not above its tombstone %s',
                         NEW.incarnation, NEW.tenant, NEW.ns, NEW.name, tomb);
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER caches_guard_insert BEFORE INSERT ON caches
  FOR EACH ROW EXECUTE FUNCTION caches_guard_insert();

CREATE FUNCTION caches_guard_delete() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF writer_level() < 14 AND
     (OLD.incarnation > 0 OR EXISTS (SELECT 1 FROM features WHERE name = 'cache_incarnations')) THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL007',
      MESSAGE = format('cache %s/%s/%s (incarnation %s): this instance predates cache incarnations '
                       '(writer level %s) and cannot delete it without a tombstone once '
                       'cache_incarnations is finalized; upgrade it',
                       OLD.tenant, OLD.ns, OLD.name, OLD.incarnation, writer_level());
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER caches_guard_delete BEFORE DELETE ON caches
  FOR EACH ROW EXECUTE FUNCTION caches_guard_delete();

CREATE FUNCTION cache_tombstones_guard() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL008',
      MESSAGE = format('tombstone of cache %s/%s/%s is kept forever', OLD.tenant, OLD.ns, OLD.name);
  END IF;
  NEW.deleted_up_to := GREATEST(NEW.deleted_up_to, OLD.deleted_up_to);
  RETURN NEW;
END $$;
CREATE TRIGGER cache_tombstones_guard BEFORE UPDATE OR DELETE ON cache_tombstones
  FOR EACH ROW EXECUTE FUNCTION cache_tombstones_guard();
)SQL";

// Version 7 (level 18, counters): counters and their tombstones. The triggers mirror v6
// (SL009..SL012 for SL005..SL008), with one difference: counters have no legacy past, so a
// create is refused unless the writer is at level 18 or above AND `counters` is finalized
// (a writer below 18 -- any instance from before this migration, or one run at a lower
// metadata.level -- can never store a counter), every counter is incarnated (above 0 and
// above its name's tombstone), a writer below 18 may not delete one, and counter
// tombstones are only raised and kept forever.
constexpr std::string_view kV7 = R"SQL(
CREATE TABLE counters (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  incarnation bigint NOT NULL CHECK (incarnation > 0),
  created_seq bigint NOT NULL,
  created_at_us bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name),
  FOREIGN KEY (tenant, ns) REFERENCES namespaces(tenant, name)
);
CREATE TABLE counter_tombstones (
  tenant text NOT NULL,
  ns text NOT NULL,
  name text NOT NULL,
  deleted_up_to bigint NOT NULL,
  seq bigint NOT NULL,
  PRIMARY KEY (tenant, ns, name)
);

CREATE FUNCTION counters_guard_insert() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  tomb bigint;
BEGIN
  IF writer_level() < 18 OR NOT EXISTS (SELECT 1 FROM features WHERE name = 'counters') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL009',
      MESSAGE = format('counters need every instance at metadata level 18 and the fleet feature '
                       'counters finalized (writer level %s; refused create of counter %s/%s/%s)',
                       writer_level(), NEW.tenant, NEW.ns, NEW.name),
      HINT = 'upgrade every instance to level 18, then POST /v1/features/counters/finalize';
  END IF;
  SELECT deleted_up_to INTO tomb FROM counter_tombstones
    WHERE tenant = NEW.tenant AND ns = NEW.ns AND name = NEW.name;
  IF tomb IS NOT NULL AND NEW.incarnation <= tomb THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL010',
      MESSAGE = format('incarnation %s of counter %s/%s/%s is not above its tombstone %s',
                       NEW.incarnation, NEW.tenant, NEW.ns, NEW.name, tomb);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER counters_guard_insert BEFORE INSERT ON counters
  FOR EACH ROW EXECUTE FUNCTION counters_guard_insert();

CREATE FUNCTION counters_guard_delete() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF writer_level() < 18 THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL011',
      MESSAGE = format('counter %s/%s/%s (incarnation %s): this instance runs below metadata '
                       'level 18 (writer level %s) and cannot delete it with its tombstone; upgrade it',
                       OLD.tenant, OLD.ns, OLD.name, OLD.incarnation, writer_level());
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER counters_guard_delete BEFORE DELETE ON counters
  FOR EACH ROW EXECUTE FUNCTION counters_guard_delete();

CREATE FUNCTION counter_tombstones_guard() RETURNS trigger
  LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL012',
      MESSAGE = format('tombstone of counter %s/%s/%s is kept forever', OLD.tenant, OLD.ns, OLD.name);
  END IF;
  NEW.deleted_up_to := GREATEST(NEW.deleted_up_to, OLD.deleted_up_to);
  RETURN NEW;
END $$;
CREATE TRIGGER counter_tombstones_guard BEFORE UPDATE OR DELETE ON counter_tombstones
  FOR EACH ROW EXECUTE FUNCTION counter_tombstones_guard();
)SQL";

// Guard 1 (not a migration: installed by every build that has it, whatever the schema
// version, so older binaries still start against the schema mid-upgrade): a broker lacking
// a finalized feature cannot heartbeat, whatever build sends the heartbeat. The C++ check
// before the update is an older broker's own code, and it races a finalize: checked before
// the finalize commits, its update (which waits for the finalize's FOR SHARE lock) went
// through after it, and a broker lacking the feature was serving once the feature was
// final. A BEFORE trigger runs on the row once its lock is held; its query (a VOLATILE
// function, READ COMMITTED) sees the committed finalize.
constexpr std::string_view kHeartbeatGuard = R"SQL(
CREATE OR REPLACE FUNCTION brokers_heartbeat_guard() RETURNS trigger
  LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
  missing text;
BEGIN
  SELECT string_agg(f.name, ', ' ORDER BY f.name) INTO missing
    FROM features f WHERE NOT (f.name = ANY(NEW.features));
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = 'SL013',
      MESSAGE = format('broker %s lacks finalized feature(s) %s and is not admitted; upgrade the broker',
                       NEW.id, missing);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER brokers_heartbeat_guard BEFORE UPDATE OF last_heartbeat ON brokers
  FOR EACH ROW WHEN (NEW.last_heartbeat IS DISTINCT FROM OLD.last_heartbeat)
  EXECUTE FUNCTION brokers_heartbeat_guard();
)SQL";

}  // namespace

const std::vector<Guard>& guards() {
  static const std::vector<Guard> g = {
      {"brokers_heartbeat_guard", "no heartbeat from a broker lacking a finalized feature", kHeartbeatGuard},
  };
  return g;
}

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> m = {
      {1, "catalog, fleet and change feed tables", kV1},
      {2, "incarnation rules and the pre-incarnation guard triggers", kV2},
      {3, "tombstone 0 after the finalize; no pre-incarnation deletes once finalized", kV3},
      {4, "replicated shards: replication factor, leader epoch, in-sync set, shard version, peer address", kV4},
      {5, "reassignment: a shard's target replica list", kV5},
      {6, "caches, cache incarnations and cache tombstones, with their guard triggers", kV6},
      {7, "counters (level 18), their incarnations and tombstones, with their guard triggers", kV7},
  };
  return m;
}

}  // namespace sluice::postgres_meta
