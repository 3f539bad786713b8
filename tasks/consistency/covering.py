"""Covering arrays for combinatorial consistency testing (KomMKonLLM).

A covering array CA(N; t, levels) has N rows (tests) and one column per input parameter; every
combination of values of every t columns occurs in some row. Row 0 is always all zeros: value 0
of each parameter is the original input, so the first test is the unmodified prompt.

Fewer rows for the same coverage means fewer model calls, so the generator tries hard:

1. direct constructions when they apply (Bush's orthogonal arrays over GF(q): q^t rows, optimal
   when every level is q and k <= q + 1);
2. IPOG (horizontal growth, then vertical growth with don't-care cells), a few seeded restarts;
3. post-optimisation: drop redundant rows, then repeatedly delete a row and repair the array by
   tabu search (Nurmela's move: put an uncovered t-tuple into the row where it costs least).

Everything is deterministic for a seed (budgets are iteration counts, never wall time). Coverage
is bookkept as one flat bitmap/count vector over all t-tuples of all t-subsets of columns.
If ``strength`` exceeds the number of parameters k it is clamped to k (full factorial design).
"""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from itertools import combinations, product
from math import prod
from pathlib import Path

import numpy as np

from lingtest.tasks.core.errors import InputFormatError, LingtestError

DONT_CARE = -1
MAX_LEVEL = 1 << 20  # values per parameter: far beyond an IPM's, and int64-safe in products
DEFAULT_MAX_TUPLES = 500_000  # `lingtest covering-array`: about 15 s of the built-in generator
# Tabu budget, in units of ~1 us on a 2-core VM: a step costs STEP_COST plus ELEMENT_COST per
# (candidate row x affected subset x t). Counted, not timed, so results stay deterministic.
STEP_COST, ELEMENT_COST = 150.0, 0.012
CANDIDATE_ROWS = 32  # rows a tabu step tries (a random sample when the array is taller)


class CoverageError(LingtestError):
    """An array is not a covering array for the given levels and strength."""


