// Fused multi-head attention in portable Kokkos (FlashAttention-2's algorithm): no (B, H, S, S)
// buffer in the forward or the backward, on any backend.
//
// Per (batch b, head h) with Q, K, V the head's (S, dh) columns of the packed qkv buffer:
//   forward, a team per block of query rows, over tiles of keys:
//     S_ij = scale q_i . k_j + attn_mask(i, j), -inf where key_padding_mask(b, j)
//     m_i <- max(m_i, max_j S_ij),  l_i <- l_i e^(m_old - m_i) + sum_j e^(S_ij - m_i)
//     o_i <- o_i e^(m_old - m_i) + sum_j e^(S_ij - m_i) keep_ij / (1 - p) v_j
//     O_i = o_i / l_i;  stored per row: m_i and 1 / l_i (0 for a row with no key: P_i = 0)
//   backward, P_ij = e^(S_ij - m_i) / l_i recomputed per tile, D_i = dO_i . O_i:
//     dP~_ij = dO_i . v_j,  dP_ij = dP~_ij keep_ij / (1 - p),  dS_ij = scale P_ij (dP_ij - D_i)
//     dV_j = sum_i P~_ij dO_i,  dK_j = sum_i dS_ij q_i   (a team per block of keys)
//     dQ_i = sum_j dS_ij k_j                             (a team per block of queries)
//   D_i = sum_j P~_ij dP~_ij = rowsum(dP * P) because O_i = sum_j P~_ij v_j.
//
// Work split: each team owns a block of rows (query rows, or keys for dK/dV) and walks over tiles
// of the other side staged in team scratch. A row is one thread's work: its vectors (q_i and o_i,
// or k_j, v_j, dK_j and dV_j) sit in registers, arrays of a compile-time width (the head width
// rounded up to a power of two, zero-padded), while every thread reads the same tile row at a time
// (a broadcast on GPUs). On a GPU a team has a thread per owned row; on a CPU one thread runs the
// team's rows in turn. A row's running values live in scratch between tiles, padded to an odd
// stride so that the threads of a warp hit different banks.
//
// Every sum has a fixed order and no atomics are used, so a run's bits do not depend on the
// schedule; dQ is a second pass over the key tiles rather than an atomic sum across key blocks.
// Dropout decisions are DropoutDecisions' counter hash of the score's index in the (B, H, S, S)
// row-major order, as everywhere else in kformer (no mask is stored).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../core/compat.hpp"
#include "../../../core/error.hpp"
#include "../../../core/math.hpp"
#include "../../../core/profiling.hpp"
#include "../../dropout.hpp"

namespace kformer::impl::flash {

// The widest head the kernels are compiled for (FlashAttention-2's limit too).
inline constexpr int kMaxHeadWidth = 256;

// What every pass reads: the packed buffers, the masks, dropout and the softmax statistics.
template <class T, class KeyMask, class AttnMask>
struct Problem {
  int batch = 0, heads = 0, seq = 0, d = 0;
  const T* qkv = nullptr;        // (B S, 3d): q, k, v blocks
  T* context = nullptr;          // (B S, d): O, heads side by side
  T* row_max = nullptr;          // (B H S): m_i, written by the forward
  T* row_inverse_sum = nullptr;  // (B H S): 1 / l_i (0 for a row with no key)
  KeyMask key_padding_mask;      // (B, S), true = ignore; or empty
  AttnMask attn_mask;            // (S, S) additive; or empty
  bool drop = false;
  DropoutDecisions decide{0, 0, 0.0};
  T keep_scale = 1;  // 1 / (1 - p)
  T scale = 1;       // 1 / sqrt(dh)
  T neg_inf = 0;     // -infinity (numeric_limits is host-only for nvcc: set on the host)

