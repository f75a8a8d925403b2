"""Atomic writes: a reader never sees a half-written output file or directory.

Everything is first written into a temporary file or directory in the *same parent* as the
target (so the final ``os.replace`` is a rename on one filesystem, which POSIX makes atomic),
flushed with ``fsync``, then renamed into place. Any ``OSError`` becomes
``UserError("--out", ...)`` after the temporary files are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from simcluster.errors import UserError

OUT_FIELD = "--out"


def _unwritable(path: Path, exc: OSError, field: str = OUT_FIELD) -> UserError:
    reason = exc.strerror or type(exc).__name__
    return UserError(field, f"cannot write '{path}': {reason}; choose a writable directory")


def _is_a_directory(path: Path, field: str, example: str = "out.yaml") -> UserError:
    return UserError(field, f"'{path}' is a directory; name a file (e.g. '{path / example}')")


def _umask() -> int:
    # os.umask can only be read by setting it; restore immediately.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    # Directory fsync makes the rename itself durable; not every platform allows it.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, field: str = OUT_FIELD) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename),
    making missing parent folders; an ``OSError`` is a one-line ``UserError`` naming ``field``."""
    target = Path(path)
    tmp_name: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        # mkstemp creates 0600; give the file the mode a plain open() would have.
        os.chmod(tmp_name, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        _fsync_dir(target.parent)
    except OSError as exc:
        if isinstance(exc, IsADirectoryError) and target.is_dir():
            raise _is_a_directory(target, field) from exc
        raise _unwritable(target, exc, field) from exc
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, field: str = OUT_FIELD) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"), field)


def _check_targets(staging: Path, out_dir: Path) -> list[str]:
    """Names to move; refuses before anything moves if one cannot be replaced."""
    names = sorted(p.name for p in staging.iterdir())
    for name in names:
        target = out_dir / name
        if target.exists() and not target.is_file():
            raise UserError(
                OUT_FIELD,
                f"'{target}' exists and is not a regular file; remove it or choose another --out",
            )
    return names


def _commit(staging: Path, out_dir: Path) -> None:
    for name in sorted(p.name for p in staging.iterdir()):
        _fsync_file(staging / name)
    _fsync_dir(staging)
    if not out_dir.exists():
        # The whole directory appears at once.
        os.replace(staging, out_dir)
        _fsync_dir(out_dir.parent)
        return
    if not out_dir.is_dir():
        raise UserError(
            OUT_FIELD, f"'{out_dir}' exists and is not a directory; choose another path"
        )
    # An existing directory may hold the user's other files: replace ours one by one, each
    # atomically, after checking that none of the renames can fail on a non-file target.
    for name in _check_targets(staging, out_dir):
        os.replace(staging / name, out_dir / name)
    _fsync_dir(out_dir)


