"""inference_weights: the one choice of EMA / raw / bare weights behind up eval, up predict,
up export and safetensors_export."""
import pytest
import torch

from up_trainer.engine.checkpoint import FORMAT
from up_trainer.engine.checkpoint_load import inference_weights
from up_trainer.errors import CheckpointError

RAW = {"w": torch.zeros(2)}
EMA = {"w": torch.ones(2)}


def checkpoint(ema):
    return {"format": FORMAT, "model": RAW, "ema": ema, "epoch": 1, "iter": 2}


@pytest.mark.parametrize("ema, use_ema, kind", [
    ({"model": EMA, "updates": 3}, True, "ema"),
    ({"model": EMA, "updates": 3}, False, "model"),
    (None, True, "model"),  # trained without EMA
    ({"updates": 3}, True, "model"),  # an EMA entry without weights is not used
])
def test_the_choice_is_the_same_for_a_file_and_a_loaded_dict(tmp_path, ema, use_ema, kind):
    path = tmp_path / "ckpt_e1.pth"
    torch.save(checkpoint(ema), path)
    for source in (str(path), checkpoint(ema)):
        chosen = inference_weights(source, use_ema)
        assert chosen.kind == kind
        assert torch.equal(chosen.state["w"], (EMA if kind == "ema" else RAW)["w"])


def test_a_bare_state_dict_is_read_as_plain_weights(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save(RAW, path)
    chosen = inference_weights(str(path))
    assert chosen.kind == "bare" and torch.equal(chosen.state["w"], RAW["w"])


def test_a_file_that_is_neither_is_one_error_line(tmp_path):
    path = tmp_path / "junk.pth"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError):
        inference_weights(str(path))


def test_the_checkpoint_s_label_map_comes_with_its_weights(tmp_path):
    ckpt = dict(checkpoint({"model": EMA}), classes=["cat", "dog"])
    assert inference_weights(ckpt).classes == ["cat", "dog"]
    assert inference_weights(checkpoint(None)).classes is None  # older checkpoints record none
    torch.save(RAW, tmp_path / "bare.pth")
    assert inference_weights(str(tmp_path / "bare.pth")).classes is None
