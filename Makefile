# The two commands: `make demo` and `make test`. Both set themselves up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup build demo test clean rocm-toolchain cross-toolchain

# The venv is (re)made whenever requirements.txt changes.
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

setup: $(STAMP)

build: $(STAMP)
	$(PY) tools/build.py

demo: build
	HF_HUB_OFFLINE=1 $(PY) example.py

# The ROCm compile-only check (tests/test_rocm_isa.py) needs Debian's clang-19 and the
# AMD device libraries; installed only when missing, so this is a no-op once present.
ROCM_PKGS := clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs
rocm-toolchain:
	@if ! command -v clang++-19 >/dev/null || ! command -v llvm-as-19 >/dev/null \
	    || ! command -v ld.lld-19 >/dev/null || ! ls /usr/lib/*/amdgcn/bitcode/ocml.bc >/dev/null 2>&1 \
	    || ! test -e /usr/include/hip/hip_runtime.h; then \
	  echo "installing the ROCm toolchain: $(ROCM_PKGS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(ROCM_PKGS) >/dev/null; \
	fi

# The aarch64 compile-only check of the CPU sources (tests/test_cpu_aarch64.py) needs
# Debian's cross compiler; installed only when missing.
cross-toolchain:
	@if ! command -v aarch64-linux-gnu-g++ >/dev/null; then \
	  echo "installing the aarch64 cross compiler: g++-aarch64-linux-gnu"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu >/dev/null; \
	fi

test: build rocm-toolchain cross-toolchain
	$(PY) -m pytest tests

clean:
	rm -rf build
