// Shared by the fuzz targets (README.md): a property that does not hold is a crash, with the
// reason on stderr, so libFuzzer saves the input. Plain abort(): no exception may hide it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
