"""When to evaluate and save, as pure functions of the 1-based epoch and the trainer section.

At the end of epoch e (DESIGN.md section 2):
- evaluate if e == max_epoch or (e >= test_start and e % test_freq == 0)
- write ckpt_e{e}.pth if e == max_epoch or (e >= save_start and e % save_freq == 0)
- overwrite ckpt_latest.pth ("current") if save_cur_start > 0 and e >= save_cur_start and
  e % save_cur_freq == 0
UP's only_save_latest replaces the per-epoch files by ckpt_latest.pth every save_latest_freq
epochs (and at the last epoch).
"""


def should_eval(epoch, t):
    return epoch == t["max_epoch"] or (epoch >= t["test_start"] and epoch % t["test_freq"] == 0)


def should_save(epoch, t):
    if t.get("only_save_latest"):
        return False
    return epoch == t["max_epoch"] or (epoch >= t["save_start"] and epoch % t["save_freq"] == 0)


def should_save_cur(epoch, t):
    if t.get("only_save_latest"):
        return epoch == t["max_epoch"] or epoch % t["save_latest_freq"] == 0
    start = t["save_cur_start"]
    return start > 0 and epoch >= start and epoch % t["save_cur_freq"] == 0
