"""Shared fixtures: seed everything, helpers for model tests."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all-samples", action="store_true", help="run every OpInfo sample per op")


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
