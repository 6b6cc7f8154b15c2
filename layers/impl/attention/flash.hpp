// Fused multi-head attention in portable Kokkos (FlashAttention-2's algorithm): no (B, H, S, S)
// buffer in the forward or the backward, on any backend.
//
// Per (batch b, head h) with Q, K, V the head's (S, dh) columns of the packed qkv buffer:
//   forward, one team per block of Br query rows, over tiles of Bc keys:
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
// Each tile runs in two phases separated by a team barrier: (A) a thread per row of the tile,
// vector lanes over its keys, computes the tile's scores (and in the backward dS); (B) a thread per
// output row, lanes over dh, adds the tile's contribution in a fixed order. Every sum has a fixed
// order and no atomics are used, so a run's bits do not depend on the schedule. dQ is a second
// pass over the key tiles rather than an atomic sum across key blocks, for the same reason.
//
// Dropout decisions are DropoutDecisions' counter hash of the score's index in the (B, H, S, S)
// row-major order, as everywhere else in kformer (no mask is stored). Q, K, V, O and the
// gradients are read and written in place in the packed (B S, 3d) and (B S, d) buffers.
#pragma once

#include <algorithm>
#include <cstdint>

#include <Kokkos_Core.hpp>

#include "../../../backends/for_each.hpp"
#include "../../../core/math.hpp"
#include "../../dropout.hpp"

namespace kformer::impl::flash {

// Tile sizes and team shape for a head width on an execution space: the largest power-of-two
// tiles up to kMaxTile whose scratch fits in the fast level, teams of a thread per tile row with
// vector lanes along the tile's keys and the head width on GPUs; one thread per team on CPUs.
struct Shape {
  int tile = 0;           // Br = Bc: query rows and keys per tile
  int team_size = 1;      // threads per team
  int vector_length = 1;  // lanes per thread
  int scratch_level = 0;
};

inline constexpr int kMaxTile = 64;

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
  // The score S_ij of (b, h) before the softmax: scaled product plus masks.
  KOKKOS_INLINE_FUNCTION T masked_score(int b, int i, int j, T product) const {
    if (key_padding_mask.data() != nullptr && key_padding_mask(b, j)) return neg_inf;
    T s = scale * product;
    if (attn_mask.data() != nullptr) s += attn_mask(i, j);
    return s;
  }
  // Whether dropout keeps score (row, j); row = (b H + h) S + i.
  KOKKOS_INLINE_FUNCTION bool keeps(std::int64_t row, int j) const {
    if (!drop) return true;
    bool keep[4];
    decide.keep4(static_cast<std::uint64_t>(row) * ((seq + 3) / 4) + j / 4, keep);
    return keep[j % 4];
  }
};

// Team scratch views.
template <class ExecutionSpace, class T>
using Scratch = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space,
                             Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The scratch of a pass holding `blocks` (tile x dh) arrays, `squares` (tile x tile) arrays and
// three tile-long ones, each allocated on its own.
template <class ExecutionSpace, class T>
std::size_t scratch_of(int tile, int dh, int blocks, int squares) {
  using scratch = Scratch<ExecutionSpace, T>;
  return blocks * scratch::shmem_size(std::size_t(tile) * dh) +
         squares * scratch::shmem_size(std::size_t(tile) * tile) + 3 * scratch::shmem_size(tile);
}

// The tiles of a head width: the largest power of two up to kMaxTile that is not far beyond the
// sequence and, on a GPU, whose largest pass (the backward's dK/dV) fits in the fast scratch
// level, down to 16; teams of a thread per tile row with vector lanes along keys and the head
// width on GPUs, one thread per team on CPUs (whose scratch levels are both ordinary memory).
template <class ExecutionSpace, class T>
Shape shape_for(int head_dim, int seq) {
  Shape s;
  using policy_type = Kokkos::TeamPolicy<ExecutionSpace>;
  const std::size_t fast = static_cast<std::size_t>(policy_type::scratch_size_max(0));
  const auto bytes = [&](int tile) { return scratch_of<ExecutionSpace, T>(tile, head_dim, 6, 2); };
  const bool host = backends::runs_on_host<ExecutionSpace>;
  int tile = kMaxTile;
  while (tile > 8 && (tile / 2 >= seq || (!host && tile > 16 && bytes(tile) > fast)))
    tile /= 2;
  s.tile = tile;
  s.scratch_level = bytes(tile) <= fast ? 0 : 1;
  if (!host) {
    s.vector_length = std::min(32, tile);
    s.team_size = tile;
  }
  return s;
}

