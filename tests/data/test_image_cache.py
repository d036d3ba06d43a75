"""dataset.cache: hits return the decoder's pixels, DataLoader workers fill and read one shared
arena, a budget too small is one line at start-up, a changed source file rebuilds its disk
entry, and training resumes bitwise with the cache on or off, with 0 or 2 workers. Also the
loader defaults (persistent workers) and the worker-count advice."""
import multiprocessing
import os

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import tiny_cfg, write_cfg
from test_train_e2e import assert_state_equal, load, train
from up_trainer.config.schema import validate
from up_trainer.data import readers
from up_trainer.data.image_arena import EMPTY, FILLED, ImageCache
from up_trainer.data.context import DataContext
from up_trainer.data.image_cache import open_image_cache
from up_trainer.engine.schedule import Schedule
from up_trainer.data.loader import LoaderFactory
from up_trainer.data.worker_advice import worker_advice
from up_trainer.engine.builder import build_dataset


def reading(cache):
    """The DataContext a run's data sets read with once ``cache`` is attached."""
    return DataContext(image_cache=cache)


def digit_folder(root, n=40):
    """``n`` 8x8 grey PNGs of scikit-learn's digits in class folders (image_folder layout)."""
    from up_trainer.tasks.cls.datasets import _load_digits

    images, labels = _load_digits()
    for i in range(n):
        folder = root / f"d{labels[i]}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((images[i] * 255 / 16).astype(np.uint8)).save(folder / f"{i:03d}.png")
    return str(root)


class Files:
    """A dataset stand-in that lists its image files, as file datasets do."""

    def __init__(self, paths, mode="RGB"):
        self.paths, self.mode = paths, mode

    def image_files(self):
        return [(p, self.mode, None) for p in self.paths]


