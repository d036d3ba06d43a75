"""Integrity of torch's zip files (checkpoints and weight files alike): the CRC-32 of every record.

Ground level: read by :mod:`up_trainer.weights` (any weights file) and by
:mod:`up_trainer.engine.checkpoint` (our checkpoints) without either importing the other's layer.
"""
import mmap
import os
import struct
import zipfile
import zlib


def verify_checksums(path):
    """Read every record of a torch zip file (a path, or a binary file opened by
    ``paths.open_input``) and compare it with the CRC-32 stored beside it.

    torch.save writes a CRC-32 of each record (each tensor storage and the pickle) into the
    zip headers but torch.load never checks them, so flipped bytes would load without a word.
    Returns None when all match (or the file is not a zip: torch's legacy format), else one
    sentence naming the first bad record. torch stores records uncompressed: their bytes are
    checksummed in place through a memory map (half the time of reading them through zipfile)."""
    if isinstance(path, (str, os.PathLike)):
        try:
            with open(path, "rb") as f:
                return verify_checksums(f)
        except OSError:
            return None  # unreadable: the load that follows says why
    f = path
    try:
        if not zipfile.is_zipfile(f):
            return None
        with zipfile.ZipFile(f) as archive:
            size = os.fstat(f.fileno()).st_size
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
            try:
                for info in archive.infolist():
                    if info.compress_type != zipfile.ZIP_STORED:
                        with archive.open(info) as record:  # zipfile checks the CRC-32 at the end
                            while record.read(1 << 22):
                                pass
                        continue
                    start = _data_offset(mapped, info)
                    if start is None or start + info.compress_size > len(mapped):
                        return f"record {info.filename!r}: damaged local header"
                    with memoryview(mapped) as whole, whole[start:start + info.compress_size] as data:
                        crc = zlib.crc32(data)
                    if crc != info.CRC:
                        return f"Bad CRC-32 for file {info.filename!r}"
            finally:
                if mapped is not None:
                    mapped.close()
    except zipfile.BadZipFile as exc:  # a damaged central directory
        return str(exc).strip().splitlines()[0] if str(exc).strip() else "damaged zip structure"
    except (OSError, EOFError, ValueError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _data_offset(mapped, info):
    """Where a record's bytes start: after its local header (30 bytes, name, extra field)."""
    at = info.header_offset
    header = mapped[at:at + 30]
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    if mapped[at + 30:at + 30 + name_len] != info.orig_filename.encode("utf-8"):
        return None
    return at + 30 + name_len + extra_len
