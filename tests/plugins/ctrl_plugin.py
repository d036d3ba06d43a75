"""Loaded through runtime.imports (tests/plugins on PYTHONPATH) by the checkpoint/control hook tests.

test_gate makes signal tests deterministic: at chosen points (after the update of iteration
N, after the evaluation of epoch E) it drops a marker file and then either sends a real
signal to its own process (`send`) or waits until the test process's signal has reached
auto_checkpoint's queue. Either way the signal is pending at a known boundary.
test_fault: raises at a chosen iteration, or makes the loss NaN at chosen iterations (once
per process, so a rollback that replays the iteration sees a finite loss).
"""
import os
import signal
import time

import torch

from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS


@HOOKS.register("test_gate")
class TestGate(Hook):
    """Test only: pause at given iterations/evaluations until a signal is queued (or send one)."""

    priority = "HIGH"  # before auto_checkpoint acts on the same boundary
    allow_multiple = True  # one gate per signal a test sends

    def __init__(self, at: list = (), after_eval: list = (), marker: str = "", send: str = None,
                 timeout: float = 120.0):
        super().__init__()
        self.at, self.evals = set(at), set(after_eval)
        self.marker, self.send, self.timeout = marker, send, timeout

    def _gate(self, trainer, tag):
        if self.marker:
            with open(f"{self.marker}.{tag}", "w"):
                pass
        if self.send:
            os.kill(os.getpid(), getattr(signal, self.send))
            return
        queue = trainer.hooks.get("auto_checkpoint")._queue
        deadline = time.time() + self.timeout
        while not queue and time.time() < deadline:
            time.sleep(0.02)

    def after_update(self, trainer, iteration):
        if iteration in self.at:
            self._gate(trainer, f"i{iteration}")

    def after_eval(self, trainer, metrics):
        if trainer.state.epoch in self.evals:
            self._gate(trainer, f"eval{trainer.state.epoch}")


_fired = set()


@HOOKS.register("test_fault")
class TestFault(Hook):
    """Test only: raise at iteration `raise_at`; NaN loss at `nan_at` iterations (first time only)."""

    priority = "HIGHEST"

    def __init__(self, raise_at: int = 0, nan_at: list = (), always: bool = False):
        super().__init__()
        self.raise_at, self.nan_at, self.always = raise_at, set(nan_at), always

    def before_forward(self, trainer, iteration, batch):
        if iteration == self.raise_at:
            raise RuntimeError(f"test_fault: boom at iteration {iteration}")

    def after_forward(self, trainer, iteration, outputs):
        if iteration in self.nan_at and (self.always or (id(self), iteration) not in _fired):
            _fired.add((id(self), iteration))
            outputs["loss"] = outputs["loss"] * torch.tensor(float("nan"))


@HOOKS.register("test_worker_death")
class TestWorkerDeath(Hook):
    """Test only: at iteration `at`, queue a SIGTERM to this process, then SIGKILL its
    DataLoader workers and wait for the main process to notice (it raises from its SIGCHLD
    handler): a worker dying while a stop request is pending."""

    priority = "HIGH"  # before auto_checkpoint acts on the boundary

    def __init__(self, at: int = 1):
        super().__init__()
        self.at = at

    def after_update(self, trainer, iteration):
        if iteration != self.at:
            return
        os.kill(os.getpid(), signal.SIGTERM)
        children = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                children.update(int(p) for p in f.read().split())
        assert children, "no DataLoader workers to kill"
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        time.sleep(30)  # the SIGCHLD handler raises in here
        raise AssertionError("the dead workers went unnoticed")
