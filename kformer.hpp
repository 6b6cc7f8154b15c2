// kformer: positional encodings and transformer-encoder layers as Kokkos kernels.
// The one header a user includes; it pulls in the public interface of every module.
#pragma once

#include "backends/device_info.hpp"
#include "backends/gemm.hpp"
#include "backends/spaces.hpp"
#include "core/compat.hpp"
#include "core/error.hpp"
#include "core/param.hpp"
#include "core/random.hpp"
#include "core/tensor.hpp"
#include "layers/encodings/learnable_positional_encoding.hpp"
#include "layers/encodings/positional_encoding.hpp"
#include "layers/encodings/value_encoding.hpp"
