#!/bin/sh
# `kubectl trainer` as krew installs it (hack/release.py packs this file with the client's and the
# SDK's wheels): the first run makes a virtualenv of its own from those wheels (their dependencies
# come from PyPI), every run then starts the client from it. Needs Python 3.11 or newer (python3, or
# $PYTHON); the virtualenv lives in ${XDG_CACHE_HOME:-~/.cache}/kubectl-trainer/<version>.
set -eu
version="@VERSION@"
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
venv="${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-trainer/$version"
if [ ! -f "$venv/.installed" ]; then
  python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "kubectl trainer needs Python 3.11 or newer: install it, or set PYTHON to one" >&2
    exit 1
  fi
  echo "kubectl trainer $version: installing its Python packages into $venv (once)..." >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --find-links "$here/wheels" \
    "trainerop-client==$version"; then
    echo "kubectl trainer: pip could not install it (is PyPI reachable?); run it again to retry" >&2
    exit 1
  fi
  touch "$venv/.installed"
fi
exec "$venv/bin/kubectl-trainer" "$@"
