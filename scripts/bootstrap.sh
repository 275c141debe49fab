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
# The pinned set (constraints.txt), installed by uv when it can be had: it downloads and
# compiles in parallel, about 12 s where pip takes 30-55 s on two cores. pip (the one the
# venv ships, 22.3 or later, which installs a pyproject project editable) is the
# fallback, e.g. where only a pip mirror is reachable; both read the same pins.
uv_version=0.13.9
if [ ! -x "$venv/bin/uv" ]; then
  "$venv/bin/python" -m pip install -q "uv==$uv_version" >/dev/null 2>&1 || true
fi
if [ -x "$venv/bin/uv" ] && "$venv/bin/uv" pip install -q --compile-bytecode \
     --python "$venv/bin/python" -e '.[dev]' -c constraints.txt; then
  :
else
  echo "bootstrap: uv unavailable or failed; installing with pip" >&2
  "$venv/bin/python" -m pip install -q -e '.[dev]' -c constraints.txt
fi
echo "bootstrap: ready ($("$venv/bin/fractal" --version))" >&2
