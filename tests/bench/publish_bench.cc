// sluice-bench: publish throughput and ack latency, with the disk as the reference.
//
// It is a program, not a test: it prints figures. In one run it
//   1. measures the disk: sequential writes of --chunk bytes, each followed by fdatasync,
//      in the node's data directory (what a durable log can get from this disk), and its
//      sequential bandwidth (1 MiB writes, buffered and O_DIRECT; the faster is the
//      reference for the ratios);
//   2. starts a sluiced of its own (or uses --url), creates a stream, and publishes
//      --record-bytes records with ack leader over the binary batch API from
//      --connections concurrent connections for --seconds;
//   3. prints records/s, MB/s, ack latency p50/p99/p999 and the ratio to the disk figure;
//   4. unless --no-json: the keyless load as JSON publishes and the ratio JSON / binary;
//   5. unless --no-idempotence: the same load with one key per connection, without and
//      then with idempotent producers (producer_id + sequence), and their ratio.
// With --brokers N --replication-factor R (issue 10) the run is instead
//   1. the disk reference, as above;
//   2. one broker of its own, a stream with replication factor 1, ack leader;
//   3. N brokers of its own on loopback (a raft-meta cluster: broker 1 is the one
//      controller, brokers 2..N join it as broker-only nodes, metadata.controllers), a
//      stream with replication factor R, ack quorum, each connection publishing to the
//      LEADER of its shard (GET .../shards, GET /v1/brokers);
//   4. the two loads alternate in --rounds slices (both sets of processes stay up), so
//      drift of the disk or the machine hits both sides;
//   5. each round's figures and ratio, then both totals and the ratio replicated / single.
// Both loads have the same shape: connection c publishes to shard c % shards, every
// request one key that hashes to that shard (binary records carry no explicit shard).
// Design goals: at 1 KiB records, at least half the disk's fdatasync bandwidth (issue 2);
// idempotence costs at most 10% of the throughput (issue 3); replicated (RF 3, quorum)
// at least half the single-broker throughput (issue 10).
//
// The code: this file parses the options and dispatches; publish_single.cc is the default
// run, publish_replicated.cc the --brokers run, disk_reference.cc their phase 1 and
// publish_load.cc the load both publish with. --failover, --tls, --restart and --cache are
// modes of their own (failover_bench.cc, tls_bench.cc, restart_bench.cc, cache_bench.cc).
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "bench_process.h"
#include "cache_bench.h"
#include "publish_bench.h"

namespace fs = std::filesystem;
using namespace sluice_bench;

namespace {

void usage() {
  std::puts(R"(Usage: sluice-bench [options]

  --connections N     concurrent publishing connections (default 8)
  --seconds S         measured duration per phase (default 10)
  --record-bytes B    value size (default 1024)
  --batch N           records per request (default 64)
  --shards N          shards of the benchmark stream (default 4)
  --ack MODE          none or leader (default leader)
  --dir DIR           where the node's data and the disk probe live (default: a temp dir)
  --url URL           publish to a running node instead of starting one
  --sluiced PATH      sluiced binary (default: next to this program)
  --node-set KEY=VAL  a configuration key for every sluiced this program starts (the
                      single and the replicated runs alike); repeatable
  --no-json           skip the JSON phase: the keyless load as JSON publishes (values as
                      plain strings), printed beside it with the ratio JSON / binary
  --no-idempotence    skip the idempotent-producer comparison
  --no-websocket      skip the WebSocket phase: one subscriber on a one-shard stream while
                      one connection publishes one record at a time; prints the delivery
                      latency (publish sent -> frame received) p50/p99
  --no-fetch          skip the phase with consumers fetching at the tail while producers
                      publish (its fetch records/s is printed beside the publish figure)
  --brokers N         replicated run (issue 10), after the disk reference: the load
                      against one broker of its own (replication factor 1, ack leader),
                      then N brokers of its own on loopback (raft-meta: broker 1 is the
                      controller, 2..N join it) with ack quorum to each shard's leader;
                      prints both and the ratio replicated / single, beside what the
                      disk can sync with one file per shard and one per shard replica
                      (the ceiling that puts on the ratio). Replaces the
                      keyless/JSON/keyed/idempotent phases (ignores --ack, --url)
  --replication-factor R   replication factor of the replicated stream (default: N)
  --rounds N          the replicated run alternates its two loads (one broker, N brokers)
                      in N slices of --seconds/N each (default 5), so that the disk's and
                      the machine's drift hits both sides of the ratio; prints each
                      round's figures and ratio, then the totals
  --failover [N]      failover time (issue 11) instead of throughput: one controller and
                      three brokers of its own, a stream with replication factor 3; N times
                      (default 20) SIGKILL the shard's leader and time the kill to the
                      first acknowledged ack=quorum publish (sent to a surviving broker,
                      which forwards it), then restart it and wait until it is in sync
                      again; prints p50 and max
  --session-timeout-ms MS  broker.session_timeout_ms of that run (default 3000)
  --tls               publish throughput over HTTPS against plain HTTP, two sluiced of its
                      own, alternating rounds (sluice-bench --tls --help)
  --restart GB        restart time to /readyz after a clean stop and after SIGKILL of a
                      node holding GB GiB instead (issue 12; sluice-bench --restart 1 --help)
  --cache             cache puts and gets per second (1 and 16 clients) and Redis SET under
                      appendfsync always, with the ratio (issue 13; sluice-bench --cache --help)

Everything it starts is stopped at the end, also on failure or Ctrl-C (SIGTERM, then
SIGKILL after 20 s; 10 s on a signal). Progress goes to stderr, figures to stdout.
)");
}

// Whether argv[1..] holds `arg` exactly.
bool has_arg(int argc, char** argv, const char* arg) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == arg) return true;
  return false;
}

