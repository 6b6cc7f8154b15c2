// Writing a large output around the caches (CPUs).
//
// A normal store needs the whole cache line it writes, so the core first reads that line from
// memory: y = f(x) over a tensor larger than the caches moves three bytes of memory traffic for
// every two of data. x86's non-temporal stores send whole lines straight to memory, two bytes for
// two. Measured on the 2-core development machine (OpenMP, (8, 4096, 512) float, in alternation
// with a copy, with two interleaved runs per thread (store_runs below)): the learnable encoding's
// forward went from 0.73-0.83x to 0.98-1.29x the copy's bandwidth, the fixed encoding from
// 0.67-0.77x to 0.84-1.20x.
//
// They pay only when nothing reads the output from cache soon after, so kernels use them for
// outputs of at least kStreamingStoreBytes (a layer's output in the TST pipeline, a few MiB, is
// read by the next layer while it is still in the caches) and never when the output is the input
// itself. Elsewhere (GPUs, CPUs without SSE2, host code compiled by nvcc) the stores are plain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Kokkos_Core.hpp>

// x86 host code compiled by GCC or Clang (HIP's host pass included). Not under nvcc, whose front
// end does not know the loop pragma below; a CUDA build's host backends keep plain stores.
#if !defined(__CUDACC__) && !defined(__HIP_DEVICE_COMPILE__) && !defined(__SYCL_DEVICE_ONLY__) && \
    defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KFORMER_STREAMING_STORES 1
#if defined(__clang__)
#define KFORMER_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define KFORMER_NO_UNROLL _Pragma("GCC unroll 1")
#endif
#endif

