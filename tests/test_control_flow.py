"""torch.cond -> If and while_loop -> Loop, checked against eager on every path."""

from __future__ import annotations

from typing import Any

import torch
from torch._higher_order_ops.while_loop import while_loop

import onnxport
from tests.helpers import check_model, count


class CondModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu()

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return x - 1

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,)) * 2


def test_cond_becomes_if_and_matches_both_branches() -> None:
    model = CondModel().eval()
    program = onnxport.export(model, (torch.ones(2, 3),))
    assert program is not None
    check_model(program)
    assert count(program, "If") == 1
    for x in (torch.ones(2, 3), -torch.ones(2, 3), torch.randn(2, 3)):
        torch.testing.assert_close(program(x)[0], model(x).detach())


class WhileModel(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return i < n

        def body_fn(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, x * 2 + 1

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


def test_while_loop_becomes_loop_and_matches_trip_counts() -> None:
    model = WhileModel()
    program = onnxport.export(model, (torch.randn(2, 3), torch.tensor(3)))
    assert program is not None
    check_model(program)
    assert count(program, "Loop") == 1
    for trips in (0, 1, 5):
        x, n = torch.randn(2, 3), torch.tensor(trips)
        expected = model(x, n)
        actual = program(x, n)
        torch.testing.assert_close(actual[0], expected[0])
        torch.testing.assert_close(actual[1], expected[1])


class ScanModel(torch.nn.Module):
    def forward(self, init: torch.Tensor, xs: torch.Tensor, w: torch.Tensor) -> Any:
        from torch._higher_order_ops.scan import scan

        def combine(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            new = carry + x * w
            return new, new.sin()

        return scan(combine, init, xs)


def test_scan_becomes_scan_and_matches_eager() -> None:
    model = ScanModel()
    args = (torch.zeros(3), torch.randn(5, 3), torch.randn(3))
    program = onnxport.export(model, args)
    assert program is not None
    check_model(program)
    assert count(program, "Scan") == 1
    expected = model(*args)
    actual = program(*args)
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[1], expected[1])
