"""torchvision's detectors: export time and ONNX Runtime vs eager, in both flavours.

Every detector (random weights drawn so that class scores are distinct, images resized to
160-200 pixels) is exported with `dynamo=True`, with a dynamic image size (one program, run
at 160x192 and 224x176) or with `--static` at 160x192 only, and its outputs compared with
eager PyTorch (boxes, labels, scores, masks, keypoints); with `--torchscript`, also with
`dynamo=False` beside torch.onnx's TorchScript flavour. tests/vision/test_detection.py runs
one detector of the set.

    python benchmarks/bench_detection.py [--models fasterrcnn ...] [--static] [--torchscript]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import onnxruntime
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.vision.packages import import_vision  # noqa: E402

MODELS = {
    "fasterrcnn": ("fasterrcnn_mobilenet_v3_large_320_fpn",
                   {"box_score_thresh": 0.0, "rpn_score_thresh": 0.0}),
    "maskrcnn": ("maskrcnn_resnet50_fpn", {"box_score_thresh": 0.0}),
    "keypointrcnn": ("keypointrcnn_resnet50_fpn", {"box_score_thresh": 0.0}),
    "retinanet": ("retinanet_resnet50_fpn", {"score_thresh": 0.0, "class_gain": 1.0}),
    "fcos": ("fcos_resnet50_fpn", {"score_thresh": 0.0}),
    "ssd": ("ssd300_vgg16", {"score_thresh": 0.0}),
    "ssdlite": ("ssdlite320_mobilenet_v3_large", {"score_thresh": 0.0}),
}


SIZES = [(160, 192), (224, 176)]


def _compare(expected: dict[str, torch.Tensor], got: list[object]) -> str:
    parts = []
    for (key, value), out in zip(expected.items(), got):
        out = torch.as_tensor(out)
        if out.shape != value.shape:
            parts.append(f"{key} shape {tuple(out.shape)} != {tuple(value.shape)}")
            continue
        diff = (out.double() - value.double()).abs().max().item() if value.numel() else 0.0
        scale = value.double().abs().max().item() if value.numel() else 1.0
        parts.append(f"{key}{list(value.shape)} max|diff| {diff:.2g} (max {scale:.3g})")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--static", action="store_true",
                        help="export at one image size instead of a dynamic height and width")
    parser.add_argument("--torchscript", action="store_true",
                        help="also export with dynamo=False, beside torch.onnx")
    options = parser.parse_args()
    if import_vision() is None:
        raise SystemExit("no torchvision release for this torch")
    import onnxport
    from tests.vision.test_detection import detector, images, nms_threshold, same_detections

    for key in options.models:
        name, kwargs = MODELS[key]
        model = detector(name, **kwargs)
        x = images(160, 192)
        with torch.no_grad():
            expected = model(x)[0]
        names = list(expected)
        start = time.perf_counter()
        dynamic = None if options.static else {"images": {2: "height", 3: "width"}}
        try:
            program = onnxport.export(model, (x,), dynamo=True, dynamic_shapes=dynamic)
            seconds = time.perf_counter() - start
            print(f"{key:13s} dynamo=True   {seconds:6.1f} s  outputs "
                  f"{[(v.name, str(v.shape)) for v in program.model.graph.outputs]}", flush=True)
            for size in SIZES[:1 if options.static else None]:
                sized = images(*size)
                with torch.no_grad():
                    eager = model(sized)[0]
                got = program(sized)
                ties: list[str] = []
                verdict = same_detections(eager, got, nms_iou=nms_threshold(model), ties=ties)
                same = "same detections" + (f" ({len(ties)} NMS tie kept the other candidate: "
                                            f"{'; '.join(ties)})" if ties else "")
                print(f"{'':13s} {size[0]}x{size[1]}  {_compare(eager, got)}\n{'':13s} "
                      f"{same if verdict is None else verdict}", flush=True)
        except Exception as e:  # noqa: BLE001  (reported, the next model runs)
            print(f"{key:13s} dynamo=True   FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        if not options.torchscript:
            continue
        for exporter in ("torch.onnx", "onnxport"):
            start = time.perf_counter()
            try:
                if exporter == "torch.onnx":
                    torch.onnx.export(model, (x,), io.BytesIO(), dynamo=False, opset_version=17,
                                      input_names=["images"], output_names=names)
                    result = "exported"
                else:
                    buffer = io.BytesIO()
                    onnxport.export(model, (x,), buffer, dynamo=False, input_names=["images"],
                                    output_names=names)
                    session = onnxruntime.InferenceSession(buffer.getvalue(),
                                                           providers=["CPUExecutionProvider"])
                    got = session.run(None, {"images": x.numpy()})
                    ties = []
                    verdict = same_detections(expected, got, nms_iou=nms_threshold(model),
                                              ties=ties)
                    same = "same detections" + (f" ({len(ties)} NMS tie)" if ties else "")
                    result = f"{_compare(expected, got)}; {same if verdict is None else verdict}"
                seconds = time.perf_counter() - start
                print(f"{key:13s} dynamo=False {exporter:10s} {seconds:6.1f} s  {result}",
                      flush=True)
            except Exception as e:  # noqa: BLE001  (reported, the next exporter runs)
                print(f"{key:13s} dynamo=False {exporter:10s} FAILED {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:200]}", flush=True)


if __name__ == "__main__":
    main()
