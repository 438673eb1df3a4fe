# The two commands a user needs: `make run` and `make test`. Both set up
# everything themselves on a fresh Debian machine with Python >= 3.11.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive sh -c \
	'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$$@"' apt-install

.PHONY: run test lint typecheck unit bench system-deps venv clean

## run: a local 3-node cluster on loopback, auth and TLS off (it prints how to turn them on)
run: $(STAMP)
	$(BIN)/rkv up

## test: lint, types, import rules and every test tier
test: system-deps $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit

bench: $(STAMP)
	$(BIN)/python bench/storage.py
	$(BIN)/python -m bench.http

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "rkv needs Python >= 3.11 (set PYTHON=...)"; exit 1; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || $(APT_INSTALL) python3-venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,test]'
	touch $@

# Java for Spark (local mode), a real redis-server and redis-sentinel for the Redis tests,
# Prometheus and promtool for the metrics tests (tests/cluster/test_prometheus.py
# starts its own server on 127.0.0.1; the package's service, which would listen on
# every interface at :9090, is stopped and disabled when this installs it),
# iptables for the namespaced partitions (tests/chaos/rig/netns.py, root only), fuse3
# (libfuse3 and fusermount3) for the chaos rig's power-loss filesystem
# (tests/chaos/rig/lazyfs/, root and /dev/fuse), and
# for the container tier (tests/docker/) Docker's engine, compose and
# debootstrap (its base image is made locally: no registry is needed).
system-deps:
	@command -v java >/dev/null 2>&1 || $(APT_INSTALL) openjdk-17-jre-headless
	@command -v redis-server >/dev/null 2>&1 || $(APT_INSTALL) redis-server
	@command -v redis-sentinel >/dev/null 2>&1 || $(APT_INSTALL) redis-sentinel
	@command -v promtool >/dev/null 2>&1 || { $(APT_INSTALL) prometheus && \
		{ [ ! -d /run/systemd/system ] || $(SUDO) systemctl disable --now prometheus; }; }
	@command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || $(APT_INSTALL) iptables
	@command -v fusermount3 >/dev/null 2>&1 || $(APT_INSTALL) fuse3
	@command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || $(APT_INSTALL) docker.io
	@command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || \
		$(APT_INSTALL) docker-compose
	@command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || $(APT_INSTALL) debootstrap

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
