"""Decoding: whichever decoder reads a file (torchvision.io for JPEG and PNG whose stored colours
are what is asked, Pillow for the rest), the pixels are Pillow's own, every failure is one line,
and the pixel limit is checked from the header before anything is decoded."""
import numpy as np
import pytest
import torch
from PIL import Image

from up_trainer.data import readers
from up_trainer.data.context import DataContext
from up_trainer.errors import DataError


def photo(h=20, w=28, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 255 / (w + h)], axis=2) + rng.normal(0, 10, (h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def files(tmp_path):
    """{name: path} of one picture in many stored forms."""
    rgb = Image.fromarray(photo())
    out = {}

    def save(name, image, **kw):
        out[name] = str(tmp_path / name)
        image.save(out[name], **kw)

    save("rgb.jpg", rgb, quality=90)
    save("progressive.jpg", rgb, quality=90, progressive=True)
    save("gray.jpg", rgb.convert("L"), quality=90)
    save("cmyk.jpg", rgb.convert("CMYK"), quality=90)
    save("rgb.png", rgb)
    save("gray.png", rgb.convert("L"))
    save("palette.png", rgb.convert("P"))
    save("rgba.png", rgb.convert("RGBA"))
    save("la.png", rgb.convert("LA"))
    save("bilevel.png", rgb.convert("1"))
    save("gray16.png", Image.fromarray((np.asarray(rgb.convert("L")).astype(np.uint16) * 257)))
    save("rgb.bmp", rgb)
    save("rgb.webp", rgb, lossless=True)
    save("rgb.gif", rgb.convert("P"))
    return out


def pillow_reference(path, mode):
    from PIL import ImageOps

    with Image.open(path) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I;16"):
            img = Image.fromarray(((np.asarray(img).astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8))
        return np.array(img.convert(mode))


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_every_stored_form_decodes_to_pillows_pixels(tmp_path, mode):
    for name, path in files(tmp_path).items():
        got = readers.decode_file(path, mode)
        assert got.dtype == np.uint8, name
        np.testing.assert_array_equal(got, pillow_reference(path, mode), err_msg=name)


def test_the_header_is_read_without_pillow(tmp_path):
    paths = files(tmp_path)
    sniff = {name: readers.sniff_header(bytearray(open(p, "rb").read())) for name, p in paths.items()}
    assert sniff["rgb.jpg"] == ("JPEG", 28, 20, "RGB") and sniff["progressive.jpg"] == ("JPEG", 28, 20, "RGB")
    assert sniff["gray.jpg"][3] == "L" and sniff["cmyk.jpg"][3] is None  # CMYK: Pillow's
    assert sniff["rgb.png"] == ("PNG", 28, 20, "RGB") and sniff["gray16.png"][3] == "L16"
    assert [sniff[n][3] for n in ("palette.png", "rgba.png", "la.png", "bilevel.png")] == [None] * 4
    assert sniff["rgb.bmp"] is None and sniff["rgb.webp"] is None and sniff["rgb.gif"] is None
    assert readers.sniff_header(bytearray(b"\xff\xd8\xff\xda\x00\x02")) is None  # scan before a frame


def test_broken_files_are_one_line(tmp_path):
    paths = files(tmp_path)
    for name in ("rgb.jpg", "rgb.png", "rgb.webp"):
        data = open(paths[name], "rb").read()
        cut = tmp_path / f"cut-{name}"
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(DataError, match=f"x: cannot read image {cut}: "):
            readers.decode_file(str(cut), "RGB", where="x")
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(DataError, match="cannot read image"):
        readers.decode_file(str(tmp_path / "empty.jpg"), "RGB")
    with pytest.raises(DataError, match="image not found"):
        readers.decode_file(str(tmp_path / "missing.jpg"), "RGB")


def test_pixel_limit_from_the_header_of_either_path(tmp_path):
    paths = files(tmp_path)
    for name in ("rgb.jpg", "rgb.png", "rgb.bmp"):  # header read here / by Pillow
        with pytest.raises(DataError, match=r"has 28 x 20 pixels, more than runtime.max_image_pixels \(559\)"):
            readers.decode_file(paths[name], "RGB", max_pixels=28 * 20 - 1)
        with pytest.raises(DataError, match=r"more than runtime.max_image_pixels \(559\)"):
            readers.read_image(paths[name], context=DataContext(max_pixels=28 * 20 - 1))
    assert readers.decode_file(paths["rgb.jpg"], "RGB", max_pixels=28 * 20).shape == (20, 28, 3)


def test_read_image_is_uint8_channels_first(tmp_path):
    paths = files(tmp_path)
    rgb = readers.read_image(paths["rgb.png"])
    assert rgb.dtype == torch.uint8 and rgb.shape == (3, 20, 28)
    assert torch.equal(readers.read_image(paths["rgb.png"], "BGR"), rgb.flip(0))
    assert readers.read_image(paths["rgb.png"], "GRAY").shape == (1, 20, 28)
