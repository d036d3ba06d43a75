"""CheckpointStore: atomic writes, links, background writes, disk full, stale temp files."""
import errno
import os

import pytest
import torch

from up_trainer.engine import checkpoint as ck
from up_trainer.errors import CheckpointError


def state(value):
    return {"model": {"w": torch.full((4,), float(value))}, "epoch": value, "iter": value * 10}


@pytest.mark.parametrize("async_write", [False, True])
def test_save_links_latest_and_best_to_one_file(tmp_path, async_write):
    store = ck.CheckpointStore(str(tmp_path), async_write=async_write)
    store.save(state(1), ["ckpt_e1.pth", ck.BEST])
    store.flush()
    assert os.path.samefile(tmp_path / "ckpt_e1.pth", tmp_path / ck.LATEST)
    assert os.path.samefile(tmp_path / "ckpt_e1.pth", tmp_path / ck.BEST)
    store.save(state(2), ["ckpt_e2.pth"])
    store.flush()
    assert ck.load_checkpoint(str(tmp_path / ck.LATEST))["epoch"] == 2
    assert ck.load_checkpoint(str(tmp_path / ck.BEST))["epoch"] == 1  # untouched by the new latest
    os.unlink(tmp_path / "ckpt_e2.pth")  # rotation never leaves latest dangling
    assert ck.load_checkpoint(str(tmp_path / ck.LATEST))["epoch"] == 2


def test_background_write_holds_the_state_at_save_time(tmp_path):
    store = ck.CheckpointStore(str(tmp_path), async_write=True)
    live = state(1)
    store.save(live, ["ckpt_e1.pth"])
    live["model"]["w"].add_(100)  # training goes on while the write is in flight
    store.flush()
    saved = torch.load(tmp_path / "ckpt_e1.pth", weights_only=True)
    assert torch.equal(saved["model"]["w"], torch.ones(4))


def test_reused_staging_buffers_follow_a_changing_layout(tmp_path):
    """Staging buffers are pooled by position: tensors appearing (optimizer state after the
    first step), changing shape or dtype, or moving, still come out as they were saved."""
    store = ck.CheckpointStore(str(tmp_path), async_write=True)
    layouts = [
        {"model": {"w": torch.arange(4.0)}, "optimizer": {"state": {}}},
        {"model": {"w": torch.arange(4.0) + 1}, "optimizer": {"state": {0: {"buf": torch.full((4,), 7.0)}}}},
        {"model": {"w": torch.arange(6, dtype=torch.int64)}, "optimizer": {"state": {0: {"buf": torch.ones(2, 3)}}}},
        {"extra": torch.zeros(3, dtype=torch.bool), "model": {"w": torch.arange(4.0) * 2}},
    ]
    for i, live in enumerate(layouts):
        store.save(live, [f"ckpt_e{i + 1}.pth"])
        for t in (live["model"]["w"], *(s["buf"] for s in live.get("optimizer", {}).get("state", {}).values())):
            t.add_(100)  # training goes on while the write is in flight
        store.flush()
        saved = torch.load(tmp_path / f"ckpt_e{i + 1}.pth", weights_only=True)
        assert saved["model"]["w"].dtype == live["model"]["w"].dtype
        assert torch.equal(saved["model"]["w"] + 100, live["model"]["w"])
        for key, st in live.get("optimizer", {}).get("state", {}).items():
            assert torch.equal(saved["optimizer"]["state"][key]["buf"] + 100, st["buf"])
        if "extra" in live:
            assert torch.equal(saved["extra"], live["extra"])


@pytest.mark.parametrize("async_write", [False, True])
def test_disk_full_keeps_previous_checkpoint_and_reports_clearly(tmp_path, monkeypatch, async_write):
    store = ck.CheckpointStore(str(tmp_path), async_write=async_write)
    store.save(state(1), ["ckpt_e1.pth"])
    store.flush()
    real_save = torch.save

    def full_disk(obj, f, *a, **kw):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="cannot write checkpoint .*ckpt_e2.pth: No space left on device"):
        store.save(state(2), ["ckpt_e2.pth"])
        store.flush()
    monkeypatch.setattr(ck.torch, "save", real_save)
    assert sorted(os.listdir(tmp_path)) == ["ckpt_e1.pth", ck.LATEST]
    assert ck.load_checkpoint(str(tmp_path / ck.LATEST))["epoch"] == 1


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    dead = tmp_path / ".ckpt_e3.pth.tmp999999"
    mine = tmp_path / f".ckpt_e4.pth.tmp{os.getpid()}"
    dead.write_bytes(b"x")
    mine.write_bytes(b"x")
    ck.CheckpointStore(str(tmp_path)).remove_stale_temp_files()
    assert not dead.exists() and mine.exists()


def test_find_resumable_prefers_newest_valid(tmp_path):
    store = ck.CheckpointStore(str(tmp_path))
    store.save(state(1), ["ckpt_e1.pth"])
    store.save(state(2), ["ckpt_e2.pth"])
    path, ckpt = store.find_resumable()
    assert ckpt["epoch"] == 2
    os.unlink(tmp_path / ck.LATEST)
    (tmp_path / "ckpt_e2.pth").write_bytes(b"PK\x03\x04broken")
    os.utime(tmp_path / "ckpt_e2.pth")
    path, ckpt = store.find_resumable()
    assert path.endswith("ckpt_e1.pth") and ckpt["epoch"] == 1


def test_names_parse():
    assert ck.parse_name("ckpt_e12.pth") == (12, None)
    assert ck.parse_name("ckpt_e3-i120.pth") == (3, 120)
    assert ck.parse_name("ckpt_best.pth") is None


def test_snapshot_copies_on_one_thread_and_restores_the_setting(monkeypatch):
    """A parallel copy waits for every intra-op thread to get a core: on a loaded machine the
    loop's stall grew 10-40 x. The snapshot copies on the calling thread alone."""
    threads_seen = []
    original = torch.Tensor.copy_

    def copy_(self, src, *args, **kwargs):
        threads_seen.append(torch.get_num_threads())
        return original(self, src, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = ck.snapshot({"model": {"w": torch.randn(300, 300), "b": torch.randn(300)}, "epoch": 1})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert threads_seen == [1, 1] and out["epoch"] == 1 and out["model"]["w"].shape == (300, 300)
