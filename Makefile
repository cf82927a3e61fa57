# Major: the entry point for building, running and testing.
SHELL := /bin/bash
GO ?= go
CLAUDE := .tools/claude/node_modules/.bin/claude
STATICCHECK_VERSION := v0.8.2

.PHONY: all build claude sandbox caddy haproxy pebble run test test-cluster e2e lint bench image image-test clean

all: build

build:
	$(GO) build -o bin/major ./cmd/major
	$(GO) build -o bin/scriptedmodel ./cmd/scriptedmodel

# The pinned Claude Code CLI, installed from npm into .tools/ (git-ignored).
claude: $(CLAUDE)
$(CLAUDE): scripts/install-claude.sh
	bash scripts/install-claude.sh

# bubblewrap, the sandbox every claude runs in (Debian's package, when
# missing).
sandbox:
	bash scripts/install-bubblewrap.sh >/dev/null

# Caddy, the reverse proxy of deploy/Caddyfile, which a test puts in
# front of the server (Debian's package, when missing).
caddy:
	bash scripts/install-caddy.sh >/dev/null

# HAProxy, the proxy of deploy/haproxy.cfg, which the cluster test puts
# in front of two servers (Debian's package, when missing).
haproxy:
	bash scripts/install-haproxy.sh >/dev/null

# Pebble, a test ACME CA, and its DNS server, which the ACME test
# gets a certificate from (Debian's package, when missing).
pebble:
	bash scripts/install-debian-package.sh pebble pebble >/dev/null

# Starts the server on a demo vault; with no Anthropic credential set it
# runs against the offline scripted model and says so.
run: claude sandbox build
	bash scripts/run-demo.sh

# Every test, all at once (scripts/test.sh): the Go packages (real-CLI ones
# included) with the race detector, the web client in headless Chromium
# against the server, lint (vet and staticcheck) and the benchmarks that
# need no CLI once in their short form (so none rots), and the container
# image's test where Podman can run (it says so where it cannot).
test: claude sandbox caddy haproxy pebble
	GO=$(GO) bash scripts/test.sh

# The cluster test alone (about 30 s; make test runs it too): two servers
# with their own clones of one vault remote behind HAProxy, persons moved
# between them (README, Several servers).
test-cluster: claude sandbox haproxy
	MAJOR_CLAUDE="$$(bash scripts/install-claude.sh)" $(GO) test -race -count=1 -timeout 10m ./cluster

# The web client's tests alone (installs Chromium from Debian if missing).
e2e: claude sandbox
	bash web/e2e/run.sh

# The container image, localhost/major, built with Podman on a base made
# from Debian's packages (deploy/Containerfile, scripts/build-image.sh);
# needs root.
image: claude
	GO=$(GO) bash scripts/build-image.sh

# The image started on a vault and a state volume, one chat through it.
image-test: claude
	GO=$(GO) bash scripts/image-test.sh

lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Benchmarks, each reported as a ratio against a baseline run beside it,
# and the soak test of random kills for 10 minutes.
bench:
	bash scripts/bench-report.sh
	$(GO) test -race -count=1 -timeout 30m -run TestSoakRandomKills ./relay -soak 10m

clean:
	rm -rf bin