@contextlib.contextmanager
def atomic_output_dir(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a staging directory; on success its files land in ``out_dir`` atomically.

    On any error (including ``OSError`` from the caller's writes) the staging directory is
    removed and ``out_dir`` is left as it was; an ``OSError`` becomes ``UserError("--out")``.
    """
    target = Path(out_dir)
    if target.exists() and not target.is_dir():
        raise UserError(OUT_FIELD, f"'{target}' exists and is not a directory; choose another path")
    staging: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; match a plain mkdir
        yield staging
        _commit(staging, target)
    except OSError as exc:
        raise _unwritable(target, exc) from exc
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


#: the hidden file in an output directory naming, per writer, the files it wrote there last
#: (``{"run": ["events.csv", ...]}``): what a later write of that writer may remove
MANIFEST = ".simcluster-files.json"


def _read_manifest(out_dir: Path) -> dict[str, list[str]]:
    """The manifest in ``out_dir``, or an empty one where it is missing or unreadable (then
    nothing is removed: a file is removed only on this record's word that simcluster wrote it)."""
    try:
        doc = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {
        str(owner): [n for n in names if isinstance(n, str) and _plain_name(n)]
        for owner, names in doc.items()
        if isinstance(names, list)
    }


def _plain_name(name: str) -> bool:
    """A file name directly inside the directory: never a path, a dot-file or the manifest."""
    return bool(name) and name == Path(name).name and not name.startswith(".")


def _manifest_bytes(manifest: dict[str, list[str]]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def _remove(path: Path) -> None:
    if path.is_file() and not path.is_symlink():
        try:
            path.unlink()
        except OSError as exc:
            raise _unwritable(path, exc) from exc


def write_output_files(
    out_dir: str | os.PathLike[str],
    files: dict[str, bytes],
    superseded: tuple[str, ...] = (),
    owner: str | None = None,
) -> dict[str, Path]:
    """Write ``files`` (name -> bytes, rendered beforehand) into ``out_dir`` atomically, as
    :func:`atomic_output_dir` does; returns file name -> final path. Each regular file named in
    ``superseded`` (another form of one of ``files``, say trace.json beside trace.json.gz) is
    removed once the new files are in place, so the directory never shows two runs' versions.

    With ``owner`` (a writer whose set of files varies from call to call: ``run`` writes
    timeline.svg only with --svg, breakdown.png only for a step it can split) the directory's
    :data:`MANIFEST` records the names written, and the files that owner's previous write left
    and this one did not are removed after the new ones are in place: a reused ``--out`` then
    holds one run's outputs, not the last run's beside an older run's timeline.svg. Only names
    the manifest lists under that owner are removed, so the user's own files (and any of ours
    written before the manifest existed) stay. The manifest lists the stale names too until
    they are gone, so an interruption in between leaves them to the next write."""
    target = Path(out_dir)
    previous = _read_manifest(target) if owner is not None else {}
    stale = sorted(set(previous.get(owner or "", ())) - set(files))
    staged = dict(files)
    if owner is not None:
        staged[MANIFEST] = _manifest_bytes({**previous, owner: sorted({*files, *stale})})
    with atomic_output_dir(target) as staging:
        for name, data in sorted(staged.items()):
            (staging / name).write_bytes(data)
    for name in superseded:
        if name not in files:
            _remove(target / name)
    if owner is not None and stale:
        for name in stale:
            _remove(target / name)
        atomic_write_bytes(target / MANIFEST, _manifest_bytes({**previous, owner: sorted(files)}))
    return {name: target / name for name in sorted(files)}


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor: where missing folders would be made."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(out_dir: str | os.PathLike[str]) -> None:
    """Fail fast (before a long simulation) when ``out_dir`` cannot become an output directory."""
    target = Path(out_dir)
    if target.exists() and not target.is_dir():
        raise UserError(OUT_FIELD, f"'{target}' exists and is not a directory; choose another path")
    parent = _nearest_existing(target if target.is_dir() else target.parent)
    if not parent.is_dir():
        raise UserError(OUT_FIELD, f"'{parent}' is not a directory; choose a writable directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(OUT_FIELD, f"cannot write into '{parent}'; choose a writable directory")


def check_file_writable(path: str | os.PathLike[str], field: str = OUT_FIELD, example: str = "out.yaml") -> None:
    """Fail fast (before a long measurement) when no file can be written at ``path`` as
    :func:`atomic_write_bytes` writes it: an existing directory or other non-file, a parent
    that is a file, or a folder that cannot be written into. Missing parent folders are fine:
    the write makes them (under the nearest existing folder, which must be writable)."""
    target = Path(path)
    if target.is_dir():
        raise _is_a_directory(target, field, example)
    if target.exists() and not target.is_file():
        raise UserError(field, f"'{target}' exists and is not a regular file; name a file")
    parent = _nearest_existing(target.parent)
    if not parent.is_dir():
        raise UserError(
            field, f"cannot make folder '{target.parent}': '{parent}' is a file; choose another path"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(
            field, f"cannot write into '{parent}' (read-only or not permitted); choose a writable folder"
        )
    _probe(parent, field)


def _probe(folder: Path, field: str) -> None:
    """Create and remove a scratch file in ``folder``, as the write will: ``os.access`` answers
    yes to root for any folder not on a read-only mount, though the write can still fail (an NFS
    export with root_squash maps a container's root to nobody; /proc and /sys hold no new files),
    and only after the hours a calibration measures."""
    try:
        fd, scratch = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".tmp")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(field, f"cannot write into '{folder}' ({reason}); choose a writable folder") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(scratch)
