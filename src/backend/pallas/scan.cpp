#include "backend/pallas/scan.h"

namespace parhelion::backend::pallas {

bool uses_scan(const ir::Function& fn) {
  bool any = false;
  for (const ir::Op& launch : fn.body)
    ir::walk(launch.body, [&](const ir::Op& op) { any |= op.kind == ir::OpKind::Scan; });
  return any;
}

// Step s combines each element with the one 2^s before it in scan order (a roll brings it
// under it), where that one is valid: the valid elements are [start, start + n_valid) (start
// is 0 but in a jagged loop's trip, whose rows are a window of the block it reads): for a
// forward scan at index >= start + 2^s, for a reverse one at index + 2^s < start + n_valid.
// So a ragged block's padding, or the rows around a jagged trip's window, never reach a valid
// element either way, and no identity element of the combine is needed. Booleans are rolled
// as int32 (Mosaic rotates 32-bit vectors).
std::string scan_helpers() {
  return R"PY(def _roll(x, shift, axis):
    """x rotated by `shift` along axis, as jnp.roll: element i - shift arrives at i."""
    if x.dtype == jnp.bool_:
        return pltpu.roll(x.astype(jnp.int32), shift, axis) != 0
    return pltpu.roll(x, shift, axis)


def _scan(xs, axis, start, n_valid, reverse, combine):
    """The inclusive scan of the tuple of blocks xs along axis under combine(*a, *b) (a the
    running tuple, b the next element's) over the valid elements [start, start + n_valid), from
    the first or, reversed, from the last. Hillis-Steele: log2(size) steps of rolls and selects."""
    size = xs[0].shape[axis]
    idx = jax.lax.broadcasted_iota(jnp.int32, xs[0].shape, axis)
    shift = 1
    while shift < size:
        if reverse:
            later = tuple(_roll(x, size - shift, axis) for x in xs)  # element i + shift at i
            new = combine(*later, *xs)
            ok = idx + shift < start + n_valid
        else:
            earlier = tuple(_roll(x, shift, axis) for x in xs)  # element i - shift at i
            new = combine(*earlier, *xs)
            ok = idx >= start + shift
        xs = tuple(jnp.where(ok, r, x).astype(x.dtype) for r, x in zip(new, xs))
        shift *= 2
    return xs


)PY";
}

}  // namespace parhelion::backend::pallas
