"""The torch tests run only where PyTorch is installed (CI installs the extra); one thread keeps them quick.

Without PyTorch the root ``conftest.py`` reports every file here but ``test_import.py`` as skipped.
"""

from importlib.util import find_spec

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny layers run faster on one thread than when threads contend for a shared machine's cores."""
    if find_spec("torch") is None:  # test_import.py checks that very case
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
