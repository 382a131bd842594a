// Extend attention's fp32 matrix products on the vector layer (every variant's
// fp32 path; x86_avx2 runs its own whole 16-lane chunks first and these on the
// rest): q.k as vectors over the query rows with the key elements as scalars,
// P.V as vectors along the head dimension with three query rows sharing each
// V load.
#pragma once

#include "../extend_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

// s[k][c] = sum_d kc[k][d] * qt[d][c] for the NK keys at kc (rows of `dim`)
// and the query rows c in [c0, c0 + vl); qt and s have rows of `ld`. Each qt
// load feeds NK multiply-adds; the key elements are scalars.
template <int NK>
inline void qk_keys(const float* qt, std::int64_t ld, std::int64_t dim, const float* kc,
                    float* s, std::int64_t c0, std::size_t vl) {
  const float* k0 = kc;
  const float* k1 = kc + dim;
  const float* k2 = kc + 2 * dim;
  const float* q = qt + c0;
  FM::V x = FM::load(q, vl);
  FM::V a0 = FM::mul(x, k0[0], vl), a1 = a0, a2 = a0;
  if constexpr (NK > 1) a1 = FM::mul(x, k1[0], vl);
  if constexpr (NK > 2) a2 = FM::mul(x, k2[0], vl);
  auto step = [&](const float* qp, std::int64_t i) RVVK_ALWAYS_INLINE {
    const FM::V y = FM::load(qp, vl);
    a0 = FM::fmacc(a0, k0[i], y, vl);
    if constexpr (NK > 1) a1 = FM::fmacc(a1, k1[i], y, vl);
    if constexpr (NK > 2) a2 = FM::fmacc(a2, k2[i], y, vl);
    step_barrier();
  };
  std::int64_t d = 1;
  q += ld;
  for (; d + 4 <= dim; d += 4) {
    const float* qa = q;
    const float* qb = qa + ld;
    const float* qc = qb + ld;
    const float* qd = qc + ld;
    step(qa, d);
    step(qb, d + 1);
    step(qc, d + 2);
    step(qd, d + 3);
    q = qd + ld;
  }
  for (; d < dim; ++d, q += ld) step(q, d);
  FM::store(s + c0, a0, vl);
  if constexpr (NK > 1) FM::store(s + ld + c0, a1, vl);
  if constexpr (NK > 2) FM::store(s + 2 * ld + c0, a2, vl);
}

// The same for all query rows when they span several vectors: the keys'
// elements of a tile of kTileD dimensions are loaded once into scalar
// registers and reused for every vector of query rows; partial sums go
// through s.
constexpr std::int64_t kTileD = 8;
template <int NK>
inline void qk_keys_tiled(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                          const float* kc, float* s) {
  const float* k0 = kc;
  const float* k1 = kc + dim;
  const float* k2 = kc + 2 * dim;
  float* s0 = s;
  float* s1 = s + ld;
  float* s2 = s + 2 * ld;
  std::int64_t d0 = 0;
  for (; d0 + kTileD <= dim; d0 += kTileD) {
    float x0[kTileD], x1[kTileD], x2[kTileD];
    for (int i = 0; i < kTileD; ++i) {
      x0[i] = k0[d0 + i];
      x1[i] = NK > 1 ? k1[d0 + i] : 0.0f;
      x2[i] = NK > 2 ? k2[d0 + i] : 0.0f;
    }
    for (std::int64_t c = 0; c < nqr;) {
      const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c));
      FM::V a0, a1, a2;
      if (d0 == 0) {
        a0 = a1 = a2 = FM::splat(0.0f, vl);
      } else {
        a0 = a1 = a2 = FM::load(s0 + c, vl);
        if constexpr (NK > 1) a1 = FM::load(s1 + c, vl);
        if constexpr (NK > 2) a2 = FM::load(s2 + c, vl);
      }
      const float* q = qt + d0 * ld + c;
      auto step = [&](int i) RVVK_ALWAYS_INLINE {
        const FM::V y = FM::load(q, vl);
        a0 = FM::fmacc(a0, x0[i], y, vl);
        if constexpr (NK > 1) a1 = FM::fmacc(a1, x1[i], y, vl);
        if constexpr (NK > 2) a2 = FM::fmacc(a2, x2[i], y, vl);
        q += ld;
        step_barrier();
      };
      static_assert(kTileD == 8, "the steps below");
      step(0);
      step(1);
      step(2);
      step(3);
      step(4);
      step(5);
      step(6);
      step(7);
      FM::store(s0 + c, a0, vl);
      if constexpr (NK > 1) FM::store(s1 + c, a1, vl);
      if constexpr (NK > 2) FM::store(s2 + c, a2, vl);
      c += static_cast<std::int64_t>(vl);
    }
  }
  if (d0 == dim) return;
  for (std::int64_t c = 0; c < nqr;) {  // the remaining dimensions, scalars from memory
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c));
    FM::V a0, a1, a2;
    if (d0 == 0) {
      a0 = a1 = a2 = FM::splat(0.0f, vl);
    } else {
      a0 = a1 = a2 = FM::load(s0 + c, vl);
      if constexpr (NK > 1) a1 = FM::load(s1 + c, vl);
      if constexpr (NK > 2) a2 = FM::load(s2 + c, vl);
    }
    const float* q = qt + d0 * ld + c;
    for (std::int64_t d = d0; d < dim; ++d, q += ld) {
      const FM::V y = FM::load(q, vl);
      a0 = FM::fmacc(a0, k0[d], y, vl);
      if constexpr (NK > 1) a1 = FM::fmacc(a1, k1[d], y, vl);
      if constexpr (NK > 2) a2 = FM::fmacc(a2, k2[d], y, vl);
      step_barrier();
    }
    FM::store(s0 + c, a0, vl);
    if constexpr (NK > 1) FM::store(s1 + c, a1, vl);
    if constexpr (NK > 2) FM::store(s2 + c, a2, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

// Scores of the block's nb keys for the query rows [c0, nqr), which fit one
// vector (qt and s have rows of ld).
void qk_keys_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                   const float* kc, std::int64_t nb, float* s, std::int64_t c0) {
  const std::size_t vl = FM::setvl(static_cast<std::size_t>(nqr - c0));
  std::int64_t j = 0;
  for (; j + kKeys <= nb; j += kKeys)
    qk_keys<kKeys>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
  if (nb - j == 2) qk_keys<2>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
  if (nb - j == 1) qk_keys<1>(qt, ld, dim, kc + j * dim, s + j * ld, c0, vl);
}

