# The two commands a newcomer needs: `make demo` and `make test`.
# Each one creates .venv and installs the pinned dev lock on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-kernels sklearn-suites docs bench bench-floor bench-load bench-incremental bench-baselines bench-dask bench-pipelines flower-demo flower-many clean venv fuzz property accuracy

venv: $(STAMP)

# torch is installed first and pinned to the CPU build: an unpinned torch pulls
# several GB of CUDA packages.
$(STAMP): requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo_diabetes.py

# lint-imports first: the import layers of pyproject.toml's [tool.importlinter] (issue 26)
# --dist loadgroup: the real-SuperNode tests (xdist_group "flower-federation") share one
# federation, so they must run on one worker
test: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -n 2 --dist loadgroup --durations=15

# scikit-learn's own test files through the federated adapters, with the few tests
# whose time goes to scikit-learn's cross-validated references (`make test` skips them)
sklearn-suites: $(STAMP)
	SKLEARN_FED_SLOW_SUITES=1 $(PY) -m pytest -n 2 $(wildcard tests/*/test_sklearn_*_suite.py)

# The suite under three OpenBLAS kernels (numpy's and scipy's OpenBLAS honour
# OPENBLAS_CORETYPE): a test whose answer depends on the kernel fails here. SkylakeX
# needs a CPU with AVX-512 and is skipped, saying so, on one without.
# KERNEL_TESTS narrows it, e.g. make test-kernels KERNEL_TESTS="tests/linear_model tests/golden"
KERNELS ?= Haswell SkylakeX Sandybridge
KERNEL_TESTS ?=
test-kernels: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	@for kernel in $(KERNELS); do \
		if [ "$$kernel" = SkylakeX ] && ! grep -q avx512f /proc/cpuinfo 2>/dev/null; then \
			echo "== OPENBLAS_CORETYPE=SkylakeX skipped: this CPU has no AVX-512"; continue; \
		fi; \
		echo "== OPENBLAS_CORETYPE=$$kernel"; \
		OPENBLAS_CORETYPE=$$kernel $(PY) -m pytest -n 2 -q $(KERNEL_TESTS) || exit 1; \
	done

# examples/flower/README.md's one-machine commands: a SuperLink and three SuperNodes on
# 127.0.0.1, one `flwr run`, then the saved model checked against the in-process fit
flower-demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/flower/run_demo.sh

# 20 SuperNodes (and their site workers) on this machine: two runs equal to the in-process
# fits, and the peak memory of each site's processes (slow: not in `make test`)
flower-many: $(STAMP)
	$(PY) benchmarks/bench_flower_many.py --sites 20

docs: $(STAMP)
	$(MAKE) -C docs html SPHINXBUILD=$(abspath $(VENV))/bin/sphinx-build

bench: $(STAMP)
	$(PY) benchmarks/bench_federated_ridge.py

# FederatedRidge.fit vs the BLAS floor (one X.T @ X) and Ridge, issue 19's shapes, 1 and 2 threads.
bench-floor: $(STAMP)
	$(PY) benchmarks/bench_ridge_floor.py
	$(PY) benchmarks/bench_ridge_cv.py

# A server aggregating 10,000 messages of d=100 and 1,000 of d=1,000: time and peak memory.
bench-load: $(STAMP)
	$(PY) benchmarks/bench_load.py

# FederatedRidge's precision per regime against a 60-digit reference (the docs' table).
accuracy: $(STAMP)
	$(PY) benchmarks/numerical_accuracy.py

# The ridge property tests with 25,000 examples (the suite runs 2,000).
property: $(STAMP)
	SKLEARN_FED_PROPERTY_EXAMPLES=6250 $(PY) -m pytest -n 2 tests/linear_model/test_ridge_properties.py

# IncrementalFederatedRidge per round vs scikit-learn-intelex (if installed), flatness, routes.
bench-incremental: $(STAMP)
	$(PY) benchmarks/bench_incremental.py

# The tables of docs/user_guide/baselines.rst (about 10 minutes); DATA_DIR holds
# california_housing/housing.csv and insurance/insurance.csv.
DATA_DIR ?= ../shared/data
bench-baselines: $(STAMP)
	$(PY) benchmarks/bench_baselines.py --convergence --dp --trials 3 --real-data $(DATA_DIR)

# Builds a 32 GB table on disk (needs ~34 GB free; deleted afterwards) and fits it
# out of core beside the BLAS floor, dask.array.linalg.lstsq and dask-ml.
bench-dask: $(STAMP)
	$(PY) benchmarks/bench_dask.py

# The tables of docs/user_guide/pipelines.rst (California pipeline, every estimator on
# the three real tables, Newton vs FedAvg; about half an hour on 2 cores, most of it
# MNIST's logistic regressions with 100 sites).
bench-pipelines: $(STAMP)
	$(PY) benchmarks/federated_pipelines.py --data $(DATA_DIR) --docs docs

clean:
	rm -rf $(VENV) build *.egg-info docs/_build docs/auto_examples docs/generated

# Long fuzzing of the server with hostile statistics (the suite runs 5,000 examples),
# of the uplink codecs' decoders (the suite runs 300), and every mutation of a hostile
# site's replies against every estimator (the suite runs a sample; ~30 minutes on 2 cores).
fuzz: $(STAMP)
	$(PY) tests/protocol/fuzz_statistics.py 200000
	$(PY) -W ignore tests/protocol/hostile_harness.py
	SKLEARN_FED_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/neural_network/test_codecs.py -k fuzzed