class _Space:
    """All t-subsets of columns (grouped by their largest column) and a flat index of t-tuples."""

    def __init__(self, levels: np.ndarray, strength: int):
        self.levels, self.t = levels, strength
        k = len(levels)
        subsets = sorted(combinations(range(k), strength), key=lambda c: c[::-1])
        self.cols = np.array(subsets, dtype=np.int64).reshape(len(subsets), strength)
        sizes = levels[self.cols]
        # mixed radix: the last column of a subset varies fastest
        self.mult = np.cumprod(sizes[:, ::-1], axis=1)[:, ::-1] // sizes
        counts = sizes.prod(axis=1)
        self.offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.total = int(counts.sum())
        self.first_with_max = np.searchsorted(self.cols[:, -1], np.arange(k + 1))
        self.touches = np.stack([(self.cols == c).any(axis=1) for c in range(k)])

    def index(self, array: np.ndarray, sel: slice | np.ndarray = slice(None)) -> np.ndarray:
        """Flat tuple index per (row, selected subset); -1 where a row has a don't-care there."""
        cells = array[:, self.cols[sel]]
        idx = self.offsets[sel] + (cells * self.mult[sel]).sum(axis=-1)
        return np.where((cells < 0).any(axis=-1), -1, idx)

    def upto(self, column: int) -> slice:
        """The subsets whose largest column is <= ``column``."""
        return slice(0, int(self.first_with_max[column + 1]))

    def decode(self, flat: int) -> tuple[np.ndarray, np.ndarray]:
        """(columns, values) of one flat tuple index."""
        s = int(np.searchsorted(self.offsets, flat, side="right")) - 1
        rest = flat - self.offsets[s]
        return self.cols[s], (rest // self.mult[s]) % self.levels[self.cols[s]]

    def counts(self, array: np.ndarray) -> np.ndarray:
        """How many rows cover each t-tuple."""
        idx = self.index(array).ravel()
        return np.bincount(idx[idx >= 0], minlength=self.total)


def _levels(levels: Sequence[int], strength: int) -> tuple[np.ndarray, int]:
    """Validate the model; clamp the strength to the number of parameters."""
    values = [int(v) for v in levels]  # checked as Python ints: 1e23 would overflow int64
    if not values or min(values) < 1 or max(values) > MAX_LEVEL:
        shown = str(values) if len(str(values)) < 120 else str(values)[:117] + "..."
        raise LingtestError(f"covering array: levels must be a non-empty list of integers "
                            f"1..{MAX_LEVEL}, got {shown}; fix: values per parameter, e.g. "
                            f"--values 3,3,2,2")
    if int(strength) < 1:
        raise LingtestError(f"covering array: strength must be >= 1, got {strength}; fix: "
                            f"--strength 2 (pairwise) or more")
    return np.asarray(values, dtype=np.int64), min(int(strength), len(values))


def tuple_count(levels: Sequence[int], strength: int) -> int:
    """How many t-tuples a covering array of this model must cover (t clamped to k): the
    elementary symmetric polynomial e_t of the levels, in O(k·t) exact integer steps (the
    t-subsets themselves can be too many to list)."""
    lv, t = _levels(levels, strength)
    sums = [1] + [0] * t  # sums[j] = e_j of the levels seen so far
    for value in lv.tolist():
        for j in range(t, 0, -1):
            sums[j] += sums[j - 1] * value
    return sums[t]


def check_size(levels: Sequence[int], strength: int, max_tuples: int, option: str,
               strength_option: str = "--strength", what: str = "covering array") -> int:
    """The model's t-tuple count, or a LingtestError when it exceeds ``max_tuples`` (the
    built-in generator and ``check`` take about 30 µs per tuple, and hold every t-subset of
    columns in memory), naming the bound and ``option``, which raises it."""
    count = tuple_count(levels, strength)
    if count > max_tuples:
        t = min(int(strength), len(levels))
        raise LingtestError(f"{what}: {len(levels)} parameters at strength {t} have "
                            f"{count:,} {t}-tuples to cover, above the bound of {max_tuples:,} "
                            f"(about {max_tuples * 30e-6:.0f} s to generate); fix: fewer "
                            f"parameters or values, a lower {strength_option}, or raise the "
                            f"bound with {option} N")
    return count


def missing_tuples(array: np.ndarray, levels: Sequence[int], strength: int) -> int:
    """Number of t-tuples not covered by any row (the array must have the right shape/range)."""
    lv, t = _levels(levels, strength)
    return int((_Space(lv, t).counts(np.asarray(array, dtype=np.int64)) == 0).sum())


def check(array: np.ndarray, levels: Sequence[int], strength: int) -> None:
    """Raise CoverageError unless ``array`` covers every t-tuple of the model."""
    lv, t = _levels(levels, strength)
    a = np.asarray(array)
    if a.ndim != 2 or a.shape[1] != len(lv):
        raise CoverageError(f"covering array has shape {a.shape}, expected (rows, {len(lv)}) "
                            f"for {len(lv)} parameters")
    bad = np.argwhere((a < 0) | (a >= lv))
    if len(bad):
        r, c = bad[0]
        raise CoverageError(f"row {r}, column {c}: value {a[r, c]} out of range "
                            f"[0, {lv[c]}) (fix the array or the levels)")
    space = _Space(lv, t)
    uncovered = np.flatnonzero(space.counts(a.astype(np.int64)) == 0)
    if len(uncovered):
        cols, vals = space.decode(int(uncovered[0]))
        pairs = ", ".join(f"column {c} = {v}" for c, v in zip(cols.tolist(), vals.tolist()))
        raise CoverageError(f"{len(uncovered)} {t}-tuple(s) not covered by the {len(a)} rows, "
                            f"first: {pairs}")


# ---------------------------------------------------------------- direct constructions

def _galois_field(q: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(add, mul) tables of GF(q) if q is a prime power, else None."""
    p = next((d for d in range(2, q + 1) if q % d == 0), q)
    n = round(np.log(q) / np.log(p)) if q > 1 else 0
    if q < 2 or p ** n != q:
        return None
    digits = np.array([[(x // p ** i) % p for i in range(n)] for x in range(q)])
    weights = p ** np.arange(n)
    add = ((digits[:, None] + digits[None]) % p) @ weights

    def mulpoly(a: np.ndarray, b: np.ndarray, modulus: np.ndarray) -> np.ndarray:
        res = np.convolve(a, b) % p
        for i in range(len(res) - 1, n - 1, -1):  # reduce by the monic modulus
            res[i - n:i + 1] = (res[i - n:i + 1] - res[i] * modulus) % p
        return res[:n]

    modulus = next(m for m in (np.array([*tail, 1]) for tail in product(range(p), repeat=n))
                   if _irreducible(m, p))
    mul = np.array([[mulpoly(digits[a], digits[b], modulus) @ weights for b in range(q)]
                    for a in range(q)])
    return add, mul


def _irreducible(modulus: np.ndarray, p: int) -> bool:
    """True if the monic polynomial has no monic factor of degree 1..n/2 (brute force)."""
    n = len(modulus) - 1
    for d in range(1, n // 2 + 1):
        for tail in product(range(p), repeat=d):
            rem = modulus.copy()
            div = np.array([*tail, 1])
            for i in range(n, d - 1, -1):
                rem[i - d:i + 1] = (rem[i - d:i + 1] - rem[i] * div) % p
            if not rem[:d].any():
                return False
    return True


def _bush(levels: np.ndarray, t: int) -> np.ndarray | None:
    """Bush's OA(q^t; t, q+1, q) over the smallest prime power q >= max level, values folded."""
    q = int(levels.max())
    while q <= 64 and _galois_field(q) is None:
        q += 1
    if q > 64 or len(levels) > q + 1 or t > q or q ** t > 1e5:
        return None
    add, mul = _galois_field(q)
    coef = np.array(list(product(range(q), repeat=t)))  # polynomial c0 + c1 x + ...
    cols = []
    for x in range(min(len(levels), q)):  # evaluate every polynomial at x (Horner)
        val = coef[:, t - 1].copy()
        for i in range(t - 2, -1, -1):
            val = add[mul[val, x], coef[:, i]]
        cols.append(val)
    if len(levels) == q + 1:
        cols.append(coef[:, t - 1])  # the point at infinity: the leading coefficient
    return np.stack(cols, axis=1) % levels  # folding values >= level keeps the coverage


# ---------------------------------------------------------------- IPOG

def _ipog(levels: np.ndarray, t: int, space: _Space, rng: np.random.Generator,
          seed_block: np.ndarray | None) -> np.ndarray:
    """IPOG: grow column by column; cells no tuple needs stay don't-care (-1)."""
    k = len(levels)
    if seed_block is None:
        seed_block = np.array(list(product(*(range(v) for v in levels[:t]))), dtype=np.int64)
    start = seed_block.shape[1]
    array = np.full((len(seed_block), k), DONT_CARE, dtype=np.int64)
    array[:, :start] = seed_block
    covered = np.zeros(space.total + 1, dtype=bool)  # the extra last cell absorbs index -1
    covered[space.index(array, space.upto(start - 1))] = True
    for i in range(start, k):
        sel = slice(int(space.first_with_max[i]), int(space.first_with_max[i + 1]))
        step = space.mult[sel, -1]
        values = np.arange(levels[i])
        probe = array.copy()
        probe[:, i] = 0
        base = space.index(probe, sel)
        for r in range(len(array)):  # horizontal growth: the value covering most new tuples
            valid = base[r] >= 0
            cand = base[r, valid][:, None] + step[valid][:, None] * values
            gain = (~covered[cand]).sum(axis=0)
            if gain.max() == 0:
                continue
            choices = np.flatnonzero(gain == gain.max())
            v = choices[rng.integers(len(choices))]
            array[r, i] = v
            covered[cand[:, v]] = True
        lo = space.offsets[sel.start]
        hi = space.offsets[sel.stop] if sel.stop < len(space.offsets) else space.total
        for u in np.flatnonzero(~covered[lo:hi]) + lo:  # vertical growth
            if covered[u]:
                continue
            cols, vals = space.decode(int(u))
            cells = array[:, cols]
            fits = np.flatnonzero(((cells == vals) | (cells < 0)).all(axis=1))
            if len(fits):
                r = int(fits[0])
            else:
                array = np.vstack([array, np.full((1, k), DONT_CARE, dtype=np.int64)])
                r = len(array) - 1
            array[r, cols] = vals
            covered[space.index(array[r:r + 1], space.upto(i))] = True
    return array


def _drop_redundant(array: np.ndarray, space: _Space) -> np.ndarray:
    """Remove rows whose every tuple is also covered elsewhere (fewest unique tuples first)."""
    idx = space.index(array)
    cnt = np.bincount(idx[idx >= 0], minlength=space.total)
    unique = ((cnt[idx] == 1) & (idx >= 0)).sum(axis=1)
    keep = np.ones(len(array), dtype=bool)
    for r in np.argsort(unique, kind="stable"):
        mine = idx[r][idx[r] >= 0]
        if (cnt[mine] >= 2).all():
            cnt[mine] -= 1
            keep[r] = False
    return array[keep]


def _fill(array: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Give every don't-care cell a random value (they are free; the tabu search uses them)."""
    free = array < 0
    array[free] = (rng.random(array.shape) * levels)[free].astype(np.int64)
    return array


# ---------------------------------------------------------------- post-optimisation

def _repair(array: np.ndarray, space: _Space, rng: np.random.Generator,
            iterations: int) -> int | None:
    """Tabu search in place until every tuple is covered: iterations used, None if out of budget."""
    idx = space.index(array)
    cnt = np.bincount(idx.ravel(), minlength=space.total)
    missing = int((cnt == 0).sum())
    changed = np.full(array.shape, -10**9)
    tenure = max(1, len(array) // 5)
    sample = len(array) > CANDIDATE_ROWS
    everyone = np.arange(len(array))
    for it in range(iterations):
        if missing == 0:
            return it
        zeros = np.flatnonzero(cnt == 0)
        cols, vals = space.decode(int(zeros[rng.integers(len(zeros))]))
        aff = space.touches[cols].any(axis=0)
        rows = rng.choice(len(array), CANDIDATE_ROWS, replace=False) if sample else everyone
        trial = array[rows]
        trial[:, cols] = vals
        old, new = idx[rows][:, aff], space.index(trial, aff)
        diff = old != new
        delta = (((cnt[old] == 1) & diff).sum(axis=1) - ((cnt[new] == 0) & diff).sum(axis=1))
        allowed = (changed[rows][:, cols].max(axis=1) < it - tenure) | (missing + delta == 0)
        if not allowed.any():
            continue
        score = np.where(allowed, delta, np.iinfo(np.int64).max)
        best = np.flatnonzero(score == score.min())
        pick = int(best[rng.integers(len(best))])
        r = int(rows[pick])
        cnt[old[pick][diff[pick]]] -= 1  # a row's tuples are distinct: plain indexing is safe
        cnt[new[pick][diff[pick]]] += 1
        idx[r, aff] = new[pick]
        array[r, cols] = vals
        missing += int(delta[pick])
        changed[r, cols] = it
    return iterations if missing == 0 else None


def _shrink(array: np.ndarray, space: _Space, rng: np.random.Generator, floor: int) -> np.ndarray:
    """Delete the row covering fewest tuples alone and repair; repeat while repairs succeed."""
    work = 1e6 * min(5.0, 0.3 + space.total / 15000)  # t=2 models stay well under 1 s
    aff = int(space.touches[: space.t].any(axis=0).sum())
    while len(array) > floor and work > 0:
        idx = space.index(array)
        cnt = np.bincount(idx.ravel(), minlength=space.total)
        trial = np.delete(array, int(np.argmin((cnt[idx] == 1).sum(axis=1))), axis=0)
        cost = STEP_COST + ELEMENT_COST * min(len(trial), CANDIDATE_ROWS) * aff * space.t
        used = _repair(trial, space, rng, int(work // cost))
        if used is None:
            break
        array, work = trial, work - used * cost
    return array


# ---------------------------------------------------------------- public API

def _zero_first_row(array: np.ndarray) -> np.ndarray:
    """Relabel values per column (swap the first row's value with 0): coverage is unchanged."""
    out = array.copy()
    for j, a in enumerate(array[0]):
        out[:, j] = np.where(array[:, j] == a, 0, np.where(array[:, j] == 0, a, array[:, j]))
    return out


def generate(levels: Sequence[int], strength: int, seed: int = 0,
             optimise: bool = True) -> np.ndarray:
    """A covering array of strength t (clamped to k) with row 0 all zeros; deterministic per seed.

    ``optimise=False`` returns the first construction (Bush OA if it applies, else one IPOG
    run); otherwise seeded IPOG restarts, redundant-row removal and tabu row deletion.
    """
    lv, t = _levels(levels, strength)
    rng = np.random.default_rng(seed)
    order = np.argsort(-lv, kind="stable")  # IPOG does best with the big alphabets first
    sl = lv[order]
    space = _Space(sl, t)
    floor = int(prod(sl[:t]))  # every tuple of the t largest alphabets needs its own row
    candidates = []
    bush = _bush(sl, t)
    if bush is not None:
        candidates.append(bush)
    oa_seed = None  # an OA on a prefix of equal prime-power columns is a strong IPOG start
    if optimise and (sl[:t] == sl[0]).all() and _galois_field(int(sl[0])) is not None:
        oa_seed = _bush(sl[:int(sl[0]) + 1], t)
    restarts = 1 if not optimise else int(np.clip(2e6 / (space.total * 30 + 1), 2, 8))
    if bush is None or (optimise and len(_drop_redundant(bush, space)) > floor):
        for attempt in range(restarts):
            seed_block = oa_seed if attempt % 2 == 0 else None
            candidates.append(_ipog(sl, t, space, rng, seed_block))
    if optimise:
        candidates = [_drop_redundant(c, space) for c in candidates]
    best = _fill(min(candidates, key=len), sl, rng)
    if optimise and len(best) > floor:
        best = _shrink(best, space, rng, floor)
    out = np.empty_like(best)
    out[:, order] = best
    return _zero_first_row(out)


def covering_array(levels: Sequence[int], strength: int, seed: int = 0,
                   generator: str = "builtin", binary: str | None = None) -> np.ndarray:
    """Dispatch to the built-in or an external generator; always checked, row 0 all zeros."""
    lv, t = _levels(levels, strength)
    if generator == "builtin":
        array = generate(lv.tolist(), t, seed)
    else:
        from lingtest.tasks.consistency.external import run_external

        array = run_external(generator, lv.tolist(), t, seed, binary)
        array = _zero_first_row(array) if len(array) else np.zeros((1, len(lv)), np.int64)
    check(array, lv.tolist(), t)
    return array


def ca_csv_text(array: np.ndarray) -> str:
    """KomMKonLLM's ca-N.csv text: one row per test, value indices, commas, no header."""
    return "".join(",".join(str(int(v)) for v in row) + "\n" for row in np.asarray(array))


def write_ca_csv(array: np.ndarray, path: str | Path) -> None:
    """Write ``array`` as a ca-N.csv file."""
    Path(path).write_text(ca_csv_text(array), encoding="utf-8")


def read_ca_csv(path: str | Path) -> np.ndarray:
    """Read a ca-N.csv file; blank lines are ignored, anything else malformed is an error."""
    fix = "expected one test per line: non-negative integers separated by commas, no header"
    from lingtest.tasks.core.io import read_input_text

    rows: list[list[int]] = []
    text = read_input_text(path, "a ca-N.csv is UTF-8 text, one row of integers per line")
    with io.StringIO(text, newline="") as handle:
        for line, fields in enumerate(csv.reader(handle), start=1):
            if not any(f.strip() for f in fields):
                continue
            try:
                row = [int(f) for f in fields]
            except ValueError:  # not an integer, or more digits than Python converts
                raise InputFormatError(path, line, f"not an integer in {str(fields)[:80]}",
                                       fix) from None
            if min(row) < 0:
                raise InputFormatError(path, line, f"negative value in {fields!r}", fix)
            if max(row) > MAX_LEVEL:
                raise InputFormatError(path, line, f"value {max(row)} above {MAX_LEVEL}", fix)
            if rows and len(row) != len(rows[0]):
                raise InputFormatError(path, line, f"{len(row)} values, the first row has "
                                       f"{len(rows[0])}", fix)
            rows.append(row)
    if not rows:
        raise InputFormatError(path, None, "no rows", fix)
    return np.array(rows, dtype=np.int64)
