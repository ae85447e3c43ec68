"""A file of a Kubernetes Secret as the kubelet mounts it, and rotates it."""

from __future__ import annotations

from pathlib import Path


class MountedSecret:
    """A directory laid out as the kubelet mounts a Secret: ``tokens -> ..data/tokens``,
    ``..data -> ..<version>``; an update writes a new version and swaps ``..data`` at once."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.version = 0
        root.mkdir()
        self.update(text)
        (root / "tokens").symlink_to("..data/tokens")

    @property
    def path(self) -> Path:
        return self.root / "tokens"

    def update(self, text: str) -> None:
        self.version += 1
        new = self.root / f"..2024_01_01_00_00_{self.version:02d}"
        new.mkdir()
        (new / "tokens").write_text(text)
        (self.root / "..data_tmp").symlink_to(new.name)
        (self.root / "..data_tmp").replace(self.root / "..data")
        old = self.root / f"..2024_01_01_00_00_{self.version - 1:02d}"
        if old.exists():
            (old / "tokens").unlink()
            old.rmdir()
