"""The distiller on hand-built nets: feature mimic with and without an adapter, what the
student's forward returns in training and in evaluation, task_loss: false."""
import torch
import torch.nn.functional as F
from torch import nn

from up_trainer.distill.distiller import ADAPTERS, Distiller, build_adapters
from up_trainer.distill.spec import read_spec


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, padding=1)
        self.fc = nn.Linear(width, 10)

    def forward(self, batch):
        feat = self.conv(batch["image"])
        logits = self.fc(feat.mean((2, 3)))
        return {"logits": logits, "loss": F.cross_entropy(logits, batch["label"])}


def distiller(student, teacher, adapter, task_loss=True):
    spec = read_spec({"task_loss": task_loss, "teachers": [{"name": "t", "net": {"type": "unused"}}],
                      "mimic": [{"name": "feat", "student": ["conv"], "teachers": {"t": ["conv"]},
                                 "losses": {"loss": {"type": "l2_loss", "kwargs": {"feat_norm": False, "batch_mean": False}}},
                                 "loss_weight": 2.0, "adapter": adapter}]})
    adapters = build_adapters(spec, student, {"t": teacher})
    if adapters:
        student.add_module(ADAPTERS, nn.ModuleDict(adapters))
    return Distiller(spec, student, {"t": teacher.eval()})


def batch():
    torch.manual_seed(0)
    return {"image": torch.randn(4, 1, 5, 5), "label": torch.tensor([1, 2, 3, 4])}


def test_feature_mimic_without_adapter_is_weighted_mse():
    torch.manual_seed(1)
    student, teacher = Net(6), Net(6)
    d = distiller(student, teacher, adapter=True)  # equal channels: no adapter is built
    assert not hasattr(student, ADAPTERS)
    b = batch()
    out = student(b)
    with torch.no_grad():
        want = F.mse_loss(student.conv(b["image"]), teacher.conv(b["image"])) * 2.0
    assert torch.allclose(out["mimic.feat.t.loss"], want, rtol=1e-5)
    out["mimic.feat.t.loss"].backward()
    assert student.conv.weight.grad is not None and teacher.conv.weight.grad is None
    d.remove()


def test_feature_mimic_with_adapter_maps_student_channels_onto_the_teachers():
    torch.manual_seed(1)
    student, teacher = Net(4), Net(6)
    distiller(student, teacher, adapter={"kernel_size": 1})
    (adapter,) = getattr(student, ADAPTERS).values()
    assert (adapter.conv.in_channels, adapter.conv.out_channels, adapter.conv.kernel_size) == (4, 6, (1, 1))
    b = batch()
    out = student(b)
    with torch.no_grad():
        want = F.mse_loss(adapter(student.conv(b["image"])), teacher.conv(b["image"])) * 2.0
    assert torch.allclose(out["mimic.feat.t.loss"], want, rtol=1e-5)
    out["mimic.feat.t.loss"].backward()
    assert adapter.conv.weight.grad is not None


def test_evaluation_forwards_and_task_loss_false():
    torch.manual_seed(1)
    student, teacher = Net(6), Net(6)
    distiller(student, teacher, adapter=None, task_loss=False)
    b = batch()
    student.eval()
    assert set(student(b)) == {"logits", "loss"}  # eval mode: no teacher, no mimic loss
    student.train()
    with torch.no_grad():
        assert set(student(b)) == {"logits", "loss"}  # no gradients: not a training step
    out = student(b)
    assert not out["loss"].requires_grad and out["mimic.feat.t.loss"].requires_grad


def test_a_3x3_adapter_on_n_by_c_outputs_is_one_line():
    import pytest

    from up_trainer.errors import ConfigError

    torch.manual_seed(1)
    student, teacher = Net(4), Net(6)
    spec = read_spec({"teachers": [{"name": "t", "net": {"type": "unused"}}],
                      "mimic": [{"student": ["conv", "fc"], "teachers": {"t": ["conv", "fc"]},
                                 "adapter": {"kernel_size": 3, "channels": [[4, 6], [10, 12]]}}]})
    student.add_module(ADAPTERS, nn.ModuleDict(build_adapters(spec, student, {"t": teacher})))
    Distiller(spec, student, {"t": teacher.eval()})
    with pytest.raises(ConfigError, match=r"^distill.mimic\[0\].adapter.kernel_size: a 3x3 adapter needs N x C x H "
                                          r"x W outputs; fc gives \(4, 10\)"):
        student(batch())
