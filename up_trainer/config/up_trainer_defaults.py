"""UP's trainer defaults, written into a UP-form file's trainer section at config time.

Native files keep today's defaults (no lr scaling, linear warmup from 0.001 x lr). A file read
as UP form gets UP's, explicitly, so that ``up config`` shows them and the run's config.yaml
records them:

- ``trainer.lr_scheduler.warmup_type: exp``
- ``trainer.lr_scheduler.warmup_register_type: base`` (lr x world_size x batch_size x accumulate)
- ``trainer.lr_scheduler.warmup_ratio: -1`` (warmup starts at the lr as written)

Only keys the file leaves unset are filled. No torch import here: ``up config`` stays fast.
"""

UP_LR_SCHEDULER_DEFAULTS = (
    ("warmup_type", "exp", "exponential warmup"),
    ("warmup_register_type", "base", "lr x world_size x batch_size x accumulate"),
    ("warmup_ratio", -1, "warmup starts at the lr as written"),
)


def apply_up_trainer_defaults(cfg):
    """Fill UP's defaults into ``cfg['trainer']['lr_scheduler']``; one note per key filled."""
    trainer = cfg.get("trainer")
    sched = trainer.get("lr_scheduler") if isinstance(trainer, dict) else None
    if not isinstance(sched, dict):
        return []
    notes = []
    warms = any(sched.get(k) not in (None, 0) for k in ("warmup_iter", "warmup_epochs"))
    for key, value, why in UP_LR_SCHEDULER_DEFAULTS:
        if key != "warmup_register_type" and not warms:
            continue  # only the lr scaling matters without a warmup
        if sched.get(key) is None:
            sched[key] = value
            notes.append(f"trainer.lr_scheduler.{key}: {value} (UP default: {why})")
    return notes
