// kformer-mpi-bench: a TST classifier's training step under data parallelism, for
// `mpirun -np N kformer-mpi-bench`: each rank trains its replica on batches of --batch series of
// generated series (the TST paper's defaults: d_model 64, 8 heads, 3 layers, 128 steps of 8
// features, 4 classes), and rank 0 prints the step's median time and the part of it spent in the
// gradient sums and the other collectives, and the gradient sum alone two ways (the trainer's
// reduce + broadcast, one MPI_Allreduce), as text and as JSON.
//
//   mpirun -np N kformer-mpi-bench [--batch B] [--steps S] [--json FILE]
//
// Run it with 1 and with N ranks at one thread each (OMP_NUM_THREADS=1) to see the scaling and the
// communication's share on a machine (docs/distributed.md).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/data/lorenz96.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/distributed/communicator.hpp>
#include <kformer/training/tst_trainer.hpp>

namespace {

int whole_number(const char* text, const char* option) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 1 || value > 100000) {
    std::fprintf(stderr, "kformer-mpi-bench: %s needs a whole number from 1 to 100000, got '%s'\n",
                 option, text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int batch = 32, steps = 20;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--batch" || arg == "--steps" || arg == "--json") && i + 1 < argc) {
      if (arg == "--batch") batch = whole_number(argv[++i], "--batch");
      if (arg == "--steps") steps = whole_number(argv[++i], "--steps");
      if (arg == "--json") json = argv[++i];
    } else if (arg.rfind("--kokkos", 0) != 0) {
      std::fprintf(stderr, "usage: kformer-mpi-bench [--batch B] [--steps S] [--json FILE]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    using Space = Kokkos::DefaultExecutionSpace;
    kformer::distributed::Communicator comm(MPI_COMM_WORLD);
    kformer::data::Lorenz96Options o;
    o.max_len = 128;
    const std::int64_t series = std::int64_t(batch) * comm.size() * (steps + 2);
    auto data = kformer::data::lorenz96_classification(series, 7, o);
    kformer::data::Standardization::fit(data).apply(data);
    kformer::TstConfig c;
    c.feat_dim = static_cast<int>(data.n_features);
    c.max_len = static_cast<int>(data.max_len);
    c.task = kformer::TstTask::Classification;
    c.num_outputs = static_cast<int>(data.class_names.size());
    kformer::TimeSeriesTransformer<float, Space> model(Space(), c);
    kformer::TrainingOptions t;
    t.batch_size = batch;
    kformer::TstTrainer<float, Space> trainer(Space(), model, t, data);
    trainer.set_communicator(Space(), &comm);
    // One epoch is steps + 2 global batches; the first two warm up.
    std::vector<double> step_seconds, collective_seconds;
    double last = 0, last_collectives = 0;
    trainer.train_epoch(Space(), data, 0, [&](const kformer::BatchProgress& p) {
      const double collectives = comm.seconds_in_collectives();
      if (p.batch > 2) {
        step_seconds.push_back(p.seconds - last);
        collective_seconds.push_back(collectives - last_collectives);
      }
      last = p.seconds;
      last_collectives = collectives;
    });
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double step = median(step_seconds), in_collectives = median(collective_seconds);
    // The gradient sum alone, on a buffer of the gradients' size: the trainer's sum with the same
    // bits on every rank (reduce to rank 0, broadcast) against one MPI_Allreduce.
    const std::int64_t n_gradients = model.parameters().size();
    Kokkos::View<float*, Space::memory_space> gradients("gradients", n_gradients);
    Kokkos::deep_copy(gradients, 1.0f);
    std::vector<double> identical_seconds, allreduce_seconds;
    for (int r = 0; r < 25; ++r) {
      comm.barrier();
      double t0 = MPI_Wtime();
      comm.sum_identical(Space(), gradients.data(), n_gradients);
      identical_seconds.push_back(MPI_Wtime() - t0);
      comm.barrier();
      t0 = MPI_Wtime();
      comm.sum(Space(), gradients.data(), n_gradients);
      allreduce_seconds.push_back(MPI_Wtime() - t0);
    }
    double worst[4] = {step, in_collectives, median(identical_seconds), median(allreduce_seconds)};
    MPI_Allreduce(MPI_IN_PLACE, worst, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (comm.is_root()) {
      const char* threads = std::getenv("OMP_NUM_THREADS");
      std::printf(
          "ranks %d, %s threads each, batch %d a rank (%d in all), %zu steps: step %.2f ms, "
          "collectives %.2f ms (%.0f %%), %.0f series/s\n",
          comm.size(), threads ? threads : "?", batch, batch * comm.size(), step_seconds.size(),
          worst[0] * 1e3, worst[1] * 1e3, 100 * worst[1] / worst[0],
          batch * comm.size() / worst[0]);
      std::printf(
          "gradient sum of %lld floats: %.3f ms reduce + broadcast (identical bits), %.3f ms "
          "one MPI_Allreduce\n",
          static_cast<long long>(n_gradients), worst[2] * 1e3, worst[3] * 1e3);
      if (!json.empty()) {
        std::ofstream out(json);
        out << "{\"ranks\": " << comm.size() << ", \"threads\": \"" << (threads ? threads : "")
            << "\", \"batch_per_rank\": " << batch << ", \"steps\": " << step_seconds.size()
            << ", \"step_s\": " << worst[0] << ", \"collectives_s\": " << worst[1]
            << ", \"series_per_s\": " << batch * comm.size() / worst[0]
            << ", \"gradients\": " << n_gradients << ", \"gradient_sum_identical_s\": " << worst[2]
            << ", \"gradient_allreduce_s\": " << worst[3] << "}\n";
      }
    }
  }
  MPI_Finalize();
  return 0;
}
