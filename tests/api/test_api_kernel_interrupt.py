"""The notebook's interrupt button during training: a real Jupyter kernel trains through the
API, the kernel is interrupted (SIGINT, as Jupyter sends it), and the call returns with the
snapshot written; the kernel then trains again, from that snapshot."""
import os
import sys
import time

import pytest

from conftest import HELPERS, PLUGINS, REPO, TESTS

pytest.importorskip("ipykernel")
jupyter_client = pytest.importorskip("jupyter_client")

SETUP = f"""
import sys
sys.path[:0] = {[os.path.join(TESTS, "api"), HELPERS, PLUGINS, TESTS, REPO]!r}
import os, signal
import up_trainer
from api_helpers import fast_cfg

class Started(up_trainer.Hook):
    def after_update(self, trainer, iteration):
        if iteration == 3:
            open(os.path.join(trainer.run_dir, "started"), "w").close()
"""


def _run(client, code, timeout=120):
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]


@pytest.mark.slow  # a kernel and two short runs: 43 s on 2 cores at load 10
def test_interrupting_the_kernel_writes_the_snapshot_and_the_call_returns(tmp_path):
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        _run(client, SETUP)
        run_dir = tmp_path / "run"
        # long enough to be interrupted: 200 epochs of 6 iterations
        msg_id = client.execute(f"result = up_trainer.train(fast_cfg(trainer={{'max_epoch': 200}}), "
                                f"work_dir={str(run_dir)!r}, hooks=[Started()])")
        deadline = time.time() + 120
        while not (run_dir / "started").exists():
            assert time.time() < deadline, "training did not start"
            time.sleep(0.1)
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = client.get_shell_msg(timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]  # train returned: no KeyboardInterrupt
        _run(client, "assert result.interrupted.startswith('KeyboardInterrupt; snapshot written')")
        _run(client, "import re; snapshot = result.checkpoints[-1]\n"
                     "assert re.fullmatch(r'ckpt_e\\d+-i\\d+\\.pth', os.path.basename(snapshot)), snapshot\n"
                     "assert os.path.samefile(snapshot, result.latest_checkpoint)")
        _run(client, "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler")
        # the same kernel trains on, from the snapshot, to a shorter end
        _run(client, f"again = up_trainer.train(fast_cfg(trainer={{'max_epoch': result.epoch + 1}}), "
                     f"work_dir={str(tmp_path / 'again')!r}, resume=result.latest_checkpoint)\n"
                     "assert again.interrupted is None and again.epoch == result.epoch + 1", timeout=300)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
