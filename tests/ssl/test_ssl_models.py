"""The pretraining models' mechanics: MoCo's queue and momentum update, SimCLR's NT-Xent against
UP's formulation, SimSiam's stop-gradient, MAE's masking and pixel loss, the two-view transform,
and a native dry run of each family on digits."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import invoke, write_cfg
from up_trainer.registry import MODELS, TRANSFORMS
from up_trainer.tasks.ssl.encoder import embed

BACKBONE = {"type": "resnet18", "kwargs": {"input_channel": 1, "out_layers": [1], "out_strides": [4],
                                           "normalize": {"type": "solo_bn"}}}
VIT = {"type": "deit_tiny_patch16_224", "kwargs": {"image_size": 16, "patch_size": 4, "depth": 2, "in_channel": 1}}


def views(n=8, size=16, channels=1):
    torch.manual_seed(0)
    return {"image": torch.rand(n, 2, channels, size, size)}


def test_moco_enqueues_the_keys_and_moves_the_momentum_encoder():
    torch.manual_seed(0)
    model = MODELS.get("moco")(backbone=BACKBONE, dim=16, queue_size=32, momentum=0.9, temperature=0.2, mlp=True)
    online_before = copy.deepcopy(model.backbone.state_dict())
    twin_before = copy.deepcopy(model.backbone_momentum.state_dict())
    assert all(torch.equal(online_before[k], twin_before[k]) for k in online_before)  # starts as a copy
    with torch.no_grad():  # the online weights move away, so the update has something to follow
        for p in model.backbone.parameters():
            p.add_(0.1)
    batch = views()
    model.train()
    out = model(batch)
    assert out["loss"].isfinite()
    assert int(model.queue_ptr) == 8
    with torch.no_grad():
        k = F.normalize(model.projector_momentum(embed(model.backbone_momentum, batch["image"][:, 1])), dim=1)
    assert torch.allclose(model.queue[:, :8].t(), k, atol=1e-5)
    conv = "conv1.weight"
    want = 0.9 * twin_before[conv] + 0.1 * (online_before[conv] + 0.1)
    assert torch.allclose(model.backbone_momentum.state_dict()[conv], want, atol=1e-6)
    assert not any(p.requires_grad for p in model.backbone_momentum.parameters())
    out["loss"].backward()
    assert model.backbone.conv1.weight.grad is not None


def test_simclr_loss_equals_ups_positive_first_form():
    torch.manual_seed(0)
    model = MODELS.get("simclr")(backbone=BACKBONE, projector_layers=2, hidden_dim=32, dim=8, temperature=0.07)
    model.train()
    batch = views()
    loss = model(batch)["loss"]
    x = torch.cat([batch["image"][:, 0], batch["image"][:, 1]])
    model.train()
    torch.manual_seed(0)
    z = F.normalize(model.projector(F.normalize(embed(model.backbone, x), dim=1)), dim=1)
    n = len(z) // 2  # UP: positives first, then the negatives, cross-entropy with label 0
    labels = torch.cat([torch.arange(n), torch.arange(n)])
    same = labels[None] == labels[:, None]
    eye = torch.eye(2 * n, dtype=torch.bool)
    sim = (z @ z.t())[~eye].view(2 * n, -1)
    same = same[~eye].view(2 * n, -1)
    logits = torch.cat([sim[same].view(2 * n, -1), sim[~same].view(2 * n, -1)], dim=1) / 0.07
    assert torch.allclose(loss, F.cross_entropy(logits, torch.zeros(2 * n, dtype=torch.long)), atol=1e-4)


def test_simsiam_targets_take_no_gradient():
    torch.manual_seed(0)
    model = MODELS.get("simsiam")(backbone=BACKBONE, dim=16, pred_dim=8)
    model.train()
    loss = model(views())["loss"]
    assert -1.0 <= float(loss.detach()) <= 1.0
    loss.backward()
    assert model.predictor[0].weight.grad is not None and model.backbone.conv1.weight.grad is not None


def test_mae_hides_the_asked_share_of_patches_and_scores_only_them():
    torch.manual_seed(0)
    model = MODELS.get("mae")(backbone=VIT, mask_ratio=0.75, decoder_dim=16, decoder_depth=1, decoder_heads=2)
    model.train()
    images = torch.rand(3, 1, 16, 16)
    latent, mask, restore = model._encode(images)
    assert mask.shape == (3, 16) and mask.sum(1).tolist() == [12.0] * 3
    assert latent.shape[1] == 1 + 4  # the class token and the 4 visible patches
    assert model.patchify(images).shape == (3, 16, 16)
    loss = model({"image": images})["loss"]
    loss.backward()
    assert loss.isfinite() and model.decoder_pred.weight.grad is not None
    assert not model.backbone.encoder.pos_embedding.requires_grad  # MAE's fixed sine-cosine table


def test_two_views_stacks_two_different_views():
    op = TRANSFORMS.get("two_views")(transforms=[TRANSFORMS.get("torch_gaussian_blur")()])
    torch.manual_seed(0)
    image = torch.rand(1, 8, 8)
    out = op(image)
    assert out.shape == (2, 1, 8, 8) and not torch.equal(out[0], out[1])
    recipe = TRANSFORMS.get("torch_mocov3")(size=8)(torch.randint(0, 255, (3, 12, 12), dtype=torch.uint8))
    assert recipe.shape == (2, 3, 8, 8) and recipe.dtype == torch.float32  # ends in to_tensor + normalize


NATIVE = {
    "moco_v3": {"type": "moco_v3", "kwargs": {"backbone": BACKBONE, "dim": 16, "mlp_dim": 32, "temperature": 0.2}},
    "simsiam": {"type": "simsiam", "kwargs": {"backbone": BACKBONE, "dim": 16, "pred_dim": 8}},
    "mae": {"type": "mae", "kwargs": {"backbone": VIT, "decoder_dim": 16, "decoder_depth": 1, "decoder_heads": 2}},
}


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_native_pretraining_dry_runs_on_digits(name, tmp_path):
    view = {"type": "two_views", "kwargs": {"transforms": [{"type": "RandomResizedCrop", "kwargs": {"size": 16}}]}}
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"batch_size": 8, "train": {"type": "digits", "kwargs": {
               "split": "train", "size": 16, "subset": 32, "transforms": [] if name == "mae" else [view]}}},
           "trainer": {"max_epoch": 1, "is_eval": False}, "net": NATIVE[name]}
    res = invoke(["train", "--config", write_cfg(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run",
                  "--dry-run", "--device", "cpu"])
    assert res.exit_code == 0, res.stderr or res.exception
    assert "dry run: ok" in (tmp_path / "run" / "train.log").read_text()


@pytest.mark.parametrize("name", ["moco", "mae"])
def test_pretraining_resumes_bitwise(name, tmp_path):
    """The queue, its pointer and the momentum encoder are checkpointed (MoCo); MAE's masks come
    from the restored random streams: two epochs equal one, a stop, and one more."""
    nets = {"moco": {"type": "moco", "kwargs": {"backbone": BACKBONE, "dim": 8, "queue_size": 16, "momentum": 0.9}},
            "mae": NATIVE["mae"]}
    view = {"type": "two_views", "kwargs": {"transforms": [{"type": "RandomResizedCrop", "kwargs": {"size": 16}}]}}
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"batch_size": 8, "drop_last": True, "train": {"type": "digits", "kwargs": {
               "split": "train", "size": 16, "subset": 24, "transforms": [] if name == "mae" else [view]}}},
           "trainer": {"max_epoch": 2, "is_eval": False}, "net": nets[name]}
    path = write_cfg(tmp_path / "c.yaml", cfg)
    straight, split = tmp_path / "straight", tmp_path / "split"
    for args in (["--work-dir", straight], ["--work-dir", split, "--opts", "trainer.max_epoch=1"],
                 ["--work-dir", split, "--resume", split / "checkpoints" / "ckpt_e1.pth"]):
        res = invoke(["train", "--config", path, "--device", "cpu", *args])
        assert res.exit_code == 0, res.stderr or res.exception
    a = torch.load(straight / "checkpoints" / "ckpt_e2.pth", weights_only=True)["model"]
    b = torch.load(split / "checkpoints" / "ckpt_e2.pth", weights_only=True)["model"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    if name == "moco":
        assert int(a["queue_ptr"]) == (6 * 8) % 16 and not torch.equal(a["backbone.conv1.weight"],
                                                                        a["backbone_momentum.conv1.weight"])


def test_simsiam_scheduler_keeps_the_special_groups_lr_and_decays_the_rest(tmp_path):
    """UP's special_param_group [key: predictor] + SimSiamScheduler: SimSiam's fixed predictor lr."""
    view = {"type": "two_views", "kwargs": {"transforms": [{"type": "RandomResizedCrop", "kwargs": {"size": 16}}]}}
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"batch_size": 8, "drop_last": True, "train": {"type": "digits", "kwargs": {
               "split": "train", "size": 16, "subset": 16, "transforms": [view]}}},
           "trainer": {"max_epoch": 3, "is_eval": False,
                       "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9},
                                     "special_param_group": [{"key": "predictor"}]},
                       "lr_scheduler": {"type": "SimSiamScheduler", "kwargs": {"T_max": 4}}},
           "net": NATIVE["simsiam"]}
    res = invoke(["train", "--config", write_cfg(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run",
                  "--device", "cpu"])
    assert res.exit_code == 0, res.stderr or res.exception
    groups = torch.load(tmp_path / "run" / "checkpoints" / "ckpt_e3.pth", weights_only=True)["optimizer"]["param_groups"]
    special = [g for g in groups if g.get("special_param_group") == "predictor"]
    default = [g for g in groups if not g.get("special_param_group")]
    assert len(special) == 1 and len(default) == 1
    assert special[0]["lr"] == pytest.approx(0.1)
    # the last step (update 6 of 2 per epoch) sets epoch 3's lr: 0.1 * (1 + cos(pi * 3 / 4)) / 2
    assert default[0]["lr"] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 3 / 4)), rel=1e-6)
