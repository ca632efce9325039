"""Shared pytest fixtures: the ctypes binding of libcinfer and small model builders."""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "python"))
from cinfer_ctypes import Library  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def lib():
    return Library()


@pytest.fixture(scope="session")
def cli():
    return os.environ.get("CINFER_CLI", str(ROOT / "build" / "cinfer"))
