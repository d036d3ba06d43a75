"""A trained two-stage net as a deployed file: a Faster R-CNN FPN trained briefly on digit scenes
exports end to end to ONNX (at its export size and with --dynamic-size) and gives the
checkpoint's detections on val scenes, real non-empty detections of a trained RPN and box head
(the other two-stage tests use seeded random heads)."""
import os
import sys

import pytest
import torch
import yaml

from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "helpers"))

NET = {"type": "faster_rcnn", "kwargs": {
    "num_classes": 10, "backbone": "resnet18", "returned_layers": [2, 3], "fpn_channels": 32, "min_size": 64,
    "max_size": 64, "score_thresh": 0.1, "detections_per_img": 30,
    "det_kwargs": {"rpn_pre_nms_top_n_test": 300, "rpn_post_nms_top_n_test": 60}}}
TOLERANCE = 1e-4


@pytest.mark.slow  # 250 training steps: about 3 minutes on 2 loaded cores, then two exports
def test_a_trained_faster_rcnn_end_to_end_onnx_gives_the_checkpoints_detections(tmp_path):
    from scene_training import digit_scene_metrics

    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error
    from up_trainer.tasks.det.digits_det import DigitsDetection

    cfg = {"runtime": {"num_threads": 1}, "trainer": {"max_epoch": 1}, "net": NET,
           "dataset": {"test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2,
                                                                 "canvas_size": 64}}}}
    path = str(tmp_path / "frcnn.yaml")
    open(path, "w").write(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(path)["net"])
    metrics = digit_scene_metrics(model, 250, 3e-3)  # AdamW steps of 8 scenes; AP 0.03 (AP50 0.07): it detects
    assert metrics["bbox.AP50"] > 0.02
    ckpt = str(tmp_path / "frcnn.pth")
    torch.save(model.state_dict(), ckpt)

    val = DigitsDetection("val", 16, canvas_size=64, digits_per_image=[1, 2], scale_range=[16, 28], seed=0)
    images = [val[i]["image"] for i in range(16)]
    images[3] = images[3][:, :48, :56].contiguous()  # another size in the batch: padding and clipping
    with torch.no_grad():
        want = model.eval()({"image": images})["detections"]
    count = sum(len(d["scores"]) for d in want)
    assert count > 20 and sum(len(d["scores"]) > 0 for d in want) > 10, "the trained net should detect digits"
    for name, dynamic in (("frcnn.onnx", False), ("frcnn.dynamic.onnx", True)):
        out = str(tmp_path / name)
        record = export_model(resolve_config(path), ckpt, "onnx", out, form="end2end", dynamic_size=dynamic)
        assert record["max_error"] <= TOLERANCE  # on seeded random images (few digits there)
        got = ExportedModel(out)({"image": images})["detections"]
        error = detections_error(got, want)
        print(f"{name}: {count} detections on 16 val scenes, max error {error:.3g}; "
              f"on export {record['max_error']:.3g} over {record['verified_detections']} detections")
        assert error <= TOLERANCE, name
