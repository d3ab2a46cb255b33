# vgpu — build, test and run. `make help` lists the targets.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/vgpu-project/vgpu/pkg/version.Version=$(VERSION)
GO ?= go
BIN := bin
CMDS := vgpuctl vgpusim
PREFIX ?= /usr/local
FUZZTIME ?= 10s

.PHONY: all help deps build $(CMDS) test test-race vet lint fuzz bench demo install man clean

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

deps: ## install what a fresh Debian 12 machine lacks
	@scripts/deps.sh

build: $(CMDS) ## build every binary into bin/

$(CMDS):
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/$@ ./cmd/$@

vet: ## go vet and gofmt
	@out=$$(gofmt -l cmd pkg internal profiles e2e 2>/dev/null); if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

lint: vet ## vet plus staticcheck when installed
	@if command -v staticcheck >/dev/null; then staticcheck ./...; fi

test: deps vet test-race fuzz ## the whole suite (the README's test command)

test-race: ## unit, CLI and process-level tests with the race detector
	$(GO) test -race -count=1 ./...

fuzz: ## run every fuzz target briefly (FUZZTIME=10s)
	$(GO) test -run='^$$' -fuzz='^FuzzParseAddress$$' -fuzztime=$(FUZZTIME) ./pkg/pci
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./pkg/profile

bench: ## benchmarks, printed as a table
	@$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./... | scripts/benchtable.sh

man: vgpuctl ## man pages into bin/man
	$(BIN)/vgpuctl man $(BIN)/man

install: build man ## install binaries, man pages and the profile catalog
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/vgpu/profiles
	install -m 0755 $(addprefix $(BIN)/,$(CMDS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(BIN)/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 profiles/*.yaml $(DESTDIR)$(PREFIX)/share/vgpu/profiles/

clean:
	rm -rf $(BIN)
