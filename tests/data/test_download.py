"""Offline tests for recsys.data.download against a throwaway HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import shutil
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path

import pytest
from conftest import DRIP_PATH, LATE_BODY, LATE_PATH, SLOW_PATH, Served, zip_bytes

from recsys.data.download import _describe, _SchemeCheckingRedirects, download, extract_zip
from recsys.errors import DataError, DownloadError

TINY_LINES = b"1\t10\t4\t881250949\n2\t20\t3\t881250950\n3\t10\t5\t881250951\n"


@pytest.fixture
def archive_bytes() -> bytes:
    return zip_bytes({"ml-tiny/u.data": TINY_LINES, "ml-tiny/README": b"made-up test data\n"})


def leftovers(folder: Path) -> list[str]:
    """Everything in folder, so a test can insist a failed download cached nothing."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_with_sha256_and_size(
    served: Served, archive_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    dest = tmp_path / "out" / "nested" / "ml-tiny.zip"  # parent folders do not exist yet

    got = download(
        url,
        dest,
        size=len(archive_bytes),
        sha256=hashlib.sha256(archive_bytes).hexdigest().upper(),
        allow_http=True,
        timeout=5,
    )

    assert got == dest
    assert dest.read_bytes() == archive_bytes
    assert leftovers(dest.parent) == ["ml-tiny.zip"]
    assert served.requests == ["/ml-tiny.zip"]


def test_download_with_md5_only(served: Served, archive_bytes: bytes, tmp_path: Path) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    dest = tmp_path / "out" / "ml-tiny.zip"

    download(
        url,
        dest,
        size=None,
        md5=hashlib.md5(archive_bytes).hexdigest(),
        allow_http=True,
        timeout=5,
        progress=False,
    )

    assert dest.read_bytes() == archive_bytes
    assert leftovers(dest.parent) == ["ml-tiny.zip"]


def test_download_needs_a_digest(served: Served, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sha256 or md5"):
        download(f"{served.base}/x.zip", tmp_path / "x.zip", size=1, allow_http=True)
    assert served.requests == []


@pytest.mark.parametrize("which", ["sha256", "md5"])
def test_download_wrong_digest_caches_nothing(
    served: Served, archive_bytes: bytes, tmp_path: Path, which: str
) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    out = tmp_path / "out"
    dest = out / "ml-tiny.zip"
    right = {
        "sha256": hashlib.sha256(archive_bytes).hexdigest(),
        "md5": hashlib.md5(archive_bytes).hexdigest(),
    }
    pinned = dict(right, **{which: "0" * len(right[which])})

    with pytest.raises(DownloadError) as err:
        download(url, dest, size=len(archive_bytes), allow_http=True, progress=False, **pinned)

    message = str(err.value)
    assert url in message and which in message
    assert "0" * len(right[which]) in message and right[which] in message
    assert "\n" not in message
    assert not dest.exists()
    assert leftovers(out) == []


@pytest.mark.parametrize("delta", [1, -1], ids=["expects-more", "expects-less"])
def test_download_wrong_size_caches_nothing(
    served: Served, archive_bytes: bytes, tmp_path: Path, delta: int
) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    out = tmp_path / "out"
    dest = out / "ml-tiny.zip"
    expected = len(archive_bytes) + delta

    with pytest.raises(DownloadError, match=f"expected {expected} bytes") as err:
        download(
            url,
            dest,
            size=expected,
            sha256=hashlib.sha256(archive_bytes).hexdigest(),
            allow_http=True,
            progress=False,
        )

    assert url in str(err.value)
    assert not dest.exists()
    assert leftovers(out) == []


def test_download_404_caches_nothing(served: Served, tmp_path: Path) -> None:
    url = f"{served.base}/missing.zip"
    out = tmp_path / "out"
    dest = out / "missing.zip"

    with pytest.raises(DownloadError, match="404") as err:
        download(url, dest, size=None, sha256="0" * 64, allow_http=True, progress=False)

    assert url in str(err.value)
    assert served.requests == ["/missing.zip"]
    assert not dest.exists()
    assert leftovers(out) == []


def test_download_refuses_plain_http_without_opt_in(
    served: Served, archive_bytes: bytes, tmp_path: Path
) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    dest = tmp_path / "out" / "ml-tiny.zip"

    with pytest.raises(DownloadError, match="http") as err:
        download(url, dest, size=None, sha256=hashlib.sha256(archive_bytes).hexdigest())

    assert url in str(err.value)
    assert "allow_http" in str(err.value)
    assert served.requests == []
    assert not dest.exists()
    assert leftovers(tmp_path / "out") == []


def test_download_times_out(served: Served, tmp_path: Path) -> None:
    url = served.base + SLOW_PATH
    out = tmp_path / "out"
    dest = out / "slow.zip"

    with pytest.raises(DownloadError, match=r"timed out after 0\.5 s") as err:
        download(url, dest, size=None, sha256="0" * 64, allow_http=True, timeout=0.5)

    assert url in str(err.value)
    assert served.requests == [SLOW_PATH]
    assert not dest.exists()
    assert leftovers(out) == []


def test_a_download_that_drips_is_stopped_as_stalled(served: Served, tmp_path: Path) -> None:
    """Every byte comes within the socket's timeout, so only the stall check can end it."""
    out = tmp_path / "out"
    with pytest.raises(DownloadError, match=r"drip.zip stalled: \d+ bytes in the last 0\.3 s"):
        download(
            served.base + DRIP_PATH, out / "drip.zip", size=None, sha256="0" * 64, allow_http=True,
            timeout=5, stall_seconds=0.3,
        )  # fmt: skip
    assert leftovers(out) == []


def test_a_slow_answer_then_a_fast_body_is_no_stall(served: Served, tmp_path: Path) -> None:
    """The stall span starts with the body: waiting for the headers has the timeout of its own."""
    dest = tmp_path / "late.zip"
    sha256 = hashlib.sha256(LATE_BODY).hexdigest()
    download(
        served.base + LATE_PATH, dest, size=None, sha256=sha256, allow_http=True, timeout=5, stall_seconds=0.3
    )
    assert dest.read_bytes() == LATE_BODY


def test_an_archive_larger_than_the_free_disk_is_refused_unwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/zeros", b"\0" * 2_000_000)  # deflates to about 2 KB
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(buffer.getvalue())
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1_000_000))
    with pytest.raises(DataError, match=r"bomb.zip: it unpacks to 1\.9 MiB and .* has 1\.0 MiB free"):
        extract_zip(archive, tmp_path / "out" / "bomb")
    assert leftovers(tmp_path / "out") == []


