# `make run` runs the default experiment, `make test` the test suite; both build .venv first if needed.
#   make run ARGS="+exp=ablation_kappa"      make test PYTEST_ARGS="tests/core -x"
# `make test-quick` is the unit tier for the edit loop (no engine, no subprocess; under a minute); `make
# test-durations` runs the suite and records each test group's seconds in tests/durations.json, the order the
# groups are handed to the workers in (longest first).
# `make results` reruns the paper measurements, collects the records the page reads into docs/results/records/ and
# rewrites docs/results.md from them; the page's header gives each part's time on the machine it ran on (2 CPU cores).
# `make check-vllm-gpu` checks the pinned GPU vLLM (requirements/gpu.txt) against every vLLM name the engine touches
# and finds which model runner it builds on CUDA, from the wheel's sources (downloaded once into outputs/cache/wheels),
# without a GPU; `make test` runs the same check. `make check-gpu` is the first command on a new GPU node: 2 pruned
# steps of a random Qwen3-1.7B-shaped policy in two cases (one pass, detect-first), failing on log-probs that
# disagree after a sync, memory above the plan or a V2 runner (experiments/gpu_smoke.py; ARGS="--torch-only"
# without vLLM).
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
PY := .venv/bin/python
TEST_WORKERS ?= 2

.PHONY: setup run test test-quick test-durations results check-vllm-gpu check-gpu
setup:
	@bash scripts/setup_env.sh

run: setup
	$(PY) experiments/run.py $(ARGS)

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

test-quick: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --quick -q $(PYTEST_ARGS)

test-durations: setup
	$(MAKE) test PYTEST_ARGS="--store-durations $(PYTEST_ARGS)"

results: setup
	$(PY) experiments/reproduce.py $(ARGS)

check-vllm-gpu: setup
	$(PY) scripts/check_vllm_wheel.py

check-gpu: setup
	$(PY) experiments/gpu_smoke.py $(ARGS)
