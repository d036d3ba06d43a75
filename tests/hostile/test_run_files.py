"""Run-dir files other than checkpoints, damaged between a run and its auto_resume: the
resume goes on, the damaged file is kept aside, a new one starts, no checkpoint is touched."""
import os

import pytest

from conftest import invoke
from hostile_helpers import copy_run, fingerprint, tiny_cfg, trained_run, write_yaml  # noqa: F401

DAMAGE = [
    ("NUL bytes", {"metrics.csv": b"phase,epoch,iter\x00\x00\ntrain,1,\x00\x01\x02\n"}),
    ("not UTF-8", {"metrics.csv": b"phase,epoch,iter\ntrain,1,2\n\xff\xfe\xfa\n",
                   "metrics.jsonl": b'{"phase": "train", "iter": 1}\n\xff\xfe\n'}),
    ("foreign header", {"metrics.csv": b"name,value\nloss,0.5\n"}),
]


@pytest.mark.parametrize("what,files", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_metrics_file_does_not_block_auto_resume(tmp_path, trained_run, what, files):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    cfg = tiny_cfg(saver={"save_dir": "checkpoints", "auto_resume": True},
                   default_hooks={"logger": {"type": "train_val_logger", "kwargs": {
                       "freq": 1, "summary_writer": "none", "plot": False, "progress_bar": False}}})
    cfg["trainer"]["max_epoch"] = 2
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "resumed from" in res.stdout
    for name, data in files.items():
        kept = [n for n in os.listdir(tmp_path) if n.startswith(f"{name}.corrupt-")]
        assert len(kept) == 1, os.listdir(tmp_path)
        assert (tmp_path / kept[0]).read_bytes() == data  # the old file, as it was
        assert f"{name} cannot be read" in res.stdout and f"kept as {kept[0]}" in res.stdout
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("phase,epoch,iter") and len(lines) >= 3  # the resumed epoch's rows
    after = fingerprint(save_dir)
    assert after["ckpt_e1.pth"] == before["ckpt_e1.pth"]  # latest and best move on; e1 stays
    assert "ckpt_e2.pth" in after
