"""Cached arrays read by row (NpyOnDisk): what indexing the array gives, and clear errors."""

import gc
import os
import pickle

import numpy as np
import pytest

from filters.packaged import NpyOnDisk


def test_rows_read_from_disk_are_the_rows_indexing_gives(tmp_path):
    weights = np.random.default_rng(0).standard_normal((5_000, 142)).astype("<f2")
    np.save(tmp_path / "weights.npy", weights)
    on_disk = NpyOnDisk(tmp_path / "weights.npy", "<f2", ndim=2)
    rows = np.array([4_999, 0, 17, 17, 2_500], dtype=np.intp)
    assert len(on_disk) == 5_000 and np.array_equal(on_disk[rows], weights[rows])
    assert on_disk[rows[:0]].shape == (0, 142)
    assert on_disk.rows_between(3, 6) == weights[3:6].tobytes() and on_disk.rows_between(7, 7) == b""
    with pytest.raises(IndexError):
        on_disk[np.array([5_000])]
    with pytest.raises(IndexError):
        on_disk.rows_between(4_999, 5_001)


def test_an_array_of_another_kind_is_refused_naming_the_file(tmp_path):
    np.save(tmp_path / "floats.npy", np.zeros(10, np.float64))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((3, 4), "<f2")))
    with pytest.raises(ValueError, match="floats.npy"):
        NpyOnDisk(tmp_path / "floats.npy", "<i8", ndim=1)
    with pytest.raises(ValueError, match="fortran.npy"):
        NpyOnDisk(tmp_path / "fortran.npy", "<f2", ndim=2)


def test_a_pickled_copy_reads_through_its_own_descriptor_and_each_closes_its_own(tmp_path):
    weights = np.arange(40, dtype="<i8").reshape(10, 4)
    np.save(tmp_path / "rows.npy", weights)
    original = NpyOnDisk(tmp_path / "rows.npy", "<i8", ndim=2)
    copy = pickle.loads(pickle.dumps(original))
    assert copy.fd != original.fd and np.array_equal(copy[np.array([9, 1])], weights[[9, 1]])
    descriptor = original.fd
    del original
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(descriptor)
    assert copy.rows_between(2, 3) == weights[2].tobytes()


def test_a_truncated_file_and_an_index_it_cannot_serve_raise_naming_the_file(tmp_path):
    np.save(tmp_path / "rows.npy", np.arange(1_000, dtype="<i8"))
    on_disk = NpyOnDisk(tmp_path / "rows.npy", "<i8", ndim=1)
    os.truncate(tmp_path / "rows.npy", on_disk.offset + 8 * 500)
    with pytest.raises(OSError, match="rows.npy: read 0 of 8 bytes at row 700"):
        on_disk[np.array([3, 700])]
    with pytest.raises(OSError, match="rows.npy: read 32 of 80 bytes"):
        on_disk.rows_between(496, 506)
    with pytest.raises(TypeError, match="rows.npy"):
        on_disk[(slice(None), [0, 1])]