  KOKKOS_INLINE_FUNCTION int head_dim() const { return d / heads; }
  // Row i of head h's q (block 0), k (1) or v (2) for batch element b.
  KOKKOS_INLINE_FUNCTION const T* qkv_row(int b, int h, int block, int i) const {
    return qkv + (std::int64_t(b) * seq + i) * 3 * d + block * d + h * head_dim();
  }
  KOKKOS_INLINE_FUNCTION bool key_masked(int b, int j) const {
    return key_padding_mask.data() != nullptr && key_padding_mask(b, j);
  }
  // The score S_ij of (b, h) before the softmax: scaled product plus masks.
  KOKKOS_INLINE_FUNCTION T masked_score(int b, int i, int j, T product) const {
    if (key_masked(b, j)) return neg_inf;
    T s = scale * product;
    if (attn_mask.data() != nullptr) s += attn_mask(i, j);
    return s;
  }
  // Dropout's decisions for keys j4 .. j4 + 3 (j4 a multiple of 4) of score row
  // row = (b H + h) S + i.
  KOKKOS_INLINE_FUNCTION void keeps4(std::int64_t row, int j4, bool keep[4]) const {
    decide.keep4(static_cast<std::uint64_t>(row) * ((seq + 3) / 4) + j4 / 4, keep);
  }
};

// How a pass is cut: a team owns `rows` rows and walks over tiles of `tile` rows of the other
// side. Each tile is split into `parts` equal spans that different threads take for the same row
// (each with its own running values, combined in a fixed order at the end), so that short
// sequences over few heads still give a GPU enough threads: on a GPU a team has a thread per
// (owned row, part), on a CPU one thread does them all in turn.
struct Shape {
  int rows = 0;  // 0: the backend's default (shape_for)
  int tile = 0;
  int parts = 0;  // 0: chosen from the work
  int team_size = 1;
  int scratch_level = 0;
};

// Tiles are multiples of kChunk, the keys a forward row scores before it rescales its output;
// a part has at least kChunk tile rows, and a tile is split into at most kMaxParts parts.
inline constexpr int kChunk = 16;
inline constexpr int kMaxParts = 8;

template <class ExecutionSpace, class T>
using Scratch = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space,
                             Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// KFORMER_ATTENTION_TILES="ROWS,TILE[,PARTS]" (rows and tile powers of two from 16 to 256, parts
// 1, 2, 4 or 8), a knob for tuning on a new GPU (docs/gpu.md) and for testing the parts on a CPU;
// all zero when unset.
inline Shape requested_shape() {
  static const Shape requested = [] {
    Shape s;
    const char* text = std::getenv("KFORMER_ATTENTION_TILES");
    if (text == nullptr) return s;
    const auto power = [](int v, int low, int high) {
      return v >= low && v <= high && (v & (v - 1)) == 0;
    };
    char tail = 0;
    const int fields = std::sscanf(text, "%d,%d,%d%c", &s.rows, &s.tile, &s.parts, &tail);
    if ((fields != 2 && fields != 3) || !power(s.rows, kChunk, 256) ||
        !power(s.tile, kChunk, 256) || (fields == 3 && !power(s.parts, 1, kMaxParts)))
      fail("KFORMER_ATTENTION_TILES", "expected ROWS,TILE or ROWS,TILE,PARTS (rows and tile ",
           "powers of two from ", kChunk, " to 256, parts 1, 2, 4 or 8), got '", text, "'");
    return s;
  }();
  return requested;
}

// The shape of a pass over `rows_of_work` rows (B H S) whose scratch is bytes(rows, tile, parts).
// CPUs: 64 x 64 in one part (a thread takes whole teams). GPUs: 128 rows, tiles of 64 and as many
// parts (up to 2) as it takes for a quarter of the device's resident threads to have work, the
// fastest of the shapes measured on an H200 (docs/gpu.md); then tiles, rows and parts halved until
// the scratch fits in the fast level (the slow one, device memory, only where even 16 x 16 in one
// part does not fit). Either way halved towards 16 x 16 where the sequence is shorter.
template <class ExecutionSpace, class Bytes>
Shape shape_for(const ExecutionSpace& exec, int seq, std::int64_t rows_of_work,
                const Bytes& bytes) {
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  const std::size_t fast = static_cast<std::size_t>(policy_type::scratch_size_max(0));
  constexpr bool host = backends::runs_on_host<ExecutionSpace>;
  Shape s = requested_shape();
  if (s.rows == 0) {
    s.rows = host ? 64 : 128;
    s.tile = 64;
  }
  while (s.rows > kChunk && s.rows / 2 >= seq)
    s.rows /= 2;
  while (s.tile > kChunk && s.tile / 2 >= seq)
    s.tile /= 2;
  if (s.parts == 0) {
    s.parts = 1;
    const std::int64_t wanted = host ? 0 : std::int64_t(compat::concurrency(exec)) / 4;
    while (s.parts < 2 && rows_of_work * s.parts < wanted)
      s.parts *= 2;
  }
  while (s.parts > 1 && s.tile / s.parts < kChunk)
    s.parts /= 2;
  if (!host) {
    // Tiles first while they are not shorter than the rows and keep kChunk rows a part, then
    // rows, then parts, then tiles down to kChunk.
    while (bytes(s.rows, s.tile, s.parts) > fast) {
      const bool tile_first = s.tile >= s.rows && s.tile / 2 >= kChunk * s.parts;
      if (!tile_first && s.rows > kChunk)
        s.rows /= 2;
      else if (!tile_first && s.parts > 1)
        s.parts /= 2;
      else if (s.tile > kChunk)
        s.tile /= 2;
      else
        break;
    }
    s.team_size = s.rows * s.parts;
  }
  s.scratch_level = bytes(s.rows, s.tile, s.parts) <= fast ? 0 : 1;
  return s;
}

// Copies rows [0, n) of a head's (S, dh) block (row r at first_row + r ld) into `capacity` rows
// `stride` apart in scratch, `Width` values each: zero beyond dh and in rows [n, capacity), so
// that products over Width and over a whole tile need no bounds.
template <int Width, class Member, class T>
KOKKOS_INLINE_FUNCTION void stage_rows(const Member& team, T* dst, int n, int capacity, int dh,
                                       int stride, const T* first_row, std::int64_t ld) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, capacity * Width), [&](const int e) {
    const int r = e / Width, k = e % Width;
    dst[r * stride + k] = r < n && k < dh ? first_row[r * ld + k] : T(0);
  });
}

