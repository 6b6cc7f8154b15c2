// Adds the positional encoding to a zero (2, 3, 4) tensor and checks the documented first row.
#include <kformer/kformer.hpp>

#include <cstdio>

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using Space = Kokkos::DefaultExecutionSpace;
  Kokkos::View<float***, Kokkos::LayoutRight, Space::memory_space> x("x", 2, 3, 4);
  const kformer::PositionalEncoding<float, Space> encoding(4);
  encoding.forward_inplace(Space(), x);
  const auto h = kformer::to_host(x);
  const bool ok =
      h(1, 0, 0) == 0.0f && h(1, 0, 1) == 1.0f && h(1, 0, 2) == 0.0f && h(1, 0, 3) == 1.0f;
  std::printf("consumer: first row (%g, %g, %g, %g) %s\n", h(1, 0, 0), h(1, 0, 1), h(1, 0, 2),
              h(1, 0, 3), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
