"""The public .npy calls (cinfer_npy_read, cinfer_npy_write) through the shared library, against numpy's own files."""
import ctypes

import numpy as np
import pytest

from cinfer_ctypes import Tensor

DTYPES = {np.float32: 1, np.uint8: 2, np.int8: 3, np.int32: 6, np.int64: 7, np.bool_: 9, np.float16: 10,
          np.float64: 11}


@pytest.fixture(scope="module")
def npy(lib):
    L = lib.lib
    L.cinfer_npy_read.argtypes = [ctypes.c_char_p, ctypes.POINTER(Tensor)]
    L.cinfer_npy_write.argtypes = [ctypes.c_char_p, ctypes.POINTER(Tensor)]
    return L


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_read_what_numpy_wrote(lib, npy, tmp_path, dtype):
    want = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    np.save(tmp_path / "a.npy", want)
    t = Tensor()
    lib.check(npy.cinfer_npy_read(str(tmp_path / "a.npy").encode(), ctypes.byref(t)))
    try:
        assert (t.dtype, t.ndim, list(t.dims[:t.ndim])) == (DTYPES[dtype], 3, [2, 3, 4])
        got = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_uint8)), (want.nbytes,))
        assert got.tobytes() == want.tobytes()
    finally:
        lib.lib.cinfer_tensor_free_data(ctypes.byref(t))
    assert not t.data


def test_numpy_reads_what_cinfer_wrote(lib, npy, tmp_path):
    want = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    t = Tensor(name=None, dtype=1, ndim=2, data=want.ctypes.data)
    t.dims[0], t.dims[1] = 3, 4
    lib.check(npy.cinfer_npy_write(str(tmp_path / "b.npy").encode(), ctypes.byref(t)))
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), want)
    scalar = np.array(2.5, np.float64)
    s = Tensor(name=None, dtype=11, ndim=0, data=scalar.ctypes.data)
    lib.check(npy.cinfer_npy_write(str(tmp_path / "s.npy").encode(), ctypes.byref(s)))
    assert np.load(tmp_path / "s.npy").shape == () and np.load(tmp_path / "s.npy") == 2.5


def test_errors_name_the_file(lib, npy, tmp_path):
    t = Tensor()
    missing = tmp_path / "missing.npy"
    assert npy.cinfer_npy_read(str(missing).encode(), ctypes.byref(t)) != 0
    assert str(missing) in lib.lib.cinfer_last_error().decode()
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((2, 3), np.float32)))
    assert npy.cinfer_npy_read(str(tmp_path / "f.npy").encode(), ctypes.byref(t)) != 0
    assert "Fortran" in lib.lib.cinfer_last_error().decode()
    bad = Tensor(name=None, dtype=1, ndim=1, data=None)
    bad.dims[0] = -2
    assert npy.cinfer_npy_write(str(tmp_path / "bad.npy").encode(), ctypes.byref(bad)) != 0
    assert "bad.npy" in lib.lib.cinfer_last_error().decode() and "-2" in lib.lib.cinfer_last_error().decode()
