"""Per-claim transient CDI spec files in one directory (by default the dynamic `/var/run/cdi`).

Runtimes rescan the directory whenever it changes and may read a file at any moment, so a spec is
written to a hidden temporary file in the same directory (same filesystem, so the rename is atomic)
and renamed into place; both the file and the directory are synced so that after a crash the name
either points at a complete spec or does not exist. Temporary names start with "." and end with
".tmp", which runtimes ignore (they load only `*.yaml` and `*.json`).

A file name is `<vendor>-<class>_<claimUID>.yaml`. Claim UIDs may not contain "_", so the claim
part of a name is always what follows the kind's prefix, and listing by kind stays exact, except
for kinds that differ only where "/" and "-" meet (`a-b/c` and `a/b-c`), which a driver does not
mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from pathlib import Path

import yaml

from dra_driver.cdi.codec import spec_from_dict, spec_to_dict
from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.filesystem import in_memory
from dra_driver.cdi.model import CdiSpec
from dra_driver.cdi.names import split_kind, validate_claim_uid
from dra_driver.durable import sync_directory

DEFAULT_ROOT = Path("/var/run/cdi")
STATIC_ROOT = Path("/etc/cdi")
_SUFFIX = ".yaml"
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CdiSpecDir:
    """One CDI spec directory holding a transient spec per prepared claim."""

    def __init__(self, root: Path = DEFAULT_ROOT) -> None:
        self.root = root
        # Part of this instance's temporary names; see `_write_atomically`.
        self._token = secrets.token_hex(6)
        self._in_memory: bool | None = None

    @property
    def in_memory(self) -> bool:
        """Whether the directory is on tmpfs or ramfs, where writing a spec never waits for a
        disk (looked up once: a spec directory is not remounted under a running plugin)."""
        if self._in_memory is None:
            self._in_memory = in_memory(self.root)
        return self._in_memory

    def claim_spec_path(self, kind: str, claim_uid: str) -> Path:
        return self.root / f"{_prefix(kind)}{_checked_uid(claim_uid)}{_SUFFIX}"

    def write_claim_spec(self, claim_uid: str, spec: CdiSpec) -> Path:
        path = self.claim_spec_path(spec.kind, claim_uid)
        # JSON is a subset of YAML, so every runtime's YAML reader takes it, and writing it is
        # several times faster than the YAML emitter on the prepare path; on one line, because
        # only then does the standard library encode it in C.
        data = (json.dumps(spec_to_dict(spec)) + "\n").encode()
        try:
            self._write_atomically(path, data)
        except FileNotFoundError:  # the directory is made on first use, or again if removed
            self.root.mkdir(parents=True, exist_ok=True)
            self._write_atomically(path, data)
        return path

    def delete_claim_spec(self, kind: str, claim_uid: str) -> bool:
        """Remove a claim's spec; False when it was already gone, so unprepare can repeat."""
        path = self.claim_spec_path(kind, claim_uid)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        sync_directory(self.root)
        return True

    def claim_specs(self, kind: str) -> dict[str, Path]:
        """Claim UID to spec path for every claim spec of `kind`, to find orphans after a crash."""
        prefix = _prefix(kind)
        found: dict[str, Path] = {}
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return found
        for entry in entries:
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(_SUFFIX)):
                continue
            claim_uid = name[len(prefix) : -len(_SUFFIX)]
            try:
                validate_claim_uid(claim_uid)
            except CdiError:
                continue
            found[claim_uid] = self.root / name
        return found

    def read(self, path: Path) -> CdiSpec:
        """Decode a spec file; OSError (a missing file included) is left to the caller."""
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as error:
            raise CdiError(f"{path}: not valid YAML: {error}") from None
        if not isinstance(data, dict):
            raise CdiError(f"{path}: expected a mapping at the top level")
        return spec_from_dict(data, str(path))

    def _write_atomically(self, path: Path, data: bytes) -> None:
        # The temporary name is fixed per claim and instance: writes of one claim's spec do not
        # overlap (the caller holds the claim), so no random name is needed; a name that is
        # taken anyway falls back to a random one.
        temp_name = f"{path.parent}/.{path.name}.{self._token}.tmp"
        try:
            fd = os.open(temp_name, _CREATE_FLAGS, 0o644)
        except FileExistsError:
            fd, temp_name = tempfile.mkstemp(
                dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
            )
        try:
            try:
                os.fchmod(fd, 0o644)  # runtimes read specs as another user; ignore the umask
                view = memoryview(data)
                while view:  # a write may take less than it was given
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp_name, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
            raise
        sync_directory(path.parent)


def _prefix(kind: str) -> str:
    vendor, device_class = split_kind(kind)
    return f"{vendor}-{device_class}_"


def _checked_uid(claim_uid: str) -> str:
    validate_claim_uid(claim_uid)
    return claim_uid
