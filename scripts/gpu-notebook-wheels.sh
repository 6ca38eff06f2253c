#!/usr/bin/env bash
# Download the wheels the GPU host lacks to import the workbench and run notebooks/ headless (nbclient + ipykernel),
# into <repo>/.whl/, then check that the set is complete and print its size.
#
#   bash scripts/gpu-notebook-wheels.sh            # download (skips wheels already in .whl/) + check + size
#   bash scripts/gpu-notebook-wheels.sh --check    # only the check and the size
#
# Why: the GPU host (Python 3.12, torch, no IPython/ipywidgets/plotly/nbclient/ipykernel/jupyter_client/nbformat)
# reaches no package registry. Everything it needs travels with a device call as wheels (`carry: [".whl"]`) and is
# installed there with `python3 -m pip install --no-index --no-deps --target /tmp/wbsite .whl/*.whl`
# (docs/workbench.md, "On a GPU"). The versions are the ones this project's .venv runs its notebook tests with;
# wheels are fetched for CPython 3.12 on manylinux x86-64 (pure-Python wheels are py3-none-any and match too).
# Packages the host already has (/work/.library/device/KINDS.md, "Python packages already there": attrs,
# narwhals, packaging, psutil, pygments, python-dateutil, six, typing-extensions, tqdm, ...) are left out.
# The check (scripts/wheel_closure.py) reads every wheel's Requires-Dist, evaluates its markers for Python 3.12 on
# Linux, and fails naming any requirement that neither the set nor the host's list provides.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.whl"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

# name==version: the .venv's notebook stack (pyproject.toml's "notebook" extra), minus JupyterLab and its server
WHEELS=(
    ipython==9.18.1 ipython_pygments_lexers==1.1.1 traitlets==5.16.1
    prompt_toolkit==3.0.53 wcwidth==0.9.4 jedi==0.20.1 parso==0.8.7 pexpect==4.9.0 ptyprocess==0.7.0
    stack_data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure_eval==0.2.4 matplotlib-inline==0.2.2
    ipykernel==7.4.0 comm==0.2.3 debugpy==1.8.22 nest-asyncio2==1.7.4
    jupyter_client==8.10.0 jupyter_core==5.9.1 platformdirs==4.14.9 pyzmq==27.3.0 tornado==6.6.1
    nbclient==0.11.0 nbformat==5.11.1 fastjsonschema==2.22.3 jsonschema==4.26.0
    jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    ipywidgets==8.1.9 widgetsnbextension==4.0.16 jupyterlab_widgets==3.0.17
    plotly==7.1.0 anywidget==0.11.0 psygnal==0.16.1
)

check_only=0
for arg in "$@"; do
    case "$arg" in
        --check) check_only=1 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu-notebook-wheels: unknown argument '$arg' (expected --check)" >&2; exit 2 ;;
    esac
done

say() { echo "[gpu-notebook-wheels] $*"; }

mkdir -p "$DEST"
# the folder is a build output: keep it out of git in this checkout (.gitignore lists it too)
exclude="$ROOT/.git/info/exclude"
if [ -d "$ROOT/.git/info" ] && ! grep -qx '/.whl/' "$exclude" 2>/dev/null; then
    echo '/.whl/' >> "$exclude"
fi

if [ "$check_only" = 0 ]; then
    for spec in "${WHEELS[@]}"; do
        name="${spec%%==*}"
        version="${spec##*==}"
        norm="$(echo "$name" | tr 'A-Z-.' 'a-z__')"
        if ls "$DEST" 2>/dev/null | tr 'A-Z-.' 'a-z__' | grep -q "^${norm}-${version//./_}-"; then
            continue  # already downloaded
        fi
        say "download $spec"
        "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$DEST" \
            --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any "$spec"
    done
fi

"$PYTHON" "$ROOT/scripts/wheel_closure.py" "$DEST" "${WHEELS[@]}"
bytes="$(cat "$DEST"/*.whl | wc -c)"
say "$(ls "$DEST"/*.whl | wc -l) wheels, $(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }') in $DEST"
