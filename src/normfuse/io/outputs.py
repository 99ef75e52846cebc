"""Every file a command writes: planned and checked before any work, staged beside each
destination, committed together at the end, and removed on any error or signal before the commit.
Inside `command_signals`, SIGINT and SIGTERM are ignored once the commit starts: from then on the
command has succeeded (ADV9-03).

A destination is refused (`NormfuseError`) when it is, or resolves to, a protected file (the input
model, its external-data files), when two destinations are the same, when its folder is missing or
not writable, when its name is too long, or when it is a directory, FIFO, device or socket (or a
link to one), or in /dev, /proc or /sys. Whether the folder accepts new files is tried with a
probe file, created and removed at once. `-` means standard output where a command allows it,
and is not a file.

Symbolic links: a destination that is a link is replaced by the new file (the link itself, never
its target); its temporary file is created beside the destination path itself, so the final
rename never crosses filesystems. `--in-place` is the exception: it replaces the file MODEL
resolves to, so a model reached through a link keeps its external-data references.

Modes: a new file gets 0666 minus the umask; a replaced regular file keeps its mode and, where
permitted, its owner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from normfuse.errors import NormfuseError

STDOUT = "-"
_NAME_MAX = 255
_TEMP_PREFIX_CHARS = 64


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every `with OutputPlan()` cleans up."""


@dataclass
class _Entry:
    label: str
    path: Path
    mode: int
    owner: tuple[int, int] | None
    temp: Path | None = None


