#!/usr/bin/env bash
# The project's main command.
#
#   bash scripts/start.sh                 # set up .venv (with Jupyter) and open JupyterLab on notebooks/
#   bash scripts/start.sh --no-browser    # any other argument is passed on to `jupyter lab`
#   bash scripts/start.sh --headless      # no Jupyter: compile, check and time the quickstart kernel
#   bash scripts/start.sh --headless --size 512 --block-k 64   # arguments after --headless go to the quickstart
#
# JupyterLab listens on 127.0.0.1 only. As root (containers), --allow-root is added for you.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

headless=0
args=()
for arg in "$@"; do
    if [ "$arg" = "--headless" ]; then headless=1; else args+=("$arg"); fi
done

if [ "$headless" = 1 ]; then
    bash "$ROOT/scripts/setup-env.sh"
    echo "[start] python -m tilelang_core.quickstart ${args[*]:-}"
    exec "$ROOT/.venv/bin/python" -m tilelang_core.quickstart "${args[@]+"${args[@]}"}"
fi

bash "$ROOT/scripts/setup-env.sh" --notebook
mkdir -p "$ROOT/notebooks"
# scripts/jupyter/labconfig/page_config.json turns off JupyterLab's "receive official Jupyter news?" toast (the
# announcements plugin, which also checks for updates): it covered the page on first start. The folder is added to
# Jupyter's config search path for this server only; the user's own settings stay untouched.
export JUPYTER_CONFIG_PATH="$ROOT/scripts/jupyter${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"
extra=()
if [ "$(id -u)" = 0 ]; then
    extra+=(--allow-root)
fi
echo "[start] jupyter lab notebooks/ --ip=127.0.0.1 ${extra[*]:-} ${args[*]:-}"
exec "$ROOT/.venv/bin/jupyter" lab notebooks/ --ip=127.0.0.1 "${extra[@]+"${extra[@]}"}" "${args[@]+"${args[@]}"}"
