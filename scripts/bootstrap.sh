#!/usr/bin/env bash
# Install what fractal needs on a fresh machine: system packages (tmux, git) when
# absent, then a virtualenv with the project installed editable plus dev extras.
set -euo pipefail
venv="${1:-.venv}"
py="${PY:-python3}"

missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v git >/dev/null 2>&1 || missing+=(git)
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bootstrap: installing ${missing[*]} with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
# No pip upgrade: the pip a Python 3.11+ venv ships (22.3 or later) installs a
# pyproject project editable, and upgrading it costs a download and a few seconds.
"$venv/bin/python" -m pip install -q -e '.[dev]'
echo "bootstrap: ready ($("$venv/bin/fractal" --version))" >&2