class OutputPlan:
    """The files one command will write. Use as a context manager: on any exception (signals
    included) every staged temporary file is removed and no destination is touched."""

    def __init__(self, protected: Iterable[str | os.PathLike] = ()) -> None:
        self._protected_paths: set[Path] = set()
        self._protected_ids: set[tuple[int, int]] = set()
        self._entries: dict[Path, _Entry] = {}
        self.committed = False
        for path in protected:
            self.protect(path)

    def protect(self, path: str | os.PathLike) -> None:
        """Never write `path` (as given, or what it resolves to)."""
        path = Path(path)
        with contextlib.suppress(NormfuseError):
            self._protected_paths |= {_lexical(path, ""), _resolve(path, "")}
        with contextlib.suppress(OSError):
            info = path.stat()
            self._protected_ids.add((info.st_dev, info.st_ino))

    def add(self, path: str | os.PathLike, label: str, allow_stdout: bool = False) -> Path | None:
        """Check the destination `path` (named `label` in errors) and reserve it; returns the
        destination to stage, or None for `-` (standard output) where `allow_stdout`."""
        if allow_stdout and os.fspath(path) == STDOUT:
            return None
        where = f"{label} {os.fspath(path)}"
        destination = _lexical(Path(path), where)
        self._check_new(destination, where)
        info = _lstat(destination)
        mode, owner = _new_file_mode(), None
        if info is not None and stat.S_ISLNK(info.st_mode):
            _check_link_target(destination, where)
        elif info is not None:
            _check_kind(info, where)
            mode, owner = stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)
        _check_folder(destination, where)
        self._entries[destination] = _Entry(label, destination, mode, owner)
        return destination

    def add_in_place(self, path: str | os.PathLike, label: str = "--in-place") -> Path:
        """Reserve the file `path` resolves to, to be replaced; it keeps its mode and owner."""
        where = f"{label} {os.fspath(path)}"
        destination = _resolve(_lexical(Path(path), where), where)
        info = _lstat(destination)
        if info is None:
            raise NormfuseError(f"{where}: no such file")
        _check_kind(info, where)
        _check_folder(destination, where)
        if destination in self._protected_paths or _file_id(destination) in self._protected_ids:
            raise NormfuseError(f"{where}: is also one of the model's external-data files")
        if destination in self._entries:
            raise NormfuseError(f"{where}: is also another output")
        self._entries[destination] = _Entry(
            label, destination, stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)
        )
        return destination

    def stage(self, destination: Path, write: Callable[[BinaryIO], None]) -> None:
        """Write a reserved destination's new content, through `write(file)`, to its temporary
        file (replacing an earlier staging)."""
        temp = self.temp_path(destination)
        try:
            with temp.open("wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:
            raise NormfuseError(f"cannot write {destination}: {error.strerror or error}") from None

    def stage_bytes(self, destination: Path, payload: bytes) -> None:
        """`stage` with the whole content given."""
        self.stage(destination, lambda file: file.write(payload))

    def temp_path(self, destination: Path) -> Path:
        """A new, empty temporary file beside `destination` for a writer that needs a path (it
        is removed again unless committed)."""
        entry = self._entries.get(destination)
        if entry is None:
            raise ValueError(f"{destination} was not planned")
        self._remove_temp(entry)
        prefix = f".{destination.name[:_TEMP_PREFIX_CHARS]}."
        try:
            handle, name = tempfile.mkstemp(
                prefix=prefix, suffix=".tmp" + _short_suffix(destination), dir=destination.parent
            )
        except OSError as error:
            raise NormfuseError(f"cannot write {destination}: {error.strerror or error}") from None
        os.close(handle)
        entry.temp = Path(name)
        return entry.temp

    def commit(self) -> list[Path]:
        """Rename every staged file onto its destination, in planning order, with SIGINT and
        SIGTERM held back (inside `command_signals`: ignored from here on); returns the
        destinations written."""
        written = []
        with _signals_held():
            _settle()
            for entry in self._entries.values():
                if entry.temp is None:
                    continue
                try:
                    _apply_mode(entry)
                    os.replace(entry.temp, entry.path)
                except OSError as error:
                    raise NormfuseError(
                        f"cannot write {entry.path}: {error.strerror or error}"
                    ) from None
                entry.temp = None
                written.append(entry.path)
            for folder in {path.parent for path in written}:
                _fsync_folder(folder)
        self.committed = True
        return written

    def discard(self) -> None:
        """Remove every staged temporary file."""
        for entry in self._entries.values():
            self._remove_temp(entry)

    def __enter__(self) -> OutputPlan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()

    def _check_new(self, destination: Path, where: str) -> None:
        resolved = _resolve(destination, where)
        if any(map(_is_system_path, (destination, resolved, *_link_targets(destination)))):
            raise NormfuseError(f"{where}: is in /dev, /proc or /sys (or a link there), not a file")
        if {destination, resolved} & self._protected_paths or _file_id(resolved) in (
            self._protected_ids
        ):
            raise NormfuseError(f"{where}: is the input model or one of its data files")
        for entry in self._entries.values():
            if destination == entry.path or resolved == entry.path.resolve():
                raise NormfuseError(f"{where}: is the same file as {entry.label}")

    @staticmethod
    def _remove_temp(entry: _Entry) -> None:
        if entry.temp is not None:
            entry.temp.unlink(missing_ok=True)
            entry.temp = None


def _lexical(path: Path, where: str) -> Path:
    """`path` made absolute with its folder resolved and its last component kept (a link at the
    destination stays a link)."""
    name = path.name
    if len(os.fsencode(name)) > _NAME_MAX:
        raise NormfuseError(f"{where}: file name longer than {_NAME_MAX} bytes")
    if name in ("", ".", ".."):
        return _resolve(path, where)
    return _resolve(path.absolute().parent, where) / name


def _resolve(path: Path, where: str) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as error:  # a link loop, a name too long
        raise NormfuseError(f"{where}: {getattr(error, 'strerror', None) or error}") from None


def _link_targets(path: Path) -> list[Path]:
    """What a chain of symbolic links at `path` names, step by step (as written, made absolute),
    so that a link into /proc is seen even where the kernel resolves it elsewhere."""
    targets: list[Path] = []
    while path.is_symlink() and len(targets) < 40:
        path = Path(os.path.normpath(path.parent / os.readlink(path)))
        targets.append(path)
    return targets


def _is_system_path(path: Path) -> bool:
    """Under /dev (but /dev/shm), /proc or /sys: never replaced, even where root could."""
    parts = path.parts[1:3]
    if not parts:
        return False
    return parts[0] in ("proc", "sys") or (parts[0] == "dev" and parts[1:] != ("shm",))


def _short_suffix(destination: Path) -> str:
    """The destination's extension, kept on its temporary file for writers that infer the format
    from the name (matplotlib)."""
    suffix = destination.suffix
    return suffix if len(suffix) <= 8 and suffix[1:].isalnum() else ""


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise NormfuseError(f"{path}: {error.strerror or error}") from None


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _check_kind(info: os.stat_result, where: str) -> None:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a device",
        stat.S_ISBLK: "a device",
        stat.S_ISSOCK: "a socket",
    }
    for test, kind in kinds.items():
        if test(info.st_mode):
            raise NormfuseError(f"{where}: is {kind}, not a file")