// The limits the out-of-range message states.
bool in_range(const Options& o) {
  return !(o.brokers < 0 || o.brokers > 16 || o.replication_factor < 1 ||
           (o.brokers > 0 && o.replication_factor > o.brokers) || o.connections < 1 || o.connections > 256 ||
           o.seconds < 1 || o.seconds > 3600 || o.shards < 1 || o.shards > 256 || o.batch_records < 1 ||
           o.record_bytes < 0 || o.rounds < 1 || (o.brokers > 0 && o.rounds > o.seconds));
}

// The options of the throughput and --failover runs. Nothing when the program is to exit
// instead, with *exit_code: 0 after --help, 2 after the usage (an unknown option, a missing
// value) or a value out of range.
std::optional<Options> parse_options(int argc, char** argv, int* exit_code) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--connections") o.connections = std::stoi(val());
    else if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--record-bytes") o.record_bytes = std::stoi(val());
    else if (a == "--batch") o.batch_records = std::stoi(val());
    else if (a == "--shards") o.shards = std::stoi(val());
    else if (a == "--ack") o.ack = val();
    else if (a == "--dir") o.dir = val();
    else if (a == "--url") o.url = val();
    else if (a == "--sluiced") o.sluiced = val();
    else if (a == "--no-idempotence") o.idempotence = false;
    else if (a == "--no-fetch") o.fetch = false;
    else if (a == "--no-json") o.json = false;
    else if (a == "--no-websocket") o.websocket = false;
    else if (a == "--brokers") o.brokers = std::stoi(val());
    else if (a == "--replication-factor") o.replication_factor = std::stoi(val());
    else if (a == "--rounds") o.rounds = std::stoi(val());
    else if (a == "--failover") {
      o.failover_kills = 20;
      if (i + 1 < argc && argv[i + 1][0] != '-') o.failover_kills = std::stoi(argv[++i]);
    }
    else if (a == "--session-timeout-ms") o.session_timeout_ms = std::stoi(val());
    else if (a == "--node-set") node_settings().push_back(val());
    else if (a == "-h" || a == "--help") { usage(); *exit_code = 0; return std::nullopt; }
    else { usage(); *exit_code = 2; return std::nullopt; }
  }
  if (o.brokers > 0 && !has_arg(argc, argv, "--replication-factor")) o.replication_factor = o.brokers;
  if (!has_arg(argc, argv, "--rounds")) o.rounds = std::min(o.rounds, o.seconds);
  if (!in_range(o)) {
    std::fprintf(stderr, "sluice-bench: out of range (brokers 1..16, 1 <= replication factor <= brokers, "
                         "connections 1..256, seconds 1..3600, shards 1..256, rounds 1..seconds)\n");
    *exit_code = 2;
    return std::nullopt;
  }
  return o;
}

// What every run needs before it starts: its directory (a new temp dir by default), the
// signal handlers that stop its children, the sluiced binary and the disk probe's chunk.
// False if the temp dir could not be made.
bool prepare_run(Options& o) {
  if (o.dir.empty()) {
    std::string t = (fs::temp_directory_path() / "sluice-bench-XXXXXX").string();
    if (!mkdtemp(t.data())) return false;
    o.dir = t;
  }
  fs::create_directories(o.dir);
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  if (o.sluiced.empty())
    o.sluiced = (fs::read_symlink("/proc/self/exe").parent_path() / "sluiced").string();
  if (o.chunk == 0) o.chunk = o.batch_records * (8 + o.record_bytes);  // one request's payload
  return true;
}

// --failover, once its own limits are checked (failover_bench.cc).
int failover_mode(const Options& o) {
  if (o.failover_kills > 1000 || o.session_timeout_ms < 100) {
    std::fprintf(stderr, "sluice-bench: --failover takes 1..1000 kills and --session-timeout-ms >= 100\n");
    return 2;
  }
  return run_failover(o);
}

}  // namespace

int run_restart_bench(int argc, char** argv);  // restart_bench.cc
namespace sluice_bench {
int run_tls_bench(int argc, char** argv);  // tls_bench.cc
}

int main(int argc, char** argv) {
  // Modes that parse their own options.
  if (has_arg(argc, argv, "--restart")) return run_restart_bench(argc, argv);
  if (has_arg(argc, argv, "--tls")) return sluice_bench::run_tls_bench(argc, argv);
  if (has_arg(argc, argv, "--cache")) return sluice_bench::run_cache_bench(argc, argv);
  int exit_code = 0;
  std::optional<Options> o = parse_options(argc, argv, &exit_code);
  if (!o) return exit_code;
  if (!prepare_run(*o)) return 1;
  if (o->failover_kills > 0) return failover_mode(*o);
  return o->brokers > 0 ? run_replicated(*o) : run_publish(*o);
}
