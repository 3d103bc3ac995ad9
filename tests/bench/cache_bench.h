// sluice-bench --cache (issue 13: "cache puts and gets per second (1 and 16 clients) ...
// Compare puts in the same run with Redis SET under appendfsync always, if redis-server is
// installed, and report the ratio"). See cache_bench.cc.
#pragma once

namespace sluice_bench {

int run_cache_bench(int argc, char** argv);

}  // namespace sluice_bench
