"""Detector families reach export through the EXPORTERS registry, keyed by the model's kind: a
family registered from outside the package exports like a built-in one, and nothing in export/
dispatches on a family's name."""
import pathlib
import re

import pytest
import torch

from up_trainer.errors import ConfigError
from up_trainer.registry import EXPORTERS
from up_trainer.tasks.net import build_model

YOLOX = {"type": "yolox", "kwargs": {"num_classes": 3, "size": "nano", "score_thresh": 0.3}}


def test_every_built_in_family_has_its_exporter():
    from up_trainer.export.dense import dense_kinds
    from up_trainer.export.two_stage import two_stage_kinds

    assert sorted(dense_kinds()) == ["fcos", "retina_plus", "retinanet", "ssdlite", "up_fcos", "yolox"]
    assert sorted(two_stage_kinds()) == ["faster_rcnn", "up_rcnn"]
    assert {EXPORTERS.get(k).preprocess for k in ("retinanet", "fcos", "ssdlite", "faster_rcnn")} == {"torchvision"}
    assert {EXPORTERS.get(k).preprocess for k in ("yolox", "retina_plus", "up_fcos", "up_rcnn")} == {"pad"}


def test_a_family_registered_from_outside_exports_through_its_exporter():
    from up_trainer.export.dense import YoloxDense, dense_graph
    from up_trainer.export.detectors import build_graph, preprocess_record

    torch.manual_seed(0)
    model = build_model(YOLOX).eval()
    x = torch.rand(2, 3, 64, 64) * 255
    with torch.no_grad():
        want = dense_graph(model, 64, 64)(x)
    model.kind = "plugin_yolox"  # a family the package does not know
    with pytest.raises(ConfigError, match="plugin_yolox has no dense export"):
        dense_graph(model, 64, 64)

    @EXPORTERS.register("plugin_yolox")
    class PluginDense(YoloxDense):
        pass

    try:
        graph, inputs, outputs, decode = build_graph(model, (3, 64, 64), "raw")
        assert isinstance(graph, PluginDense) and inputs == ["image"] and decode["levels"]
        with torch.no_grad():
            got = graph(x)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        assert preprocess_record(model, (3, 64, 64))["type"] == "pad"
    finally:
        EXPORTERS._entries.pop("plugin_yolox")


def test_export_modules_do_not_dispatch_on_family_names():
    """Which graph, input step and threshold a family has is its exporter's to say. Left: the
    raw-heads form, which only torchvision's RetinaNet and FCOS have (graphs.py)."""
    from up_trainer.export.inputs import threshold_holder

    root = pathlib.Path(__file__).resolve().parents[2] / "up_trainer" / "export"
    families = "|".join(EXPORTERS.names())
    dispatch = re.compile(rf"\bkind\s*(==|!=|(not\s+)?in\s*\()[^#]*[\"'](?:{families})[\"']")
    found = [f"{p.name}:{i}" for p in sorted(root.glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if dispatch.search(line)]
    assert found == ["graphs.py:42"]
    model = build_model(YOLOX)
    assert threshold_holder(model) is model.postprocess