// A thread's own Width-long vector (q_i, o_i, k_j, ...), whose home is its padded row in scratch:
// copied into registers for widths up to kRegisterWidth (save() writes it back), used in place
// in scratch for wider heads, whose vectors would not fit in registers anyway (and whose fully
// unrolled loops took nvcc minutes to compile).
inline constexpr int kRegisterWidth = 64;

template <int Width, class T, bool InRegisters = (Width <= kRegisterWidth)>
struct RowVector {
  T v[Width];
  T* home;
  KOKKOS_INLINE_FUNCTION explicit RowVector(T* row) : home(row) {
    for (int k = 0; k < Width; ++k)
      v[k] = row[k];
  }
  KOKKOS_INLINE_FUNCTION T& operator[](int k) { return v[k]; }
  KOKKOS_INLINE_FUNCTION T operator[](int k) const { return v[k]; }
  KOKKOS_INLINE_FUNCTION void save() const {
    for (int k = 0; k < Width; ++k)
      home[k] = v[k];
  }
};

template <int Width, class T>
struct RowVector<Width, T, false> {
  T* v;
  KOKKOS_INLINE_FUNCTION explicit RowVector(T* row) : v(row) {}
  KOKKOS_INLINE_FUNCTION T& operator[](int k) { return v[k]; }
  KOKKOS_INLINE_FUNCTION T operator[](int k) const { return v[k]; }
  KOKKOS_INLINE_FUNCTION void save() const {}
};

// a . b over Width values (zero beyond the head width)
template <int Width, class T, bool R>
KOKKOS_INLINE_FUNCTION T dot(const RowVector<Width, T, R>& a, const T* b) {
  T s = 0;
  for (int k = 0; k < Width; ++k)
    s += a[k] * b[k];
  return s;
}
// acc += w b
template <int Width, class T, bool R>
KOKKOS_INLINE_FUNCTION void add_scaled(RowVector<Width, T, R>& acc, T w, const T* b) {
  for (int k = 0; k < Width; ++k)
    acc[k] += w * b[k];
}

// ---- forward -----------------------------------------------------------------------------------

// The weight e^(m_part - m) of a part's running values in the combined row, m = max over parts
// (0 for a part that saw no key; 1 for equal maxima, where -inf - -inf would be NaN).
template <class T>
KOKKOS_INLINE_FUNCTION T part_weight(T m_part, T m, T minus_inf) {
  if (m_part == minus_inf) return T(0);
  return m_part == m ? T(1) : math::exp_nonpositive(m_part - m);
}

template <class ExecutionSpace, class T, int Width, class KeyMask, class AttnMask>
struct Forward {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int kStride = Width + 1;  // of a thread's own rows in scratch
  Problem<T, KeyMask, AttnMask> p;
  Shape shape;
  int blocks;  // of query rows per (b, h)

  // Scratch: Q (rows x kStride), O of every part (parts x rows x kStride), m, l of every part
  // (parts x rows), K, V (tile x Width).
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_of(int rows, int tile, int parts) {
    return std::size_t(rows) * (kStride + std::size_t(parts) * (kStride + 2)) +
           std::size_t(tile) * 2 * Width;
  }
  static std::size_t scratch_bytes(int rows, int tile, int parts) {
    return Scratch<ExecutionSpace, T>::shmem_size(scratch_of(rows, tile, parts));
  }

