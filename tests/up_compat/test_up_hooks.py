"""UP's hooks auto_save_metric, auto_save_best_multitask, gradient_collector and grad_cam."""
import json
import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import tiny_cfg
from test_train_e2e import assert_state_equal, load, train
from up_trainer.engine.state import TrainState
from up_trainer.errors import ConfigError
from up_trainer.hooks.auto_save_best_multitask import AutoSaveBestMultiTask
from up_trainer.hooks.auto_save_metric import AutoSaveMetric
from up_trainer.hooks.grad_cam import cam_maps
from up_trainer.hooks.gradient_collector import GradientCollector


class Requests:
    def __init__(self):
        self.names = []

    def request(self, name):
        self.names.append(name)


def fake_trainer(tmp_path, module=None, **runtime):
    st = TrainState()
    return SimpleNamespace(state=st, run_dir=str(tmp_path), dist=SimpleNamespace(is_main=True), optim=object(),
                           module=module, checkpoints=Requests(), cfg={"runtime": runtime})


def test_grad_cam_leaves_training_bitwise_unchanged_and_metrics_are_recorded(tmp_path, run_up):
    """grad_cam never steps the optimizer nor touches gradients, BN statistics or RNG."""
    plain, _ = train(run_up, tmp_path, "plain", tiny_cfg())
    hooks = [{"type": "grad_cam", "kwargs": {"freq": 5, "save_dir": "cams"}},
             {"type": "auto_save_metric", "kwargs": {"metric_json": "metric.json"}}]
    cams, _ = train(run_up, tmp_path, "cams", tiny_cfg(hooks=hooks))
    a, b = load(plain / "checkpoints" / "ckpt_e2.pth"), load(cams / "checkpoints" / "ckpt_e2.pth")
    assert_state_equal(a["model"], b["model"])
    assert_state_equal(a["optimizer"], b["optimizer"])
    pngs = sorted(os.listdir(cams / "cams"))
    assert len(pngs) == 2 * 16 and pngs[0].startswith("i10_") and pngs[-1].startswith("i5_")  # iterations 5, 10
    entries = json.loads((cams / "metric.json").read_text())
    assert [(e["epoch"], e["iter"]) for e in entries] == [(1, 6), (2, 12)]
    assert set(entries[0]["metrics"]) >= {"top1"}