// Copies rows [first, first + n) of a head's (S, dh) block into a (tile, dh) scratch array.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void load_rows(const Member& team, T* dst, int n, int dh, const T* first_row,
                                      std::int64_t ld) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int r) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                         [&](const int k) { dst[r * dh + k] = first_row[r * ld + k]; });
  });
}

// Copies rows [first, first + n) of a head's (S, dh) block into a (dh, tile) scratch array,
// transposed: key c's values are column c, so that the lanes of a thread, each on its own key,
// read consecutive addresses.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void load_columns(const Member& team, T* dst, int n, int dh, int tile,
                                         const T* first_row, std::int64_t ld) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int c) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                         [&](const int k) { dst[k * tile + c] = first_row[c * ld + k]; });
  });
}

// The dot product of two dh-vectors by one lane (the lanes of a thread work on different keys),
// b's elements `stride` apart; the same order of operations for every layout.
template <class T>
KOKKOS_INLINE_FUNCTION T dot(const T* a, const T* b, int n, int stride = 1) {
  T s = 0;
  for (int k = 0; k < n; ++k)
    s += a[k] * b[k * stride];
  return s;
}

// ---- forward -----------------------------------------------------------------------------------

template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
struct Forward {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using scratch = Scratch<ExecutionSpace, T>;
  Problem<T, KeyMask, AttnMask> p;
  int tile, blocks, level;

  // Scratch: Q, O, V (tile x dh), K^T (dh x tile), S (tile x tile), m, l, correction (tile).
  static std::size_t scratch_bytes(int tile, int dh) {
    return scratch_of<ExecutionSpace, T>(tile, dh, 4, 1);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq;
    const T minus_inf = p.neg_inf;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int i0 = (team.league_rank() % blocks) * tile;
    const int rows = seq - i0 < tile ? seq - i0 : tile;
    const auto& s0 = team.team_scratch(level);
    T* const q = scratch(s0, std::size_t(tile) * dh).data();
    T* const o = scratch(s0, std::size_t(tile) * dh).data();
    T* const kt = scratch(s0, std::size_t(tile) * dh).data();
    T* const v = scratch(s0, std::size_t(tile) * dh).data();
    T* const s = scratch(s0, std::size_t(tile) * tile).data();
    T* const m = scratch(s0, tile).data();
    T* const l = scratch(s0, tile).data();
    T* const corr = scratch(s0, tile).data();
    const std::int64_t ld = 3 * p.d;
    load_rows(team, q, rows, dh, p.qkv_row(b, h, 0, i0), ld);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                           [&](const int c) { o[r * dh + c] = 0; });
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        m[r] = minus_inf;  // not reduction_identity: -DBL_MAX in Kokkos 3.4, -inf in 5
        l[r] = 0;
      });
    });
    for (int j0 = 0; j0 < seq; j0 += tile) {
      const int keys = seq - j0 < tile ? seq - j0 : tile;
      team.team_barrier();  // the last tile's phase B is done with kt, v and s
      load_columns(team, kt, keys, dh, tile, p.qkv_row(b, h, 1, j0), ld);
      load_rows(team, v, keys, dh, p.qkv_row(b, h, 2, j0), ld);
      team.team_barrier();
      // (A) scores, the running maximum and sum, P~ of the tile.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
        const int i = i0 + r;
        T* const sr = s + r * tile;
        T tile_max = Kokkos::reduction_identity<T>::max();
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, keys),
            [&](const int c, T& mx) {
              const T a = p.masked_score(b, i, j0 + c, dot(q + r * dh, kt + c, dh, tile));
              sr[c] = a;
              mx = a > mx ? a : mx;
            },
            Kokkos::Max<T>(tile_max));
        const T m_old = m[r];
        const T m_new = tile_max > m_old ? tile_max : m_old;
        const std::int64_t row = std::int64_t(bh) * seq + i;
        T tile_sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, keys),
            [&](const int c, T& sum) {
              const T e = sr[c] == minus_inf ? T(0) : math::exp_nonpositive(sr[c] - m_new);
              sum += e;
              sr[c] = p.keeps(row, j0 + c) ? e * p.keep_scale : T(0);
            },
            tile_sum);
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          // Equal maxima need no correction; this also keeps a row whose keys so far are all
          // masked (m_old = m_new = -inf, where -inf - -inf would be NaN) at o = 0, l = 0.
          const T c = m_old == m_new ? T(1) : math::exp_nonpositive(m_old - m_new);
          corr[r] = c;
          l[r] = l[r] * c + tile_sum;
          m[r] = m_new;
        });
      });
      team.team_barrier();
      // (B) o_i <- o_i corr_i + sum_j P~_ij v_j.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
        const T* const sr = s + r * tile;
        const T c = corr[r];
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const int col) {
          T acc = o[r * dh + col] * c;
          for (int j = 0; j < keys; ++j)
            acc += sr[j] * v[j * dh + col];
          o[r * dh + col] = acc;
        });
      });
    }
    team.team_barrier();
    // O = o / l into the context's head columns; the row statistics for the backward.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      const int i = i0 + r;
      const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
      T* const out = p.context + (std::int64_t(b) * seq + i) * p.d + h * dh;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                           [&](const int col) { out[col] = o[r * dh + col] * inv; });
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        const std::int64_t row = std::int64_t(bh) * seq + i;
        if (p.row_max != nullptr) {
          p.row_max[row] = m[r];
          p.row_inverse_sum[row] = inv;
        }
      });
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
      exec, "kformer::attention::row_dots", std::int64_t(p.batch) * heads * seq,
      KOKKOS_LAMBDA(const std::int64_t row) {
        const int i = static_cast<int>(row % seq);
        const std::int64_t bh = row / seq;
        const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
        const std::int64_t at = (std::int64_t(b) * seq + i) * d + h * dh;
        out[row] = dot(o + at, d_o + at, dh);
      });
}

