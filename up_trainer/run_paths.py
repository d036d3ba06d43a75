"""Where a run writes, resolved once: the run dir, saver.save_dir, saver.results_dir and every
hook's output folders (Hook.output_dirs). The output guard (paths.py) checks these before
anything starts and the directory locks (run_lock.py) hold them for the run, so the two can
never disagree about which folders a run writes.

Paths resolve by one rule (paths.resolve_path, which the builder uses too): saver
paths against ``--work-dir`` when given, else the current directory; a hook's folders against
the run dir.
"""
import os
from dataclasses import dataclass, field

from .paths import resolve_path


@dataclass(frozen=True)
class HookDir:
    key: str  # the YAML key path that names it, e.g. hooks[2].kwargs.logdir
    path: str
    names: object  # a tuple of file names, or a predicate on them (Hook.output_dirs)
    locked: bool  # held by the run's locks too (Hook.lock_outputs)


@dataclass(frozen=True)
class RunPaths:
    work_dir: object  # --work-dir, or None
    run_dir: str
    save_dir: object  # None for an evaluation-only run, which saves no checkpoint
    results_dir: object  # None when the run writes no results
    hook_dirs: tuple = field(default=())
    evaluate_only: bool = False  # `up train -e`: the hooks' folders are guarded, not locked

    @classmethod
    def of(cls, cfg, work_dir=None, evaluate_only=False):
        run_dir = work_dir or os.getcwd()
        hook_dirs = tuple(_hook_dirs(cfg, run_dir))
        saver = cfg["saver"]
        evaluates = evaluate_only or (cfg["dataset"].get("test") is not None and cfg["trainer"].get("is_eval", True))
        results = saver.get("results_dir") if evaluates and saver.get("save_result", True) else None
        return cls(work_dir, run_dir, None if evaluate_only else resolve_path(saver["save_dir"], work_dir),
                   resolve_path(results, work_dir) if results else None, hook_dirs, evaluate_only)

    def resolve(self, path):
        """A path from the config (saver.resume_model, pretrain_model) as the builder reads it."""
        return resolve_path(path, self.work_dir)

    def own_dirs(self):
        """[(what, path)] of the run's own directories: the run dir, save_dir, results_dir."""
        dirs = [("run dir", self.run_dir)]
        if self.save_dir is not None:
            dirs.append(("saver.save_dir", self.save_dir))
        if self.results_dir is not None:
            dirs.append(("saver.results_dir", self.results_dir))
        return dirs

    def written(self):
        """[(what, path)] of the directories the run holds locked: its own, the run dir first,
        then the folders of hooks that ask for it (the logger's logdir)."""
        return self.own_dirs() + [(d.key, d.path) for d in self.hook_dirs if d.locked and not self.evaluate_only]


def _hook_dirs(cfg, run_dir):
    from .registry import HOOKS

    found = []
    for i, entry in enumerate(cfg.get("hooks") or []):
        if not isinstance(entry, dict) or entry.get("type") not in HOOKS:
            continue  # a hook with no type or an unknown one is reported where hooks are built
        cls = HOOKS.get(entry["type"])
        kwargs = entry.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            continue  # likewise: "expected a mapping", in one line, where the hook is built
        for key, folder, names in cls.output_dirs(kwargs):
            if isinstance(folder, str) and folder:
                found.append(HookDir(f"hooks[{i}].kwargs.{key}", os.path.join(run_dir, folder), names,
                                     cls.lock_outputs))
    return found
