// Data-parallel training over MPI, run with 2 ranks (mpirun -np 2): the communicator's
// collectives and shares, replicas that stay bit-for-bit identical across ranks after every step,
// and 2-rank training equal to 1-rank training on the same global batches (within floating-point
// reassociation), with LayerNorm and with BatchNorm statistics synchronised across ranks; ranks
// that disagree on the model are refused on every rank before any collective could hang.
#define CATCH_CONFIG_RUNNER
#include "../support/catch.hpp"

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/data/lorenz96.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/distributed/communicator.hpp>
#include <kformer/training/tst_trainer.hpp>

using namespace kformer;
using Space = Kokkos::DefaultExecutionSpace;

namespace {

distributed::Communicator& world() {
  static distributed::Communicator comm(MPI_COMM_WORLD);
  return comm;
}

data::SeriesSet series(std::int64_t n) {
  data::Lorenz96Options o;
  o.n_variables = 4;
  o.max_len = 16;
  auto set = data::lorenz96_classification(n, 5, o);
  data::Standardization::fit(set).apply(set);
  return set;
}

TstConfig config_of(const data::SeriesSet& s, NormType norm) {
  TstConfig c;
  c.feat_dim = static_cast<int>(s.n_features);
  c.max_len = static_cast<int>(s.max_len);
  c.d_model = 8;
  c.n_heads = 2;
  c.num_layers = 2;
  c.dim_feedforward = 16;
  c.dropout = 0.0;  // dropout decisions depend on a series' place in its rank's batch
  c.norm = norm;
  c.task = TstTask::Classification;
  c.num_outputs = static_cast<int>(s.class_names.size());
  c.seed = 3;
  return c;
}

// The model's parameters after `epochs` epochs of training on `data` with `batch_size` series a
// rank, over `comm`.
std::vector<double> trained(distributed::Communicator& comm, const data::SeriesSet& data,
                            NormType norm, bool sync_batchnorm, int batch_size, int epochs) {
  TimeSeriesTransformer<double, Space> model(Space(), config_of(data, norm));
  TrainingOptions o;
  o.batch_size = batch_size;
  o.seed = 11;
  o.sync_batchnorm = sync_batchnorm;
  TstTrainer<double, Space> trainer(Space(), model, o, data);
  trainer.set_communicator(Space(), &comm);
  for (int e = 0; e < epochs; ++e)
    trainer.train_epoch(Space(), data, e);
  const auto host =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.parameters().values());
  return std::vector<double>(host.data(), host.data() + host.size());
}

// Whether every rank holds the same bytes.
bool same_on_every_rank(const std::vector<double>& v) {
  std::vector<double> root(v);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  int same = std::memcmp(root.data(), v.data(), v.size() * sizeof(double)) == 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return same == 1;
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 1e-30, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("The communicator sums, shares and checks agreement", "[distributed]") {
  auto& comm = world();
  REQUIRE(comm.size() == 2);
  double values[2] = {1.0 + comm.rank(), 10.0};
  comm.sum(values, 2);
  CHECK(values[0] == 3.0);
  CHECK(values[1] == 20.0);
  const auto [first, last] = comm.share(7);  // 4 series for rank 0, 3 for rank 1
  CHECK(first == (comm.rank() == 0 ? 0 : 4));
  CHECK(last == (comm.rank() == 0 ? 4 : 7));
  CHECK_NOTHROW(comm.require_same("the feature count", 8));
  CHECK_THROWS_WITH(
      comm.require_same("the feature count", 8 + comm.rank()),
      Catch::Matchers::Contains("the ranks disagree on the feature count: from 8 to 9"));
  CHECK(comm.all(true));
  CHECK_FALSE(comm.all(comm.rank() == 0));
}

TEST_CASE("Two ranks train replicas that stay identical and match one rank on the global batch",
          "[distributed]") {
  auto& comm = world();
  const auto data = series(40);  // 3 global batches of 16 (8 a rank), the last one of 8 (4 a rank)
  distributed::Communicator alone;
  for (const auto& [norm, sync] :
       {std::pair{NormType::LayerNorm, false}, std::pair{NormType::BatchNorm, true}}) {
    CAPTURE(norm_name(norm), sync);
    const auto two = trained(comm, data, norm, sync, 8, 2);
    CHECK(same_on_every_rank(two));
    const auto one = trained(alone, data, norm, sync, 16, 2);
    CHECK(max_relative_difference(two, one) < 1e-10);
  }
  // Local BatchNorm statistics (as PyTorch's DDP): replicas stay identical, but the statistics of
  // a rank's half batch differ from the whole batch's.
  const auto local = trained(comm, data, NormType::BatchNorm, false, 8, 1);
  CHECK(same_on_every_rank(local));
}

TEST_CASE("Ranks that disagree on the model or the data are refused on every rank",
          "[distributed][errors]") {
  auto& comm = world();
  {
    const auto same = series(40);
    auto config = config_of(same, NormType::LayerNorm);
    config.d_model = comm.rank() == 0 ? 8 : 16;
    TimeSeriesTransformer<double, Space> model(Space(), config);
    TstTrainer<double, Space> trainer(Space(), model, TrainingOptions{}, same);
    CHECK_THROWS_WITH(trainer.set_communicator(Space(), &comm),
                      Catch::Matchers::Contains("the ranks disagree on d_model: from 8 to 16"));
  }
  auto data = series(comm.rank() == 0 ? 40 : 36);
  TimeSeriesTransformer<double, Space> model(Space(), config_of(data, NormType::LayerNorm));
  TrainingOptions o;
  o.batch_size = 8;
  TstTrainer<double, Space> trainer(Space(), model, o, data);
  trainer.set_communicator(Space(), &comm);
  CHECK_THROWS_WITH(trainer.train_epoch(Space(), data, 0),
                    Catch::Matchers::Contains("the ranks disagree on the training data's series"));
  const auto few = series(1);
  TimeSeriesTransformer<double, Space> small(Space(), config_of(few, NormType::LayerNorm));
  TstTrainer<double, Space> lonely(Space(), small, o, few);
  lonely.set_communicator(Space(), &comm);
  CHECK_THROWS_WITH(lonely.train_epoch(Space(), few, 0),
                    Catch::Matchers::Contains("1 series for 2 ranks"));
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    status = Catch::Session().run(argc, argv);
  }
  // Both ranks must agree: a failure on one is a failure of the test.
  MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
