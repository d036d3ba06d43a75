"""A snapshot resumed on another number of processes than saved it: said, never silent."""
from conftest import tiny_cfg
from up_trainer.config.schema import validate
from up_trainer.engine.builder import build_trainer


def test_a_snapshot_from_inside_an_epoch_resumed_on_another_process_count_says_what_it_costs(tmp_path, caplog):
    """Mid-epoch, the batches already taken were sharded over the saving run's processes: on
    another count the rest of the epoch cannot be the exact remainder, and the log says so."""
    trainer = build_trainer(validate(tiny_cfg()), work_dir=str(tmp_path))
    ckpt = trainer.checkpoint_dict()
    ckpt["state"] = {"epoch": 1, "epoch_done": False, "epoch_iter": 2, "iter": 2, "metrics": {}}
    ckpt["rng_ranks"] = [ckpt["rng"], ckpt["rng"]]  # saved by two processes
    with caplog.at_level("WARNING", logger="up"):
        trainer.load_checkpoint(ckpt, "snap.pth")
    assert "snap.pth was saved inside epoch 1 by 2 process(es) and resumes on 1" in caplog.text
    caplog.clear()
    ckpt["state"]["epoch_done"] = True  # an epoch end resumes exactly anywhere
    with caplog.at_level("WARNING", logger="up"):
        trainer.load_checkpoint(ckpt, "end.pth")
    assert "saved inside epoch" not in caplog.text
