"""Teacher weights from the files users have: our checkpoints and bare torchvision state dicts
(the same name maps as saver.pretrain_model); the teacher is frozen and in eval mode."""
import torch

from up_trainer.distill.spec import read_spec
from up_trainer.distill.teacher import build_teacher

NET = {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}}


def spec_for(weight, bn_mode="eval"):
    return read_spec({"teachers": [{"name": "t", "net": NET, "weight": str(weight), "bn_mode": bn_mode}],
                      "mimic": [{"student": ["backbone.fc"], "teachers": {"t": ["backbone.fc"]}}]}).teachers[0]


def reference(seed=5):
    from up_trainer.tasks.net import build_model

    torch.manual_seed(seed)
    return build_model(NET)


def built(path, bn_mode="eval"):
    return build_teacher(spec_for(path, bn_mode), device=torch.device("cpu"), dtype=torch.float32,
                         memory_format=None, weight_path=str(path))


def assert_same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_teacher_from_one_of_our_checkpoints(tmp_path):
    ref = reference()
    torch.save({"model": ref.state_dict(), "epoch": 10, "iter": 230}, tmp_path / "ckpt_e10.pth")
    teacher = built(tmp_path / "ckpt_e10.pth")
    assert_same(teacher, ref)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())


def test_teacher_from_a_bare_torchvision_state_dict_and_bn_mode_train(tmp_path):
    ref = reference()
    torch.save(ref.backbone.state_dict(), tmp_path / "torchvision.pth")  # no "backbone." prefix
    teacher = built(tmp_path / "torchvision.pth", bn_mode="train")
    assert_same(teacher, ref)
    assert teacher.training and not any(p.requires_grad for p in teacher.parameters())


def test_teacher_from_a_up_named_checkpoint(tmp_path):
    """UP's own names (resnet's layer0.0 / layer0.1 stem) load through the UP net's name map."""
    up_net = [{"name": "backbone", "type": "resnet18", "kwargs": {"out_layers": [4], "out_strides": [32]}},
              {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 10, "in_plane": 512}},
              {"name": "post_process", "type": "base_cls_postprocess",
               "kwargs": {"cls_loss": {"type": "ce"}}}]
    from up_trainer.tasks.net import build_model

    torch.manual_seed(5)
    ref = build_model(up_net)
    up_names = {k.replace("backbone.conv1.", "backbone.layer0.0.").replace("backbone.bn1.", "backbone.layer0.1."): v
                for k, v in ref.state_dict().items()}
    assert any(k.startswith("backbone.layer0.0.") for k in up_names)
    torch.save({"model": up_names}, tmp_path / "up.pth")
    spec = read_spec({"teachers": [{"name": "t", "net": up_net, "weight": "up.pth"}],
                      "mimic": [{"student": ["head.classifier"], "teachers": {"t": ["head.classifier"]}}]}).teachers[0]
    teacher = build_teacher(spec, device=torch.device("cpu"), dtype=torch.float32, memory_format=None,
                            weight_path=str(tmp_path / "up.pth"))
    assert_same(teacher, ref)
