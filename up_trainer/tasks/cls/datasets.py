"""Classification datasets: ``digits`` (bundled with scikit-learn), ``image_folder``; UP's ``cls``
meta files are in meta_dataset.py, CSV lists in csv_dataset.py.

Every sample is ``{"image": uint8 CxHxW (float in [0, 1] for digits, which is held as floats),
"label": int64 scalar, "index": int}``; the conversion to the model's float input (the
pipeline's trailing to_tensor / normalize, data/model_input.py) runs at the end of the sample
(``dataset.normalize_on: workers``) or on the batch after its move to the device (``device``).
Every dataset has ``num_classes`` and ``classes``. Bad data raises one DataError line naming
the file (and the line of a meta file). Transforms draw from torch's global RNG, which the
loader seeds per sample, so augmentation is reproducible across workers and resumes.
"""
import functools
import logging
import os
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, default_collate

from ...data.model_input import FinalConversion
from ...data.packed_records import PackedIndex
from ...data.readers import PIL_MODE, read_image
from ...data.label_map import LabelRows
from ...errors import ConfigError, DataError, did_you_mean

log = logging.getLogger("up")
from ...registry import DATASETS
from ..transforms import build_transforms

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
COLOR_MODES = ("RGB", "L")


def _transforms(transforms, transformer):
    """``transforms`` (ours) or ``transformer`` (UP's key), never both."""
    if transforms is not None and transformer is not None:
        raise ConfigError("transformer", "give either transforms or UP's transformer, not both")
    if transformer is not None:
        return build_transforms(transformer, "transformer")
    return build_transforms(transforms, "transforms")


def _check_color_mode(color_mode):
    if color_mode not in COLOR_MODES:
        raise ConfigError("color_mode", f"{color_mode!r} is not one of {', '.join(COLOR_MODES)}",
                          did_you_mean(str(color_mode).upper(), COLOR_MODES))


def load_image(path, color_mode, where=None, exif_transpose=True, draft=None, context=None):
    """A uint8 CxHxW tensor; unreadable files become one DataError line (``context``: the
    reading data set's DataContext, or None)."""
    return read_image(path, color_mode, where, exif_transpose, draft, context)


def draft_size_of(transform):
    """``decode_draft``: the least upright size (a short side, or (h, w)) the pipeline's first
    step, a Resize to a fixed size, needs from the decoder."""
    from torchvision.transforms import v2

    first = transform.transforms[0] if transform is not None else None
    if not isinstance(first, v2.Resize) or first.max_size is not None:
        raise ConfigError("decode_draft", "needs a pipeline that starts with a Resize to a fixed size (the "
                          f"decoder must know what it may drop), here it starts with {first!r}",
                          "put {type: Resize, kwargs: {size: 256}} first, or set decode_draft: false")
    size = list(first.size)
    return size[0] if len(size) == 1 else (size[0], size[1])


def _check_exif(exif_transpose):
    if not isinstance(exif_transpose, bool):
        raise ConfigError("exif_transpose", f"expected true or false, got {exif_transpose!r}")
    return exif_transpose


def collate_same_size(samples):
    """default_collate, after checking that the images can be stacked: images of different
    sizes without a resize would otherwise fail inside torch.stack as a traceback."""
    first = samples[0]["image"]
    for sample in samples[1:]:
        image = sample["image"]
        if isinstance(image, torch.Tensor) and isinstance(first, torch.Tensor) and image.shape != first.shape:
            raise DataError(f"images of different sizes in one batch: {tuple(first.shape)} (sample "
                            f"{samples[0]['index']}) and {tuple(image.shape)} (sample {sample['index']}); "
                            "add a resize to the dataset's transforms, e.g. {type: Resize, kwargs: {size: "
                            "[224, 224]}} or RandomResizedCrop / CenterCrop")
    return default_collate(samples)


class ClsDatasetBase(LabelRows, FinalConversion, Dataset):
    """Applies the transform and builds the sample dict; subclasses provide ``_load(index)``."""

    num_classes: int
    classes: list
    draft = None  # decode_draft: the least decoded size (readers.decode_file's draft), None: full size
    numbered_classes = False  # True: the labels are indices in the files, their names only numbers

    def __init__(self, transform):
        self.set_pipeline(transform)

    def set_draft(self, decode_draft):
        """``decode_draft: true``: JPEGs decoded at the least size the pipeline's first step needs
        (Pillow's draft: a DCT-domain 1/2, 1/4 or 1/8 reduction, not the pixels of a full decode
        and resize; for photos much larger than the model input)."""
        if not isinstance(decode_draft, bool):
            raise ConfigError("decode_draft", f"expected true or false, got {decode_draft!r}")
        self.draft = draft_size_of(self.transform) if decode_draft else None

    def collate_fn(self, samples):
        return self.attach(collate_same_size(samples))

    def _load(self, index):  # -> (image tensor, int label)
        raise NotImplementedError

    def image_files(self):
        """(path, Pillow mode, None) of every image file the samples decode, which the image cache
        (dataset.cache) plans its slots from: file datasets keep ``records`` (or ``samples``) of
        (path, label, ...) and a ``color_mode``; in-memory ones (digits) list none, and so do images
        read with exif_transpose: false (the cache holds images decoded the default way)."""
        if not getattr(self, "exif_transpose", getattr(getattr(self, "reader", None), "exif_transpose", True)) \
                or self.draft is not None:  # reduced JPEG decodes are not cached either
            return []
        rows = getattr(self, "records", None) or getattr(self, "samples", None) or []
        mode = PIL_MODE[getattr(self, "color_mode", "RGB")]
        return [(row[0], mode, None) for row in rows if isinstance(row[0], str)]

    def __getitem__(self, index):
        image, label = self._load(index)
        if self.transform is not None:
            image = self.transform(image)
        image = self.finish(image)
        if label is None:  # an unlabeled image (UP's inference_only meta files): predictions only
            return {"image": image, "index": index}
        return {"image": image, "label": torch.tensor(label, dtype=torch.int64), "index": index}


