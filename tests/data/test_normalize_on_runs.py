"""dataset.normalize_on end to end: training with the conversion on the device (uint8 batches
from 2 workers) ends with the weights of training with it in the workers, bit for bit, and a
device-mode run resumed mid-way ends there too."""
from test_image_cache import digit_folder, tiny_cfg
from test_train_e2e import assert_state_equal, load, train


def cfg(root, where, workers, max_epoch=2):
    folder = {"type": "image_folder", "kwargs": {"root": root, "color_mode": "L", "transforms": [
        {"type": "RandomAffine", "kwargs": {"degrees": 10, "translate": [0.1, 0.1]}},
        {"type": "to_tensor"}, {"type": "normalize", "kwargs": {"mean": [0.5], "std": [0.25]}}]}}
    return tiny_cfg(runtime={"seed": 3, "imports": ["tiny_net_plugin"]},
                    dataset={"train": folder, "test": None, "batch_size": 8, "num_workers": workers,
                             "normalize_on": where},
                    net={"type": "tiny_convnet", "kwargs": {"num_classes": 10}},
                    trainer={"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05}}})


def test_device_and_workers_conversion_train_alike_and_resume_bitwise(tmp_path, run_up):
    root = digit_folder(tmp_path / "digits", n=24)
    workers, _ = train(run_up, tmp_path, "workers", cfg(root, "workers", 0))
    reference = load(workers / "checkpoints" / "ckpt_e2.pth")
    device, _ = train(run_up, tmp_path, "device", cfg(root, "device", 2))
    assert_state_equal(reference["model"], load(device / "checkpoints" / "ckpt_e2.pth")["model"])
    half, _ = train(run_up, tmp_path, "half", cfg(root, "device", 0, max_epoch=1))
    resumed, _ = train(run_up, tmp_path, "half", cfg(root, "device", 0), "--resume",
                       half / "checkpoints" / "ckpt_e1.pth")
    out = load(resumed / "checkpoints" / "ckpt_e2.pth")
    assert_state_equal(reference["model"], out["model"])
    assert_state_equal(reference["optimizer"], out["optimizer"])
