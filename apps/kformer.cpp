// The kformer program.
//
//   kformer encode --dim D --len L [--csv F] [--png F]   the positional-encoding matrix
//   kformer info                                         enabled backends and devices
//
// Without a subcommand it runs the default job on embedded defaults (for now: the encoding of a
// 256-step, 64-dimension sequence, written as CSV and PNG under kformer-out/).
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <kformer/core/file_io.hpp>
#include <kformer/core/png.hpp>
#include <kformer/kformer.hpp>

namespace {

struct EncodeOptions {
  int dim = 64;
  int len = 256;
  double base = 10000.0;
  long long first_position = 0;
  bool split = false;
  std::string precision = "float";
  std::string backend = "default";
  std::string csv;
  std::string png;
};

template <class T, class Space>
std::vector<double> encoding_on(const Space& space, const EncodeOptions& o) {
  kformer::PositionalEncodingOptions opt;
  opt.base = o.base;
  opt.first_position = o.first_position;
  opt.layout =
      o.split ? kformer::SinusoidLayout::SplitHalves : kformer::SinusoidLayout::Interleaved;
  Kokkos::Timer timer;
  const auto pe = kformer::positional_encoding<T>(space, o.dim, o.len, opt);
  space.fence();
  const double seconds = timer.seconds();
  const auto host = kformer::to_host(pe);
  std::printf("encoding (%d positions x %d dims, %s, %s layout, base %g) on %s in %.3f ms\n", o.len,
              o.dim, o.precision.c_str(), o.split ? "split" : "interleaved", o.base,
              kformer::backends::space_name<Space>().c_str(), seconds * 1e3);
  return std::vector<double>(host.data(), host.data() + host.size());
}

void run_encode(const EncodeOptions& o) {
  std::vector<double> values;
  kformer::backends::dispatch(o.backend, [&](auto space) {
    values = o.precision == "double" ? encoding_on<double>(space, o) : encoding_on<float>(space, o);
  });
  std::printf("first rows:\n");
  for (int p = 0; p < std::min(o.len, 3); ++p) {
    std::printf("  p=%d:", p);
    for (int j = 0; j < std::min(o.dim, 8); ++j)
      std::printf(" %+.6f", values[std::size_t(p) * o.dim + j]);
    std::printf("%s\n", o.dim > 8 ? " ..." : "");
  }
  if (!o.csv.empty()) {
    std::ostringstream os;
    os.precision(9);
    os << "position";
    for (int j = 0; j < o.dim; ++j)
      os << ",d" << j;
    os << '\n';
    for (int p = 0; p < o.len; ++p) {
      os << p + o.first_position;
      for (int j = 0; j < o.dim; ++j)
        os << ',' << values[std::size_t(p) * o.dim + j];
      os << '\n';
    }
    kformer::write_file_atomic(o.csv, os.str());
    std::printf("wrote %s\n", o.csv.c_str());
  }
  if (!o.png.empty()) {
    // One row of pixels per position, columns = dimensions; cells enlarged for small matrices.
    const int cell_w = std::max(1, 512 / o.dim), cell_h = std::max(1, 512 / std::max(o.len, 1));
    kformer::write_heatmap_png(o.png, values, o.len, o.dim, -1.0, 1.0, cell_w, cell_h);
    std::printf("wrote %s (rows = positions, columns = dimensions; blue -1, white 0, red +1)\n",
                o.png.c_str());
  }
}

void add_encode_options(CLI::App* cmd, EncodeOptions& o) {
  cmd->add_option("--dim", o.dim, "encoding dimension (columns)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--len", o.len, "sequence length (rows)")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--base", o.base, "frequency base");
  cmd->add_option("--first-position", o.first_position, "position of the first row");
  cmd->add_flag("--split", o.split, "sines in the first half, cosines in the second");
  cmd->add_option("--precision", o.precision, "float or double")
      ->check(CLI::IsMember({"float", "double"}));
  cmd->add_option("--backend", o.backend, "execution space (serial, openmp, cuda, hip, default)");
  cmd->add_option("--csv", o.csv, "write the matrix as CSV");
  cmd->add_option("--png", o.png, "write the matrix as a heatmap PNG");
}

}  // namespace

int main(int argc, char* argv[]) {
  // --kokkos-* arguments go to Kokkos, the rest to the command line parser.
  std::vector<char*> kokkos_args = {argv[0]}, app_args = {argv[0]};
  for (int i = 1; i < argc; ++i)
    (std::string(argv[i]).rfind("--kokkos-", 0) == 0 ? kokkos_args : app_args).push_back(argv[i]);
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  int app_argc = static_cast<int>(app_args.size());

  CLI::App app{"kformer: transformer sequence models as Kokkos kernels"};
  app.require_subcommand(0, 1);
  EncodeOptions encode;
  auto* encode_cmd = app.add_subcommand("encode", "compute the positional-encoding matrix");
  add_encode_options(encode_cmd, encode);
  auto* info_cmd = app.add_subcommand("info", "list the enabled backends and devices");
  CLI11_PARSE(app, app_argc, app_args.data());

  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  try {
    if (*info_cmd) {
      kformer::backends::print_backends(std::cout, true);
    } else if (*encode_cmd) {
      run_encode(encode);
    } else {
      // The default job on embedded defaults.
      kformer::backends::print_backends(std::cout);
      mkdir("kformer-out", 0755);
      EncodeOptions defaults;
      defaults.csv = "kformer-out/encoding.csv";
      defaults.png = "kformer-out/encoding.png";
      run_encode(defaults);
    }
  } catch (const kformer::Error& e) {
    std::fprintf(stderr, "kformer: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