  // Query row i (its q, and a part's o, m, l) against staged keys c_begin .. c_end - 1 of the tile
  // at j0, c_begin a multiple of kChunk.
  KOKKOS_INLINE_FUNCTION void row_tile(int b, std::int64_t score_row, int i, int j0, int c_begin,
                                       int c_end, T* q_row, T* o_row, T& m, T& l, const T* k,
                                       const T* v) const {
    const T minus_inf = p.neg_inf;
    const RowVector<Width, T> q(q_row);
    RowVector<Width, T> o(o_row);
    T m_run = m, l_run = l;
    for (int c0 = c_begin; c0 < c_end; c0 += kChunk) {
      T e[kChunk];
      T chunk_max = minus_inf;
      for (int u = 0; u < kChunk; ++u) {
        const int c = c0 + u;
        e[u] = c < c_end ? p.masked_score(b, i, j0 + c, dot(q, k + c * Width)) : minus_inf;
        chunk_max = e[u] > chunk_max ? e[u] : chunk_max;
      }
      const T m_new = chunk_max > m_run ? chunk_max : m_run;
      if (m_new == minus_inf) continue;  // every key so far masked: o and l stay 0
      // Equal maxima need no correction (and -inf - -inf would be NaN).
      const T correction = m_run == m_new ? T(1) : math::exp_nonpositive(m_run - m_new);
      T sum = 0;
      for (int u = 0; u < kChunk; ++u) {
        e[u] = e[u] == minus_inf ? T(0) : math::exp_nonpositive(e[u] - m_new);
        sum += e[u];
      }
      if (p.drop)
        for (int g = 0; g < kChunk / 4; ++g) {
          bool keep[4];
          p.keeps4(score_row, j0 + c0 + 4 * g, keep);
          for (int w = 0; w < 4; ++w)
            e[4 * g + w] = keep[w] ? e[4 * g + w] * p.keep_scale : T(0);
        }
      l_run = l_run * correction + sum;
      m_run = m_new;
      if (correction != T(1))
        for (int col = 0; col < Width; ++col)
          o[col] *= correction;
      // Keys past c_end are another part's or zero rows of v; e is 0 for them.
      for (int u = 0; u < kChunk; ++u)
        add_scaled(o, e[u], v + (c0 + u) * Width);
    }
    o.save();
    m = m_run;
    l = l_run;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq, capacity = shape.rows, tile = shape.tile;
    const int parts = shape.parts, span = tile / parts;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int i0 = (team.league_rank() % blocks) * capacity;
    const int rows = seq - i0 < capacity ? seq - i0 : capacity;
    const std::int64_t ld = 3 * p.d;
    const T minus_inf = p.neg_inf;
    T* const q = Scratch<ExecutionSpace, T>(team.team_scratch(shape.scratch_level),
                                            scratch_of(capacity, tile, parts))
                     .data();
    T* const o = q + capacity * kStride;          // part a's row r at (a capacity + r) kStride
    T* const m = o + parts * capacity * kStride;  // part a's row r at a capacity + r
    T* const l = m + parts * capacity;
    T* const k = l + parts * capacity;
    T* const v = k + tile * Width;
    stage_rows<Width>(team, q, rows, rows, dh, kStride, p.qkv_row(b, h, 0, i0), ld);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * rows), [&](const int e) {
      const int at = (e / rows) * capacity + e % rows;
      for (int col = 0; col < Width; ++col)
        o[at * kStride + col] = 0;
      m[at] = minus_inf;  // not reduction_identity: -DBL_MAX in Kokkos 3.4, -inf in 5
      l[at] = 0;
    });
    for (int j0 = 0; j0 < seq; j0 += tile) {
      const int keys = seq - j0 < tile ? seq - j0 : tile;
      team.team_barrier();  // the last tile is done with k and v
      stage_rows<Width>(team, k, keys, tile, dh, Width, p.qkv_row(b, h, 1, j0), ld);
      stage_rows<Width>(team, v, keys, tile, dh, Width, p.qkv_row(b, h, 2, j0), ld);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * rows), [&](const int e) {
        const int r = e % rows, part = e / rows, at = part * capacity + r;
        const int c_begin = part * span, c_end = c_begin + span < keys ? c_begin + span : keys;
        if (c_begin >= c_end) return;
        const int i = i0 + r;
        row_tile(b, std::int64_t(bh) * seq + i, i, j0, c_begin, c_end, q + r * kStride,
                 o + at * kStride, m[at], l[at], k, v);
      });
    }
    team.team_barrier();
    // The parts combined in order: O = sum_a w_a o_a / sum_a w_a l_a, w_a = e^(m_a - m); the row
    // statistics m and 1 / l for the backward.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      const int i = i0 + r;
      T m_row = minus_inf;
      for (int a = 0; a < parts; ++a)
        m_row = m[a * capacity + r] > m_row ? m[a * capacity + r] : m_row;
      T weight[kMaxParts];
      T l_row = 0;
      for (int a = 0; a < parts; ++a) {
        weight[a] = part_weight(m[a * capacity + r], m_row, minus_inf);
        l_row += weight[a] * l[a * capacity + r];
      }
      const T inv = l_row > T(0) ? T(1) / l_row : T(0);
      T* const out = p.context + (std::int64_t(b) * seq + i) * p.d + h * dh;
      for (int col = 0; col < dh; ++col) {
        T acc = 0;
        for (int a = 0; a < parts; ++a)
          acc += weight[a] * o[(a * capacity + r) * kStride + col];
        out[col] = acc * inv;
      }
      if (p.row_max != nullptr) {
        const std::int64_t row = std::int64_t(bh) * seq + i;
        p.row_max[row] = m_row;
        p.row_inverse_sum[row] = inv;
      }
    });
  }
};

// ---- backward ----------------------------------------------------------------------------------

// What the backward adds: dO and dQ, dK, dV in place in the packed buffers, and D.
template <class T>
struct Gradients {
  const T* d_context = nullptr;  // (B S, d): dO
  T* d_qkv = nullptr;            // (B S, 3d): dQ, dK, dV
  T* row_dot = nullptr;          // (B H S): D_i = dO_i . O_i
};

