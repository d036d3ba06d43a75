"""Images whose bytes say more than 8-bit RGB: 16-bit samples and EXIF orientation. What the
model receives must be what the picture shows: 30000 of 65535 is 46 % grey, not white, and a
phone photo taken upright is upright (unless the config says the boxes describe the stored
pixels: exif_transpose: false)."""
import json
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from up_trainer.errors import ConfigError, DataError
from up_trainer.tasks.cls.datasets import ImageFolderDataset
from up_trainer.tasks.det.datasets import CocoDetection

LEVEL = 30000
EXPECTED = round(LEVEL * 255 / 65535)  # 117: the nearest 8-bit level


def png_16bit_rgb(path, h, w, value):
    """A 16-bit-per-channel RGB PNG (colour type 2, bit depth 16), written by hand: Pillow
    writes 16-bit PNGs for gray only."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + struct.pack(">H", value) * (3 * w)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(row * h)) + chunk(b"IEND", b"")
    path.write_bytes(data)


@pytest.fixture
def sixteen_bit_folder(tmp_path):
    root = tmp_path / "data"
    (root / "gray").mkdir(parents=True)
    (root / "rgb").mkdir()
    (root / "tiff").mkdir()
    Image.fromarray(np.full((4, 6), LEVEL, np.uint16)).save(root / "gray" / "g.png")
    png_16bit_rgb(root / "rgb" / "c.png", 4, 6, LEVEL)
    Image.fromarray(np.full((4, 6), LEVEL, np.uint16)).save(root / "tiff" / "t.tif")
    return root


def test_16bit_images_keep_their_level(sixteen_bit_folder):
    ds = ImageFolderDataset(root=str(sixteen_bit_folder))
    assert ds.classes == ["gray", "rgb", "tiff"]
    for i in range(len(ds)):
        image = ds[i]["image"]
        assert image.shape == (3, 4, 6) and image.dtype == torch.uint8
        assert image.unique().tolist() == [EXPECTED], ds.samples[i][0]  # not clipped to 255
        model_input = ds.model_input(image)
        assert (model_input - LEVEL / 65535).abs().max() <= 0.5 / 255 + 1e-6


def test_16bit_gray_read_as_gray(sixteen_bit_folder):
    ds = ImageFolderDataset(root=str(sixteen_bit_folder), color_mode="L")
    assert ds[0]["image"].shape == (1, 4, 6) and ds[0]["image"].unique().tolist() == [EXPECTED]


def photo(path, orientation):
    """An 8 wide x 16 high picture (left half red, right half blue, a green top row) stored with
    the EXIF orientation tag a phone writes."""
    pixels = np.zeros((16, 8, 3), np.uint8)
    pixels[:, :4, 0] = 255
    pixels[:, 4:, 2] = 255
    pixels[0, :, 1] = 255
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels).save(path, exif=exif.tobytes())
    return torch.from_numpy(pixels).permute(2, 0, 1)


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".webp"])
def test_exif_orientation_is_applied_by_default(tmp_path, suffix):
    (tmp_path / "a").mkdir()
    stored = photo(tmp_path / "a" / f"p{suffix}", 6)  # 6: turn 90 degrees clockwise to view
    image = ImageFolderDataset(root=str(tmp_path))[0]["image"]
    assert image.shape == (3, 8, 16)  # upright: 16 wide, 8 high
    if suffix == ".png":  # lossless: the exact turn
        assert torch.equal(image, torch.rot90(stored, -1, dims=(1, 2)))
    kept = ImageFolderDataset(root=str(tmp_path), exif_transpose=False)[0]["image"]
    assert kept.shape == (3, 16, 8)
    if suffix == ".png":
        assert torch.equal(kept, stored)


def test_every_orientation_matches_pillows_exif_transpose(tmp_path):
    from PIL import ImageOps

    (tmp_path / "a").mkdir()
    for orientation in range(1, 9):
        path = tmp_path / "a" / f"o{orientation}.png"
        photo(path, orientation)
        with Image.open(path) as img:
            expected = torch.from_numpy(np.array(ImageOps.exif_transpose(img).convert("RGB"))).permute(2, 0, 1)
        ds = ImageFolderDataset(root=str(tmp_path))
        assert torch.equal(ds[orientation - 1]["image"], expected), orientation


def test_coco_boxes_of_an_upright_photo(tmp_path):
    """Annotation tools show (and size) the upright picture: the record's 16 x 8 matches the
    turned image; with exif_transpose: false the size check names the switch."""
    (tmp_path / "img").mkdir()
    photo(tmp_path / "img" / "p.jpg", 6)
    ann = {"images": [{"id": 1, "file_name": "p.jpg", "width": 16, "height": 8}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 16,
                            "iscrowd": 0}],
           "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    ds = CocoDetection(ann_file=str(tmp_path / "ann.json"), img_dir=str(tmp_path / "img"))
    assert ds[0]["image"].shape == (3, 8, 16)
    stored = CocoDetection(ann_file=str(tmp_path / "ann.json"), img_dir=str(tmp_path / "img"), exif_transpose=False)
    with pytest.raises(DataError, match=r"image is \(16, 8\) \(h, w\) but the annotation says \(8, 16\) "
                       r"\(exif_transpose is false; if the annotation describes the upright picture, set it to true\)"):
        stored[0]
    ann["images"][0].update(width=8, height=16)  # an annotation of the stored pixels
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    with pytest.raises(DataError, match="its EXIF orientation turns it; if the annotation describes the stored "
                       "pixels, set exif_transpose: false"):
        CocoDetection(ann_file=str(tmp_path / "ann.json"), img_dir=str(tmp_path / "img"))[0]


def test_exif_switch_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="exif_transpose"):
        ImageFolderDataset(root=str(tmp_path), exif_transpose="yes")
    with pytest.raises(ConfigError, match="not both"):
        CocoDetection(ann_file=str(tmp_path / "x.json"), exif_transpose=False,
                      image_reader={"type": "fs_pillow", "kwargs": {"image_dir": str(tmp_path)}})
