#include "backend/pallas/random.h"

namespace parhelion::backend::pallas {

// Integers are int32 here: products wrap mod 2^32 as unsigned ones do, right shifts of words
// are logical (lax.shift_right_logical), and constants above 2^31 are written as their signed
// equivalents. The uniform and normal maps are lang.h's (and the cpu runtime's) operation for
// operation, except that the cosine is evaluated by the same polynomials in f32.
std::string random_helpers() {
  return R"PY(def _srl(x, n):
    return jax.lax.shift_right_logical(x, jnp.int32(n))


def _mul_hi_lo(a, m_hi, m_lo):
    """The high and low words of the 64-bit product of words a and m = m_hi * 2^16 + m_lo."""
    a_hi, a_lo = _srl(a, 16), a & 0xFFFF
    ll, hl, lh, hh = a_lo * m_lo, a_hi * m_lo, a_lo * m_hi, a_hi * m_hi
    mid = _srl(ll, 16) + (hl & 0xFFFF) + (lh & 0xFFFF)
    hi = hh + _srl(hl, 16) + _srl(lh, 16) + _srl(mid, 16)
    lo = (mid << 16) | (ll & 0xFFFF)
    return hi, lo


def _philox(seed, offset):
    """Words 0 and 1 of Philox-4x32-10 at counter (offset lo, hi, 0, 0), key (seed lo, hi)."""
    shape = jnp.broadcast_shapes(jnp.shape(seed), jnp.shape(offset))
    offset = jnp.broadcast_to(jnp.asarray(offset, jnp.int32), shape)
    seed = jnp.broadcast_to(jnp.asarray(seed, jnp.int32), shape)
    c0, c1 = offset, offset >> 31  # the high words of 32-bit values: their sign
    c2 = c3 = jnp.zeros_like(offset)
    k0, k1 = seed, seed >> 31
    for _ in range(10):
        hi0, lo0 = _mul_hi_lo(c0, 0xD251, 0x1F53)  # 0xD2511F53
        hi1, lo1 = _mul_hi_lo(c2, 0xCD9E, 0x8D57)  # 0xCD9E8D57
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + jnp.int32(-1640531527)  # + 0x9E3779B9
        k1 = k1 + jnp.int32(-1150833019)  # + 0xBB67AE85
    return c0, c1


def _uniform_of(w):
    """A word as f32 in [0, 1): negatives folded by ~w, times a scale just below 2^-31."""
    return jnp.where(w < 0, ~w, w).astype(jnp.float32) * jnp.float32(4.6566127342e-10)


def _cos_2pi(u):
    """cos(2 pi u): reduced exactly in u, then Taylor polynomials on [0, pi/4]."""
    a = jnp.abs(u - jnp.round(u))
    flip = a > 0.25
    b = jnp.where(flip, 0.5 - a, a)
    use_sin = b > 0.125
    x = jnp.where(use_sin, 0.25 - b, b) * jnp.float32(6.28318530717958648)
    x2 = x * x
    c = 1.0 + x2 * (-0.5 + x2 * (4.16666667e-2 + x2 * (-1.38888889e-3 + x2 * (2.48015873e-5 + x2 * -2.75573192e-7))))
    s = x * (1.0 + x2 * (-0.166666667 + x2 * (8.33333333e-3 + x2 * (-1.98412698e-4 + x2 * 2.75573192e-6))))
    r = jnp.where(use_sin, s, c)
    return jnp.where(flip, -r, r)


def _philox_uniform(seed, offset):
    return _uniform_of(_philox(seed, offset)[0])


def _philox_normal(seed, offset):
    w0, w1 = _philox(seed, offset)
    u1 = jnp.maximum(_uniform_of(w0), jnp.float32(1.0e-7))
    return jnp.sqrt(-2.0 * jnp.log(u1)) * _cos_2pi(_uniform_of(w1))


)PY";
}

}  // namespace parhelion::backend::pallas
