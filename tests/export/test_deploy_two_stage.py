"""The two-stage nets (torchvision's Faster R-CNN FPN; UP's Faster R-CNN C4, R-FCN, Cascade R-CNN)
and UP's FCOS export to ONNX (raw and end to end) and pt2 and verify on reload; the written file
then runs as the model (up_trainer.export.runtime) on digit scenes it was not verified on."""
import json
import os
import sys

import pytest
import torch
import yaml

from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tasks", "det"))
from test_deploy_families import scenes  # noqa: E402  (digit scenes as the models take them)
from test_fcos_rcnn import small_c4, small_cascade, small_fcos, small_rfcn  # noqa: E402  (UP files, made small)

FASTER_RCNN = {"type": "faster_rcnn", "kwargs": {
    "num_classes": 3, "backbone": "resnet18", "returned_layers": [2, 3], "fpn_channels": 32, "min_size": 64,
    "max_size": 64, "score_thresh": 0.3, "detections_per_img": 30,
    "det_kwargs": {"rpn_pre_nms_top_n_test": 300, "rpn_post_nms_top_n_test": 60}}}
NETS = {"faster_rcnn": lambda: FASTER_RCNN, "c4": small_c4, "rfcn": small_rfcn, "cascade": small_cascade,
        "up_fcos": small_fcos}
FORMS = (("onnx", "end2end", ".onnx"), ("onnx", "raw", ".raw.onnx"), ("pt2", "raw", ".pt2"))


def make_net(tmp_path, name):
    """A config and a bare-weights file. The heads (every conv and linear layer outside the
    backbone and the FPN) get seeded random weights of gain 0.5, so the RPN ranks anchors
    without ties and the box stage spreads its scores over several classes; a gain of 1 makes
    random RPN deltas so large that float32 rounding alone moves a box near 0 px by 1e-4.
    Faster R-CNN's box head gets small biases: a RoI whose features its ReLUs zero out scores the
    softmax of the biases, about 1/(C+1) = 0.25 per class, under the score threshold 0.3; with
    larger biases every such RoI ties at one score above it, and NMS may keep either of two tied
    boxes."""
    cfg = {"runtime": {"num_threads": 1}, "trainer": {"max_epoch": 1}, "net": NETS[name](),
           "dataset": {"test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, "canvas_size": 64}}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(str(path))["net"]).eval()
    with torch.no_grad():
        for key, module in model.named_modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)) and not key.startswith(("backbone", "neck")):
                module.weight.normal_(0, 0.5 / module.weight[0].numel() ** 0.5)
                if module.bias is not None and name == "faster_rcnn" and isinstance(module, torch.nn.Linear):
                    module.bias.normal_(0.0, 0.05)
                elif module.bias is not None:
                    module.bias.normal_(0.0, 0.5)
    ckpt = tmp_path / f"{name}.pth"
    torch.save(model.state_dict(), ckpt)
    return str(path), str(ckpt), model


def check_forms(tmp_path, name, forms):
    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error

    cfg, ckpt, model = make_net(tmp_path, name)
    images = scenes(2)
    images[1] = images[1][:, :, :48].contiguous()  # another size in the batch: padding and clipping
    with torch.no_grad():
        want = model({"image": images})["detections"]
    labels = {int(v) for d in want for v in d["labels"]}
    assert sum(len(d["boxes"]) for d in want) > 10 and len(labels) > 1, "the test net should detect several classes"
    records = {}
    for fmt, form, suffix in forms:
        out = str(tmp_path / f"{name}{suffix}")
        record = export_model(resolve_config(cfg), ckpt, fmt, out, form=form)
        assert record["max_error"] <= 1e-4 and record["verified_batches"] == [1, 3]
        got = ExportedModel(out)({"image": images})["detections"]  # read back from the file and its record
        assert detections_error(got, want) <= 1e-4, (fmt, form)
        records[(fmt, form)] = json.load(open(out + ".json"))
    return records


def test_faster_rcnn_end_to_end_onnx_runs_as_the_model(tmp_path):
    """The default suite's check (the slow test below covers every net, form and format)."""
    record = check_forms(tmp_path, "faster_rcnn", FORMS[:1])[("onnx", "end2end")]
    assert record["form"] == "end2end" and record["post_processing"] == "included"
    assert record["input"]["names"] == ["image", "image_sizes"]
    assert record["outputs"] == ["num_detections", "boxes", "scores", "labels"]


@pytest.mark.slow  # 15-140 s per net at load average 20 (three exports, each verified; pt2 is the slow one)
@pytest.mark.parametrize("name", list(NETS))
def test_every_two_stage_net_and_up_fcos_export_in_both_forms_and_pt2(tmp_path, name):
    records = check_forms(tmp_path, name, FORMS)
    raw = records[("onnx", "raw")]
    if name == "up_fcos":  # a dense net: boxes and scores per point
        assert raw["form"] == "dense" and raw["outputs"] == ["boxes", "scores"]
        return
    assert raw["form"] == "two_stage" and raw["outputs"] == ["proposals", "num_proposals", "boxes", "scores"]
    assert raw["decode"]["min_size"] == (0.01 if name == "faster_rcnn" else 0.0)
    assert records[("pt2", "raw")]["form"] == "two_stage"


def test_two_stage_raw_outputs_are_the_proposals_and_their_boxes_per_class(tmp_path):
    """The raw form holds what the net computes before its last step: the RPN's proposals (as
    its own forward keeps them) and every proposal's box and score per class."""
    from up_trainer.export.two_stage import TwoStageGraph

    _, _, model = make_net(tmp_path, "rfcn")
    images = scenes(2)
    graph = TwoStageGraph(model, 64, 64).eval()
    x, sizes = torch.stack(images), torch.tensor([[64, 64], [64, 64]])
    with torch.no_grad():
        proposals, num, boxes, scores = graph(x, sizes)
        feats = {"0": model._part("backbone")(x)[-1]}
        from torchvision.models.detection.image_list import ImageList

        want, _ = model._part("rpn")(ImageList(x, [(64, 64)] * 2), feats)
    assert proposals.shape[1] == 20 and boxes.shape[1:] == (20, 10, 4) and scores.shape[1:] == (20, 10)
    for i in range(2):
        assert int(num[i]) == len(want[i]) and torch.equal(proposals[i, : len(want[i])], want[i])
        assert (scores[i, int(num[i]):] == -1).all() and (proposals[i, int(num[i]):] == 0).all()


@pytest.mark.slow  # one export and two evals: 25 s at load average 20 (kept out of the default suite's budget)
def test_eval_model_gives_the_checkpoints_metrics_for_a_two_stage_file(tmp_path):
    from conftest import invoke

    from up_trainer.export import export_model

    cfg, ckpt, _ = make_net(tmp_path, "c4")
    out = str(tmp_path / "c4.raw.onnx")
    export_model(resolve_config(cfg), ckpt, "onnx", out, form="raw")
    metrics = {}
    for flag, value in (("--checkpoint", ckpt), ("--model", out)):
        results = tmp_path / flag.strip("-")
        res = invoke(["eval", "--config", cfg, flag, value, "--opts", f"saver.results_dir={results}"])
        assert res.exit_code == 0, res.stderr
        metrics[flag] = {k: v for k, v in json.load(open(results / "metrics.json")).items() if k.startswith("bbox.")}
    assert len(metrics["--model"]) > 5  # (the checkpoint's eval also reports its val loss)
    assert metrics["--model"] == pytest.approx(metrics["--checkpoint"], abs=1e-4)
