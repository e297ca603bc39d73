"""The torch tests run only where PyTorch is installed (CI installs the extra); one thread keeps them quick."""

from importlib.util import find_spec
from pathlib import Path

import pytest

#: Without PyTorch (a plain install) only test_import.py, which checks that case, has something to run.
collect_ignore = [] if find_spec("torch") else [
    path.name for path in Path(__file__).parent.glob("test_*.py") if path.name != "test_import.py"]


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny layers run faster on one thread than when threads contend for a shared machine's cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