// D_i = dO_i . O_i for every (b, h, i).
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void row_dots(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p,
              const Gradients<T>& g) {
  const int heads = p.heads, seq = p.seq, d = p.d, dh = p.head_dim();
  const T* const o = p.context;
  const T* const d_o = g.d_context;
  T* const out = g.row_dot;
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::attention::row_dots"), std::int64_t(p.batch) * heads * seq,
      KOKKOS_LAMBDA(const std::int64_t row) {
        const int i = static_cast<int>(row % seq);
        const std::int64_t bh = row / seq;
        const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
        const std::int64_t at = (std::int64_t(b) * seq + i) * d + h * dh;
        T s = 0;
        for (int k = 0; k < dh; ++k)
          s += o[at + k] * d_o[at + k];
        out[row] = s;
      });
}

// Loads the softmax statistics m_i, 1 / l_i and D_i of `n` query rows from i0 into scratch.
template <class Member, class T, class KeyMask, class AttnMask>
KOKKOS_INLINE_FUNCTION void stage_row_statistics(const Member& team,
                                                 const Problem<T, KeyMask, AttnMask>& p,
                                                 const Gradients<T>& g, std::int64_t first_row,
                                                 int n, T* m, T* inv, T* dd) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int r) {
    m[r] = p.row_max[first_row + r];
    inv[r] = p.row_inverse_sum[first_row + r];
    dd[r] = g.row_dot[first_row + r];
  });
}

// dK and dV: a team per block of keys (a thread per key and part of the query tile), over every
// tile of query rows.
template <class ExecutionSpace, class T, int Width, class KeyMask, class AttnMask>
struct BackwardKeys {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int kStride = Width + 1;
  Problem<T, KeyMask, AttnMask> p;
  Gradients<T> g;
  Shape shape;
  int blocks;  // of keys per (b, h)

  // Scratch: K, V (rows x kStride), dK, dV of every part (parts x rows x kStride each), Q, dO
  // (tile x Width), m, 1 / l, D (tile) and the tile's dropout decisions (tile x rows bytes).
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_of(int rows, int tile, int parts) {
    return std::size_t(rows) * (2 + 2 * std::size_t(parts)) * kStride +
           std::size_t(tile) * (2 * Width + 3);
  }
  static std::size_t scratch_bytes(int rows, int tile, int parts) {
    return Scratch<ExecutionSpace, T>::shmem_size(scratch_of(rows, tile, parts)) +
           Scratch<ExecutionSpace, bool>::shmem_size(std::size_t(tile) * rows);
  }

  // Key j (k, v and a part's dk, dv in scratch) against staged query rows r_begin .. r_end - 1 of
  // the tile at i0; c is the key's column in keep.
  KOKKOS_INLINE_FUNCTION void key_tile(int b, int i0, int r_begin, int r_end, int j, int c,
                                       T* k_row, T* v_row, T* dk_row, T* dv_row, const T* q,
                                       const T* d_o, const T* m, const T* inv, const T* dd,
                                       const bool* keep) const {
    const RowVector<Width, T> k(k_row), v(v_row);
    RowVector<Width, T> dk(dk_row), dv(dv_row);
    for (int r = r_begin; r < r_end; ++r) {
      if (inv[r] == T(0)) continue;  // a query with no key: P_i = 0
      const T* const qi = q + r * Width;
      const T* const doi = d_o + r * Width;
      const T a = p.masked_score(b, i0 + r, j, dot(k, qi));
      if (a == p.neg_inf) continue;
      const T prob = math::exp_nonpositive(a - m[r]) * inv[r];
      const bool kept = !p.drop || keep[r * shape.rows + c];
      const T d_dropped = dot(v, doi);  // dP~
      const T d_prob = kept ? d_dropped * p.keep_scale : T(0);
      const T dropped = kept ? prob * p.keep_scale : T(0);
      const T ds = p.scale * prob * (d_prob - dd[r]);
      add_scaled(dv, dropped, doi);
      add_scaled(dk, ds, qi);
    }
    dk.save();
    dv.save();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq, d = p.d, capacity = shape.rows, tile = shape.tile;
    const int parts = shape.parts, span = tile / parts;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int j0 = (team.league_rank() % blocks) * capacity;
    const int keys = seq - j0 < capacity ? seq - j0 : capacity;
    const std::int64_t ld = 3 * d;
    const auto& level = team.team_scratch(shape.scratch_level);
    T* const k = Scratch<ExecutionSpace, T>(level, scratch_of(capacity, tile, parts)).data();
    T* const v = k + capacity * kStride;
    T* const dk = v + capacity * kStride;  // part a's key c at (a capacity + c) kStride
    T* const dv = dk + parts * capacity * kStride;
    T* const q = dv + parts * capacity * kStride;
    T* const d_o = q + tile * Width;
    T* const m = d_o + tile * Width;
    T* const inv = m + tile;
    T* const dd = inv + tile;
    bool* const keep = Scratch<ExecutionSpace, bool>(level, std::size_t(tile) * capacity).data();
    stage_rows<Width>(team, k, keys, keys, dh, kStride, p.qkv_row(b, h, 1, j0), ld);
    stage_rows<Width>(team, v, keys, keys, dh, kStride, p.qkv_row(b, h, 2, j0), ld);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * capacity * kStride),
                         [&](const int e) {
                           dk[e] = 0;
                           dv[e] = 0;
                         });
    for (int i0 = 0; i0 < seq; i0 += tile) {
      const int n = seq - i0 < tile ? seq - i0 : tile;
      const std::int64_t first_row = std::int64_t(bh) * seq + i0;
      team.team_barrier();  // the last tile is done with q, dO, the statistics and keep
      stage_rows<Width>(team, q, n, n, dh, Width, p.qkv_row(b, h, 0, i0), ld);
      stage_rows<Width>(team, d_o, n, n, dh, Width,
                        g.d_context + (std::int64_t(b) * seq + i0) * d + h * dh, d);
      stage_row_statistics(team, p, g, first_row, n, m, inv, dd);
      if (p.drop)  // keep[r rows + c]: whether dropout keeps score (i0 + r, j0 + c)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * (capacity / 4)), [&](const int e) {
          const int r = e / (capacity / 4), c4 = 4 * (e % (capacity / 4));
          bool kept[4];
          p.keeps4(first_row + r, j0 + c4, kept);
          for (int w = 0; w < 4; ++w)
            keep[r * capacity + c4 + w] = kept[w];
        });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * keys), [&](const int e) {
        const int c = e % keys, part = e / keys, at = part * capacity + c;
        const int r_begin = part * span, r_end = r_begin + span < n ? r_begin + span : n;
        if (r_begin >= r_end || p.key_masked(b, j0 + c)) return;  // no query sees this key
        key_tile(b, i0, r_begin, r_end, j0 + c, c, k + c * kStride, v + c * kStride,
                 dk + at * kStride, dv + at * kStride, q, d_o, m, inv, dd, keep);
      });
    }
    team.team_barrier();
    // The parts' sums added in order.
    T* const dk_out = g.d_qkv + (std::int64_t(b) * seq + j0) * ld + d + h * dh;
    T* const dv_out = dk_out + d;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](const int c) {
      for (int col = 0; col < dh; ++col) {
        T sum_k = 0, sum_v = 0;
        for (int a = 0; a < parts; ++a) {
          sum_k += dk[(a * capacity + c) * kStride + col];
          sum_v += dv[(a * capacity + c) * kStride + col];
        }
        dk_out[c * ld + col] = sum_k;
        dv_out[c * ld + col] = sum_v;
      }
    });
  }
};