namespace kformer::backends {

inline constexpr std::size_t kStreamingStoreBytes = std::size_t(16) << 20;

// Whether a kernel writing `bytes` to `out` from `in` should write around the caches.
inline bool use_streaming_stores(const void* out, const void* in, std::size_t bytes) {
  return out != in && bytes >= kStreamingStoreBytes;
}

namespace impl {

inline constexpr int kCacheLine = 64;

#if defined(KFORMER_STREAMING_STORES)
// A run of n T at `address`: [0, head) before its first line boundary, [head, lines_end) whole
// lines, [lines_end, n) the tail.
template <class T>
struct LineSplit {
  std::int64_t head, lines_end;
  LineSplit(const std::uintptr_t address, const std::int64_t n) {
    constexpr int kPerLine = kCacheLine / static_cast<int>(sizeof(T));
    const std::int64_t to_line =
        (kCacheLine - address % kCacheLine) % kCacheLine / static_cast<std::int64_t>(sizeof(T));
    head = to_line < n ? to_line : n;
    lines_end = head + (n - head) / kPerLine * kPerLine;
  }
};

// line[j] = value(k + j) for the kCacheLine bytes of one line. One vector operation: left to
// itself GCC unrolls this loop completely and then assembles the vector from scalar loads, which
// made the fixed encoding 0.75x of a copy instead of 1.0x.
template <class T, class Value>
inline void fill_line(T* const line, const std::int64_t k, const Value& value) {
  KFORMER_NO_UNROLL
  for (int j = 0; j < kCacheLine / static_cast<int>(sizeof(T)); ++j)
    line[j] = value(k + j);
}

// One aligned 64-byte line from `line` to `out`, around the caches.
inline void stream_line(void* out, const void* line) {
#if defined(__AVX512F__)
  _mm512_stream_si512(static_cast<__m512i*>(out), _mm512_load_si512(line));
#elif defined(__AVX__)
  const auto* from = static_cast<const __m256i*>(line);
  auto* to = static_cast<__m256i*>(out);
  _mm256_stream_si256(to, _mm256_load_si256(from));
  _mm256_stream_si256(to + 1, _mm256_load_si256(from + 1));
#else
  const auto* from = static_cast<const __m128i*>(line);
  auto* to = static_cast<__m128i*>(out);
  for (int i = 0; i < 4; ++i)
    _mm_stream_si128(to + i, _mm_load_si128(from + i));
#endif
}
#endif

}  // namespace impl

// out[k] = value(k) for k in [0, n), value called once per k in increasing order: one thread's run
// of a CPU kernel. With `streaming`, the aligned whole lines are written around the caches; the
// work item must then end with streaming_fence() (not one per run: the fence waits until the
// stores have left the core, about a microsecond each time).
template <class T, class Value>
KOKKOS_INLINE_FUNCTION void store_run(T* const out, const std::int64_t n, const bool streaming,
                                      const Value& value) {
  std::int64_t k = 0;
#if defined(KFORMER_STREAMING_STORES)
  constexpr int kPerLine = impl::kCacheLine / static_cast<int>(sizeof(T));
  const auto address = reinterpret_cast<std::uintptr_t>(out);
  if (streaming && address % sizeof(T) == 0) {
    const impl::LineSplit<T> split(address, n);
    for (; k < split.head; ++k)
      out[k] = value(k);
    for (; k < split.lines_end; k += kPerLine) {
      alignas(impl::kCacheLine) T line[kPerLine];
      impl::fill_line(line, k, value);
      impl::stream_line(out + k, line);
    }
    for (; k < n; ++k)
      out[k] = value(k);
    return;
  }
#else
  (void)streaming;
#endif
  for (; k < n; ++k)
    out[k] = value(k);
}

// store_run for N runs of the same length, out[i][k] = value[i](k), with their lines interleaved
// when streaming: N input streams in flight per thread instead of one. A streaming add over
// (8, 4096, 512) floats, against a plain copy in alternation on the 2-core development machine
// (OpenMP, 2 threads), with 1, 2, 4 and 8 streams per thread: 0.92-1.13x, 1.09-1.31x, 1.22-1.45x
// and 0.74-0.80x (eight outrun the core's write-combining buffers). Runs whose addresses differ in
// their offset within a cache line are written one after the other.
template <int N, class T, class Value>
KOKKOS_INLINE_FUNCTION void store_runs(T* const (&out)[N], const Value (&value)[N],
                                       const std::int64_t n, const bool streaming) {
#if defined(KFORMER_STREAMING_STORES)
  constexpr int kPerLine = impl::kCacheLine / static_cast<int>(sizeof(T));
  const auto address = reinterpret_cast<std::uintptr_t>(out[0]);
  bool same_offsets = address % sizeof(T) == 0;
  for (int i = 1; i < N; ++i)
    same_offsets = same_offsets && reinterpret_cast<std::uintptr_t>(out[i]) % impl::kCacheLine ==
                                       address % impl::kCacheLine;
  if (streaming && same_offsets) {
    const impl::LineSplit<T> split(address, n);
    std::int64_t k = 0;
    for (; k < split.head; ++k)
      for (int i = 0; i < N; ++i)
        out[i][k] = value[i](k);
    for (; k < split.lines_end; k += kPerLine) {
      alignas(impl::kCacheLine) T lines[N][kPerLine];
      for (int i = 0; i < N; ++i)
        impl::fill_line(lines[i], k, value[i]);
      for (int i = 0; i < N; ++i)
        impl::stream_line(out[i] + k, lines[i]);
    }
    for (; k < n; ++k)
      for (int i = 0; i < N; ++i)
        out[i][k] = value[i](k);
    return;
  }
#endif
  for (int i = 0; i < N; ++i)
    store_run(out[i], n, streaming, value[i]);
}

// out_of(b)[k] = value_for(b)(k) for b in [b_begin, b_end) and k in [0, n): the runs of a group of
// batch elements, written four at a time (store_runs), then two, then one.
template <class OutOf, class ValueFor>
KOKKOS_INLINE_FUNCTION void store_batch_runs(const int b_begin, const int b_end,
                                             const std::int64_t n, const bool streaming,
                                             const OutOf& out_of, const ValueFor& value_for) {
  using T = std::remove_pointer_t<decltype(out_of(b_begin))>;
  using Value = decltype(value_for(b_begin));
  int b = b_begin;
  for (; b + 3 < b_end; b += 4) {
    T* const out[4] = {out_of(b), out_of(b + 1), out_of(b + 2), out_of(b + 3)};
    const Value values[4] = {value_for(b), value_for(b + 1), value_for(b + 2), value_for(b + 3)};
    store_runs(out, values, n, streaming);
  }
  for (; b + 1 < b_end; b += 2) {
    T* const out[2] = {out_of(b), out_of(b + 1)};
    const Value values[2] = {value_for(b), value_for(b + 1)};
    store_runs(out, values, n, streaming);
  }
  if (b < b_end) store_run(out_of(b), n, streaming, value_for(b));
}

// Orders this thread's streaming stores before everything it does next (as plain stores are), so
// that other threads see them once the kernel is over.
KOKKOS_INLINE_FUNCTION void streaming_fence() {
#if defined(KFORMER_STREAMING_STORES)
  _mm_sfence();
#endif
}

}  // namespace kformer::backends
