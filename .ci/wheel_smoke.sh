#!/usr/bin/env bash
# Wheel smoke test: what a user gets from `pip install ember`, used from outside the checkout.
#
#   1. build the wheel from a copy of this checkout (`pip wheel --no-deps`, with the checkout's .venv python);
#   2. create a fresh virtualenv in a temporary directory outside the checkout and install the wheel there
#      (dependencies from PyPI through pip's caches: the llama-cpp-python wheel built by `make test` is reused
#      from pip's wheel cache, not rebuilt; the log says which);
#   3. from that temporary directory (so nothing of the checkout can be imported by accident):
#      a. every module of both packages imports; every string format compiles (the format patterns are package
#         data, not files of the checkout);
#      b. `ember generate` with a schema whose property has "format": "date" prints a document whose field is a
#         valid ISO date;
#      c. `ember call --tool-choice required` yields action "tool_calls".
#
# Needs the models `make test` pulled (the model store: $EMBER_MODELS_DIR, default ~/.cache/ember/models).
# Exits non-zero on any failure. Environment: PYTHON (default .venv/bin/python), SMOKE_MODEL (a store name or GGUF
# path, default smollm2-135m-instruct), KEEP_SMOKE_DIR=1 keeps the temporary directory for inspection.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
model_name="${SMOKE_MODEL:-smollm2-135m-instruct}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ember-wheel-smoke.XXXXXX")"
case "$work/" in "$repo"/*) echo "wheel smoke: temporary directory $work is inside the checkout" >&2; exit 1 ;; esac
if [ "${KEEP_SMOKE_DIR:-0}" = 1 ]; then echo "wheel smoke: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
started=$SECONDS
step() { echo "== wheel smoke [$((SECONDS - started))s]: $*"; }

step "building the wheel"
# From a copy of the checkout's files (tracked and untracked-but-not-ignored): no build/ or egg-info is written
# into the checkout, and no stale build/lib file (a renamed module) can slip into the wheel.
mkdir "$work/tree"
git -C "$repo" ls-files -z --cached --others --exclude-standard \
    | (cd "$repo" && while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done) \
    | tar -C "$repo" --null -T - -cf - | tar -C "$work/tree" -xf -
"$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$work/tree"
wheel="$(ls "$work"/dist/ember-*.whl)"
"$python" - "$wheel" "$repo" <<'EOF'
import pathlib, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
formats = sorted(n for n in names if n.startswith("constrained/grammars/formats/") and n.endswith(".regex"))
sources = sorted(f"constrained/grammars/formats/{p.name}"
                 for p in pathlib.Path(sys.argv[2], "src/constrained/grammars/formats").glob("*.regex"))
assert sources and formats == sources, f"the wheel's format patterns {formats} are not the sources {sources}"
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, {len(formats)} format patterns")
EOF

step "installing it into a fresh virtualenv ($work/venv)"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install --quiet --upgrade pip==25.3
"$venv_python" -m pip install --progress-bar off "$wheel" >"$work/install.log" 2>&1 \
    || { cat "$work/install.log"; exit 1; }
if grep -q "Building wheel for llama-cpp-python" "$work/install.log"; then
    echo "wheel smoke: note: llama-cpp-python was built from source (not in pip's wheel cache)"
else
    grep -o "Using cached llama_cpp_python[^ ]*" "$work/install.log" || true
fi

cd "$work"  # outside the checkout: only the installed wheel is importable
unset PYTHONPATH
export EMBER_CACHE_DIR="$work/index"  # a cold grammar cache: the format files are read, not a cached grammar
ember="$work/venv/bin/ember"

step "imports come from the wheel; every string format compiles"
model="$("$ember" models path "$model_name")"
"$venv_python" - "$work" "$model" <<'EOF'
import importlib, pkgutil, sys
import agent, constrained
from constrained.dialect import json_lexemes

for module in (agent, constrained):
    assert module.__file__.startswith(sys.argv[1] + "/venv/"), f"{module.__name__} imported from {module.__file__}"
    for sub in pkgutil.walk_packages(module.__path__, module.__name__ + "."):  # every module ships and imports
        importlib.import_module(sub.name)
vocab = constrained.Vocabulary.from_gguf(sys.argv[2])
for name in json_lexemes.STRING_FORMATS:
    constrained.compile_json_schema({"type": "string", "format": name}, vocab)
print(f"formats {', '.join(json_lexemes.STRING_FORMATS)}: compiled from {json_lexemes.FORMAT_DIR}")
EOF

step "ember generate: a \"format\": \"date\" property"
cat >"$work/schema.json" <<'EOF'
{"type": "object",
 "properties": {"name": {"type": "string", "maxLength": 20}, "date": {"type": "string", "format": "date"}},
 "required": ["name", "date"], "additionalProperties": false}
EOF
"$ember" generate --model "$model" --threads 2 --schema "$work/schema.json" --json --max-tokens 64 \
    --prompt "Ada Lovelace was born on 10 December 1815. Give her name and birth date as JSON." >"$work/generate.out"
cat "$work/generate.out"
"$venv_python" - "$work/generate.out" <<'EOF'
import datetime, json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert len(lines) == 1, lines
doc = json.loads(lines[0])
assert set(doc) == {"name", "date"}, doc
datetime.date.fromisoformat(doc["date"])
assert len(doc["date"]) == 10, doc  # RFC 3339 full-date: YYYY-MM-DD exactly
EOF

step "ember call --tool-choice required"
cat >"$work/tools.json" <<'EOF'
[{"name": "get_weather", "description": "Current weather for a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                 "required": ["city"], "additionalProperties": false}}]
EOF
"$ember" call --model "$model" --threads 2 --tools "$work/tools.json" --tool-choice required --json --max-tokens 64 \
    --prompt "What is the weather in Paris?" >"$work/call.out"
cat "$work/call.out"
"$venv_python" - "$work/call.out" <<'EOF'
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert len(lines) == 1, lines
record = json.loads(lines[0])
assert record["action"] == "tool_calls", record
assert record["calls"] and all(call["name"] == "get_weather" for call in record["calls"]), record
EOF

step "ember bench outside a checkout: one line, exit 2"
status=0
"$ember" bench masks 2>"$work/bench.err" || status=$?
cat "$work/bench.err"
[ "$status" = 2 ] && [ "$(wc -l <"$work/bench.err")" = 1 ] && grep -q "source repository" "$work/bench.err"

step "OK"
