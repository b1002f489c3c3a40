# `make run` runs the default experiment, `make test` the test suite; both build .venv first if needed.
#   make run ARGS="+exp=ablation_kappa"      make test PYTEST_ARGS="tests/core -x"
# `make results` reruns the paper measurements (about 25 min on 2 CPU cores) and rewrites docs/results.md.
# `make check-vllm-gpu` checks the pinned GPU vLLM (requirements/gpu.txt) against every vLLM name the engine touches,
# from the wheel's sources (downloaded once into outputs/cache/wheels), without a GPU; not part of `make test`.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
PY := .venv/bin/python

.PHONY: setup run test results check-vllm-gpu
setup:
	@bash scripts/setup_env.sh

run: setup
	$(PY) experiments/run.py $(ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

results: setup
	$(PY) experiments/reproduce.py $(ARGS)

check-vllm-gpu: setup
	$(PY) scripts/check_vllm_wheel.py