// o[r][c0, c0 + vl) = o[r][...] * alpha[r] + sum_j p[j][r] * vc[j][...] for
// the NR query rows r at o (rows of dim_v); p has rows of `ld`, vc of `lv`. Each V load
// feeds NR multiply-adds; the probabilities are scalars.
template <int NR>
inline void pv_rows(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                    std::int64_t ld, const float* vc, std::int64_t lv, std::int64_t nb,
                    std::int64_t c0, std::size_t vl) {
  float* o0 = o + c0;
  float* o1 = o0 + dim_v;
  float* o2 = o1 + dim_v;
  FM::V a0 = FM::mul(FM::load(o0, vl), alpha[0], vl), a1 = a0, a2 = a0;
  if constexpr (NR > 1) a1 = FM::mul(FM::load(o1, vl), alpha[1], vl);
  if constexpr (NR > 2) a2 = FM::mul(FM::load(o2, vl), alpha[2], vl);
  auto step = [&](const float* pp, const float* vp) RVVK_ALWAYS_INLINE {
    const FM::V x = FM::load(vp, vl);
    a0 = FM::fmacc(a0, pp[0], x, vl);
    if constexpr (NR > 1) a1 = FM::fmacc(a1, pp[1], x, vl);
    if constexpr (NR > 2) a2 = FM::fmacc(a2, pp[2], x, vl);
    step_barrier();
  };
  const float* pp = p;
  const float* vp = vc + c0;
  std::int64_t j = 0;
  for (; j + 4 <= nb; j += 4) {
    const float* pb = pp + ld;
    const float* pc = pb + ld;
    const float* pd = pc + ld;
    const float* vb = vp + lv;
    const float* vc2 = vb + lv;
    const float* vd = vc2 + lv;
    step(pp, vp);
    step(pb, vb);
    step(pc, vc2);
    step(pd, vd);
    pp = pd + ld;
    vp = vd + lv;
  }
  for (; j < nb; ++j, pp += ld, vp += lv) step(pp, vp);
  FM::store(o0, a0, vl);
  if constexpr (NR > 1) FM::store(o1, a1, vl);
  if constexpr (NR > 2) FM::store(o2, a2, vl);
}

// The value columns [c, dim_v) of P.V for all nqr query rows (see pv_rows).
RVVK_ALWAYS_INLINE inline void pv_cols(float* o, std::int64_t dim_v, const float* alpha,
                                       const float* p, std::int64_t nqr, std::int64_t ld,
                                       const float* vc, std::int64_t lv, std::int64_t nb,
                                       std::int64_t c) {
  while (c < dim_v) {
    const std::size_t vl = FM::setvl(static_cast<std::size_t>(dim_v - c));
    std::int64_t r = 0;
    for (; r + kRows <= nqr; r += kRows)
      pv_rows<kRows>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    if (nqr - r == 2) pv_rows<2>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    if (nqr - r == 1) pv_rows<1>(o + r * dim_v, dim_v, alpha + r, p + r, ld, vc, lv, nb, c, vl);
    c += static_cast<std::int64_t>(vl);
  }
}

namespace generic {
// Scores of the block's nb keys (fp32 rows kc) for all nqr query rows
// (qt and s have rows of ld). pf: lines to prefetch, unused here.
inline void qk_block(const float* qt, std::int64_t nqr, std::int64_t ld, std::int64_t dim,
                     const float* kc, std::int64_t nb, float* s, Lines& /*pf*/) {
  if (nqr > static_cast<std::int64_t>(FM::vlmax())) {
    std::int64_t j = 0;
    for (; j + kKeys <= nb; j += kKeys)
      qk_keys_tiled<kKeys>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    if (nb - j == 2) qk_keys_tiled<2>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    if (nb - j == 1) qk_keys_tiled<1>(qt, nqr, ld, dim, kc + j * dim, s + j * ld);
    return;
  }
  qk_keys_block(qt, nqr, ld, dim, kc, nb, s, 0);
}

// o = o * alpha + P.V over the block for all nqr query rows. pf: unused here.
inline void pv_block(float* o, std::int64_t dim_v, const float* alpha, const float* p,
                     std::int64_t nqr, std::int64_t ld, const float* vc, std::int64_t lv,
                     std::int64_t nb, Lines& /*pf*/) {
  pv_cols(o, dim_v, alpha, p, nqr, ld, vc, lv, nb, 0);
}
}  // namespace generic
}  // namespace
}  // namespace rvvk::RVVK_NS