# -- digits -------------------------------------------------------------------------------------
def stratified_split(labels, test_ratio, seed):
    """(train, test) index arrays: per class, a seeded permutation's first round(n*ratio) go
    to test. numpy's legacy RandomState is stable across versions and machines."""
    rng = np.random.RandomState(seed)
    test = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(len(idx))]
        test.extend(idx[: int(round(len(idx) * test_ratio))].tolist())
    test = np.sort(np.asarray(test, dtype=np.int64))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test


@functools.lru_cache(maxsize=1)
def _load_digits():
    """(images 1797x8x8 in 0..16, labels); parsed once per process for both splits.

    The data file ships inside scikit-learn (no download). It is read directly because
    importing sklearn (and scipy with it) takes seconds, which every run would pay.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz") if spec else None
    if path is None or not os.path.exists(path):
        from sklearn.datasets import load_digits  # layout changed: let scikit-learn find it

        digits = load_digits()
        return digits.images, digits.target.astype(np.int64)
    table = np.loadtxt(path, delimiter=",", dtype=np.float64)
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


@DATASETS.register("digits")
class DigitsDataset(ClsDatasetBase):
    """scikit-learn's bundled handwritten digits: 1797 real 8x8 gray images, 10 classes.

    split: train | test | all, a stratified split fixed by test_ratio and split_seed.
    size: resize the 8x8 images (bilinear) once at load. subset: first N samples of the split.
    """

    SPLITS = ("train", "test", "all")

    def __init__(self, split: str = "train", test_ratio: float = 0.2, split_seed: int = 0,
                 transforms: Optional[list] = None, transformer: Optional[list] = None, size: int = 8,
                 subset: Optional[int] = None):
        if split not in self.SPLITS:
            raise ConfigError("split", f"{split!r} is not one of {', '.join(self.SPLITS)}",
                              did_you_mean(split, self.SPLITS))
        if not 0.0 < test_ratio < 1.0:
            raise ConfigError("test_ratio", f"must be between 0 and 1, got {test_ratio}")
        if size < 1:
            raise ConfigError("size", f"must be >= 1, got {size}")
        if subset is not None and subset < 1:
            raise ConfigError("subset", f"must be >= 1, got {subset}")
        super().__init__(_transforms(transforms, transformer))
        all_images, labels = _load_digits()
        train, test = stratified_split(labels, test_ratio, split_seed)
        indices = {"train": train, "test": test, "all": np.arange(len(labels))}[split]
        if subset is not None:
            indices = indices[:subset]
        images = torch.from_numpy(all_images[indices].astype(np.float32) / 16.0).unsqueeze(1)
        if size != images.shape[-1]:
            images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
        self.images = images.contiguous()
        self.labels = labels[indices].tolist()
        self.source_indices = indices.tolist()  # rows of load_digits(), for tracing a sample back
        self.classes = [str(i) for i in range(10)]
        self.num_classes = 10

    def __len__(self):
        return len(self.labels)

    def _load(self, index):
        return self.images[index].clone(), self.labels[index]


# -- image folder -------------------------------------------------------------------------------
@DATASETS.register("image_folder")
class ImageFolderDataset(PackedIndex, ClsDatasetBase):
    """``root/<class>/<image>`` (sub-folders allowed); classes are the sorted folder names.

    ``records`` holds one ``(path, label)`` row per image, packed once the set is built for a
    run (as the meta-file sets' are), so loader workers share them instead of copying them."""

    def __init__(self, root: str, transforms: Optional[list] = None, transformer: Optional[list] = None,
                 color_mode: str = "RGB", exif_transpose: bool = True, decode_draft: bool = False):
        _check_color_mode(color_mode)
        self.exif_transpose = _check_exif(exif_transpose)
        super().__init__(_transforms(transforms, transformer))
        self.set_draft(decode_draft)
        if not os.path.isdir(root):
            raise DataError(f"image_folder root is not a directory: {root}")
        self.root = root
        self.color_mode = color_mode
        self.classes = sorted(d.name for d in os.scandir(root) if d.is_dir() and not d.name.startswith("."))
        if not self.classes:
            raise DataError(f"{root} has no class folders (expected root/<class>/<image>)")
        self.num_classes = len(self.classes)
        records = []
        for label, name in enumerate(self.classes):
            files = []
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, name)):
                dirnames.sort()
                files += [os.path.join(dirpath, f) for f in sorted(filenames)
                          if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")]
            if not files:
                raise DataError(f"class folder {os.path.join(root, name)} has no images "
                                f"({', '.join(IMAGE_EXTENSIONS)})")
            records += [(f, label) for f in files]
        self.records = records

    @property
    def samples(self):
        """The ``(path, label)`` rows, under torchvision's ImageFolder name (read-only once packed)."""
        return self.records

    def __len__(self):
        return len(self.records)

    def _load(self, index):
        path, label = self.records[index]
        return load_image(path, self.color_mode, exif_transpose=self.exif_transpose, draft=self.draft,
                          context=self.context), label
