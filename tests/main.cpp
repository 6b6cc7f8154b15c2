// Catch2 runner for kformer's tests: Kokkos is initialised once for the whole process, after
// Catch has parsed its own arguments (so that listing tests, tags or reporters needs no Kokkos:
// CTest's test discovery lists them at build time, also on machines without the build's GPU).
#define CATCH_CONFIG_RUNNER  // Catch2 2: this file provides main (Catch2 3 never does)
#include "support/catch.hpp"

#include <Kokkos_Core.hpp>

#include "support/allocation_counter.hpp"

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& config = session.configData();
#if KFORMER_CATCH_MAJOR >= 3
  const bool listing =
      config.listTests || config.listTags || config.listReporters || config.listListeners;
#else
  const bool listing =
      config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters;
#endif
  if (listing) return session.run();
  Kokkos::initialize(argc, argv);
  kformer::testing::AllocationCounter::install();
  const int rc = session.run();
  Kokkos::finalize();
  return rc;
}
