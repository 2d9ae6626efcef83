"""Edge cases for FFTs and complex tensors, which ONNX carries as real (..., 2) pairs."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import pytest
import torch

import onnxport
from tests.helpers import Fn, export_and_compare, op_types


def check(fn: Any, *args: Any, **kwargs: Any) -> onnxport.ONNXProgram:
    return export_and_compare(Fn(fn), args, **kwargs)


X = torch.randn(3, 6, 5)
Z = torch.randn(3, 6, 5, dtype=torch.complex64)


# -- the representation ------------------------------------------------------------------
def test_complex_input_and_output_are_pairs_in_the_model() -> None:
    program = check(lambda z: z * 2, Z)
    graph = program.model.graph
    assert graph.inputs[0].dtype == ir.DataType.FLOAT
    assert list(graph.inputs[0].shape) == [3, 6, 5, 2]
    assert list(graph.outputs[0].shape) == [3, 6, 5, 2]
    assert program.model.metadata_props["pkg.onnxport.complex_inputs"] == "0"
    assert program.model.metadata_props["pkg.onnxport.complex_outputs"] == "0"
    # Called, the program returns the pairs the graph holds, as torch.onnx's ONNXProgram does.
    out = program(Z)[0]
    assert out.dtype == torch.float32 and out.shape == (3, 6, 5, 2)
    torch.testing.assert_close(torch.view_as_complex(out), Z * 2)


def test_only_complex_outputs_are_listed() -> None:
    program = check(lambda x: (x + 1, torch.fft.fft(x), torch.fft.rfft(x).abs()), X)
    assert program.model.metadata_props["pkg.onnxport.complex_outputs"] == "1"
    assert "pkg.onnxport.complex_inputs" not in program.model.metadata_props


def test_no_cast_to_a_complex_type() -> None:
    program = check(lambda x: torch.fft.ifft(x.to(torch.complex128)), X)
    for node in program.model.graph.all_nodes():
        if node.op_type == "Cast":
            assert node.attributes["to"].as_int() not in (ir.DataType.COMPLEX64,
                                                           ir.DataType.COMPLEX128)


def test_complex128_is_double_pairs() -> None:
    program = check(lambda z: torch.fft.fft(z), Z.to(torch.complex128))
    assert program.model.graph.outputs[0].dtype == ir.DataType.DOUBLE


def test_complex_weight_is_stored_as_pairs() -> None:
    class Rotate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(5, dtype=torch.complex64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.view_as_real(torch.fft.fft(x) * self.w)

    export_and_compare(Rotate(), (X,))


def test_conjugated_input_is_resolved() -> None:
    check(lambda z: z + 1, Z.conj())


# -- FFTs --------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", [None, "forward", "ortho"])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_one_dim_norms_and_negative_dims(name: str, norm: str | None) -> None:
    fn = getattr(torch.fft, name)
    check(lambda x: fn(x, dim=-2, norm=norm), X)


@pytest.mark.parametrize("n", [3, 8, 13])
def test_lengths_pad_and_trim(n: int) -> None:
    check(lambda x: (torch.fft.fft(x, n=n), torch.fft.irfft(x, n=n)), X)


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"])
def test_n_dims_with_sizes(name: str) -> None:
    fn = getattr(torch.fft, name)
    check(lambda x: fn(x, s=(4, 7), dim=(0, -1), norm="ortho"), X)


def test_complex_input_fft_and_inverse_round_trip() -> None:
    check(lambda z: (torch.fft.fft2(z), torch.fft.ifft(torch.fft.fft(z))), Z)


def test_float64_fft() -> None:
    check(lambda x: torch.fft.rfft2(x), X.double())


@pytest.mark.parametrize("opset", [18, 20])
def test_dft_axis_at_opsets_18_and_20(opset: int) -> None:
    program = check(lambda x: torch.fft.fftn(x, dim=(0, 2)), X, opset_version=opset)
    assert "DFT" in op_types(program)


def test_dynamic_batch() -> None:
    n = torch.export.Dim("n", min=2, max=32)
    program = check(lambda x: torch.fft.rfft(x, dim=0, norm="ortho"), X,
                    dynamic_shapes=(({0: n},),))
    other = torch.randn(7, 6, 5)
    torch.testing.assert_close(torch.view_as_complex(program(other)[0]),
                               torch.fft.rfft(other, dim=0, norm="ortho"))


def test_stft_magnitude() -> None:
    window = torch.hann_window(16)
    check(lambda x: torch.stft(x, 16, hop_length=4, window=window, return_complex=True).abs(),
          torch.randn(2, 100))


# -- complex arithmetic and layout ---------------------------------------------------------
def test_rotary_embedding_with_polar_and_view_as_complex() -> None:
    # The Llama-style rotary embedding: complex multiply of pairs, then back to real.
    freqs = torch.polar(torch.ones(6, 4), torch.randn(6, 4))

    def rope(x: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(-2)

    check(rope, torch.randn(2, 6, 8))


def test_arithmetic_mixing_real_and_complex() -> None:
    y = torch.randn(6, 5)
    check(lambda z: (z + y, z - 2, y * z, z * z, z / y, y / z, z / (1 + 2j), -z.conj()), Z)


def test_abs_angle_real_imag() -> None:
    check(lambda z: (z.abs(), z.angle(), z.real, z.imag), Z)


def test_layout_ops_with_negative_dims() -> None:
    check(lambda z: (z.transpose(-1, -2), z.unsqueeze(-1), z[..., 1:3], z.flip(-1),
                     z.permute(2, 0, 1), z.reshape(-1), torch.cat([z, z], -1),
                     torch.stack([z, z], -1), z.sum(-1), z.mean((0, -1))), Z)


def test_complex_from_real_parts_broadcasts() -> None:
    check(lambda a, b: torch.complex(a, b), torch.randn(3, 1), torch.randn(4))


def test_length_one_signal() -> None:
    # (Empty batches are not tested: eager torch's MKL FFT rejects them.)
    check(lambda x: (torch.fft.fft(x), torch.fft.rfft(x), torch.fft.irfft(x, n=1)),
          torch.randn(4, 1))


def test_chalf_is_refused() -> None:
    with pytest.raises(onnxport.errors.OnnxExporterError, match="complex32"):
        onnxport.export(Fn(lambda x: x.to(torch.complex32).abs()), (X,))


def test_exp_reciprocal_and_matmul() -> None:
    w = torch.randn(5, 4, dtype=torch.complex64)
    r = torch.randn(5, 2)
    check(lambda z: (z.exp(), z.reciprocal(), z @ w, z @ r.to(z.dtype), torch.fft.fft(z[0, 0]) @ w),
          Z)


def test_complex_creation() -> None:
    check(lambda x: (torch.zeros(2, 3, dtype=torch.complex64) + x[0, :2, :3],
                     torch.full((2, 3), 1 + 2j) * x[0, :2, :3],
                     torch.ones_like(torch.fft.fft(x)), torch.zeros_like(x, dtype=torch.cfloat)), X)


def test_exp_of_imaginary_phase() -> None:
    check(lambda theta: torch.exp(1j * theta), torch.randn(4, 5))


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1.5])
def test_complex_power(exponent: float) -> None:
    check(lambda z: z ** exponent, Z)


def test_complex_index_put_and_index_add() -> None:
    i = torch.tensor([0, 2])

    def fn(z: torch.Tensor, v: torch.Tensor) -> Any:
        put = z.clone()
        put[i] = v
        return put, z.index_add(1, torch.tensor([5, 0]), z[:, :2] * 1j, alpha=2)

    check(fn, Z, torch.randn(2, 6, 5, dtype=torch.complex64))


def test_complex_gather_at_negative_and_inner_dims() -> None:
    # Lumina2's rotary tables: complex rows picked by position ids.
    i = torch.tensor([[[0, 3, 1, 1, 2]] * 6] * 2)

    def fn(z: torch.Tensor) -> Any:
        return z.gather(-1, i), z.gather(1, i[:, :4, :])

    check(fn, Z)
