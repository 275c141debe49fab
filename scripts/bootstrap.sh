#!/usr/bin/env bash
# Install what fractal needs on a fresh machine: system packages (tmux, bubblewrap, git,
# and the PostgreSQL server the suite's --backend=postgres runs a throwaway cluster of)
# when absent, then a virtualenv with the project installed editable plus the dev, web
# and postgres extras.
set -euo pipefail
venv="${1:-.venv}"
py="${PY:-python3}"

missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
# every agent launch runs in a bubblewrap sandbox on Linux (docs/security.md)
if [ "$(uname -s)" = Linux ]; then command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap); fi
command -v git >/dev/null 2>&1 || missing+=(git)
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
then
  missing+=(postgresql)
fi
# libpq: a PostgreSQL tree's commands load it through ctypes (fractal/store/libpq.py).
if ! ldconfig -p 2>/dev/null | grep -q 'libpq\.so\.5 '; then
  missing+=(libpq5)
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

# The pinned set (constraints.txt) goes in with uv when uv can be had: it downloads and
# byte-compiles in parallel, ~12 s where pip took 30-55 s on two cores. So the venv is
# made without pip (ensurepip alone took ~4-12 s) and the system's pip puts uv in it; uv
# then installs pip too, for whoever uses the venv. Without a system pip, or when uv
# fails (only a pip mirror reachable, say), the venv's own pip installs the same pins.
uv_version=0.13.9
pip_version=23.2.1
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --without-pip "$venv"
fi
if [ ! -x "$venv/bin/uv" ]; then
  "$py" -m pip --python "$venv/bin/python" install -q "uv==$uv_version" >/dev/null 2>&1 || true
fi
if [ -x "$venv/bin/uv" ] && "$venv/bin/uv" pip install -q --compile-bytecode \
     --python "$venv/bin/python" -e '.[dev,web,postgres]' "pip==$pip_version" -c constraints.txt; then
  :
else
  echo "bootstrap: installing with pip (uv unavailable or failed)" >&2
  "$venv/bin/python" -m pip --version >/dev/null 2>&1 || "$venv/bin/python" -m ensurepip >/dev/null
  "$venv/bin/python" -m pip install -q -e '.[dev,web,postgres]' -c constraints.txt
fi
echo "bootstrap: ready ($("$venv/bin/fractal" --version))" >&2
