"""Speed levers on CPU: the keys are accepted, reach DataLoader / the model, and resume stays exact.

Their CUDA side (channels_last convolutions, cudnn.benchmark, pinned non_blocking copies, compile
on a GPU) is exercised in tests/gpu/.
"""
import subprocess
import sys
import time
import warnings

import pytest
import torch

from conftest import tiny_cfg, write_cfg
from test_train_e2e import assert_state_equal, load, train
from up_trainer.config.schema import validate
from up_trainer.engine.builder import build_trainer

AUGMENTED = {"type": "digits", "kwargs": {"split": "train", "subset": 96, "transforms": [
    {"type": "RandomAffine", "kwargs": {"degrees": 10, "translate": [0.1, 0.1]}}]}}


def worker_cfg(**dataset):
    return tiny_cfg(dataset={"train": AUGMENTED, "num_workers": 1, "persistent_workers": True,
                             "prefetch_factor": 3, **dataset})


def test_loader_keys_reach_the_dataloader(tmp_path):
    trainer = build_trainer(validate(worker_cfg(pin_memory=True)), work_dir=str(tmp_path))
    loader = trainer.loaders.train_loader(1)
    # pinned only where there is an accelerator to copy to (torch warns on every loader otherwise)
    pinned = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor, loader.pin_memory) == (1, True, 3,
                                                                                                           pinned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(loader))
    assert trainer.loaders.train_loader(2) is loader  # one loader, its workers serve every epoch
    if sys.platform.startswith("linux"):  # forked whatever Python's default (forkserver from 3.14)
        assert loader.multiprocessing_context.get_start_method() == "fork"
        assert loader._ring is not None  # and so they hand batches over through the shared ring
    assert trainer.loaders.test_loader() is trainer.loaders.test_loader()
    plain = build_trainer(validate(tiny_cfg()), work_dir=str(tmp_path / "plain")).loaders
    assert plain.train_loader(1) is not plain.train_loader(2)
    assert (plain.train_loader(1).persistent_workers, plain.train_loader(1).prefetch_factor) == (False, None)