def _check_link_target(destination: Path, where: str) -> None:
    """A link is replaced, but a link to a directory, FIFO or device is refused (the user meant
    that object, and it cannot be written as a file)."""
    try:
        info = destination.stat()
    except OSError:
        return  # dangling, or a loop: the link itself is replaced
    _check_kind(info, f"{where} (a symbolic link)")


def _check_folder(destination: Path, where: str) -> None:
    folder = destination.parent
    if not folder.is_dir():
        raise NormfuseError(f"{where}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NormfuseError(f"{where}: folder {folder} is not writable")
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = _NAME_MAX
    if len(os.fsencode(destination.name)) > name_max:
        raise NormfuseError(f"{where}: file name longer than {name_max} bytes")
    try:  # the folder may still refuse new files (read-only filesystem, special folder)
        handle, probe = tempfile.mkstemp(prefix=".normfuse.", suffix=".tmp", dir=folder)
    except OSError as error:
        raise NormfuseError(
            f"{where}: cannot create files in {folder} ({error.strerror})"
        ) from None
    os.close(handle)
    os.unlink(probe)


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _apply_mode(entry: _Entry) -> None:
    assert entry.temp is not None
    os.chmod(entry.temp, entry.mode)
    if entry.owner is not None and os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.chown(entry.temp, *entry.owner)
            os.chmod(entry.temp, entry.mode)  # chown clears set-id bits


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _CommandSignals:
    """Whether a command's signal handling is active (`command_signals`), and whether its outputs
    were committed (from then on SIGINT and SIGTERM are ignored)."""

    active = False
    committed = False


def _settle() -> None:
    """Inside `command_signals`: ignore SIGINT and SIGTERM from now on (the commit is starting,
    and once it has started the command has succeeded). `signal.signal` first runs the handler of
    a signal that already arrived, so one that came before this point still raises, before any
    file is renamed; one pending in this thread is discarded by SIG_IGN."""
    if not _CommandSignals.active or threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _CommandSignals.committed = True


@contextlib.contextmanager
def command_signals(keep_after_commit: bool = False) -> Iterator[None]:
    """One command's SIGINT and SIGTERM: until an `OutputPlan` commits, SIGTERM raises
    `Terminated` (SIGINT raises KeyboardInterrupt, as always), so every staged file is removed;
    from the commit on both are ignored, so the command finishes with its own status. The
    previous handlers are restored on leaving, unless the commit happened and
    `keep_after_commit` (a process about to exit: a signal during its shutdown must not kill it
    with committed outputs). A no-op outside the main thread."""

    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    _CommandSignals.active, _CommandSignals.committed = True, False
    try:
        yield
    finally:
        committed = _CommandSignals.committed
        _CommandSignals.active = _CommandSignals.committed = False
        if not (committed and keep_after_commit):
            for signum, handler in previous.items():
                if handler is not None:  # None: a handler not set from Python, left as it is
                    signal.signal(signum, handler)
