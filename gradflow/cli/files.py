"""Every file gradflow writes (graph -o, inspect -o, eval --plot FILE) goes through write_file(): all or nothing.

The bytes go to a temporary file in the target's directory, which then replaces the target in one step
(os.replace, atomic on POSIX and Windows). So eight runs writing the same picture at once leave one complete
picture, a reader never sees half a file, and a full disk, a file-size limit or Ctrl-C in the middle leaves the
old file as it was and no temporary file behind. `tests/system/test_output_guards.py` checks that nothing else
in the package opens a file for writing.
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from gradflow.errors import ValueInputError


def write_file(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` atomically; a package error (exit 2) saying why it cannot."""
    raw = data.encode() if isinstance(data, str) else data
    target = Path(os.path.realpath(path))  # through a symlink: replace the file it points at, keep the link
    if target.is_dir():  # `-o ""` reaches here as '.'
        raise ValueInputError("usage", f"cannot write to '{path}': it is a directory, not a file",
                              hint="give a file name, e.g. -o picture.svg (an empty -o \"\" names the current "
                                   "directory)")
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    try:
        if mode is not None and not stat.S_ISREG(mode):  # /dev/null, /dev/stdout, a FIFO: nothing to replace
            _write_in_place(target, raw)
        else:
            _replace(target, raw, mode)
    except OSError as err:
        raise ValueInputError("usage", f"cannot write {path}: {err.strerror or err}") from None


def _replace(target: Path, raw: bytes, mode: int | None) -> None:
    tmp = target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask, as open() would
    except PermissionError:
        if mode is None:
            raise
        _write_in_place(target, raw)  # a read-only directory holding a writable file: as before, not atomic
        return
    try:
        with open(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))  # replacing a file keeps its permissions
        os.replace(tmp, target)
    except BaseException:  # a write error, Ctrl-C: the target is untouched, the temporary file goes
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_in_place(target: Path, raw: bytes) -> None:
    with open(target, "wb") as fh:
        fh.write(raw)
