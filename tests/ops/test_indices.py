"""hpcdgnn.indices' set operations on integer arrays give numpy's results (values, order, dtype)."""

import numpy as np
import pytest

from hpcdgnn.indices import intersect_ints, setdiff_ints, union_ints, unique_ints


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
def test_unique_ints_equals_np_unique(dtype):
    rng = np.random.default_rng(0)
    for size in (0, 1, 2, 3, 17, 1000):
        for high in (1, 5, 10**6):
            x = rng.integers(0, high, size).astype(dtype)
            got, want = unique_ints(x), np.unique(x)
            assert got.dtype == want.dtype and np.array_equal(got, want)
    x = rng.integers(-50, 50, (7, 9))  # negatives, a 2-D array flattened as np.unique does
    assert np.array_equal(unique_ints(x), np.unique(x))


def test_unique_ints_refuses_floats():
    with pytest.raises(TypeError, match="integers"):
        unique_ints(np.array([1.0, 1.0]))


def test_set_operations_equal_numpy():
    rng = np.random.default_rng(1)
    for _ in range(500):
        a = rng.integers(-3, int(rng.integers(1, 40)), int(rng.integers(0, 30)))
        b = rng.integers(-3, int(rng.integers(1, 40)), int(rng.integers(0, 30)))
        for ours, theirs in ((union_ints, np.union1d), (setdiff_ints, np.setdiff1d), (intersect_ints, np.intersect1d)):
            got, want = ours(a, b), theirs(a, b)
            assert got.dtype == want.dtype and np.array_equal(got, want), (ours.__name__, a, b)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint16, np.int64, np.uint64])
def test_dense_ranges_at_the_ends_of_the_type_equal_numpy(dtype):
    """Ids within a few times their count of each other take the table path: its offsets and the values back
    stay exact at a type's extremes (int8 from -100 to 100 overflows int8)."""
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    for base in (int(info.min), 0, int(info.max) - 70):
        for _ in range(100):
            a, b = (np.array([base + int(v) for v in rng.integers(0, 70, int(rng.integers(0, 40)))], dtype=dtype)
                    for _ in range(2))
            assert np.array_equal(unique_ints(a), np.unique(a)) and unique_ints(a).dtype == a.dtype
            for ours, theirs in ((union_ints, np.union1d), (setdiff_ints, np.setdiff1d),
                                 (intersect_ints, np.intersect1d)):
                got, want = ours(a, b), theirs(a, b)
                assert got.dtype == want.dtype and np.array_equal(got, want), (ours.__name__, a, b)
    spread = np.array([-100, 100, 5, -100], dtype=np.int8)
    assert np.array_equal(unique_ints(spread), np.array([-100, 5, 100], dtype=np.int8))
