// sluice-catalog-bench: stream creates per second and change-feed latency, for raft-meta
// and postgres-meta side by side in one run (issue 5). A program, not a test.
//
//   raft-meta      one member (the only shape this build has), 1 and --clients clients
//   postgres-meta  1 instance and --instances instances on one database, same clients
//
// Create latency is measured around create_stream(). Change-feed latency is from the start
// of a create to its delivery by watch() on every instance (for several instances, the
// figure that matters is the delivery on the *other* instances).
// PostgreSQL: --pg-url, or a throwaway server started with tests/support/pg_test_server.sh
// (needs root, as the tests do).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "catalog_bench_node.h"
#include "pg_meta_store.h"
#include "raft_meta_store.h"
#include "support/test_host.h"

using Clock = std::chrono::steady_clock;
using namespace sluice;

namespace {

struct Options {
  int seconds = 5;
  int clients = 16;
  int instances = 3;
  int pg_pool = 0;  // 0: postgres-meta's default metadata.postgres.pool_size
  std::string pg_url;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

struct Result_ {
  double creates_per_s = 0, create_p50 = 0, create_p99 = 0, feed_p50 = 0, feed_p99 = 0;
  std::uint64_t errors = 0;
  std::size_t feed_samples = 0;
  std::string first_error;  // the first failed create's answer
};

// Runs `clients` threads creating streams through `stores` (round robin) for `seconds`.
Result_ run(std::vector<MetadataStore*> stores, int clients, int seconds, const std::string& tag) {
  std::mutex mu;
  std::map<std::string, Clock::time_point> started;
  std::vector<double> feed;  // ms, deliveries on instances other than the creator (or all, if one)
  std::map<std::string, std::size_t> creator;
  std::vector<std::unique_ptr<WatchHandle>> watches;
  const auto snap = stores[0]->snapshot();
  const ChangeSeq from = snap ? snap->seq : ChangeSeq{0};
  for (std::size_t i = 0; i < stores.size(); ++i) {
    watches.push_back(stores[i]->watch(
        from,
        [&, i](const ChangeEvent& ev) {
          if (ev.kind != ChangeEvent::Kind::stream_created) return;
          const auto now = Clock::now();
          std::lock_guard lk(mu);
          auto it = started.find(ev.stream.key.name);
          if (it == started.end()) return;
          if (stores.size() > 1 && creator[ev.stream.key.name] == i) return;
          feed.push_back(std::chrono::duration<double, std::milli>(now - it->second).count());
        },
        [] {}));
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> done{0}, errors{0};
  std::string first_error;  // mu
  std::vector<double> lat;
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      std::vector<double> mine;
      for (int i = 0; !stop.load(); ++i) {
        const std::string name = tag + "-" + std::to_string(c) + "-" + std::to_string(i);
        const std::size_t via = static_cast<std::size_t>(c + i) % stores.size();
        const auto b = Clock::now();
        {
          std::lock_guard lk(mu);
          started[name] = b;
          creator[name] = via;
        }
        StreamSpec spec;
        spec.shards = 1;
        auto r = stores[via]->create_stream({"bench", "b", name}, spec);
        if (r) {
          mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - b).count());
          done.fetch_add(1);
        } else {
          errors.fetch_add(1);
          std::lock_guard lk(mu);
          if (first_error.empty()) first_error = r.error().to_string();
        }
      }
      std::lock_guard lk(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // Let the feeds catch up (bounded), then stop watching.
  const std::size_t expect = done.load() * (stores.size() > 1 ? stores.size() - 1 : 1);
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lk(mu);
      if (feed.size() >= expect) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  watches.clear();
  Result_ r;
  r.creates_per_s = done.load() / secs;
  r.create_p50 = pct(lat, 0.5);
  r.create_p99 = pct(lat, 0.99);
  std::lock_guard lk(mu);
  r.feed_p50 = pct(feed, 0.5);
  r.feed_p99 = pct(feed, 0.99);
  r.feed_samples = feed.size();
  r.errors = errors.load();
  r.first_error = first_error;
  return r;
}

void print(const char* what, const Result_& r) {
  std::printf("  %-34s %8.0f creates/s  create p50 %6.2f ms p99 %6.2f ms  feed p50 %6.2f ms p99 %6.2f ms  (%zu feed samples, %llu errors)\n",
              what, r.creates_per_s, r.create_p50, r.create_p99, r.feed_p50, r.feed_p99, r.feed_samples,
              static_cast<unsigned long long>(r.errors));
  if (!r.first_error.empty()) std::printf("    first error: %s\n", r.first_error.c_str());
  std::fflush(stdout);
}

void prepare(MetadataStore& s) {
  (void)s.create_tenant("bench");
  (void)s.create_namespace("bench", "b");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::NodeBenchOptions node;
  bool node_mode = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--clients") o.clients = std::stoi(val());
    else if (a == "--instances") o.instances = std::stoi(val());
    else if (a == "--pg-url") o.pg_url = val();
    else if (a == "--pg-pool") o.pg_pool = std::stoi(val());
    else if (a == "--tombstones") node_mode = true, node.tombstones = std::stol(val());
    else if (a == "--sluiced") node.sluiced = val();
    else if (a == "--dir") node.dir = val();
    else if (a == "--keep") node.keep = true;
    else {
      std::puts("Usage: sluice-catalog-bench [--seconds S] [--clients N] [--instances K] [--pg-url URL] [--pg-pool N]\n"
                "       sluice-catalog-bench --tombstones N [--clients C] [--sluiced PATH] [--dir DIR] [--keep]\n"
                "  --tombstones N: a real sluiced (embedded node) over HTTP: C clients create and delete\n"
                "  N streams (pairs/s), then the node is stopped and started twice (time to /readyz\n"
                "  with N tombstones). docs/benchmarks.md \"sluice-catalog-bench\".");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (node_mode) {
    node.clients = o.clients;
    return bench::run_node_bench(node);
  }
  std::printf("sluice-catalog-bench: %d s per phase, %d concurrent clients, %d postgres instances\n",
              o.seconds, o.clients, o.instances);

  // raft-meta: one member.
  {
    testing::TestHost host({{"raft.address", "127.0.0.1:0"}, {"metadata.rpc_address", ""}});
    raft_meta::RaftMetaStore store(host);
    if (auto r = store.start(); !r) {
      std::fprintf(stderr, "raft-meta start failed: %s\n", r.error().to_string().c_str());
      return 1;
    }
    prepare(store);
    std::puts("raft-meta (one member, libuv, on disk)");
    print("1 client", run({&store}, 1, o.seconds, "r1"));
    print((std::to_string(o.clients) + " clients").c_str(), run({&store}, o.clients, o.seconds, "rn"));
    store.stop();
  }

  // postgres-meta.
  std::string url = o.pg_url;
  std::string pg_dir;
  if (url.empty()) {
    char tmpl[] = "/tmp/sluice-pgbench-XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    pg_dir = tmpl;
    ::chmod(pg_dir.c_str(), 0755);  // the server runs as user postgres
    const int port = 56000 + static_cast<int>(std::random_device{}() % 4000);
    const std::string cmd = std::string(SLUICE_PG_SCRIPT) + " start " + pg_dir + "/pg " + std::to_string(port) +
                            " > " + pg_dir + "/pg.log 2>&1";
    std::printf("starting a throwaway PostgreSQL on port %d ...\n", port);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "could not start PostgreSQL (see %s/pg.log); pass --pg-url\n", pg_dir.c_str());
      return 1;
    }
    url = "host=127.0.0.1 port=" + std::to_string(port) + " user=postgres dbname=sluice_test";
  }
  {
    const std::string schema = "bench_" + std::to_string(::getpid());
    std::vector<std::unique_ptr<testing::TestHost>> hosts;
    std::vector<std::unique_ptr<postgres_meta::PgMetaStore>> stores;
    for (int i = 0; i < std::max(1, o.instances); ++i) {
      std::map<std::string, std::string> cfg{{"metadata.postgres.url", url},
                                             {"metadata.postgres.schema", schema}};
      if (o.pg_pool > 0) cfg["metadata.postgres.pool_size"] = std::to_string(o.pg_pool);
      hosts.push_back(std::make_unique<testing::TestHost>(cfg));
      stores.push_back(std::make_unique<postgres_meta::PgMetaStore>(*hosts.back()));
      if (auto r = stores.back()->start(); !r) {
        std::fprintf(stderr, "postgres-meta start failed: %s\n", r.error().to_string().c_str());
        return 1;
      }
    }
    prepare(*stores[0]);
    std::puts("postgres-meta (PostgreSQL 15 on loopback, fsync off in the throwaway server)");
    print("1 instance, 1 client", run({stores[0].get()}, 1, o.seconds, "p11"));
    print(("1 instance, " + std::to_string(o.clients) + " clients").c_str(),
          run({stores[0].get()}, o.clients, o.seconds, "p1n"));
    std::vector<MetadataStore*> all;
    for (auto& s : stores) all.push_back(s.get());
    print((std::to_string(all.size()) + " instances, " + std::to_string(o.clients) + " clients").c_str(),
          run(all, o.clients, o.seconds, "pkn"));
    for (auto& s : stores) s->stop();
  }
  if (!pg_dir.empty()) {
    const std::string cmd = std::string(SLUICE_PG_SCRIPT) + " stop " + pg_dir + "/pg > /dev/null 2>&1";
    (void)std::system(cmd.c_str());
    (void)std::system(("rm -rf " + pg_dir).c_str());
  }
  return 0;
}