def photos(tmp_path, n=3):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        path = str(tmp_path / f"photo{i}.{'jpg' if i % 2 else 'png'}")
        Image.fromarray(rng.integers(0, 256, (20 + i, 30, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def counting_decoder(monkeypatch):
    """Counts file decodes in every process (the counter lives in shared memory)."""
    count = multiprocessing.Value("i", 0)
    decode = readers.decode_file

    def counted(*args, **kwargs):
        with count.get_lock():
            count.value += 1
        return decode(*args, **kwargs)
    monkeypatch.setattr(readers, "decode_file", counted)
    return count


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_hit_returns_the_decoded_pixels_without_decoding(tmp_path, monkeypatch, mode):
    paths = photos(tmp_path)
    expected = [readers.decode_file(p, mode) for p in paths]
    cache = open_image_cache({"cache": "ram"}, [("dataset.train", Files(paths, mode))])
    context = reading(cache)
    count = counting_decoder(monkeypatch)
    first = [readers.decode_image(p, mode, context=context) for p in paths]
    again = [readers.decode_image(p, mode, context=context) for p in paths]
    assert count.value == len(paths) and cache.filled() == len(paths)
    for want, a, b in zip(expected, first, again):
        assert a.dtype == b.dtype == np.uint8 and a.shape == b.shape == want.shape
        assert np.array_equal(a, want) and np.array_equal(b, want)
    again[0][...] = 0  # a hit is the caller's own copy
    assert np.array_equal(readers.decode_image(paths[0], mode, context=context), expected[0])
    other = "L" if mode == "RGB" else "RGB"  # outside the plan: decoded each time, still right
    assert np.array_equal(readers.decode_image(paths[0], other, context=context), readers.decode_file(paths[0], other))
    assert count.value == len(paths) + 2
    readers.decode_image(paths[0], mode)  # a read without the run's context goes around its cache
    assert count.value == len(paths) + 3


def test_dataloader_workers_fill_and_read_one_shared_arena(tmp_path, monkeypatch):
    root = digit_folder(tmp_path / "digits", n=24)
    data = build_dataset({"type": "image_folder", "kwargs": {"root": root, "color_mode": "L"}}, "dataset.train")
    created = ImageCache.created
    cache = open_image_cache({"cache": "ram"}, [("dataset.train", data)])
    data.use_context(reading(cache))  # as the builder does: the workers inherit it with the data set
    count = counting_decoder(monkeypatch)  # set before the workers fork: they count into it too
    cfg = {"batch_size": 4, "test_batch_size": None, "num_workers": 2, "pin_memory": False,
           "persistent_workers": None, "prefetch_factor": None, "drop_last": False}
    loaders = LoaderFactory(cfg, data, None, seed=0)
    loaders.follow(Schedule({"max_epoch": 2}, 1))
    assert loaders.persistent()
    seen = [b["image"] for b in loaders.train_loader(1)]
    # every image decoded once, in the workers, and the main process sees their slots filled:
    # one arena, not a copy per worker
    assert count.value == 24 and cache.filled() == 24 and ImageCache.created == created + 1
    again = [b["image"] for b in loaders.train_loader(2)]
    assert count.value == 24  # the second epoch decodes nothing
    assert sum(len(b) for b in again) == sum(len(b) for b in seen) == 24


def test_a_budget_too_small_is_one_line_at_start_up(tmp_path, run_up):
    root = digit_folder(tmp_path / "digits", n=10)
    folder = {"type": "image_folder", "kwargs": {"root": root, "color_mode": "L"}}
    cfg = tiny_cfg(dataset={"train": folder, "test": None, "cache": "ram", "cache_bytes": "500B"})
    res = run_up(["train", "--config", write_cfg(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert res.stderr.strip() == ("up: error: dataset.cache_bytes: the 10 images of dataset.train need 640 B "
                                  "decoded; dataset.cache_bytes is 500 B (set it to at least 640B, or use "
                                  "dataset.cache: disk)"), res.stderr


@pytest.mark.parametrize("dataset, message", [
    ({"cache": "rma"}, "dataset.cache: 'rma' is not one of none, ram, disk (did you mean 'ram'?)"),
    ({"cache": "ram", "cache_bytes": "2 gigs"}, "dataset.cache_bytes: '2 gigs' is not a size"),
    ({"cache": "ram", "cache_bytes": 0}, "dataset.cache_bytes: must be at least 1 byte"),
    ({"cache": "ram", "cache_dir": "x"}, "dataset.cache_dir: only used by dataset.cache: disk"),
])
def test_bad_cache_settings_are_one_line_errors(tmp_path, run_up, dataset, message):
    res = run_up(["config", "--config", write_cfg(tmp_path / "c.yaml", tiny_cfg(dataset=dataset))])
    assert res.exit_code == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_sizes_and_spellings_normalize():
    ds = validate(tiny_cfg(dataset={"cache": True, "cache_bytes": "1.5GiB"}))["dataset"]
    assert (ds["cache"], ds["cache_bytes"]) == ("ram", 1610612736)
    assert validate(tiny_cfg(dataset={"cache": "disk", "cache_bytes": "2GB"}))["dataset"]["cache_bytes"] == 2 * 10**9


def test_a_changed_source_file_rebuilds_its_disk_entry(tmp_path):
    paths = photos(tmp_path, n=4)
    cache_dir = str(tmp_path / "cache")
    settings = {"cache": "disk"}
    cache = open_image_cache(settings, [("dataset.train", Files(paths))], cache_dir)
    for p in paths:
        readers.decode_image(p, "RGB", context=reading(cache))
    assert cache.filled() == 4
    cache = open_image_cache(settings, [("dataset.train", Files(paths))], cache_dir)  # a later run
    assert cache.filled() == 4
    os.utime(paths[1], ns=(10**18, 10**18))  # touched: only the mtime differs
    Image.fromarray(np.full((22, 30, 3), 7, np.uint8)).save(paths[2])  # rewritten: other bytes, same pixel size
    cache = open_image_cache(settings, [("dataset.train", Files(paths))], cache_dir)
    assert list(cache._table["state"] == EMPTY) == [False, True, True, False]
    assert np.array_equal(readers.decode_image(paths[2], "RGB", context=reading(cache)),
                          np.full((22, 30, 3), 7, np.uint8))
    assert cache._table["state"][2] == FILLED


def test_same_size_and_mtime_with_other_content_needs_cache_hash(tmp_path):
    paths = photos(tmp_path, n=2)
    path = paths[0]  # a PNG: rewritten with other pixels, padded to the same byte size, same mtime
    stat = os.stat(path)
    for use_hash in (False, True):
        settings = {"cache": "disk", "cache_hash": use_hash}
        cache_dir = str(tmp_path / f"cache_{use_hash}")
        cache = open_image_cache(settings, [("dataset.train", Files(paths))], cache_dir)
        readers.decode_image(path, "RGB", context=reading(cache))
        cache.close()
        original = open(path, "rb").read()
        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(path)
        with open(path, "ab") as f:
            f.write(b"\0" * (stat.st_size - os.path.getsize(path)))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        cache = open_image_cache(settings, [("dataset.train", Files(paths))], cache_dir)
        assert (cache._table["state"][0] == EMPTY) == use_hash
        with open(path, "wb") as f:
            f.write(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _open_in_child(paths, cache_dir, pipe):
    try:
        open_image_cache({"cache": "disk"}, [("dataset.train", Files(paths))], cache_dir)
        pipe.send("opened")
    except Exception as exc:
        pipe.send(str(exc))


def test_a_cache_dir_in_use_is_refused(tmp_path):
    paths = photos(tmp_path, n=1)
    cache_dir = str(tmp_path / "cache")
    # held (its lock with it) while the child tries
    cache = open_image_cache({"cache": "disk"}, [("dataset.train", Files(paths))], cache_dir)
    ctx = multiprocessing.get_context("fork")  # another process: the directory's lock is this one's
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_open_in_child, args=(paths, cache_dir, send))
    child.start()
    message = receive.recv()
    child.join()
    assert message == (f"dataset.cache_dir: {cache_dir} is in use by another run (PID {os.getpid()}) "
                       "(give each concurrent run its own cache_dir)")
    cache.close()


def folder_cfg(root, cache, workers, max_epoch=2):
    folder = {"type": "image_folder", "kwargs": {"root": root, "color_mode": "L", "transforms": [
        {"type": "RandomAffine", "kwargs": {"degrees": 10, "translate": [0.1, 0.1]}}]}}
    return tiny_cfg(runtime={"seed": 3, "imports": ["tiny_net_plugin"]},
                    dataset={"train": folder, "test": None, "batch_size": 8, "num_workers": workers, "cache": cache},
                    net={"type": "tiny_convnet", "kwargs": {"num_classes": 10}},
                    trainer={"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05}}})


def test_resume_is_bitwise_with_the_cache_on_and_off_and_0_or_2_workers(tmp_path, run_up):
    root = digit_folder(tmp_path / "digits", n=32)
    reference, _ = train(run_up, tmp_path, "reference", folder_cfg(root, "none", 0))
    final = load(reference / "checkpoints" / "ckpt_e2.pth")
    for cache, workers in (("ram", 2), ("disk", 0)):
        name = f"{cache}{workers}"
        half, res = train(run_up, tmp_path, name, folder_cfg(root, cache, workers, max_epoch=1))
        assert f"dataset.cache {cache}: 32 images" in res.stdout
        resumed, res = train(run_up, tmp_path, name, folder_cfg(root, cache, workers), "--resume",
                             half / "checkpoints" / "ckpt_e1.pth")
        if cache == "disk":  # the resumed run found every image in the first run's cache
            assert "32 already cached" in res.stdout
        out = load(resumed / "checkpoints" / "ckpt_e2.pth")
        assert_state_equal(final["model"], out["model"])
        assert_state_equal(final["optimizer"], out["optimizer"])


def test_persistent_workers_default_to_on_with_workers_and_several_epochs():
    def factory(workers, epochs, setting=None):
        cfg = {"num_workers": workers, "persistent_workers": setting}
        loaders = LoaderFactory(cfg, None, None, seed=0)
        if epochs is not None:
            loaders.follow(Schedule({"max_epoch": epochs}, 1))
        return loaders.persistent()
    assert factory(2, 5) and not factory(0, 5) and not factory(2, 1) and not factory(2, None)
    assert not factory(2, 5, False) and factory(2, 1, True)


def test_worker_advice_names_a_count_when_data_outweighs_compute():
    assert worker_advice(0.01, 0.05, 0) is None  # compute 0.04 s covers the loading
    text = worker_advice(0.3, 0.4, 0, cpus=8)  # 0.3 s to load in the main process, 0.1 s to compute
    assert "try dataset.num_workers: 3 (8 CPUs here)" in text and "dataset.cache: ram" in text
    # 2 workers each take 2 x 0.4 s per batch: 8 would hide it, 7 CPUs are left for workers
    assert "try dataset.num_workers: 7 (8 CPUs here), and a lighter pipeline" in worker_advice(0.3, 0.4, 2, "ram", 8)
    assert "more workers than the 2 CPUs here would not help" in worker_advice(0.3, 0.4, 1, "ram", 2)


def test_reload_and_yolox_noaug_swap_the_set_under_persistent_workers(tmp_path, run_up):
    """reload rebuilds the training set every epoch and yolox_noaug swaps its pipeline at epoch
    3: each swap drops the persistent loader, whose workers hold the old set, and the run with
    2 (persistent by default) workers equals the one without workers."""
    from test_yolox_noaug import noaug_cfg, weights
    from test_yolox_noaug import train as train_noaug

    train_noaug(run_up, tmp_path, "in_process", noaug_cfg())
    cfg = noaug_cfg()
    cfg["dataset"]["num_workers"] = 2
    train_noaug(run_up, tmp_path, "workers", cfg)
    a = weights(tmp_path / "in_process" / "checkpoints" / "ckpt_e4.pth")
    b = weights(tmp_path / "workers" / "checkpoints" / "ckpt_e4.pth")
    assert_state_equal(a["model"], b["model"])
    assert a["hooks"]["yolox_noaug"] == b["hooks"]["yolox_noaug"] == {"switched": True, "switch_epoch": 3}


def coco_photos(tmp_path, n=5):
    """``n`` PNGs of assorted sizes with one or two boxes each, as a COCO instances file."""
    import json

    rng = np.random.default_rng(1)
    images, anns = [], []
    for i in range(n):
        h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
        images.append({"id": i + 1, "file_name": f"{i}.png", "height": h, "width": w})
        for k in range(1 + i % 2):
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": 1 + k, "iscrowd": 0,
                         "bbox": [1.5 + k, 2.0, w / 2, h / 3]})
    ann_file = tmp_path / "ann.json"
    ann_file.write_text(json.dumps({"images": images, "annotations": anns,
                                    "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}))
    return str(ann_file)


def det_batches(ann_file, transforms, cache, epochs=(1, 2)):
    data = build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": os.path.dirname(ann_file),
                                                      "transforms": transforms}}, "dataset.train")
    opened = open_image_cache({"cache": cache}, [("dataset.train", data)]) if cache != "none" else None
    data.use_context(reading(opened))
    cfg = {"batch_size": 2, "test_batch_size": None, "num_workers": 0, "pin_memory": False,
           "persistent_workers": None, "prefetch_factor": None, "drop_last": False}
    loaders = LoaderFactory(cfg, data, None, seed=5)
    return opened, [[(b["image"], b["target"]) for b in loaders.train_loader(e)] for e in epochs]


@pytest.mark.parametrize("first", [
    {"type": "keep_ar_resize_max", "kwargs": {"scales": [48], "max_size": 80}},
    {"type": "fix_output_resize", "kwargs": {"scales": [40, 56]}},
])
def test_a_deterministic_first_step_is_cached_after_it_exactly(tmp_path, first):
    """The cache holds the resize's output; samples equal the uncached pipeline's bit for bit."""
    ann_file = coco_photos(tmp_path)
    transforms = [first, {"type": "flip", "kwargs": {"flip_p": 0.5}}]
    _, plain = det_batches(ann_file, transforms, "none")
    cache, cached = det_batches(ann_file, transforms, "ram")
    assert cache.steps and cache.filled() == 5  # filled in epoch 1, read in epoch 2
    for epoch_plain, epoch_cached in zip(plain, cached):
        for (images, targets), (images2, targets2) in zip(epoch_plain, epoch_cached):
            for a, b in zip(images, images2):
                assert a.dtype == b.dtype and torch.equal(a, b)  # uint8, or converted where normalize_on says
            assert_state_equal(targets, targets2)


def test_a_random_first_step_leaves_the_decoded_files_cached(tmp_path):
    ann_file = coco_photos(tmp_path)
    transforms = [{"type": "flip", "kwargs": {"flip_p": 0.5}},
                  {"type": "keep_ar_resize_max", "kwargs": {"scales": [48], "max_size": 80}}]
    _, plain = det_batches(ann_file, transforms, "none")
    cache, cached = det_batches(ann_file, transforms, "ram")
    assert not cache.steps and cache.filled() == 5
    for (images, targets), (images2, targets2) in zip(plain[1], cached[1]):
        assert all(torch.equal(a, b) for a, b in zip(images, images2))
        assert_state_equal(targets, targets2)


def test_the_logger_gives_the_worker_advice_once_per_run(caplog):
    from types import SimpleNamespace

    from up_trainer.hooks.train_val_logger import TrainValLogger

    hook = TrainValLogger(summary_writer="none")
    hook._advised = False
    trainer = SimpleNamespace(cfg={"dataset": {"num_workers": 0, "cache": "none"}})
    with caplog.at_level("INFO", logger="up"):
        hook._advise_workers(trainer, [0.01, 0.02, 0.02, 0.05])  # compute 0.04 s > data 0.01 s: silent
        for _ in range(3):
            hook._advise_workers(trainer, [0.3, 0.05, 0.05, 0.4])
    advice = [r.message for r in caplog.records if "data loading is the bottleneck" in r.message]
    assert len(advice) == 1 and "dataset.num_workers 0; try dataset.num_workers:" in advice[0]


def test_a_data_set_pickled_for_a_spawned_worker_leaves_the_cache_behind(tmp_path):
    """Spawned workers (macOS, Windows) receive the data set pickled: its DataContext arrives
    without the cache (an arena is shared by forking only), with the run's other settings."""
    import pickle

    root = digit_folder(tmp_path / "digits", n=4)
    data = build_dataset({"type": "image_folder", "kwargs": {"root": root, "color_mode": "L"}}, "dataset.train")
    cache = open_image_cache({"cache": "ram"}, [("dataset.train", data)])
    data.use_context(DataContext(normalize_on="workers", max_pixels=1000, image_cache=cache))
    copy = pickle.loads(pickle.dumps(data))
    assert copy.context == DataContext(normalize_on="workers", max_pixels=1000)
    assert torch.equal(copy[0]["image"], data[0]["image"]) and cache.filled() == 1
