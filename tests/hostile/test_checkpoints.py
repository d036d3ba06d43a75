"""Checkpoints that do not fit the config, or were edited by hand: refused before anything is
loaded, in one line naming the first key that does not fit (exit 2), with every checkpoint
already in the work dir untouched."""
import torch

from conftest import invoke
from hostile_helpers import assert_one_line, copy_run, fingerprint, tiny_cfg, trained_run, write_yaml  # noqa: F401


def edited(save_dir, tmp_path, **changes):
    """A copy of the trained run's final checkpoint with keys replaced (None deletes)."""
    ckpt = torch.load(save_dir / "ckpt_e1.pth", map_location="cpu", weights_only=True)
    for key, value in changes.items():
        if value is None:
            ckpt.pop(key, None)
        else:
            ckpt[key] = value
    path = tmp_path / "edited.pth"
    torch.save(ckpt, path)
    return path


def train(tmp_path, *extra, **sections):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(**sections))
    return invoke(["train", "--config", cfg, "--work-dir", tmp_path, *extra])


def resume_attempt(tmp_path, trained_run, message, *, ckpt=None, **sections):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    sections.setdefault("trainer", {"max_epoch": 2})
    result = train(tmp_path, "--resume", ckpt or save_dir / "ckpt_e1.pth", **sections)
    line = assert_one_line(result, message)
    assert fingerprint(save_dir) == before
    return line


def test_resume_another_architecture(tmp_path, trained_run):  # noqa: F811
    resume_attempt(tmp_path, trained_run, "the checkpoint's weights do not fit the configured net: "
                   "backbone.0.weight is in the configured net but not in the checkpoint",
                   net={"type": "test_cnn"})


def test_resume_another_width(tmp_path, trained_run):  # noqa: F811
    resume_attempt(tmp_path, trained_run, "backbone.1.weight has shape (32, 64) in the checkpoint, (16, 64) in "
                   "the configured net", net={"type": "test_mlp", "kwargs": {"hidden": 16}})


def test_resume_another_class_count(tmp_path, trained_run):  # noqa: F811
    line = resume_attempt(tmp_path, trained_run, "backbone.3.weight has shape (10, 32) in the checkpoint, (12, 32)",
                          net={"type": "test_mlp", "kwargs": {"num_classes": 12}})
    assert line.startswith("up: error: --resume: ") and "another architecture or class count" in line


def test_resume_another_optimizer(tmp_path, trained_run):  # noqa: F811
    resume_attempt(tmp_path, trained_run, "optimizer state does not fit trainer.optimizer: it was written by SGD, "
                   "the config builds Adam", trainer={"max_epoch": 2, "optimizer": {"type": "Adam", "kwargs": {}}})


def test_resume_another_optimizer_from_a_checkpoint_that_does_not_name_it(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    old_style = edited(save_dir, tmp_path, optimizer_type=None)
    resume_attempt(tmp_path, trained_run, "written by another optimizer class (its param groups have dampening, "
                   "momentum, nesterov), the config builds Adam",
                   ckpt=old_style, trainer={"max_epoch": 2, "optimizer": {"type": "Adam", "kwargs": {}}})


def test_resume_with_changed_param_groups(tmp_path, trained_run):  # noqa: F811
    resume_attempt(tmp_path, trained_run, "1 param groups in the checkpoint, 2 configured",
                   trainer={"max_epoch": 2, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9},
                                                          "paramwise_cfg": {"bias_lr_mult": 2.0}}})


def test_eval_another_architecture(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(net={"type": "test_mlp", "kwargs": {"hidden": 16}}))
    result = invoke(["eval", "--config", cfg, "--checkpoint", save_dir / "ckpt_e1.pth", "--work-dir", tmp_path])
    assert_one_line(result, "backbone.1.weight has shape (32, 64) in the checkpoint, (16, 64) in the configured net")
    assert fingerprint(save_dir) == before