def test_cam_maps_follow_the_grad_cam_formula():
    torch.manual_seed(0)
    feature, grad = torch.rand(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    maps = cam_maps(feature, grad, (4, 4))
    for b in range(2):
        want = torch.relu((grad[b].mean(dim=(1, 2))[:, None, None] * feature[b]).sum(0))
        want = (want - want.min()) / (want.max() - want.min())
        torch.testing.assert_close(maps[b], want)


def test_auto_save_metric_drops_entries_after_the_resume_point(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"metrics": {}, "iter": i, "epoch": i // 6} for i in (6, 12, 18)]))
    hook = AutoSaveMetric(metric_json=str(path))
    trainer = fake_trainer(tmp_path)
    trainer.state.iter, trainer.state.epoch = 12, 2
    hook.before_train(trainer)
    assert [e["iter"] for e in json.loads(path.read_text())] == [6, 12]
    trainer.state.iter, trainer.state.epoch = 18, 3
    hook.after_eval(trainer, {"top1": torch.tensor(0.5)})
    assert json.loads(path.read_text())[-1] == {"metrics": {"top1": 0.5}, "iter": 18, "epoch": 3}
    detail = tmp_path / "detail.json"
    detail.write_text(json.dumps({"per_class": [1, 2]}))
    hook.detail_metric = str(detail)
    hook.after_eval(trainer, {"top1": 0.6})
    assert json.loads(path.read_text())[-1]["metrics"] == {"per_class": [1, 2]}


def test_auto_save_best_multitask_keeps_one_best_per_task(tmp_path):
    hook = AutoSaveBestMultiTask()
    hook.name = "auto_save_best_multitask"
    trainer = fake_trainer(tmp_path, task_names=["cls", "det"])
    hook.before_train(trainer)
    trainer.state.epoch = 1
    hook.after_eval(trainer, {"key.cls.top1": 0.5, "key.det.bbox_ap": 0.2, "cls.top5": 0.9})
    assert trainer.checkpoints.names == ["ckpt_best.cls.pth", "ckpt_best.det.pth"]
    trainer.state.epoch = 2
    hook.after_eval(trainer, {"key.cls.top1": 0.4, "key.det.bbox_ap": float("nan")})
    hook.after_eval(trainer, {"key.cls.top1": 0.45, "key.det.bbox_ap": 0.3})
    assert trainer.checkpoints.names[2:] == ["ckpt_best.det.pth"]
    again = AutoSaveBestMultiTask(tasks=["cls"])
    again.load_state_dict(hook.state_dict())
    assert again.best == {"cls": [0.5, 1], "det": [0.3, 2]}
    with pytest.raises(ConfigError, match="no tasks to track"):
        AutoSaveBestMultiTask().before_train(fake_trainer(tmp_path))


class LossWithCollector(nn.Module):
    def __init__(self):
        super().__init__()
        self.grads = []

    def collect_grad(self, grad):
        self.grads.append(grad.detach().clone())


class TinyDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.roi_head = nn.Module()
        self.roi_head.cls_subnet_pred = nn.Linear(4, 3)
        self.post_process = nn.Module()
        self.post_process.cls_loss = LossWithCollector()


@pytest.mark.parametrize("grad_type", ["output", "input"])
def test_gradient_collector_hands_gradients_to_the_loss(tmp_path, grad_type):
    torch.manual_seed(0)
    model = TinyDetector()
    hook = GradientCollector(grad_type=grad_type)
    hook.name = "gradient_collector"
    hook.before_train(fake_trainer(tmp_path, module=model))
    x = torch.randn(5, 4, requires_grad=True)
    out = model.roi_head.cls_subnet_pred(x)
    loss = (out ** 2).sum()
    want = torch.autograd.grad(loss, out if grad_type == "output" else x, retain_graph=True)[0]
    model.post_process.cls_loss.grads.clear()  # that autograd pass went through the hook as well
    loss.backward()
    (got,) = model.post_process.cls_loss.grads
    torch.testing.assert_close(got, want)
    hook.after_train(None)
    model.roi_head.cls_subnet_pred(x).sum().backward()
    assert len(model.post_process.cls_loss.grads) == 1  # removed after training


@pytest.mark.parametrize("kwargs, match", [
    ({"hook_module": ["roi_head.cls_subnet"]}, r"hook_module\.0: the model has no module.*cls_subnet_pred"),
    ({"collect_func_module": "roi_head"}, "has no collect_grad"),
    ({"grad_type": "both"}, "expected output or input"),
])
def test_gradient_collector_errors(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        hook = GradientCollector(**kwargs)
        hook.name = "gradient_collector"
        hook.before_train(fake_trainer(tmp_path, module=TinyDetector()))


def test_up_hooks_we_do_not_provide_are_refused_in_one_line():
    from up_trainer.config.up_form import translate

    cfg = {"hooks": [{"type": "train_val_logger"}, {"type": "feature_vis"}]}
    with pytest.raises(ConfigError, match=r"^hooks\[1\]\.type: feature_vis is UP's feature-map visualisation.*"
                       "use grad_cam"):
        translate(cfg)


def test_memory_empty_builds_with_ups_kwargs():
    from up_trainer.engine.builder import build_hooks

    hooks = build_hooks([{"type": "memory_empty", "kwargs": {"freq": 50}}])
    with pytest.raises(ConfigError, match="must be >= 1"):
        build_hooks([{"type": "memory_empty", "kwargs": {"freq": 0}}])
    assert len(list(hooks)) == 1


def test_grad_cam_on_a_up_form_net_touches_no_gradient(tmp_path):
    from up_trainer.hooks.grad_cam import GradCAM
    from up_trainer.tasks.net import build_model

    torch.manual_seed(0)
    model = build_model([
        {"name": "backbone", "type": "resnet18", "kwargs": {"out_layers": [4], "out_strides": [32]}},
        {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 5, "in_plane": 512}},
        {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}]).train()
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"3": "three|r7"}))
    hook = GradCAM(layer_name="backbone.layer4", class_names=str(names), save_dir="cams", freq=2)
    hook.name = "grad_cam"
    trainer = fake_trainer(tmp_path, module=model)
    trainer.device = torch.device("cpu")
    hook.before_train(trainer)
    batch = {"image": torch.rand(2, 3, 64, 64), "label": torch.tensor([3, 1])}
    hook.before_forward(trainer, 1, batch)  # not a multiple of freq
    assert not (tmp_path / "cams").exists()
    hook.before_forward(trainer, 2, batch)
    assert sorted(os.listdir(tmp_path / "cams")) == ["i2_1_1.png", "r7_i2_0_three.png"]
    assert model.training and all(p.grad is None for p in model.parameters())