// Phase A of a backward tile: P~_ij and dS_ij for query rows i0 + [0, rows) and keys
// j0 + [0, keys), from Q, dO (tile x dh) and K^T, V^T (dh x tile) in scratch, into pt and ds
// (tile x tile), rows of the tile `tile` apart.
template <class Member, class T, class KeyMask, class AttnMask>
KOKKOS_INLINE_FUNCTION void score_gradients(const Member& team,
                                            const Problem<T, KeyMask, AttnMask>& p, int b, int bh,
                                            int i0, int rows, int j0, int keys, int tile,
                                            const T* q, const T* d_o, const T* kt, const T* vt,
                                            const T* m, const T* inv, const T* dd, T* pt, T* ds) {
  const int dh = p.head_dim();
  const T minus_inf = p.neg_inf;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
    const int i = i0 + r;
    const std::int64_t row = std::int64_t(bh) * p.seq + i;
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, keys), [&](const int c) {
      const T a = p.masked_score(b, i, j0 + c, dot(q + r * dh, kt + c, dh, tile));
      const T prob = a == minus_inf ? T(0) : math::exp_nonpositive(a - m[r]) * inv[r];
      const bool keep = p.keeps(row, j0 + c);
      const T d_dropped = dot(d_o + r * dh, vt + c, dh, tile);  // dP~
      const T d_prob = keep ? d_dropped * p.keep_scale : T(0);
      pt[r * tile + c] = keep ? prob * p.keep_scale : T(0);
      ds[r * tile + c] = p.scale * prob * (d_prob - dd[r]);
    });
  });
}

// dK and dV: a team per block of keys, over every tile of queries.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
struct BackwardKeys {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using scratch = Scratch<ExecutionSpace, T>;
  Problem<T, KeyMask, AttnMask> p;
  Gradients<T> g;
  int tile, blocks, level;

