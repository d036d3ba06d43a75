"""up_trainer.predict on file paths, PIL images and tensors: the numbers `up predict` writes."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

import tiny_net_plugin  # noqa: F401  (registers tiny_convnet for build_model below)
import up_trainer
from api_helpers import changed, fast_cfg, process_state
from conftest import invoke, write_cfg
from test_predict import det_setup  # noqa: F401  (fixture: a detector that finds a "3" everywhere)
from up_trainer.tasks.net import build_model


def _cli_records(tmp_path, cfg_path, ckpt, inputs, *extra):
    out = tmp_path / "cli_out"
    res = invoke(["predict", "--config", cfg_path, "--checkpoint", ckpt, "--input", inputs, "--out", out, *extra])
    assert res.exit_code == 0, res.stderr
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def _three_forms(path, mode):
    """The file, the PIL image of it, and its pixels as a uint8 CxHxW tensor."""
    pil = Image.open(path)
    pil.load()
    array = np.array(pil.convert(mode))  # a writable copy
    tensor = torch.from_numpy(array)[None] if array.ndim == 2 else torch.from_numpy(array).permute(2, 0, 1)
    return [str(path), pil, tensor]


@pytest.fixture()
def cls_setup(tmp_path):
    """A tiny classifier whose test set resizes its images to 16x16 at load (so every input
    form meets the same resize), and colour inputs of another size than the net's."""
    cfg = fast_cfg(dataset={"test": {"type": "digits", "kwargs": {"split": "test", "subset": 8, "size": 16}}})
    cfg_path = write_cfg(tmp_path / "cls.yaml", cfg)
    torch.manual_seed(1)
    model = build_model(up_trainer.load_config(cfg_path)["net"])
    ckpt = tmp_path / "cls.pth"
    torch.save(model.state_dict(), ckpt)
    inputs = tmp_path / "cls_in"
    inputs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)).save(inputs / f"c{i}.png")
    return cfg_path, str(ckpt), inputs


def test_classification_paths_pil_and_tensors_match_up_predict(tmp_path, cls_setup):
    cfg_path, ckpt, inputs = cls_setup
    files = sorted(inputs.iterdir())
    before = process_state()
    by_form = [up_trainer.predict(cfg_path, ckpt, [forms[k] for forms in map(lambda f: _three_forms(f, "RGB"), files)])
               for k in range(3)]
    assert changed(before, process_state()) == []
    cli = _cli_records(tmp_path, cfg_path, ckpt, inputs)
    for i, record in enumerate(cli):
        path, pil, tensor = (form[i] for form in by_form)
        assert torch.equal(path["probabilities"], pil["probabilities"])
        assert torch.equal(path["probabilities"], tensor["probabilities"])
        assert path["probabilities"].shape == (10,) and float(path["probabilities"].sum()) == pytest.approx(1)
        assert (record["label"], record["class"], record["topk"]) == (path["label"], path["class"], path["topk"])
        assert record["score"] == round(path["score"], 4)


def test_detection_paths_pil_and_tensors_match_up_predict(tmp_path, det_setup):  # noqa: F811
    cfg_path, ckpt, inputs = det_setup
    files = sorted(inputs.iterdir())
    cli = _cli_records(tmp_path, cfg_path, ckpt, inputs, "--score-thr", "0.5")
    every_form = [form for file in files for form in _three_forms(file, "RGB")]
    predicted = up_trainer.predict(cfg_path, ckpt, every_form, score_thr=0.5)  # one model load
    for i, record in enumerate(cli):
        results = predicted[3 * i:3 * i + 3]
        for result in results:
            assert torch.equal(result["boxes"], results[0]["boxes"]) and torch.equal(result["scores"],
                                                                                   results[0]["scores"])
            assert result["boxes"].shape[1] == 4 and result["boxes"].dtype == torch.float32
            assert [[round(v, 2) for v in b] for b in result["boxes"].tolist()] == record["boxes"]
            assert [round(s, 4) for s in result["scores"].tolist()] == record["scores"]
            assert result["labels"].tolist() == record["labels"] and result["classes"] == record["classes"]


def test_a_float_tensor_in_0_1_is_the_same_image(tmp_path, cls_setup):
    cfg_path, ckpt, inputs = cls_setup
    path, _, tensor = _three_forms(sorted(inputs.iterdir())[0], "RGB")
    as_float = up_trainer.predict(cfg_path, ckpt, tensor.float() / 255)
    assert torch.equal(as_float["probabilities"], up_trainer.predict(cfg_path, ckpt, path)["probabilities"])