// dQ: a team per block of query rows (a thread per row and part of the key tile), over every
// tile of keys.
template <class ExecutionSpace, class T, int Width, class KeyMask, class AttnMask>
struct BackwardQueries {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int kStride = Width + 1;
  Problem<T, KeyMask, AttnMask> p;
  Gradients<T> g;
  Shape shape;
  int blocks;  // of query rows per (b, h)

  // Scratch: Q, dO (rows x kStride), dQ of every part (parts x rows x kStride), m, 1 / l, D
  // (rows), K, V (tile x Width).
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_of(int rows, int tile, int parts) {
    return std::size_t(rows) * ((2 + std::size_t(parts)) * kStride + 3) +
           std::size_t(tile) * 2 * Width;
  }
  static std::size_t scratch_bytes(int rows, int tile, int parts) {
    return Scratch<ExecutionSpace, T>::shmem_size(scratch_of(rows, tile, parts));
  }

  // Query row i (q, dO and a part's dQ in scratch) against staged keys c_begin .. c_end - 1 of
  // the tile at j0, c_begin a multiple of 4.
  KOKKOS_INLINE_FUNCTION void row_tile(int b, std::int64_t score_row, int i, int j0, int c_begin,
                                       int c_end, T* q_row, T* d_o_row, T* dq_row, T m, T inv, T dd,
                                       const T* k, const T* v) const {
    const RowVector<Width, T> q(q_row), d_o(d_o_row);
    RowVector<Width, T> dq(dq_row);
    for (int c4 = c_begin; c4 < c_end; c4 += 4) {
      bool keep[4] = {true, true, true, true};
      if (p.drop) p.keeps4(score_row, j0 + c4, keep);
      for (int w = 0; w < 4; ++w) {
        const int c = c4 + w;
        if (c >= c_end) break;
        const T a = p.masked_score(b, i, j0 + c, dot(q, k + c * Width));
        if (a == p.neg_inf) continue;
        const T prob = math::exp_nonpositive(a - m) * inv;
        const T d_prob = keep[w] ? dot(d_o, v + c * Width) * p.keep_scale : T(0);
        add_scaled(dq, p.scale * prob * (d_prob - dd), k + c * Width);
      }
    }
    dq.save();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq, d = p.d, capacity = shape.rows, tile = shape.tile;
    const int parts = shape.parts, span = tile / parts;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int i0 = (team.league_rank() % blocks) * capacity;
    const int rows = seq - i0 < capacity ? seq - i0 : capacity;
    const std::int64_t ld = 3 * d, first_row = std::int64_t(bh) * seq + i0;
    T* const q = Scratch<ExecutionSpace, T>(team.team_scratch(shape.scratch_level),
                                            scratch_of(capacity, tile, parts))
                     .data();
    T* const d_o = q + capacity * kStride;
    T* const dq = d_o + capacity * kStride;  // part a's row r at (a capacity + r) kStride
    T* const m = dq + parts * capacity * kStride;
    T* const inv = m + capacity;
    T* const dd = inv + capacity;
    T* const k = dd + capacity;
    T* const v = k + tile * Width;
    stage_rows<Width>(team, q, rows, rows, dh, kStride, p.qkv_row(b, h, 0, i0), ld);
    stage_rows<Width>(team, d_o, rows, rows, dh, kStride,
                      g.d_context + (std::int64_t(b) * seq + i0) * d + h * dh, d);
    stage_row_statistics(team, p, g, first_row, rows, m, inv, dd);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * capacity * kStride),
                         [&](const int e) { dq[e] = 0; });
    for (int j0 = 0; j0 < seq; j0 += tile) {
      const int keys = seq - j0 < tile ? seq - j0 : tile;
      team.team_barrier();  // the last tile is done with k and v
      stage_rows<Width>(team, k, keys, tile, dh, Width, p.qkv_row(b, h, 1, j0), ld);
      stage_rows<Width>(team, v, keys, tile, dh, Width, p.qkv_row(b, h, 2, j0), ld);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts * rows), [&](const int e) {
        const int r = e % rows, part = e / rows, at = part * capacity + r;
        const int c_begin = part * span, c_end = c_begin + span < keys ? c_begin + span : keys;
        if (c_begin >= c_end || inv[r] == T(0)) return;  // a query with no key: no gradient
        row_tile(b, first_row + r, i0 + r, j0, c_begin, c_end, q + r * kStride, d_o + r * kStride,
                 dq + at * kStride, m[r], inv[r], dd[r], k, v);
      });
    }
    team.team_barrier();
    // The parts' sums added in order.
    T* const dq_out = g.d_qkv + (std::int64_t(b) * seq + i0) * ld + h * dh;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      for (int col = 0; col < dh; ++col) {
        T sum = 0;
        for (int a = 0; a < parts; ++a)
          sum += dq[(a * capacity + r) * kStride + col];
        dq_out[r * ld + col] = sum;
      }
    });
  }
};