def test_extract_zip_unpacks_all_members(archive_bytes: bytes, tmp_path: Path) -> None:
    archive = tmp_path / "ml-tiny.zip"
    archive.write_bytes(archive_bytes)
    target = tmp_path / "data" / "ml-tiny-extracted"

    assert extract_zip(archive, target) == target

    assert (target / "ml-tiny" / "u.data").read_bytes() == TINY_LINES
    assert (target / "ml-tiny" / "README").read_bytes() == b"made-up test data\n"
    # The staging folder is gone: only the finished target sits beside it.
    assert leftovers(target.parent) == ["ml-tiny-extracted"]


@pytest.mark.parametrize("evil", ["../evil.txt", "ml-tiny/../../evil.txt"])
def test_extract_zip_refuses_path_traversal(tmp_path: Path, evil: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    archive = tmp_path / "evil.zip"
    # The bad member comes last, so a checker that writes as it goes would leave u.data behind.
    archive.write_bytes(zip_bytes({"ml-tiny/u.data": TINY_LINES, evil: b"pwned\n"}))
    target = work / "out"

    with pytest.raises(DataError, match="outside") as err:
        extract_zip(archive, target)

    assert str(archive) in str(err.value) and evil in str(err.value)
    assert not target.exists()
    assert leftovers(work) == []
    assert not list(tmp_path.rglob("evil.txt"))


@pytest.mark.parametrize("name", ["/abs.txt", "C:/abs.txt"])
def test_extract_zip_refuses_absolute_member(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "abs.zip"
    archive.write_bytes(zip_bytes({"ok.txt": b"fine\n", name: b"pwned\n"}))
    target = tmp_path / "out"

    with pytest.raises(DataError, match="absolute") as err:
        extract_zip(archive, target)

    assert name in str(err.value)
    assert not target.exists()
    assert leftovers(tmp_path) == ["abs.zip"]


def test_extract_zip_refuses_symlink_member(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ml-tiny/u.data", TINY_LINES)
        link = zipfile.ZipInfo("ml-tiny/link")
        link.create_system = 3  # unix, so the high bits of external_attr are a file mode
        link.external_attr = 0o120777 << 16
        zf.writestr(link, "/etc/passwd")
    archive = tmp_path / "link.zip"
    archive.write_bytes(buf.getvalue())
    target = tmp_path / "out"

    with pytest.raises(DataError, match="symbolic link") as err:
        extract_zip(archive, target)

    assert "ml-tiny/link" in str(err.value)
    assert not target.exists()
    assert leftovers(tmp_path) == ["link.zip"]


def test_extract_zip_rejects_non_zip(tmp_path: Path) -> None:
    archive = tmp_path / "fake.zip"
    archive.write_bytes(b"<html>not a zip, probably an error page</html>\n")
    target = tmp_path / "out"

    with pytest.raises(DataError, match="not a readable zip") as err:
        extract_zip(archive, target)

    assert str(archive) in str(err.value)
    assert not target.exists()


def test_extract_zip_refuses_existing_target(archive_bytes: bytes, tmp_path: Path) -> None:
    archive = tmp_path / "ml-tiny.zip"
    archive.write_bytes(archive_bytes)
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine\n")

    with pytest.raises(DataError, match="already exists"):
        extract_zip(archive, target)

    assert leftovers(target) == ["keep.txt"]
    assert leftovers(tmp_path) == ["ml-tiny.zip", "out"]


def test_extract_zip_names_a_damaged_deflate_stream(tmp_path: Path) -> None:
    """Regression: zlib's own error (a stream damaged before the member's CRC is checked) escaped."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ml-tiny/u.data", TINY_LINES * 2000)
    whole = buffer.getvalue()
    start = whole.index(b"u.data") + len("u.data")  # the member's data follows its local header
    for position in range(start + 10, start + 400):  # the first flip that zlib itself refuses
        damaged = bytearray(whole)
        damaged[position] ^= 0xFF
        try:
            with zipfile.ZipFile(io.BytesIO(bytes(damaged))) as zf:
                zf.read("ml-tiny/u.data")
        except zlib.error:
            break
        except zipfile.BadZipFile:
            continue
    else:
        pytest.fail("no flipped byte made zlib fail")
    archive = tmp_path / "damaged.zip"
    archive.write_bytes(bytes(damaged))
    with pytest.raises(DataError, match=r"cannot extract .*damaged\.zip into .*: Error -3"):
        extract_zip(archive, tmp_path / "out")
    assert leftovers(tmp_path) == ["damaged.zip"]


def test_a_redirect_to_a_scheme_the_download_may_not_use_is_refused() -> None:
    """urllib follows redirects by itself: https must not become plain http on the way."""
    handler = _SchemeCheckingRedirects(allow_http=False)
    request = urllib.request.Request("https://example.org/ml-100k.zip")
    with pytest.raises(DownloadError, match=r"refusing to download http://example\.org/x\.zip over"):
        handler.redirect_request(request, io.BytesIO(), 302, "Found", {}, "http://example.org/x.zip")
    followed = handler.redirect_request(request, io.BytesIO(), 302, "Found", {}, "https://mirror.org/x.zip")
    assert followed is not None and followed.full_url == "https://mirror.org/x.zip"
    # Where plain http is allowed (a local test server), https still never steps down to it.
    with pytest.raises(DownloadError, match=r"redirect from https to http://example\.org/x\.zip"):
        _SchemeCheckingRedirects(allow_http=True).redirect_request(
            request, io.BytesIO(), 302, "Found", {}, "http://example.org/x.zip"
        )


def test_a_reason_over_several_lines_is_described_in_one() -> None:
    loop = urllib.error.HTTPError(
        "https://example.org/x.zip",
        302,
        "would lead to an infinite loop.\nThe last 30x error was:\nFound",
        {},
        None,
    )
    assert _describe("https://example.org/x.zip", loop, 60) == (
        "download of https://example.org/x.zip failed: HTTP 302 would lead to an infinite loop."
    )


def test_without_a_pinned_size_a_bound_stops_what_is_written(
    served: Served, archive_bytes: bytes, tmp_path: Path
) -> None:
    url = served.put("ml-tiny.zip", archive_bytes)
    with pytest.raises(DownloadError, match=rf"is larger than expected: over {len(archive_bytes) - 1} bytes"):
        download(
            url,
            tmp_path / "out" / "ml-tiny.zip",
            size=None,
            md5=hashlib.md5(archive_bytes).hexdigest(),
            allow_http=True,
            timeout=5,
            progress=False,
            max_size=len(archive_bytes) - 1,
        )
    assert leftovers(tmp_path / "out") == []