@pytest.mark.parametrize("overrides, message", [
    ({"dataset": {"persistent_workers": True}}, "dataset.persistent_workers: needs worker processes"),
    ({"dataset": {"prefetch_factor": 2}}, "dataset.prefetch_factor: needs worker processes"),
    ({"runtime": {"compile": {"mod": "max-autotune"}}}, "runtime.compile.mod: unknown argument"),
    ({"runtime": {"compile": {"mode": "fastest"}}}, "runtime.compile: "),
    ({"runtime": {"compile": "yes"}}, "runtime.compile: expected bool/dict"),
    ({"runtime": {"cudnn_benchmark": True, "deterministic": True}}, "runtime.cudnn_benchmark: cannot be combined"),
])
def test_bad_lever_settings_are_one_line_errors(tmp_path, run_up, overrides, message):
    path = write_cfg(tmp_path / "bad.yaml", tiny_cfg(**overrides))
    res = run_up(["train", "--config", path, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    checked = run_up(["config", "--config", path])  # up config refuses what up train would
    assert checked.exit_code == 2 and message in checked.stderr, (checked.stderr, checked.exception)


def test_persistent_workers_resume_bitwise_as_a_straight_run_in_one_process(tmp_path, run_up):
    """Workers that outlive an epoch still draw each batch's augmentation from (seed, epoch,
    position): the run equals one without workers, and resuming mid-run changes nothing."""
    straight, _ = train(run_up, tmp_path, "straight", worker_cfg(num_workers=2))
    half_cfg = worker_cfg(num_workers=2)
    half_cfg["trainer"]["max_epoch"] = 1
    train(run_up, tmp_path, "half", half_cfg)
    resumed, _ = train(run_up, tmp_path, "half", worker_cfg(num_workers=2), "--resume",
                       tmp_path / "half" / "checkpoints" / "ckpt_e1.pth")
    in_process, _ = train(run_up, tmp_path, "in_process", tiny_cfg(dataset={"train": AUGMENTED}))
    final = load(straight / "checkpoints" / "ckpt_e2.pth")
    assert_state_equal(final["model"], load(resumed / "checkpoints" / "ckpt_e2.pth")["model"])
    assert_state_equal(final["model"], load(in_process / "checkpoints" / "ckpt_e2.pth")["model"])
    assert_state_equal(final["optimizer"], load(resumed / "checkpoints" / "ckpt_e2.pth")["optimizer"])


def test_channels_last_trains_saves_plain_keys_and_resumes_exactly(tmp_path, run_up):
    cfg = tiny_cfg(runtime={"seed": 3, "channels_last": True})
    trainer = build_trainer(validate(cfg), work_dir=str(tmp_path / "built"))
    conv = trainer.module.backbone.layer1[0].conv1.weight  # 64 channels: the two layouts differ
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    straight, _ = train(run_up, tmp_path, "straight", cfg)
    half, _ = train(run_up, tmp_path, "half", tiny_cfg(runtime={"seed": 3, "channels_last": True},
                                                        trainer={**cfg["trainer"], "max_epoch": 1}))
    resumed, _ = train(run_up, tmp_path, "half", cfg, "--resume", half / "checkpoints" / "ckpt_e1.pth")
    a, b = load(straight / "checkpoints" / "ckpt_e2.pth"), load(resumed / "checkpoints" / "ckpt_e2.pth")
    assert_state_equal(a["model"], b["model"])
    plain = load(tmp_path / "straight" / "checkpoints" / "ckpt_e2.pth")["model"]
    assert set(plain) == set(trainer.module.state_dict())


def tiny_compiled_cfg(compile_value, max_epoch=2):
    return tiny_cfg(runtime={"seed": 3, "imports": ["tiny_net_plugin"], "compile": compile_value},
                    net={"type": "tiny_convnet", "kwargs": {"num_classes": 10}},
                    trainer={"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}})


@pytest.mark.slow
def test_compiled_model_trains_keeps_plain_checkpoint_keys_and_resumes(tmp_path, run_up):
    """torch.compile on CPU (inductor builds C++ kernels): about 30-60 s on a busy 2-core box,
    hence ``slow``; run it with ``python -m pytest -m slow tests/engine/test_speed_levers.py``."""
    started = time.perf_counter()
    plain, _ = train(run_up, tmp_path, "plain", tiny_compiled_cfg(False))
    compiled, res = train(run_up, tmp_path, "compiled", tiny_compiled_cfg(True))
    assert "torch.compile: default settings" in res.stdout
    half, _ = train(run_up, tmp_path, "half", tiny_compiled_cfg(True, max_epoch=1))
    resumed, _ = train(run_up, tmp_path, "half", tiny_compiled_cfg(True), "--resume",
                       half / "checkpoints" / "ckpt_e1.pth")
    a = load(plain / "checkpoints" / "ckpt_e2.pth")
    b = load(compiled / "checkpoints" / "ckpt_e2.pth")
    c = load(resumed / "checkpoints" / "ckpt_e2.pth")
    assert list(a["model"]) == list(b["model"]) == list(c["model"])  # no "_orig_mod." prefix
    assert not any("_orig_mod" in k for k in b["optimizer"]["param_groups"][0].get("param_names", []))
    # compiled kernels may fuse differently from eager: close, and the resumed run equals the straight one
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k].float(), b["model"][k].float(), rtol=1e-3, atol=1e-4)
    assert_state_equal(b["model"], c["model"])
    assert c["iter"] == b["iter"]
    print(f"compile test took {time.perf_counter() - started:.1f} s")


def test_a_process_holding_persistent_workers_exits(tmp_path):
    """Workers ignore SIGTERM (a stop is the main process's to handle), so persistent ones still
    alive at interpreter exit must be shut down before multiprocessing's exit handler would
    SIGTERM them and wait forever (a trainer kept by the caller, as in a notebook or a test)."""
    from test_dist import child_env

    script = f"""
import sys
from conftest import tiny_cfg
from up_trainer.config.schema import validate
from up_trainer.engine.builder import build_trainer
cfg = tiny_cfg(dataset={{"num_workers": 2, "persistent_workers": True}})
trainer = build_trainer(validate(cfg), work_dir={str(tmp_path)!r})
for batch in trainer.loaders.train_loader(1):
    pass
for batch in trainer.loaders.test_loader():
    pass
print("iterated")
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env(), timeout=120)
    assert res.returncode == 0 and "iterated" in res.stdout, res.stderr[-3000:]


def test_persistent_workers_mix_and_augment_by_the_epoch_they_serve():
    """batch_fn (mixing in the collate step) and augmentation inside long-lived workers follow
    the epoch of each iteration, as in the main process; a mid-epoch start too."""
    from conftest import loader_cfg

    from up_trainer.data.loader import LoaderFactory
    from up_trainer.registry import DATASETS

    data = DATASETS.build(AUGMENTED | {"kwargs": {**AUGMENTED["kwargs"], "subset": 24}}, "d")
    mix = {"type": "batch_mixup", "kwargs": {"alpha": 0.5, "num_classes": 10}}
    main = LoaderFactory(loader_cfg(batch_fn=mix), data, None, seed=4)
    workers = LoaderFactory(loader_cfg(batch_fn=mix, num_workers=2, persistent_workers=True), data, None, seed=4)
    for epoch, start in ((1, 0), (2, 0), (3, 2)):
        expected = list(main.train_loader(epoch, start_batch=start))
        got = list(workers.train_loader(epoch, start_batch=start))
        assert len(got) == len(expected) == 6 - start
        for a, b in zip(expected, got):
            assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
    assert workers.train_loader(4) is workers.train_loader(5)