// ---- launches ----------------------------------------------------------------------------------

// f(std::integral_constant<int, Width>) for the smallest compiled width that holds dh.
template <class F>
void with_width(int dh, F&& f) {
  if (dh <= 8)
    f(std::integral_constant<int, 8>{});
  else if (dh <= 16)
    f(std::integral_constant<int, 16>{});
  else if (dh <= 32)
    f(std::integral_constant<int, 32>{});
  else if (dh <= 64)
    f(std::integral_constant<int, 64>{});
  else if (dh <= 128)
    f(std::integral_constant<int, 128>{});
  else
    f(std::integral_constant<int, kMaxHeadWidth>{});
}

// Runs pass Kernel (a team per block of shape.rows rows of every (b, h)).
template <class Kernel, class ExecutionSpace>
void launch(const ExecutionSpace& exec, const std::string& label, int seq, int bh, Kernel kernel) {
  const Shape shape = shape_for(
      exec, seq, std::int64_t(bh) * seq,
      [](int rows, int tile, int parts) { return Kernel::scratch_bytes(rows, tile, parts); });
  kernel.shape = shape;
  kernel.blocks = (seq + shape.rows - 1) / shape.rows;
  using policy_type = backends::BalancedTeamPolicy<ExecutionSpace>;
  Kokkos::parallel_for(
      label,
      policy_type(exec, bh * kernel.blocks, shape.team_size, 1)
          .set_scratch_size(shape.scratch_level, Kokkos::PerTeam(Kernel::scratch_bytes(
                                                     shape.rows, shape.tile, shape.parts))),
      kernel);
}

// context = attention(qkv), with each row's m and 1 / l in row_max, row_inverse_sum when given.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void forward(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p) {
  with_width(p.head_dim(), [&](auto width) {
    using F = Forward<ExecutionSpace, T, decltype(width)::value, KeyMask, AttnMask>;
    launch(exec, KFORMER_LABEL("kformer::attention::flash_forward"), p.seq, p.batch * p.heads,
           F{p, {}, 0});
  });
}

// dQ, dK, dV into g.d_qkv from dO (g.d_context) and the forward's context and row statistics;
// g.row_dot is a (B H S) workspace.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void backward(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p,
              const Gradients<T>& g) {
  row_dots(exec, p, g);
  with_width(p.head_dim(), [&](auto width) {
    constexpr int W = decltype(width)::value;
    using K = BackwardKeys<ExecutionSpace, T, W, KeyMask, AttnMask>;
    launch(exec, KFORMER_LABEL("kformer::attention::flash_backward_keys"), p.seq, p.batch * p.heads,
           K{p, g, {}, 0});
    using Q = BackwardQueries<ExecutionSpace, T, W, KeyMask, AttnMask>;
    launch(exec, KFORMER_LABEL("kformer::attention::flash_backward_queries"), p.seq,
           p.batch * p.heads, Q{p, g, {}, 0});
  });
}

