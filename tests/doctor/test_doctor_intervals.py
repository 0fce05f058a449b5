"""The doctor's interval arithmetic against a brute-force count on an integer grid, and the
exposed time of synthetic copies (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.doctor.intervals import covered, merge, subtract

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=25)


def _grid(pairs, lo=0, hi=300):
    g = np.zeros(hi - lo, bool)
    for s, d in pairs:
        g[s : s + d] = True
    return g


@settings(max_examples=200, deadline=None)
@given(spans)
def test_merge_gives_disjoint_sorted_blocks_covering_the_same_points(pairs):
    s = np.array([p[0] for p in pairs], float)
    e = s + np.array([p[1] for p in pairs], float)
    ms, me = merge(s, e)
    assert np.all(me > ms)
    assert np.all(ms[1:] > me[:-1])  # disjoint and not touching
    assert (me - ms).sum() == _grid(pairs).sum()


@settings(max_examples=200, deadline=None)
@given(spans, st.lists(st.tuples(st.integers(0, 250), st.integers(0, 50)), min_size=1, max_size=10))
def test_covered_length_matches_a_brute_force_count(pairs, queries):
    s = np.array([p[0] for p in pairs], float)
    u = merge(s, s + np.array([p[1] for p in pairs], float))
    a = np.array([q[0] for q in queries], float)
    b = a + np.array([q[1] for q in queries], float)
    g = _grid(pairs)
    want = [g[int(x) : int(y)].sum() for x, y in zip(a, b, strict=True)]
    np.testing.assert_allclose(covered(u, a, b), want)


@settings(max_examples=200, deadline=None)
@given(spans, st.integers(0, 250), st.integers(1, 50))
def test_exposed_time_never_exceeds_the_copy_and_the_uncovered_parts_add_up(pairs, a, d):
    s = np.array([p[0] for p in pairs], float)
    u = merge(s, s + np.array([p[1] for p in pairs], float))
    exposed = d - covered(u, np.array([a], float), np.array([a + d], float))[0]
    assert 0 <= exposed <= d
    parts = subtract(float(a), float(a + d), u)
    assert sum(y - x for x, y in parts) == exposed
    assert all(a <= x < y <= a + d for x, y in parts)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 100), st.integers(1, 50))
def test_a_copy_with_nothing_beside_it_is_exposed_whole_and_one_inside_a_kernel_not_at_all(a, d):
    empty = merge(np.array([]), np.array([]))
    assert covered(empty, np.array([a], float), np.array([a + d], float))[0] == 0
    around = merge(np.array([a - 1.0]), np.array([a + d + 1.0]))
    assert covered(around, np.array([a], float), np.array([a + d], float))[0] == d
