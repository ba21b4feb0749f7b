"""The artifact store: content-addressed ids, atomic publication, integrity checks."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import artifact as artifact_mod
from agent.artifact import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactRef,
    ArtifactStore,
    InvalidArtifactIdError,
    sanitize_name,
)

ID_RE = re.compile(r"^\d{4}-[0-9a-f]{12}-[A-Za-z0-9._-]+$")


def test_write_publishes_under_a_content_addressed_id(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data = b"# best config\n"
    ref = store.write("best-config.md", data)
    digest = hashlib.sha256(data).hexdigest()
    assert ref.id == f"0000-{digest[:12]}-best-config.md"
    assert (ref.name, ref.sha256, ref.size_bytes) == ("best-config.md", digest, len(data))
    assert ref.path == (tmp_path / ref.id).resolve() and ref.path.read_bytes() == data
    assert ref.to_json() == {"id": ref.id, "name": "best-config.md", "sha256": digest, "size_bytes": len(data)}


def test_sequence_numbers_increase_and_identical_content_gets_a_new_id(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ids = [store.write("same.txt", b"same").id for _ in range(3)]
    assert [i[:4] for i in ids] == ["0000", "0001", "0002"]
    assert len(set(ids)) == 3
    reopened = ArtifactStore(tmp_path)
    assert reopened.write("next.txt", b"n").id.startswith("0003-")


def test_names_are_sanitized_and_cannot_escape_the_root(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    ref = store.write("../../etc/pass wd", b"x")
    assert ref.name == "_.._etc_pass_wd"
    assert ref.path.parent == (tmp_path / "store").resolve()
    assert store.write("", b"y").name == "artifact"
    assert store.write("...", b"z").name == "artifact"


@given(st.text(max_size=300))
def test_sanitized_names_are_always_safe_file_names(name: str) -> None:
    clean = sanitize_name(name)
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,100}", clean)
    assert not clean.startswith(".")


def test_long_names_keep_their_extension() -> None:
    clean = sanitize_name("a" * 300 + ".md")
    assert len(clean) == 100 and clean.endswith(".md")


def test_read_returns_the_bytes_and_refuses_tampered_content(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.write("a.bin", bytes(range(256)))
    assert store.read(ref.id) == bytes(range(256))
    content = bytearray(ref.path.read_bytes())
    content[100] ^= 0xFF
    ref.path.write_bytes(bytes(content))
    with pytest.raises(ArtifactIntegrityError) as info:
        store.read(ref.id)
    assert info.value.artifact_id == ref.id


def test_verify_detects_a_flipped_byte_a_truncation_and_a_deletion(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    refs = [store.write(f"f{i}.txt", f"content {i}".encode()) for i in range(3)]
    assert all(store.verify(r) for r in refs)
    content = bytearray(refs[0].path.read_bytes())
    content[0] ^= 0x01
    refs[0].path.write_bytes(bytes(content))
    refs[1].path.write_bytes(refs[1].path.read_bytes()[:-1])
    refs[2].path.unlink()
    assert [store.verify(r) for r in refs] == [False, False, False]


def test_verify_refuses_a_ref_whose_hash_does_not_match_its_id(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.write("a.txt", b"a")
    forged = ArtifactRef(id=ref.id, name=ref.name, sha256=hashlib.sha256(b"b").hexdigest(), size_bytes=1,
                         path=ref.path)
    assert not store.verify(forged)


def test_read_rejects_ids_that_are_not_store_ids(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    for bad in ("../secret", "0000-abc-x", "/etc/passwd", "0000-0123456789ab-../x"):
        with pytest.raises(InvalidArtifactIdError):
            store.read(bad)
    with pytest.raises(ArtifactNotFoundError):
        store.read("0009-0123456789ab-missing.txt")


def test_write_refuses_text(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        ArtifactStore(tmp_path).write("a.txt", "text")  # type: ignore[arg-type]


def test_refs_lists_published_artifacts_in_order_and_ignores_temps_and_foreign_files(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    written = [store.write(f"n{i}.txt", f"{i}".encode()) for i in range(12)]
    (tmp_path / ".ember-tmp-999999999-abcdef").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("not an artifact")
    (tmp_path / "0001-nothex-x").write_text("nope")
    assert store.refs() == written


def test_a_failure_before_rename_leaves_no_final_name_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    store = ArtifactStore(tmp_path)

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(artifact_mod.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        store.write("a.txt", b"data")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert store.write("b.txt", b"data").id.startswith("0000-")


def test_remove_stale_temps_keeps_temps_of_live_writers(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    (tmp_path / f".ember-tmp-{dead_pid}-aaaa").write_bytes(b"x")
    (tmp_path / f".ember-tmp-{os.getppid()}-bbbb").write_bytes(b"x")
    (tmp_path / f".ember-tmp-{os.getpid()}-cccc").write_bytes(b"x")
    assert store.remove_stale_temps() == 2
    assert [p.name for p in tmp_path.iterdir()] == [f".ember-tmp-{os.getppid()}-bbbb"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=64)), min_size=1, max_size=5))
def test_every_written_artifact_reads_back_and_verifies(tmp_path_factory, items) -> None:
    store = ArtifactStore(tmp_path_factory.mktemp("store"))
    refs = [store.write(name, data) for name, data in items]
    assert all(ID_RE.match(r.id) for r in refs)
    assert [store.read(r.id) for r in refs] == [data for _, data in items]
    assert store.refs() == refs
