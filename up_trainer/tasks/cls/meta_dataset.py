"""UP's ``cls`` dataset: a meta file of image paths and labels (imagenet-style lines or JSON
records), read through UP's image readers; split out of datasets.py, whose base it shares."""
import logging
import os
from typing import Optional

from ...data.label_map import check_names
from ...data.packed_records import PackedIndex
from ...data.readers import FileReader, build_reader
from ...data.validation.cls_meta import check_one_label_per_image, parse_json_line, parse_text_line
from ...errors import ConfigError, DataError, did_you_mean
from ...registry import DATASETS
from .datasets import ClsDatasetBase, _check_color_mode, _check_exif, _transforms

log = logging.getLogger("up")

# -- UP's cls meta files --------------------------------------------------------------------------
@DATASETS.register("cls")
class ClsMetaDataset(PackedIndex, ClsDatasetBase):
    """UP's ``cls`` dataset: a meta file of ``relative/path label`` lines (meta_type imagenet)
    or of JSON records ``{"filename", "label"}`` (custom_cls; .json/.jsonl or lines starting
    with ``{``). Images are ``image_dir/filename``. UP's ``image_reader: {type: fs_pillow|fs_opencv,
    kwargs: {image_dir, color_mode}}`` (data/readers.py) may replace image_dir and color_mode.
    check_files: stat every image up front, so a
    missing file fails before training instead of mid-epoch. save_score (UP): the evaluation
    results file (``results_dir``) holds every class's score per image, not only the top-k."""

    META_TYPES = ("imagenet", "custom_cls", "inference_only", "moco_imagenet", "moco_custom")
    # UP's self-supervised parsers read the same lines (UP then zeroes the labels, which
    # pretraining never reads; they are kept here)
    SSL_META_TYPES = {"moco_imagenet": "imagenet", "moco_custom": "custom_cls"}
    IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")  # UP's folder search (any case here)

    def __init__(self, meta_file: str, image_dir: str = "", color_mode: str = "RGB",
                 transforms: Optional[list] = None, transformer: Optional[list] = None,
                 meta_type: Optional[str] = None, image_reader: Optional[dict] = None,
                 classes: Optional[list] = None, num_classes: Optional[int] = None,
                 check_files: bool = True, save_score: bool = False, inference_cfg: Optional[dict] = None,
                 exif_transpose: Optional[bool] = None, decode_draft: bool = False):
        self.save_score = bool(save_score)  # UP: the results file holds every class score
        if inference_cfg is not None:
            meta_file = self._inference_source(inference_cfg, meta_file)
        if image_reader is not None:
            if image_dir:
                raise ConfigError("image_dir", "give image_dir here or in image_reader.kwargs, not both")
            if exif_transpose is not None:
                raise ConfigError("exif_transpose", "give exif_transpose here or in image_reader.kwargs, not both")
            self.reader = build_reader(image_reader)
        else:
            _check_color_mode(color_mode)
            exif_transpose = True if exif_transpose is None else _check_exif(exif_transpose)
            self.reader = FileReader(image_dir, color_mode, exif_transpose=exif_transpose)
        if meta_type is not None and meta_type not in self.META_TYPES:
            raise ConfigError("meta_type", f"{meta_type!r} is not one of {', '.join(self.META_TYPES)}",
                              did_you_mean(meta_type, self.META_TYPES))
        super().__init__(_transforms(transforms, transformer))
        self.set_draft(decode_draft)
        self.meta_file = meta_file
        self.image_dir, self.color_mode = self.reader.image_dir, self.reader.color_mode
        self.records = self._parse(meta_file, self.SSL_META_TYPES.get(meta_type, meta_type))  # (path, label, line)
        check_one_label_per_image(self.records, meta_file)
        if check_files:
            for path, _, lineno in self.records:
                if not os.path.isfile(path):
                    raise DataError(f"{meta_file}:{lineno}: image not found: {path}")
        self._set_classes(classes, num_classes)

    def _parse(self, meta_file, meta_type):
        if getattr(self, "_listed", None) is not None:  # images found under inference_from
            return [(self.reader.path_of(path), None, i + 1) for i, path in enumerate(self._listed)]
        from ...paths import open_input  # the one opener of user-named files: a regular file or one line

        try:
            with open_input(meta_file, "meta file", DataError, text=True) as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read meta file {meta_file}: {exc}") from None
        numbered = [(i + 1, line.strip()) for i, line in enumerate(lines) if line.strip()]
        if not numbered:
            raise DataError(f"meta file {meta_file} is empty (no records)")
        if meta_type == "inference_only":  # one image path per line, no label
            return [(self.reader.path_of(line), None, lineno) for lineno, line in numbered]
        if meta_type is None:
            is_json = meta_file.lower().endswith((".json", ".jsonl")) or numbered[0][1].startswith("{")
        else:
            is_json = meta_type == "custom_cls"
        parse = parse_json_line if is_json else parse_text_line
        records = []
        for lineno, line in numbered:
            filename, label = parse(line, f"{meta_file}:{lineno}")
            records.append((self.reader.path_of(filename), label, lineno))
        return records

    def _inference_source(self, cfg, meta_file):
        """UP's ``inference_cfg``: ``inference_from`` (a folder searched recursively for images,
        or a file listing image paths) replaces the meta file. UP also writes the folder's list
        to ``folder_images_save_path``; here the list is kept in memory (nothing is written).
        ``test_resume`` (skip images already in earlier result files) is not mapped: every image
        is evaluated and the results file is written whole."""
        if not isinstance(cfg, dict):
            raise ConfigError("inference_cfg", f"expected a mapping, got {type(cfg).__name__}")
        for key in cfg:
            if key not in ("inference_from", "folder_images_save_path", "test_resume"):
                raise ConfigError(f"inference_cfg.{key}", "unknown key",
                                  did_you_mean(key, ["inference_from", "folder_images_save_path", "test_resume"]))
        if cfg.get("test_resume") is not None:
            log.warning("inference_cfg.test_resume: not mapped; every image is evaluated again")
        source = cfg.get("inference_from")
        if source is None:
            return meta_file
        if os.path.isfile(source):
            return source
        if not os.path.isdir(source):
            raise DataError(f"inference_cfg.inference_from: {source} is neither a folder nor a file")
        found = sorted(os.path.join(root, name) for root, _, names in os.walk(source) for name in names
                       if name.lower().endswith(self.IMAGE_EXTENSIONS))
        if not found:
            raise DataError(f"inference_cfg.inference_from: no images ({', '.join(self.IMAGE_EXTENSIONS)}) "
                            f"under {source}")
        self._listed = found
        return source

    def _set_classes(self, classes, num_classes):
        classes = check_names(classes, "classes", key="classes") if classes is not None else None
        self.numbered_classes = classes is None  # the file's labels are indices: their names are numbers
        if classes is not None and num_classes is not None and len(classes) != num_classes:
            raise ConfigError("classes", f"{len(classes)} names but num_classes is {num_classes}")
        if classes is not None:
            num_classes = len(classes)
        labeled = [(label, lineno) for _, label, lineno in self.records if label is not None]
        if any(isinstance(label, tuple) for label, _ in labeled):  # UP's multi-head form
            from .multi_head import head_counts

            self.num_classes = head_counts(labeled, classes, num_classes, self.meta_file)
            self.classes = [str(i) for i in range(self.num_classes[0])]
            return
        if num_classes is not None:
            for label, lineno in labeled:
                if label >= num_classes:
                    raise DataError(f"{self.meta_file}:{lineno}: label {label} is out of range "
                                    f"for {num_classes} classes")
        elif labeled:
            num_classes = max(label for label, _ in labeled) + 1
        self.num_classes = num_classes  # None: unlabeled images only (inference_only) and no class count given
        self.classes = ([str(c) for c in classes] if classes is not None else
                        [str(i) for i in range(num_classes or 0)])

    def __len__(self):
        return len(self.records)

    def training_problem(self):
        """Unlabeled images (inference_only, inference_cfg) cannot train: see data/validation."""
        if any(label is None for _, label, _ in self.records):
            return (f"{self.meta_file}: images without labels (an inference_only list): training needs a label "
                    "per image")
        return None

    def image_classes(self):
        """Each record's class (repeat-factor sampling); none for an unlabeled image."""
        # list labels (several heads): head 0's class, the one ``classes`` names
        return [[] if label is None else [label[0] if isinstance(label, tuple) else label]
                for _, label, _ in self.records]

    def _load(self, index):
        path, label, lineno = self.records[index]
        return self.reader.read(path, where=f"{self.meta_file}:{lineno}", draft=self.draft,
                                context=self.context), label
