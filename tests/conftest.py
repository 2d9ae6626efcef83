"""Shared fixtures: seed everything, helpers for model tests."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all-samples", action="store_true", help="run every OpInfo sample per op")
    parser.addoption("--ops-sample", type=int, default=1,
                     help="run one op test in N of tests/ops/test_ops.py (the newest-torch smoke)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    every = config.getoption("--ops-sample")
    if every <= 1:
        return
    ops = [item for item in items if item.nodeid.startswith("tests/ops/test_ops.py::")]
    dropped = set(ops) - set(ops[::every])
    if dropped:
        config.hook.pytest_deselected(items=list(dropped))
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
