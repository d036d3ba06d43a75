"""train_val_logger: timings, --display, TTY/non-TTY output, CSV/JSONL rows, resume, event files.

The unit tests drive the hook through the trainer's events with a scripted clock; one real
training run (module fixture, plus a resume from its epoch-1 checkpoint) checks the files on
disk, reading the event files back with TensorBoard's own EventAccumulator.
"""
import csv
import io
import json
import logging
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
import yaml

from conftest import REPO, write_cfg
from up_trainer.engine.scalars import Scalars
from up_trainer.engine.state import TrainState
from up_trainer.errors import ConfigError
from up_trainer.hooks import train_val_logger as tvl
from up_trainer.registry import HOOKS

LINE = re.compile(r"\[\s*[\d.]+%\] epoch (\d+) \[(\d+)/(\d+)\]")


@pytest.fixture
def up_log():
    """Records of the 'up' logger (it does not propagate to the root logger)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("up")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(old_level)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class CountingLoss:
    """Looks like a 1-element tensor; counts .item() calls (they force a device sync)."""

    def __init__(self, value):
        self.value, self.items = value, 0

    def numel(self):
        return 1

    def detach(self):
        return self

    def float(self):
        return self

    def item(self):
        self.items += 1
        return self.value


def fake_trainer(run_dir, epoch_len=10, max_epoch=2, display=None):
    st = TrainState()
    st.epoch_len = epoch_len
    return SimpleNamespace(state=st, dist=SimpleNamespace(is_main=True, enabled=False), device=torch.device("cpu"),
                           optim=SimpleNamespace(lr=lambda: 0.01), outputs={}, run_dir=str(run_dir),
                           max_epoch=max_epoch, total_iters=max_epoch * epoch_len, display=display,
                           scalars=Scalars(), cfg={"dataset": {"num_workers": 0}})


def drive(hook, trainer, clock, n_iters, phase_times, metrics=None):
    """Run the trainer's event sequence for ``n_iters`` iterations; phase_times(it) gives
    (data, forward, backward, optimizer step) seconds for iteration ``it``."""
    st = trainer.state
    for _ in range(n_iters):
        if st.epoch_done:
            st.next_epoch()
            hook.before_epoch(trainer, st.epoch)
        it = st.iter + 1
        data, fwd, bwd, step = phase_times(it)
        hook.before_data(trainer, it)
        clock.t += data
        hook.before_forward(trainer, it, {})
        clock.t += fwd
        hook.after_forward(trainer, it, trainer.outputs)
        clock.t += bwd
        hook.after_backward(trainer, it, None)
        clock.t += step
        st.iter, st.epoch_iter = it, st.epoch_iter + 1
        hook.after_update(trainer, it)
        if st.epoch_iter == st.epoch_len:
            hook.after_epoch(trainer, st.epoch)
            clock.t += 100.0  # evaluation: must not count as batch time
            hook.after_eval(trainer, metrics or {"top1": 50.0 + st.epoch})
            st.epoch_done = True


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def jsonl(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(tvl.time, "perf_counter", c)
    return c


@pytest.fixture
def non_tty(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(tvl.sys, "stdout", out)
    return out


def test_skip_first_k_is_left_out_of_timings_and_eta(tmp_path, clock, non_tty, up_log):
    hook = tvl.TrainValLogger(freq=5, skip_first_k=3, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path)
    hook.before_train(trainer)
    # The first 3 iterations are slow warm-up (10 s per phase), then 1+2+3+0.5 s.
    drive(hook, trainer, clock, 10, lambda it: (10, 10, 10, 10) if it <= 3 else (1, 2, 3, 0.5))
    train = [r for r in rows(tmp_path) if r["phase"] == "train"]
    assert [r["iter"] for r in train] == ["5", "10"]
    # Window at iter 5 = iterations 4 and 5 only; iterations 1-3 are not in it.
    assert float(train[0]["data_time"]) == pytest.approx(1.0)
    assert float(train[0]["forward_time"]) == pytest.approx(2.0)
    assert float(train[0]["backward_time"]) == pytest.approx(3.0)
    assert float(train[0]["batch_time"]) == pytest.approx(6.5)
    lines = [r.getMessage() for r in up_log if LINE.search(r.getMessage())]
    # ETA from the global average (6.5 s) x 15 iterations left = 97.5 s.
    assert "eta 0:01:37" in lines[0]
    assert "batch 6.500 (6.500)" in lines[0]
    assert "batch 6.500 (6.500)" in lines[1]


def test_without_skip_the_warmup_counts(tmp_path, clock, non_tty, up_log):
    hook = tvl.TrainValLogger(freq=5, skip_first_k=0, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path)
    hook.before_train(trainer)
    drive(hook, trainer, clock, 5, lambda it: (10, 10, 10, 10) if it <= 3 else (1, 2, 3, 0.5))
    (row,) = [r for r in rows(tmp_path) if r["phase"] == "train"]
    assert float(row["batch_time"]) == pytest.approx((3 * 40 + 2 * 6.5) / 5)


@pytest.mark.parametrize("display, expected", [(None, [5, 10, 15, 20]), (3, [3, 6, 9, 12, 15, 18])])
def test_display_overrides_freq_only_when_given(tmp_path, clock, non_tty, up_log, display, expected):
    hook = tvl.TrainValLogger(freq=5, skip_first_k=0, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path, display=display)
    hook.before_train(trainer)
    drive(hook, trainer, clock, 20, lambda it: (0.1, 0.1, 0.1, 0.1))
    logged = [int(LINE.search(r.getMessage()).group(2)) + 10 * (int(LINE.search(r.getMessage()).group(1)) - 1)
              for r in up_log if LINE.search(r.getMessage())]
    assert logged == expected
    assert [int(r["iter"]) for r in rows(tmp_path) if r["phase"] == "train"] == expected


def test_losses_and_grad_norm_read_only_on_log_lines(tmp_path, clock, non_tty, up_log):
    hook = tvl.TrainValLogger(freq=4, skip_first_k=0, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path, epoch_len=8, max_epoch=1)
    cls_loss, box_loss = CountingLoss(1.5), CountingLoss(0.25)
    trainer.outputs = {"cls_loss": cls_loss, "box_loss": box_loss, "accuracy": torch.tensor(0.5)}
    trainer.scalars.put("grad_norm", torch.tensor(4.0))
    hook.before_train(trainer)
    drive(hook, trainer, clock, 8, lambda it: (0.1, 0.1, 0.1, 0.1))
    assert cls_loss.items == 2 and box_loss.items == 2  # 8 iterations, 2 log lines
    train = [r for r in jsonl(tmp_path) if r["phase"] == "train"]
    assert [(r["epoch"], r["iter"]) for r in train] == [(1, 4), (1, 8)]
    assert train[0]["cls_loss"] == 1.5 and train[0]["box_loss"] == 0.25 and train[0]["loss"] == 1.75
    assert train[0]["grad_norm"] == 4.0 and train[0]["lr"] == 0.01
    assert "accuracy" not in train[0]
    assert train[0]["memory_mb"] > 10  # peak RSS of this Python process
    line = next(r.getMessage() for r in up_log if LINE.search(r.getMessage()))
    assert "cls_loss 1.5000" in line and "loss 1.7500" in line and "grad_norm 4.0000" in line
    assert "lr 0.01" in line and "mem " in line


def test_non_tty_gets_plain_lines_only(tmp_path, clock, non_tty, up_log):
    hook = tvl.TrainValLogger(freq=5, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path)
    hook.before_train(trainer)
    drive(hook, trainer, clock, 20, lambda it: (0.1, 0.1, 0.1, 0.1))
    assert non_tty.getvalue() == ""  # no bar, no carriage returns: the log handler prints the lines


def test_tty_gets_a_live_bar_cleared_around_lines(tmp_path, clock, monkeypatch, up_log):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    monkeypatch.setattr(tvl.sys, "stdout", out)
    hook = tvl.TrainValLogger(freq=5, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path)
    hook.before_train(trainer)
    drive(hook, trainer, clock, 20, lambda it: (0.1, 0.1, 0.1, 0.1))
    hook.after_train(trainer)
    text = out.getvalue()
    assert "\r|" in text and "% epoch 1 [2/10]" in text and "% epoch 2 [9/10]" in text
    assert text.endswith("\r\x1b[K")  # the bar is gone when training ends


def test_tty_bar_is_cleared_before_other_hooks_lines(tmp_path, clock, monkeypatch, up_log):
    """Another hook's log line (memory_checkpoint's plan, a warning) starts on a clean line."""
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    monkeypatch.setattr(tvl.sys, "stdout", out)
    console = logging.StreamHandler(out)  # what setup_logging installs: the console is the bar's stream
    logging.getLogger("up").addHandler(console)
    try:
        hook = tvl.TrainValLogger(freq=1000, summary_writer="none", plot=False)
        trainer = fake_trainer(tmp_path)
        hook.before_train(trainer)
        drive(hook, trainer, clock, 3, lambda it: (0.1, 0.1, 0.1, 0.1))
        assert out.getvalue().rstrip().split("\r")[-1].startswith("|")  # the bar is on screen
        logging.getLogger("up").info("memory_checkpoint: plan ready")
        assert "\r\x1b[Kmemory_checkpoint: plan ready\n" in out.getvalue()
        hook.after_train(trainer)
        assert console.filters == []  # nothing left behind on the console handler
    finally:
        logging.getLogger("up").removeHandler(console)


def test_resumed_run_continues_rows_without_duplicates(tmp_path, clock, non_tty, up_log):
    first = tvl.TrainValLogger(freq=5, summary_writer="none", plot=False)
    trainer = fake_trainer(tmp_path, epoch_len=10, max_epoch=2)
    first.before_train(trainer)
    drive(hook=first, trainer=trainer, clock=clock, n_iters=15, phase_times=lambda it: (0.1,) * 4)
    assert [(r["phase"], r["iter"]) for r in rows(tmp_path)] == [
        ("train", "5"), ("train", "10"), ("eval", "10"), ("train", "15")]
    # Resume from the end-of-epoch-1 checkpoint (iteration 10): the row at 15 goes, the rest stays.
    trainer = fake_trainer(tmp_path, epoch_len=10, max_epoch=2)
    trainer.state.load_state_dict({"epoch": 1, "epoch_done": True, "epoch_iter": 10, "iter": 10})
    second = tvl.TrainValLogger(freq=5, summary_writer="none", plot=False)
    second.before_train(trainer)
    drive(second, trainer, clock, 10, lambda it: (0.1,) * 4)
    expected = [("train", "5"), ("train", "10"), ("eval", "10"), ("train", "15"), ("train", "20"), ("eval", "20")]
    assert [(r["phase"], r["iter"]) for r in rows(tmp_path)] == expected
    assert [(r["phase"], str(r["iter"])) for r in jsonl(tmp_path)] == expected
    assert all(r["epoch"] for r in rows(tmp_path))


@pytest.mark.parametrize("kwargs, path", [
    ({"summary_writer": "tensorbord"}, "hooks[0].kwargs.summary_writer"),
    ({"summary_writer": "pavi"}, "hooks[0].kwargs.writer_kwargs.url"),
    ({"summary_writer": "pavi", "writer_kwargs": {"url": "http://x", "bach_size": 3}},
     "hooks[0].kwargs.writer_kwargs.bach_size"),
    ({"writer_kwargs": {"logdir": "elsewhere"}}, "hooks[0].kwargs.writer_kwargs.logdir"),
    ({"freq": 0}, "hooks[0].kwargs.freq"),
])
def test_bad_kwargs_name_their_yaml_path(monkeypatch, kwargs, path):
    monkeypatch.delenv("UP_PAVI_URL", raising=False)
    with pytest.raises(ConfigError) as info:
        HOOKS.build({"type": "train_val_logger", "kwargs": kwargs}, "hooks[0]")
    assert info.value.path == path


# -- one real run (and a resume of it) ---------------------------------------------------------------
def demo_cfg(**logger_kwargs):
    with open(os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["hooks"] = [{"type": "grad_clipper", "kwargs": {"max_norm": 10.0}},
                    {"type": "train_val_logger", "kwargs": logger_kwargs}]
    return cfg


TINY = ["dataset.train.kwargs.subset=32", "dataset.test.kwargs.subset=16", "dataset.train.kwargs.size=8",
        "dataset.test.kwargs.size=8", "dataset.batch_size=8", "trainer.max_epoch=2", "runtime.num_threads=1",
        "default_hooks.best=null"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    from conftest import invoke

    tmp = tmp_path_factory.mktemp("logger")
    cfg = write_cfg(tmp / "cfg.yaml", demo_cfg(freq=1000, skip_first_k=2, logdir="tb"))
    run_dir = tmp / "run"
    res = invoke(["train", "--config", cfg, "--work-dir", run_dir, "--display", "2", "--opts", *TINY])
    assert res.exit_code == 0, (res.stderr, res.exception, res.stdout[-3000:])
    # Resume a copy from the epoch-1 checkpoint: rows and events must continue, not repeat.
    resumed = tmp / "resumed"
    shutil.copytree(run_dir, resumed)
    res2 = invoke(["train", "--config", cfg, "--work-dir", resumed, "--display", "2",
                   "--resume", resumed / "checkpoints" / "ckpt_e1.pth", "--opts", *TINY,
                   "hooks.train_val_logger.kwargs.plot=false"])
    assert res2.exit_code == 0, (res2.stderr, res2.exception, res2.stdout[-3000:])
    return SimpleNamespace(dir=str(run_dir), stdout=res.stdout, resumed=str(resumed), stdout2=res2.stdout)


def test_real_run_lines_follow_display_and_stay_plain(real_run):
    lines = [m.group(0) for m in LINE.finditer(real_run.stdout)]
    assert lines == [f"[{p:5.1f}%] epoch {e} [{i}/4]" for p, e, i in
                     ((25, 1, 2), (50, 1, 4), (75, 2, 2), (100, 2, 4))]
    assert "\r" not in real_run.stdout and "\x1b[" not in real_run.stdout
    assert "time data - (-)" in real_run.stdout  # iterations 1-2 skipped: the first line has no timings
    assert re.search(r"batch \d+\.\d{3} \(\d+\.\d{3}\) \| loss \d+\.\d{4} \| grad_norm \d", real_run.stdout)


def test_real_run_csv_and_jsonl_rows(real_run):
    table = rows(real_run.dir)
    assert [(r["phase"], r["epoch"], r["iter"]) for r in table] == [
        ("train", "1", "2"), ("train", "1", "4"), ("eval", "1", "4"),
        ("train", "2", "6"), ("train", "2", "8"), ("eval", "2", "8")]
    assert table[0]["batch_time"] == "" and float(table[1]["batch_time"]) > 0  # skip_first_k=2
    for r in table:
        if r["phase"] == "train":
            assert float(r["loss"]) > 0 and float(r["lr"]) > 0 and float(r["grad_norm"]) > 0
        else:
            assert 0 <= float(r["top1"]) <= 100 and r["loss"] == ""
    lines = jsonl(real_run.dir)
    assert [(r["phase"], r["epoch"], r["iter"]) for r in lines] == [
        (r["phase"], int(r["epoch"]), int(r["iter"])) for r in table]
    assert lines[1]["loss"] == pytest.approx(float(table[1]["loss"]))
    assert os.path.getsize(os.path.join(real_run.dir, "results.png")) > 10_000
    assert "training curves: " in real_run.stdout and "results.png" not in real_run.stdout2  # plot: false


def read_events(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(logdir)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_real_run_event_files_read_back_with_tensorboard(real_run):
    events = read_events(os.path.join(real_run.dir, "tb"))
    assert set(events) == {"train/loss", "train/lr", "train/grad_norm", "metrics/top1", "metrics/top5",
                           "metrics/num_samples", "metrics/val_loss"}
    assert [s for s, _ in events["train/loss"]] == [2, 4, 6, 8]
    assert [s for s, _ in events["metrics/top1"]] == [1, 2]  # epoch steps
    table = rows(real_run.dir)
    train = [r for r in table if r["phase"] == "train"]
    for tag, col in (("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm")):
        assert [v for _, v in events[tag]] == pytest.approx([float(r[col]) for r in train], rel=1e-6)
    evals = [float(r["top1"]) for r in table if r["phase"] == "eval"]
    assert [v for _, v in events["metrics/top1"]] == pytest.approx(evals)


def test_resume_continues_csv_and_events_without_duplicates(real_run):
    table = rows(real_run.resumed)
    assert [(r["phase"], r["epoch"], r["iter"]) for r in table] == [
        ("train", "1", "2"), ("train", "1", "4"), ("eval", "1", "4"),
        ("train", "2", "6"), ("train", "2", "8"), ("eval", "2", "8")]
    assert len(jsonl(real_run.resumed)) == 6
    assert "resumed from" in real_run.stdout2
    events = read_events(os.path.join(real_run.resumed, "tb"))  # two event files: the old one purged
    assert [s for s, _ in events["train/loss"]] == [2, 4, 6, 8]
    assert [s for s, _ in events["metrics/top1"]] == [1, 2]


def test_trimming_stops_at_a_garbage_frame_length(tmp_path):
    """An event file whose last frame header is garbage (a kill mid-header, a foreign file) is
    trimmed up to the last whole frame, without reading the length the header claims."""
    import struct

    from up_trainer.writers.tensorboard import TensorboardWriter, trim_event_files

    logdir = str(tmp_path / "tb")
    w = TensorboardWriter(logdir)
    for step in (1, 2, 3):
        w.add_scalar("train/loss", float(step), step)
    w.close()
    (name,) = [n for n in os.listdir(logdir) if n.startswith("events")]
    with open(os.path.join(logdir, name), "ab") as f:
        f.write(struct.pack("<Q", 2 ** 62) + b"\0" * 4 + b"junk")  # claims 4 EiB of payload
    trim_event_files(logdir, 2, 0)
    assert read_events(logdir)["train/loss"] == [(1, 1.0), (2, 2.0)]
