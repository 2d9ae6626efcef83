"""cov/corrcoef: weights, corrections, one variable, too few observations, dynamic sizes."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.helpers import Fn, export_and_compare


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_cov_with_frequency_and_analytic_weights(correction: int) -> None:
    x = torch.randn(3, 6)
    fw = torch.tensor([1, 2, 0, 3, 1, 1])
    aw = torch.rand(6)
    fn = Fn(lambda x, f, a: torch.cov(x, correction=correction, fweights=f, aweights=a))
    export_and_compare(fn, (x, fw, aw))
    export_and_compare(Fn(lambda x, f: torch.cov(x, correction=correction, fweights=f)), (x, fw))


def test_cov_and_corrcoef_of_one_variable_are_0d() -> None:
    export_and_compare(Fn(torch.cov), (torch.randn(7),))
    export_and_compare(Fn(torch.corrcoef), (torch.randn(1, 7),))


def test_cov_with_too_few_observations_gives_inf_or_nan() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager warns about the degrees of freedom
        export_and_compare(Fn(torch.cov), (torch.randn(2, 1),))


def test_corrcoef_with_dynamic_observations() -> None:
    obs = torch.export.Dim("observations")
    program = export_and_compare(Fn(torch.corrcoef), (torch.randn(3, 8),),
                                 dynamic_shapes=(({1: obs},),))
    x = torch.randn(3, 13)
    torch.testing.assert_close(program(x)[0], torch.corrcoef(x))