def test_auto_resume_after_a_config_change_refuses(tmp_path, trained_run):  # noqa: F811
    """The newest checkpoint loads but does not fit: no silent fresh start over the old run."""
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    result = train(tmp_path, trainer={"max_epoch": 2}, saver={"save_dir": "checkpoints", "auto_resume": True},
                   net={"type": "test_mlp", "kwargs": {"hidden": 16}})
    line = assert_one_line(result, "auto_resume: ", "backbone.1.weight has shape (32, 64)",
                           "train in another --work-dir or saver.save_dir")
    assert "ckpt_latest.pth" in line or "ckpt_e1.pth" in line
    assert fingerprint(save_dir) == before


def test_checkpoint_without_optimizer_state_is_not_resumed_silently(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    weights_only = edited(save_dir, tmp_path, optimizer=None, lr_scheduler=None)
    resume_attempt(tmp_path, trained_run, "holds no optimizer state, so resuming would restart the optimizer "
                   "from scratch; to start a new run from its weights, give it as saver.pretrain_model",
                   ckpt=weights_only)
    # The weights-only intent, said as the message suggests, trains.
    result = train(tmp_path / "b", saver={"save_dir": "checkpoints", "pretrain_model": str(weights_only)})
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "ckpt_e1.pth" in fingerprint(tmp_path / "b" / "checkpoints")


def test_hand_edited_rng(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    resume_attempt(tmp_path, trained_run, "'rng' lacks 'torch': the file was edited or is not ours",
                   ckpt=edited(save_dir, tmp_path, rng={}))


def test_hand_edited_hooks(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    resume_attempt(tmp_path, trained_run, "'hooks' should be a dict or null, got int 5: the file was edited",
                   ckpt=edited(save_dir, tmp_path, hooks=5))


def test_hand_edited_epoch(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    resume_attempt(tmp_path, trained_run, "'epoch' should be a int, got str one",
                   ckpt=edited(save_dir, tmp_path, epoch="one"))


def flip_tensor_byte(path, tensor):
    """Flip one byte in the middle of ``tensor``'s payload inside checkpoint file ``path``."""
    data = bytearray(path.read_bytes())
    payload = tensor.numpy().tobytes()
    start = data.find(payload)
    assert start > 0 and data.find(payload, start + 1) < 0, "payload not found once"
    data[start + len(payload) // 2] ^= 0x40
    with open(path, "r+b") as f:  # in place: every hard link to the file sees the flip, as on a bad disk
        f.write(data)


def test_flipped_tensor_bytes_are_reported(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    bad = edited(save_dir, tmp_path)  # an exact copy
    flip_tensor_byte(bad, torch.load(bad, weights_only=True)["model"]["backbone.1.weight"])
    line = resume_attempt(tmp_path, trained_run, f"--resume: checkpoint {bad} is corrupt", ckpt=bad)
    assert "CRC-32" in line
    cfg = write_yaml(tmp_path / "eval.yaml", tiny_cfg())
    assert_one_line(invoke(["eval", "--config", cfg, "--checkpoint", bad]), "is corrupt", "CRC-32")


def test_auto_resume_falls_back_past_flipped_bytes(tmp_path):
    """Epochs 1 and 2 saved, epoch 2's file damaged: auto_resume takes epoch 1 and finishes."""
    first = train(tmp_path, trainer={"max_epoch": 2}, saver={"save_dir": "checkpoints", "auto_resume": True})
    assert first.exit_code == 0, (first.stderr, first.exception)
    save_dir = tmp_path / "checkpoints"
    e1 = fingerprint(save_dir)["ckpt_e1.pth"]
    newest = save_dir / "ckpt_e2.pth"
    flip_tensor_byte(newest, torch.load(newest, weights_only=True)["model"]["backbone.3.weight"])
    result = train(tmp_path, trainer={"max_epoch": 3}, saver={"save_dir": "checkpoints", "auto_resume": True})
    assert result.exit_code == 0, (result.stderr, result.exception)
    skipped = [line for line in result.stdout.splitlines() if "auto_resume: skipping" in line]
    assert skipped and all("is corrupt" in line and "CRC-32" in line for line in skipped), result.stdout
    assert "resumed from " + str(save_dir / "ckpt_e1.pth") in result.stdout
    after = fingerprint(save_dir)
    assert after["ckpt_e1.pth"] == e1  # the valid checkpoint it fell back to is untouched
    assert torch.load(save_dir / "ckpt_e3.pth", weights_only=True)["epoch"] == 3
    assert f"checkpoint written: {save_dir / 'ckpt_e3.pth'}" in result.stdout  # logged once renamed in


def test_hand_edited_position(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    state = torch.load(save_dir / "ckpt_e1.pth", weights_only=True)["state"]
    resume_attempt(tmp_path, trained_run, "state.epoch_iter should be a int, got str 2",
                   ckpt=edited(save_dir, tmp_path, state=dict(state, epoch_iter="2")))


# -- cases that already held; kept here so they keep holding ----------------------------------------
def test_truncated_checkpoint(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    cut = tmp_path / "cut.pth"
    cut.write_bytes((save_dir / "ckpt_e1.pth").read_bytes()[:5000])
    resume_attempt(tmp_path, trained_run, f"--resume: checkpoint {cut} is truncated or corrupt (5000 bytes)", ckpt=cut)


def test_empty_file_and_directory(tmp_path, trained_run):  # noqa: F811
    (tmp_path / "empty.pth").write_bytes(b"")
    resume_attempt(tmp_path, trained_run, "is empty (0 bytes)", ckpt=tmp_path / "empty.pth")
    (tmp_path / "b" / "dir.pth").mkdir(parents=True)
    resume_attempt(tmp_path / "b", trained_run, "is a directory", ckpt=tmp_path / "b" / "dir.pth")


class Payload:
    """Unpickling this would create a marker file: a safe load must refuse it instead."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_code_is_never_run(tmp_path, trained_run):  # noqa: F811
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pth"
    torch.save({"format": "up-trainer/1", "model": {}, "epoch": 1, "iter": 2, "x": Payload(str(marker))}, evil)
    resume_attempt(tmp_path, trained_run, "holds objects a safe load refuses", ckpt=evil)
    assert not marker.exists()


def test_foreign_checkpoint(tmp_path, trained_run):  # noqa: F811
    foreign = tmp_path / "foreign.pth"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    line = resume_attempt(tmp_path, trained_run, "is not an up-trainer checkpoint", ckpt=foreign)
    assert "use saver.pretrain_model" in line


def test_auto_resume_skips_a_truncated_newest(tmp_path):
    first = train(tmp_path, trainer={"max_epoch": 2}, saver={"save_dir": "checkpoints", "auto_resume": True})
    assert first.exit_code == 0, (first.stderr, first.exception)
    save_dir = tmp_path / "checkpoints"
    e1 = fingerprint(save_dir)["ckpt_e1.pth"]
    newest = save_dir / "ckpt_e2.pth"
    data = newest.read_bytes()
    with open(newest, "r+b") as f:  # in place: latest (a hard link) is cut too
        f.truncate(len(data) // 2)
    result = train(tmp_path, trainer={"max_epoch": 2}, saver={"save_dir": "checkpoints", "auto_resume": True})
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "resumed from " + str(save_dir / "ckpt_e1.pth") in result.stdout
    assert fingerprint(save_dir)["ckpt_e1.pth"] == e1


def test_hand_edited_hook_state(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path / "src")
    resume_attempt(tmp_path, trained_run, "hooks.auto_save_best: the saved state does not fit this hook (AttributeError",
                   ckpt=edited(save_dir, tmp_path, hooks={"auto_save_best": 5}))
