// Runs a command's body on the backend and scalar type the command line chose.
#pragma once

#include <string>

#include <kformer/backends/spaces.hpp>
#include <kformer/config.hpp>
#include <kformer/core/error.hpp>

namespace kformer::app {

template <class T>
struct Precision {
  using type = T;
};

// Runs f(space, Precision<T>{}) on `backend` with T float or double (`precision`); a backend
// that is not enabled, or double in a float-only build, is a kformer::Error.
template <class F>
void dispatch(const std::string& backend, const std::string& precision, F&& f) {
  backends::dispatch(backend, [&](auto space) {
#if KFORMER_ENABLE_DOUBLE
    if (precision == "double") return f(space, Precision<double>{});
#endif
    if (precision != "float")
      fail("kformer", "--precision ", precision,
           " is not built in (this build has float only: KFORMER_ENABLE_DOUBLE is off)");
    f(space, Precision<float>{});
  });
}

}  // namespace kformer::app