  // Scratch: K^T, V^T (dh x tile), dK, dV, Q, dO (tile x dh), P~, dS (tile x tile), m, 1 / l, D
  // (tile).
  static std::size_t scratch_bytes(int tile, int dh) {
    return scratch_of<ExecutionSpace, T>(tile, dh, 6, 2);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq, d = p.d;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int j0 = (team.league_rank() % blocks) * tile;
    const int keys = seq - j0 < tile ? seq - j0 : tile;
    const auto& s0 = team.team_scratch(level);
    const std::size_t block = std::size_t(tile) * dh;
    T* const kt = scratch(s0, block).data();
    T* const vt = scratch(s0, block).data();
    T* const dk = scratch(s0, block).data();
    T* const dv = scratch(s0, block).data();
    T* const q = scratch(s0, block).data();
    T* const d_o = scratch(s0, block).data();
    T* const pt = scratch(s0, std::size_t(tile) * tile).data();
    T* const ds = scratch(s0, std::size_t(tile) * tile).data();
    T* const m = scratch(s0, tile).data();
    T* const inv = scratch(s0, tile).data();
    T* const dd = scratch(s0, tile).data();
    const std::int64_t ld = 3 * d;
    load_columns(team, kt, keys, dh, tile, p.qkv_row(b, h, 1, j0), ld);
    load_columns(team, vt, keys, dh, tile, p.qkv_row(b, h, 2, j0), ld);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](const int c) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const int col) {
        dk[c * dh + col] = 0;
        dv[c * dh + col] = 0;
      });
    });
    for (int i0 = 0; i0 < seq; i0 += tile) {
      const int rows = seq - i0 < tile ? seq - i0 : tile;
      team.team_barrier();
      load_rows(team, q, rows, dh, p.qkv_row(b, h, 0, i0), ld);
      load_rows(team, d_o, rows, dh, g.d_context + (std::int64_t(b) * seq + i0) * d + h * dh, d);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          const std::int64_t row = std::int64_t(bh) * seq + i0 + r;
          m[r] = p.row_max[row];
          inv[r] = p.row_inverse_sum[row];
          dd[r] = g.row_dot[row];
        });
      });
      team.team_barrier();
      score_gradients(team, p, b, bh, i0, rows, j0, keys, tile, q, d_o, kt, vt, m, inv, dd, pt, ds);
      team.team_barrier();
      // (B) dV_j += sum_i P~_ij dO_i,  dK_j += sum_i dS_ij q_i.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](const int c) {
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const int col) {
          T acc_v = dv[c * dh + col], acc_k = dk[c * dh + col];
          for (int r = 0; r < rows; ++r) {
            acc_v += pt[r * tile + c] * d_o[r * dh + col];
            acc_k += ds[r * tile + c] * q[r * dh + col];
          }
          dv[c * dh + col] = acc_v;
          dk[c * dh + col] = acc_k;
        });
      });
    }
    team.team_barrier();
    T* const dk_out = g.d_qkv + (std::int64_t(b) * seq + j0) * ld + d + h * dh;
    T* const dv_out = dk_out + d;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, keys), [&](const int c) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const int col) {
        dk_out[c * ld + col] = dk[c * dh + col];
        dv_out[c * ld + col] = dv[c * dh + col];
      });
    });
  }
};

// dQ: a team per block of queries, over every tile of keys.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
struct BackwardQueries {
  using member_type = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using scratch = Scratch<ExecutionSpace, T>;
  Problem<T, KeyMask, AttnMask> p;
  Gradients<T> g;
  int tile, blocks, level;

  // Scratch: Q, dO, dQ, K (tile x dh), K^T, V^T (dh x tile), P~, dS (tile x tile), m, 1 / l, D
  // (tile).
  static std::size_t scratch_bytes(int tile, int dh) {
    return scratch_of<ExecutionSpace, T>(tile, dh, 6, 2);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const int dh = p.head_dim(), seq = p.seq, d = p.d;
    const int bh = team.league_rank() / blocks, b = bh / p.heads, h = bh % p.heads;
    const int i0 = (team.league_rank() % blocks) * tile;
    const int rows = seq - i0 < tile ? seq - i0 : tile;
    const auto& s0 = team.team_scratch(level);
    const std::size_t block = std::size_t(tile) * dh;
    T* const q = scratch(s0, block).data();
    T* const d_o = scratch(s0, block).data();
    T* const dq = scratch(s0, block).data();
    T* const k = scratch(s0, block).data();
    T* const kt = scratch(s0, block).data();
    T* const vt = scratch(s0, block).data();
    T* const pt = scratch(s0, std::size_t(tile) * tile).data();
    T* const ds = scratch(s0, std::size_t(tile) * tile).data();
    T* const m = scratch(s0, tile).data();
    T* const inv = scratch(s0, tile).data();
    T* const dd = scratch(s0, tile).data();
    const std::int64_t ld = 3 * d;
    load_rows(team, q, rows, dh, p.qkv_row(b, h, 0, i0), ld);
    load_rows(team, d_o, rows, dh, g.d_context + (std::int64_t(b) * seq + i0) * d + h * dh, d);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                           [&](const int col) { dq[r * dh + col] = 0; });
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        const std::int64_t row = std::int64_t(bh) * seq + i0 + r;
        m[r] = p.row_max[row];
        inv[r] = p.row_inverse_sum[row];
        dd[r] = g.row_dot[row];
      });
    });
    for (int j0 = 0; j0 < seq; j0 += tile) {
      const int keys = seq - j0 < tile ? seq - j0 : tile;
      team.team_barrier();
      load_rows(team, k, keys, dh, p.qkv_row(b, h, 1, j0), ld);
      load_columns(team, kt, keys, dh, tile, p.qkv_row(b, h, 1, j0), ld);
      load_columns(team, vt, keys, dh, tile, p.qkv_row(b, h, 2, j0), ld);
      team.team_barrier();
      score_gradients(team, p, b, bh, i0, rows, j0, keys, tile, q, d_o, kt, vt, m, inv, dd, pt, ds);
      team.team_barrier();
      // (B) dQ_i += sum_j dS_ij k_j.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const int col) {
          T acc = dq[r * dh + col];
          for (int c = 0; c < keys; ++c)
            acc += ds[r * tile + c] * k[c * dh + col];
          dq[r * dh + col] = acc;
        });
      });
    }
    team.team_barrier();
    T* const dq_out = g.d_qkv + (std::int64_t(b) * seq + i0) * ld + h * dh;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                           [&](const int col) { dq_out[r * ld + col] = dq[r * dh + col]; });
    });
  }
};

