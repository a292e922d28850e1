#!/usr/bin/env bash
# Checks the import layers (pyproject.toml [tool.importlinter]) on the layout users install: a
# regular (non-editable) install into a temporary folder, where probes/, fixes/ and tui/ sit
# inside diag/ as they do in a wheel. Usage: bash scripts/lint-imports.sh [venv]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Build from a copy of the sources: a stale setuptools build/ folder here would otherwise put
# modules that no longer exist into the install (and into the import graph).
mkdir "$tmp/src"
cp -r pyproject.toml README.md diag probes fixes tui "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation --no-compile \
  --target "$tmp/site" "$tmp/src" >/dev/null
for top in probes fixes tui; do
  if [ -e "$tmp/site/$top" ]; then echo "lint-imports: a top-level '$top' is installed" >&2; exit 1; fi
done
root=$PWD
(cd "$tmp" && PYTHONPATH="$tmp/site" "$root/$VENV/bin/lint-imports" --config "$root/pyproject.toml" --no-cache)
