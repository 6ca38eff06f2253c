#!/usr/bin/env bash
# Create or refresh the project's virtual environment in <repo>/.venv.
#
#   bash scripts/setup-env.sh              # runtime + dev tools (pytest, ruff)
#   bash scripts/setup-env.sh --notebook   # ... plus JupyterLab, ipykernel, ipywidgets, nbclient, nbformat
#   bash scripts/setup-env.sh --browser    # ... plus Playwright (the real-browser test; it drives apt's chromium)
#   bash scripts/setup-env.sh --ray        # ... plus Ray (the Ray executor of the tuner and its cluster test)
#   bash scripts/setup-env.sh --force      # reinstall even if the environment looks up to date
#
# Steps: python3 -m venv .venv (if missing) -> upgrade pip -> pip install torch==2.13.0 -> pip install -e ".[dev]"
# (",notebook" added with --notebook, ",browser" with --browser). torch is pinned and installed first, on its own:
# any other spec can make pip fetch a multi-GB CUDA build. A stamp file (.venv/.tilelang-setup-stamp) records a hash of pyproject.toml,
# this script and the extras installed; when it matches, nothing is reinstalled and the script returns in well
# under a second. Works from any directory. Environment: PYTHON (interpreter for the venv, default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TORCH_SPEC="torch==2.13.0"
VENV="$ROOT/.venv"
STAMP="$VENV/.tilelang-setup-stamp"
PYTHON="${PYTHON:-python3}"

want_notebook=0
want_browser=0
want_ray=0
force=0
for arg in "$@"; do
    case "$arg" in
        --notebook) want_notebook=1 ;;
        --browser) want_browser=1 ;;
        --ray) want_ray=1 ;;
        --force) force=1 ;;
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup-env: unknown argument '$arg' (expected --notebook, --browser, --ray, --force)" >&2; exit 2 ;;
    esac
done

say() { echo "[setup-env] $*"; }

extras="dev"
[ "$want_notebook" = 1 ] && extras="$extras,notebook"
[ "$want_browser" = 1 ] && extras="$extras,browser"
[ "$want_ray" = 1 ] && extras="$extras,ray"

hash_inputs() {
    # what the installed environment depends on: the dependency list, this script (torch pin, steps)
    cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup-env.sh" | sha256sum | cut -c1-32
}
current_hash="$(hash_inputs)"

# --- up to date already? --------------------------------------------------------------------------------------
if [ "$force" = 0 ] && [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ]; then
    stamp_hash="$(sed -n 's/^hash=//p' "$STAMP")"
    stamp_extras="$(sed -n 's/^extras=//p' "$STAMP")"
    extras_ok=1
    if [ "$want_notebook" = 1 ] && [[ ",$stamp_extras," != *",notebook,"* ]]; then extras_ok=0; fi
    if [ "$want_browser" = 1 ] && [[ ",$stamp_extras," != *",browser,"* ]]; then extras_ok=0; fi
    if [ "$want_ray" = 1 ] && [[ ",$stamp_extras," != *",ray,"* ]]; then extras_ok=0; fi
    if [ "$stamp_hash" = "$current_hash" ] && [ "$extras_ok" = 1 ]; then
        # the editable install must point at this checkout (a copied .venv would point elsewhere)
        where="$("$VENV/bin/python" -c 'import os, tilelang_core; print(os.path.dirname(os.path.dirname(tilelang_core.__file__)))' 2>/dev/null || true)"
        if [ "$where" = "$ROOT" ]; then
            say "environment up to date ($VENV, extras: $stamp_extras); nothing to do (--force to reinstall)"
            exit 0
        fi
        say "the venv's tilelang_core is '${where:-not importable}', not this checkout: reinstalling"
    else
        say "pyproject.toml, setup-env.sh or the requested extras changed since the last setup: updating"
    fi
fi

# --- prerequisites -------------------------------------------------------------------------------------------
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup-env: '$PYTHON' not found; install Python >= 3.10 (or set PYTHON=/path/to/python3)" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
    echo "setup-env: $("$PYTHON" --version 2>&1) is too old; Python >= 3.10 is required (set PYTHON=...)" >&2
    exit 1
fi
for tool in gcc g++; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        say "WARNING: '$tool' not found; compiling kernels needs a C/C++ compiler with OpenMP (e.g. apt-get install g++)"
    fi
done

# --- venv ----------------------------------------------------------------------------------------------------
t0=$SECONDS
if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment: $PYTHON -m venv $VENV ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
else
    say "using existing virtual environment $VENV ($("$VENV/bin/python" --version 2>&1))"
fi
rm -f "$STAMP"
PIP=("$VENV/bin/python" -m pip)

say "upgrading pip"
"${PIP[@]}" install --upgrade pip

installed_torch="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
if [[ "$installed_torch" == 2.13.0* ]]; then
    say "torch $installed_torch already installed"
else
    say "installing $TORCH_SPEC first (pinned; a CPU build is enough for this project)"
    "${PIP[@]}" install "$TORCH_SPEC"
fi

say "installing the project: pip install -e \".[$extras]\""
"${PIP[@]}" install -e ".[$extras]"

# sanity check: the package imports and points at this checkout
"$VENV/bin/python" -c 'import tilelang_core, torch, tvm; print("[setup-env] tilelang_core", tilelang_core.__version__, "| torch", torch.__version__, "| tvm", tvm.__version__)'

printf 'hash=%s\nextras=%s\n' "$current_hash" "$extras" > "$STAMP"
say "done in $((SECONDS - t0)) s; activate with: . $VENV/bin/activate"
