"""Source bundles round-trip, stay under their size cap, and cannot write outside their folder."""

from __future__ import annotations

import base64
import io
import tarfile

import pytest

from runners.bundle import BundleError, pack, unpack


def test_round_trip(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/layers.py": "import torch\n# ü\n", "top.py": "x = 1\n"}
    names = unpack(pack(files), tmp_path)
    assert sorted(names) == sorted(files)
    assert (tmp_path / "pkg/layers.py").read_text() == "import torch\n# ü\n"


def test_size_cap_on_both_sides(tmp_path):
    big = {"a.py": "".join(f"v{i} = {i * 7919 % 104729}\n" for i in range(200_000))}
    with pytest.raises(BundleError, match="over the 1000-byte limit"):
        pack(big, limit=1000)
    bundle = pack({"a.py": "x = 1\n" * 10})
    with pytest.raises(BundleError, match="over the 10-byte limit"):
        unpack(bundle, tmp_path, limit=10)


@pytest.mark.parametrize("name", ["../evil.py", "/etc/evil.py", "a/../../evil.py"])
def test_paths_that_escape_are_refused(tmp_path, name):
    with pytest.raises(BundleError, match="unsafe path"):
        pack({name: "x"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(BundleError, match="unsafe path"):
        unpack(base64.b64encode(buf.getvalue()).decode(), tmp_path / "in")
    assert not (tmp_path / "evil.py").exists()


def test_links_are_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("link.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(BundleError, match="not a regular file"):
        unpack(base64.b64encode(buf.getvalue()).decode(), tmp_path)


def test_garbage_is_a_clear_error(tmp_path):
    with pytest.raises(BundleError, match="not base64"):
        unpack("%%%", tmp_path)
    with pytest.raises(BundleError, match=r"not a tar\.gz"):
        unpack(base64.b64encode(b"plain bytes").decode(), tmp_path)