// The probabilities P (B, H, S, S) of the last forward, from Q, K and its row statistics, for
// inspection (PyTorch's need_weights); training and inference never need them.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void probabilities(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p, T* probs) {
  const int heads = p.heads, seq = p.seq, dh = p.head_dim();
  const T minus_inf = p.neg_inf;
  backends::for_each_index(
      exec, KFORMER_LABEL("kformer::attention::probabilities"),
      std::int64_t(p.batch) * heads * seq * seq, KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t row = e / seq;
        const int j = static_cast<int>(e % seq), i = static_cast<int>(row % seq);
        const std::int64_t bh = row / seq;
        const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
        const T* const qi = p.qkv_row(b, h, 0, i);
        const T* const kj = p.qkv_row(b, h, 1, j);
        T product = 0;
        for (int k = 0; k < dh; ++k)
          product += qi[k] * kj[k];
        const T a = p.masked_score(b, i, j, product);
        probs[e] = a == minus_inf
                       ? T(0)
                       : math::exp_nonpositive(a - p.row_max[row]) * p.row_inverse_sum[row];
      });
}

// The key-padding and additive masks of MultiHeadAttention (its Mask and ConstMatrix).
template <class ExecutionSpace>
using KeyMaskOf =
    Kokkos::View<const bool**, Kokkos::LayoutRight, typename ExecutionSpace::memory_space>;
template <class ExecutionSpace, class T>
using AttnMaskOf =
    Kokkos::View<const T**, Kokkos::LayoutRight, typename ExecutionSpace::memory_space>;

// The passes for those masks are compiled once, in the library (layers/attention_instances.cpp),
// for every enabled space and for float and double: each instance holds 18 kernels (six widths,
// three passes), nvcc's longest work, which every translation unit that uses attention would
// otherwise compile again. PREFIX is "extern template" (here) or "template" (there). The
// arguments are types in template argument lists, where parentheses would not compile.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define KFORMER_FLASH_INSTANCE(PREFIX, SPACE, T)                                \
  PREFIX void forward<SPACE, T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>(        \
      const SPACE&, const Problem<T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>&); \
  PREFIX void backward<SPACE, T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>(       \
      const SPACE&, const Problem<T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>&,  \
      const Gradients<T>&);                                                     \
  PREFIX void probabilities<SPACE, T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>(  \
      const SPACE&, const Problem<T, KeyMaskOf<SPACE>, AttnMaskOf<SPACE, T>>&, T*);
#define KFORMER_FLASH_INSTANCES_OF(PREFIX, SPACE) \
  KFORMER_FLASH_INSTANCE(PREFIX, SPACE, float)    \
  KFORMER_FLASH_INSTANCE(PREFIX, SPACE, double)
// NOLINTEND(bugprone-macro-parentheses)
#if defined(KOKKOS_ENABLE_SERIAL)
#define KFORMER_FLASH_SERIAL(PREFIX) KFORMER_FLASH_INSTANCES_OF(PREFIX, Kokkos::Serial)
#else
#define KFORMER_FLASH_SERIAL(PREFIX)
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
#define KFORMER_FLASH_OPENMP(PREFIX) KFORMER_FLASH_INSTANCES_OF(PREFIX, Kokkos::OpenMP)
#else
#define KFORMER_FLASH_OPENMP(PREFIX)
#endif
#if defined(KOKKOS_ENABLE_THREADS)
#define KFORMER_FLASH_THREADS(PREFIX) KFORMER_FLASH_INSTANCES_OF(PREFIX, Kokkos::Threads)
#else
#define KFORMER_FLASH_THREADS(PREFIX)
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#define KFORMER_FLASH_CUDA(PREFIX) KFORMER_FLASH_INSTANCES_OF(PREFIX, Kokkos::Cuda)
#else
#define KFORMER_FLASH_CUDA(PREFIX)
#endif
#if defined(KOKKOS_ENABLE_HIP)
#define KFORMER_FLASH_HIP(PREFIX) KFORMER_FLASH_INSTANCES_OF(PREFIX, compat::HIP)
#else
#define KFORMER_FLASH_HIP(PREFIX)
#endif
#define KFORMER_FLASH_ALL_INSTANCES(PREFIX) \
  KFORMER_FLASH_SERIAL(PREFIX)              \
  KFORMER_FLASH_OPENMP(PREFIX)              \
  KFORMER_FLASH_THREADS(PREFIX)             \
  KFORMER_FLASH_CUDA(PREFIX)                \
  KFORMER_FLASH_HIP(PREFIX)

#if !defined(KFORMER_FLASH_INSTANTIATE)
KFORMER_FLASH_ALL_INSTANCES(extern template)
#endif

}  // namespace kformer::impl::flash