// ---- launches ----------------------------------------------------------------------------------

template <class ExecutionSpace, class Functor>
void launch(const ExecutionSpace& exec, const char* label, const Shape& shape, int league,
            std::size_t scratch_bytes, const Functor& f) {
  using policy_type = backends::BalancedTeamPolicy<ExecutionSpace>;
  Kokkos::parallel_for(label,
                       policy_type(exec, league, shape.team_size, shape.vector_length)
                           .set_scratch_size(shape.scratch_level, Kokkos::PerTeam(scratch_bytes)),
                       f);
}

// context = attention(qkv), with each row's m and 1 / l in row_max, row_inverse_sum when given.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void forward(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p) {
  const int dh = p.head_dim();
  const Shape shape = shape_for<ExecutionSpace, T>(dh, p.seq);
  const int blocks = (p.seq + shape.tile - 1) / shape.tile;
  using F = Forward<ExecutionSpace, T, KeyMask, AttnMask>;
  launch(exec, "kformer::attention::flash_forward", shape, p.batch * p.heads * blocks,
         F::scratch_bytes(shape.tile, dh), F{p, shape.tile, blocks, shape.scratch_level});
}

// dQ, dK, dV into g.d_qkv from dO (g.d_context) and the forward's context and row statistics;
// g.row_dot is a (B H S) workspace.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void backward(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p,
              const Gradients<T>& g) {
  const int dh = p.head_dim();
  const Shape shape = shape_for<ExecutionSpace, T>(dh, p.seq);
  const int blocks = (p.seq + shape.tile - 1) / shape.tile;
  row_dots(exec, p, g);
  using K = BackwardKeys<ExecutionSpace, T, KeyMask, AttnMask>;
  launch(exec, "kformer::attention::flash_backward_keys", shape, p.batch * p.heads * blocks,
         K::scratch_bytes(shape.tile, dh), K{p, g, shape.tile, blocks, shape.scratch_level});
  using Q = BackwardQueries<ExecutionSpace, T, KeyMask, AttnMask>;
  launch(exec, "kformer::attention::flash_backward_queries", shape, p.batch * p.heads * blocks,
         Q::scratch_bytes(shape.tile, dh), Q{p, g, shape.tile, blocks, shape.scratch_level});
}

// The probabilities P (B, H, S, S) of the last forward, from Q, K and its row statistics, for
// inspection (PyTorch's need_weights); training and inference never need them.
template <class ExecutionSpace, class T, class KeyMask, class AttnMask>
void probabilities(const ExecutionSpace& exec, const Problem<T, KeyMask, AttnMask>& p, T* probs) {
  const int heads = p.heads, seq = p.seq, dh = p.head_dim();
  const T minus_inf = p.neg_inf;
  backends::for_each_index(
      exec, "kformer::attention::probabilities", std::int64_t(p.batch) * heads * seq * seq,
      KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t row = e / seq;
        const int j = static_cast<int>(e % seq), i = static_cast<int>(row % seq);
        const std::int64_t bh = row / seq;
        const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
        const T a = p.masked_score(b, i, j, dot(p.qkv_row(b, h, 0, i), p.qkv_row(b, h, 1, j), dh));
        probs[e] = a == minus_inf
                       ? T(0)
                       : math::exp_nonpositive(a - p.row_max[row]) * p.row_inverse_sum[row];
      });
}

}  // namespace kformer::impl::flash
