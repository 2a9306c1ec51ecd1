#!/usr/bin/env bash
# Create .venv with every package of the workspace (editable) and the development tools, at the
# versions CI tested (constraints.txt).
# Idempotent: a second run only installs what changed.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
cd "$REPO_ROOT"
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "Python 3.11 or newer is needed (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11"
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
log "installing the workspace into .venv"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt \
  -e libs/common -e libs/sdk -e 'libs/client[notebook]' -e libs/placement -e libs/models \
  -e controllers/trainer -e controllers/profile -e controllers/checkpoint -e controllers/quota -e controllers/audit -e controllers/kubeflow \
  -e controllers/verify \
  -e '.[dev]'
log "ready: .venv/bin/python"
