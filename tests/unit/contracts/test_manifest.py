"""`campaign manifest DIR`: a directory model's files in sha256sum format, one stable order, bounded, no links;
what `sha256sum -c` checks and what a contract pins."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from campaign.contracts.manifest import ManifestError, manifest_problems, parse_manifest, render_manifest, tree_digests
from tests.support.cli import campaign


def _tree(root: Path) -> Path:
    (root / "b" / "c").mkdir(parents=True)
    (root / "z.json").write_bytes(b"{}\n")
    (root / "b" / "c" / "w.bin").write_bytes(b"\x00" * 1000)
    (root / "a b.txt").write_bytes("é\n".encode())
    return root


def test_every_file_listed_once_in_codepoint_order(tmp_path: Path) -> None:
    digests = tree_digests(_tree(tmp_path / "d"))
    assert list(digests) == ["a b.txt", "b/c/w.bin", "z.json"]
    assert digests["z.json"] == hashlib.sha256(b"{}\n").hexdigest()
    assert parse_manifest(render_manifest(digests)) == digests


def test_sha256sum_reads_what_it_writes_and_it_reads_sha256sums(tmp_path: Path) -> None:
    root = _tree(tmp_path / "d")
    written = tmp_path / "d.sha256"
    ran = campaign("manifest", str(root), "--out", str(written))
    assert ran.returncode == 0, ran.stderr
    digest = hashlib.sha256(written.read_bytes()).hexdigest()
    assert f"sha256: {digest}" in ran.stdout
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "-c", "--strict", str(written)], cwd=root, capture_output=True).returncode == 0
        theirs = subprocess.run("find . -type f -print0 | sort -z | xargs -0 sha256sum -b", shell=True, cwd=root,
                                capture_output=True, text=True, check=True).stdout
        assert parse_manifest(theirs) == tree_digests(root)  # './' prefixes and '*' markers read alike
    printed = campaign("manifest", str(root))
    assert printed.returncode == 0 and printed.stdout == written.read_text() and digest in printed.stderr


@pytest.mark.parametrize("make", ["link_out", "link_in", "fifo"])
def test_links_and_special_files_are_refused_by_name(tmp_path: Path, make: str) -> None:
    root = _tree(tmp_path / "d")
    if make == "link_out":
        (root / "escape").symlink_to("/etc/hostname")
    elif make == "link_in":
        (root / "b" / "again.json").symlink_to("../z.json")
    else:
        os.mkfifo(root / "pipe")
    with pytest.raises(ManifestError, match=r"a link|not a regular file"):
        tree_digests(root)
    ran = campaign("manifest", str(root))
    assert ran.returncode == 2 and ran.stdout == "" and len(ran.stderr.strip().splitlines()) == 1


def test_the_manifest_may_not_be_written_into_its_directory(tmp_path: Path) -> None:
    root = _tree(tmp_path / "d")
    ran = campaign("manifest", str(root), "--out", str(root / "MANIFEST"))
    assert ran.returncode == 2 and "lies inside" in ran.stderr and not (root / "MANIFEST").exists()


def test_a_missing_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    ran = campaign("manifest", str(tmp_path / "nope"))
    assert ran.returncode == 2 and "no such directory" in ran.stderr and "Traceback" not in ran.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("abc  x\n", "not a `sha256sum` line"),
    (f"{'a' * 64}  ../etc/passwd\n", "not a plain relative path"),
    (f"{'a' * 64}  /etc/passwd\n", "not a plain relative path"),
    (f"{'a' * 64}  x\n{'b' * 64}  ./x\n", "listed twice"),
    ("\n", "lists no file"),
])
def test_a_manifest_of_another_shape_names_its_line(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(text, "m.sha256")


def test_problems_name_an_example_of_each_kind() -> None:
    pinned = {"a": "1" * 64, "b": "2" * 64, "c": "3" * 64}
    found = {"a": "1" * 64, "b": "9" * 64, "d": "4" * 64}
    assert manifest_problems(pinned, found) == ("1 of 3 files differ (e.g. b); 1 listed files are missing (e.g. c); "
                                                "1 files are not in the manifest (e.g. d)")
    assert manifest_problems(pinned, dict(pinned)) == ""
