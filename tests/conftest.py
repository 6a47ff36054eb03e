"""Shared test settings."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # The tests train tiny networks on 2 shared cores: torch's thread pool
    # only adds contention (an idle OpenMP barrier costs more than the work).
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
