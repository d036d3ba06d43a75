"""up_trainer.export: up export's file, record and verification, from Python."""
import json

import pytest
import torch

import tiny_net_plugin  # noqa: F401  (registers tiny_convnet for build_model below)
import up_trainer
from api_helpers import changed, fast_cfg, process_state
from conftest import invoke, write_cfg
from up_trainer.tasks.net import build_model


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_export_writes_what_up_export_writes(tmp_path):
    cfg_path = write_cfg(tmp_path / "c.yaml", fast_cfg())
    torch.manual_seed(0)
    torch.save(build_model(up_trainer.load_config(cfg_path)["net"]).state_dict(), tmp_path / "w.pth")
    before = process_state()
    record = up_trainer.export(cfg_path, tmp_path / "w.pth", "torchscript", tmp_path / "api.pt", input_size=(1, 8, 8))
    assert changed(before, process_state()) == []
    assert record["file"] == str(tmp_path / "api.pt") and record["max_error"] <= record["tolerance"]
    assert json.loads((tmp_path / "api.pt.json").read_text()) == record
    cli = invoke(["export", "--config", cfg_path, "--checkpoint", tmp_path / "w.pth", "--format", "torchscript",
                  "--out", tmp_path / "cli.pt", "--input-size", "1,8,8"])
    assert cli.exit_code == 0, cli.stderr
    from_cli = json.loads((tmp_path / "cli.pt.json").read_text())
    assert {k: v for k, v in from_cli.items() if k != "file"} == {k: v for k, v in record.items() if k != "file"}
    x = torch.rand(2, 1, 8, 8)
    assert all(torch.equal(a, b) for a, b in zip(torch.jit.load(str(tmp_path / "api.pt"))(x),
                                                 torch.jit.load(str(tmp_path / "cli.pt"))(x)))
