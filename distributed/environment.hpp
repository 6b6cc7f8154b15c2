// MPI for a program that may or may not run under an MPI launcher: started when the process was
// launched by mpirun, srun or another PMI launcher and MPI is not running yet, finalised at the
// end only if it was started here. A simulation that already runs MPI keeps its own: kformer never
// calls MPI_Init when MPI is initialised, and then uses the communicator it is given.
#pragma once

#include <kformer/config.hpp>

#include <cstdlib>

#include "communicator.hpp"

#if KFORMER_ENABLE_MPI
#include <mpi.h>
#endif

namespace kformer::distributed {

// Whether a launcher started this process as one of several ranks (Open MPI, MPICH/Hydra, PMIx,
// Slurm's srun).
inline bool launched_as_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name) != nullptr) return true;
  const char* tasks = std::getenv("SLURM_NTASKS");
  return std::getenv("SLURM_STEP_ID") != nullptr && tasks != nullptr && std::atoi(tasks) > 1;
}

class Environment {
 public:
  // Starts MPI when this build has it, the process was launched as ranks and MPI is not running
  // yet; otherwise the world is this one process.
  Environment(int* argc, char*** argv) {
#if KFORMER_ENABLE_MPI
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && launched_as_ranks()) {
      int provided = 0;
      MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
      owns_ = true;
      initialized = 1;
    }
    if (initialized) world_ = Communicator(MPI_COMM_WORLD);
#else
    (void)argc;
    (void)argv;
#endif
  }
  ~Environment() {
#if KFORMER_ENABLE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
#endif
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  Communicator& world() {
    return world_;
  }

 private:
  Communicator world_;
  bool owns_ = false;
};

}  // namespace kformer::distributed
