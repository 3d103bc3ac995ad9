// Processes and HTTP for the benchmark programs: every sluiced a benchmark starts is
// registered, and stopped at the end, on fail() and on SIGINT/SIGTERM (on_signal); the
// children also carry PR_SET_PDEATHSIG. Progress lines go to stderr.
//
// Thread-safety: progress, http, call (one session per thread) from any thread; the rest
// from the main thread.
#pragma once

#include <Poco/Net/HTTPClientSession.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace sluice_bench {

// A free TCP port on 127.0.0.1 (bound once, then released).
int free_port();

// "sluice-bench: ..." on stderr.
void progress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// SIGTERM to every live child, SIGKILL to those still there after timeout_s; reaps all.
void stop_children(int timeout_s = 20);

// A child this program reaped itself (killed and waited for): not to be stopped again.
void forget_child(pid_t pid);

// Logs, stops every child and exits 1.
[[noreturn]] void fail(const std::string& msg);

// For signal(): SIGTERM to every child, SIGKILL after 10 s, exit 130 (async-signal-safe).
extern "C" void on_signal(int);

// --node-set KEY=VALUE: given to every sluiced spawn_sluiced starts, after its own settings.
std::vector<std::string>& node_settings();

// Starts sluiced with --set key=value for each setting, output to log.
pid_t spawn_sluiced(const std::string& sluiced, const std::string& log, const std::vector<std::string>& settings);

// The p-quantile of v (reorders v); 0 when empty.
double percentile(std::vector<double>& v, double p);

// One request on a keep-alive session; the status, the body in *out.
int call(Poco::Net::HTTPClientSession& s, const std::string& method, const std::string& path,
         const std::string& body, const std::string& ctype, std::string* out = nullptr);

// One request on a fresh connection to 127.0.0.1:port; 0 when it could not be made.
int http(int port, const std::string& method, const std::string& path, const std::string& body = "",
         std::string* out = nullptr);

// Every integer (string) value of "key" in a JSON text, in order (enough for our own answers).
std::vector<long long> ints_of(const std::string& j, const std::string& key);
std::vector<std::string> strings_of(const std::string& j, const std::string& key);

// A key that the partitioner (FNV-1a 64 % shards) puts on `shard`, distinct per conn.
std::string key_for_shard(int conn, int shard, int shards);

// Polls GET /readyz until 200; fail()s if the process exits or after timeout_s.
void wait_ready(const char* name, pid_t pid, int port, const std::string& log, int timeout_s);

}  // namespace sluice_bench
