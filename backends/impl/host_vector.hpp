// Vectors of the host CPU's widest width, in GCC and Clang's vector extension, for the host loops
// that GCC does not vectorise by itself (fixed-size accumulator arrays, maxima). Defined only where
// the extension is there and the code is host code: GCC or Clang, not the device pass of nvcc or
// hipcc (KFORMER_HOST_VECTORS). Vectors are only ever loaded and stored through pointers: passing
// or returning one changes the ABI with the target's width (-Wpsabi).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__GNUC__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#define KFORMER_HOST_VECTORS 1

namespace kformer::backends::host_vector {

// Wider vectors than the target's are split into several registers anyway.
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#else
inline constexpr int kVectorBytes = 32;
#endif
template <class T, int Bytes>
struct VectorOf {
  typedef T type __attribute__((vector_size(Bytes)));
};
template <class T>
using Vec = typename VectorOf<T, kVectorBytes>::type;
// The signed integers of T's size, as many as Vec<T> has lanes: what comparing two Vec<T> gives.
template <class T>
using MaskVec = typename VectorOf<std::conditional_t<sizeof(T) == 8, std::int64_t, std::int32_t>,
                                  kVectorBytes>::type;
template <class T>
inline constexpr int kLanes = static_cast<int>(kVectorBytes / sizeof(T));

template <class V, class T>
inline void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(v));
}
template <class T, class V>
inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

// Whether any of the N bytes at p is not 0, read as whole words.
template <int N>
inline bool any_byte_set(const unsigned char* p) {
  if constexpr (N % 8 == 0) {
    std::uint64_t words[N / 8];
    std::memcpy(words, p, N);
    std::uint64_t any = 0;
    for (int i = 0; i < N / 8; ++i)
      any |= words[i];
    return any != 0;
  } else {
    static_assert(N == 4, "a vector of 4, 8, 16 or more lanes");
    std::uint32_t word;
    std::memcpy(&word, p, N);
    return word != 0;
  }
}

}  // namespace kformer::backends::host_vector

#endif
