"""Reading a trace or node-list file as text: one clear error for every way it is not CSV text.

Both trace families (openb, PAI) and both node-list formats read through ``read_text``, so a
byte-order mark, a compressed file or another encoding is handled the same everywhere.
"""

from __future__ import annotations

from pathlib import Path

from jaxsched.errors import DataError

# Leading bytes of files that are not CSV text, and what they are.
BINARY_MAGIC = ((b"\x1f\x8b", "a gzip-compressed file: decompress it first"),
                (b"PK\x03\x04", "a zip archive: extract it first"),
                (b"BZh", "a bzip2-compressed file: decompress it first"),
                (b"\xfd7zXZ", "an xz-compressed file: decompress it first"),
                (b"\x28\xb5\x2f\xfd", "a zstd-compressed file: decompress it first"))


def read_text(path: str | Path) -> str:
    """The file's text: UTF-8, with or without a byte-order mark (dropped). A missing file, a
    folder, a compressed or binary file, UTF-16 text, a non-UTF-8 byte or a NUL byte is a
    ``DataError`` naming the file (and the line of the bad byte)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, None, None, "file not found") from None
    except IsADirectoryError:
        raise DataError(path, None, None, "is a folder, not a CSV file") from None
    except OSError as err:
        raise DataError(path, None, None, f"cannot read the file: {err.strerror or err}") from None
    for magic, what in BINARY_MAGIC:
        if raw.startswith(magic):
            raise DataError(path, None, None, f"not CSV text but {what}")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # e.g. Excel's "Unicode text", PowerShell's default
        raise DataError(path, 1, None, "not UTF-8 but UTF-16 text (a UTF-16 byte-order mark): save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise DataError(path, line, None, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset "
                        f"{err.start}): a binary file or another encoding (save it as UTF-8)") from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise DataError(path, line, None, "a NUL byte: a binary file, not CSV text")
    return text
