"""Tensor's DLPack export: NumPy and torch take a xylem.Tensor through from_dlpack, as a host copy."""
import numpy as np
import pytest

import xylem


def test_numpy_from_dlpack_gives_the_values():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = xylem.tensor(a, device="native")
    assert t.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(t)
    assert b.dtype == np.float32 and b.shape == (3, 4)
    np.testing.assert_array_equal(b, a)


def test_int32_tensor_round_trips():
    a = np.array([[1, -2], [3, 2**31 - 1]], dtype=np.int32)
    np.testing.assert_array_equal(np.from_dlpack(xylem.tensor(a, device="native")), a)


def test_torch_from_dlpack():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32)
    got = torch.utils.dlpack.from_dlpack(xylem.tensor(a, device="native").__dlpack__())
    assert got.dtype == torch.float32 and tuple(got.shape) == (2, 5)
    np.testing.assert_array_equal(got.numpy(), a)


def test_capsule_outlives_the_tensor():
    t = xylem.tensor(np.full((4,), 2.5, dtype=np.float32), device="native")
    capsule = t.__dlpack__()
    del t
    import gc
    gc.collect()
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(torch.utils.dlpack.from_dlpack(capsule).numpy(), np.full((4,), 2.5, np.float32))
