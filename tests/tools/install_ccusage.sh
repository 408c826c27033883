#!/usr/bin/env bash
# Install the ccusage CLI (reference token counter used by tests/ccusage_ref.py)
# into <repo>/.tools/ccusage.  Idempotent.  Exits 0 (with a message) when npm is
# missing: the tests then fall back to tests/data/ccusage_expected.json.
# Pinned to 20.0.24: 20.0.26 ships no Linux native binary.
set -euo pipefail

VERSION="20.0.24"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$ROOT/.tools/ccusage"
BIN="$DEST/node_modules/.bin/ccusage"

if ! command -v npm >/dev/null 2>&1; then
    echo "install_ccusage: npm not found; skipping (ccusage cross-check will use recorded data)"
    exit 0
fi

if [ -x "$BIN" ] && [ "$(node -p "require('$DEST/node_modules/ccusage/package.json').version" 2>/dev/null)" = "$VERSION" ]; then
    echo "install_ccusage: ccusage@$VERSION already installed at $BIN"
    exit 0
fi

mkdir -p "$DEST"
if [ ! -f "$DEST/package.json" ]; then
    echo '{"name":"hookledger-tools-ccusage","private":true}' > "$DEST/package.json"
fi
npm install --prefix "$DEST" --no-audit --no-fund --save-exact "ccusage@$VERSION"
echo "install_ccusage: installed ccusage@$VERSION at $BIN"
"$BIN" --version || true
