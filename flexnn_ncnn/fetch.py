"""Fetch the pinned NCNN source: the `ncnn` sdist from the package index pip is configured with.

The lock (`third_party/ncnn.lock`) names one version and its sha256. The sdist URL is resolved at
run time from pip's configured indexes (PEP 503 simple pages), downloaded through pip with a
hashed direct reference, verified again here, and unpacked to `third_party/ncnn/`.

Invariants: `third_party/ncnn/` either does not exist or is a complete unpack of the locked sdist,
recorded in `third_party/ncnn/.flexnn/source.json`; a download that fails its hash is never
unpacked; nothing half-made is left behind on any error.
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .cli import UserError, add_logging_args, run_main, setup_logging

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
THIRD_PARTY = REPO_ROOT / "third_party"
SOURCE_RECORD = Path(".flexnn") / "source.json"


@dataclass(frozen=True)
class Lock:
    package: str
    version: str
    filename: str
    sha256: str
    ncnn_version: str

    @staticmethod
    def load(path: Path = THIRD_PARTY / "ncnn.lock") -> "Lock":
        try:
            data = json.loads(path.read_text())
            return Lock(**{k: str(data[k]) for k in ("package", "version", "filename", "sha256", "ncnn_version")})
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"cannot read the NCNN lock {path}: {e}") from None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_index_urls() -> list[str]:
    """The index URLs pip would use: its configured index-url (or pip's own default), then extras."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, env=env)
    config: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        config[key.split(".")[-1]] = value.strip().strip("'\"")
    index = os.environ.get("PIP_INDEX_URL") or config.get("index-url")
    if not index:
        from pip._internal.models.index import PyPI  # pip's built-in default index

        index = PyPI.simple_url
    extras = (os.environ.get("PIP_EXTRA_INDEX_URL") or config.get("extra-index-url") or "").split()
    return [index, *extras]


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def find_sdist_url(lock: Lock, indexes: Sequence[str]) -> str:
    """The URL of the locked sdist on the first index that lists it; its listed hash must match."""
    tried = []
    for index in indexes:
        page = index.rstrip("/") + f"/{lock.package}/"
        try:
            with urllib.request.urlopen(page, timeout=60) as r:
                text = r.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as e:
            tried.append(f"{page} ({getattr(e, 'reason', e)})")
            continue
        parser = _Anchors()
        parser.feed(text)
        for href in parser.hrefs:
            url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
            if url.rsplit("/", 1)[-1] != lock.filename:
                continue
            listed = dict(p.split("=", 1) for p in fragment.split("&") if "=" in p).get("sha256")
            if listed and listed != lock.sha256:
                raise UserError(f"{page} lists {lock.filename} with sha256 {listed}, the lock pins {lock.sha256}")
            return url
        tried.append(f"{page} (no {lock.filename})")
    raise UserError(f"cannot find {lock.filename} on the configured package indexes: {'; '.join(tried)}")


def download(lock: Lock, downloads: Path) -> Path:
    """The verified sdist in `downloads/`, fetched through pip unless already there."""
    target = downloads / lock.filename
    if target.exists():
        got = sha256_of(target)
        if got != lock.sha256:
            raise UserError(f"{target} has sha256 {got}, the lock pins {lock.sha256}: delete it to download again")
        return target
    url = find_sdist_url(lock, pip_index_urls())
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{lock.package} @ {url} --hash=sha256:{lock.sha256}\n")
        log.info("downloading %s through pip", lock.filename)
        out = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--quiet", "-d", tmp, "-r", str(req)],
            capture_output=True, text=True,
        )
        fetched = Path(tmp) / lock.filename
        if out.returncode != 0 or not fetched.exists():
            lines = [l.strip() for l in (out.stderr + out.stdout).splitlines() if l.strip()]
            reason = next((l for l in lines if "hash" in l.lower() or "error" in l.lower()), lines[-1] if lines else "no output")
            raise UserError(f"pip could not download {lock.filename}: {reason}")
        got = sha256_of(fetched)
        if got != lock.sha256:
            raise UserError(f"downloaded {lock.filename} has sha256 {got}, the lock pins {lock.sha256}")
        os.replace(fetched, target)
    return target


def read_source_record(source: Path) -> dict | None:
    try:
        return json.loads((source / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        return None


def unpack(lock: Lock, sdist: Path, source: Path) -> None:
    """Unpack `sdist` to `source` atomically: a temporary sibling, checked, then renamed into place."""
    if sha256_of(sdist) != lock.sha256:
        raise UserError(f"{sdist} does not match the sha256 the lock pins ({lock.sha256})")
    source.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=source.parent, prefix=f".{source.name}-unpack-") as tmp:
        try:
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="tar")  # no absolute paths, links out of tree, or owners
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise UserError(f"cannot unpack {sdist}: {e}") from None
        top = Path(tmp) / f"{lock.package}-{lock.version}"
        for required in ("CMakeLists.txt", "src/net.h", "src/layer/x86", "src/layer/arm"):
            if not (top / required).exists():
                raise UserError(f"{sdist} has no {required}: not a full NCNN source (sdists before 1.0.20250428 are stubs)")
        files = sum(1 for p in top.rglob("*") if p.is_file())
        (top / SOURCE_RECORD).parent.mkdir()
        (top / SOURCE_RECORD).write_text(json.dumps(
            {"package": lock.package, "version": lock.version, "sha256": lock.sha256, "files": files}, indent=2) + "\n")
        if source.exists():
            stale = Path(tmp) / "stale"
            os.replace(source, stale)  # removed with the temporary directory
        os.replace(top, source)
    log.info("unpacked %s (%d files) to %s", lock.filename, files, source)


def fetch(lock: Lock | None = None, third_party: Path = THIRD_PARTY) -> Path:
    """Make `third_party/ncnn` the verified, complete unpack of the locked sdist; return its path."""
    lock = lock or Lock.load(third_party / "ncnn.lock")
    source = third_party / "ncnn"
    record = read_source_record(source)
    if record and record.get("sha256") == lock.sha256:
        return source
    if source.exists():
        log.warning("%s is not an unpack of %s: replacing it", source, lock.filename)
    unpack(lock, download(lock, third_party / "downloads"), source)
    return source


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flexnn_ncnn.fetch",
        description="Download the pinned NCNN sdist through pip, verify its sha256 against third_party/ncnn.lock "
        "and unpack it to third_party/ncnn/. A no-op when that tree is already the verified unpack.",
    )
    parser.add_argument("--third-party", type=Path, default=THIRD_PARTY, help="folder holding ncnn.lock (default: %(default)s)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    print(fetch(third_party=args.third_party))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
