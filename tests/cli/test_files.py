"""Files gradflow writes (graph -o, inspect -o, eval --plot FILE) are written whole or not at all
(gradflow/cli/files.py): symlinks, devices, permissions, errors. Concurrent writers and a write cut short by a
file-size limit need real processes: tests/cli/test_output.py."""
import os
import stat
from pathlib import Path

import pytest

from gradflow.cli.files import write_file
from gradflow.errors import ValueInputError


def _left_in(folder) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_replacing_keeps_the_files_permissions_and_the_symlink(tmp_path):
    target = tmp_path / "real.dot"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.dot"
    link.symlink_to(target)
    write_file(link, "new ✂\n")
    assert link.is_symlink() and target.read_text() == "new ✂\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_file(tmp_path / "fresh.dot", b"\x89PNG")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.dot").stat().st_mode) == 0o666 & ~umask  # as open() would make it
    assert _left_in(tmp_path) == {"real.dot", "link.dot", "fresh.dot"}


def test_a_device_is_written_in_place_not_replaced(tmp_path):
    write_file(Path(os.devnull), "anything")  # /dev/null stays the device
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_missing_folder_is_a_package_error(tmp_path):
    with pytest.raises(ValueInputError, match=r"cannot write .*nowhere/g.dot: No such file or directory"):
        write_file(tmp_path / "nowhere" / "g.dot", "x")


def test_cli_output_option_writes_through_it(cli, tmp_path):
    out = tmp_path / "g.mmd"
    res = cli("graph", "x*2", "--x", "1", "--format", "mermaid", "-o", str(out))
    assert res.exit_code == 0 and res.stdout == ""
    assert out.read_text() == cli("graph", "x*2", "--x", "1", "--format", "mermaid").stdout
    assert _left_in(tmp_path) == {"g.mmd"}
