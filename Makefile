# vgpu — build, test and run. `make help` lists the targets.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

# From the git tag, as Debian and RPM order it (scripts/version.sh).
ifeq ($(origin VERSION),undefined)
VERSION := $(shell scripts/version.sh 2>/dev/null || echo dev)
endif
# make package adds -s -w: packaged binaries carry no symbol table or DWARF
# (Debian's policy 10.1; Go's tracebacks need neither).
LDFLAGS_EXTRA ?=
LDFLAGS := -X github.com/vgpu-project/vgpu/pkg/version.Version=$(VERSION) $(LDFLAGS_EXTRA)
GO ?= go
BIN := bin
CMDS := vgpuctl vgpusim vgpu-hook vgpud
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share/vgpu
DOCDIR ?= $(PREFIX)/share/doc/vgpu
# vgpuctl finds vgpuctl-libvirt, and vgpud and vgpuctl vgpu-nvml, next to
# themselves or in ../libexec/vgpu.
LIBEXECDIR ?= $(PREFIX)/libexec/vgpu
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
# systemd-modules-load reads /etc and /usr/lib, not /usr/local/lib: the
# package puts it in /usr/lib/modules-load.d (scripts/package.sh).
MODULESLOADDIR ?= $(SYSCONFDIR)/modules-load.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# Debian's zsh reads /usr/share/zsh/vendor-completions, not site-functions
# (the .deb sets it); /usr/local/share/zsh/site-functions is read by both.
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# What make install installs. vgpusim, the simulated host, is a test and
# demo tool run from bin/: nothing on a host uses it.
INSTALL_CMDS := vgpuctl vgpud vgpu-hook
LIBEXEC_CMDS := vgpuctl-libvirt vgpu-nvml
# The docs an admin needs on the host (install-files puts them in DOCDIR).
HOST_DOCS := README.md docs/install.md docs/agent.md docs/config.md docs/carving.md docs/profiles.md \
	docs/libvirt.md docs/migration.md docs/kubevirt.md
PKGDIR ?= $(BIN)/package
# A count, not a duration: Go 1.26's fuzz coordinator can fail a clean run
# with "context deadline exceeded" when a -fuzztime duration ends
# (golang/go#75804, fixed in Go 1.27). FUZZTIME=10m still works for a long
# local run, with that risk.
FUZZTIME ?= 200000x

.PHONY: all help deps build $(CMDS) vgpuctl-libvirt vgpu-nvml test test-race test-kubelet vet lint fuzz bench demo real-host-check install install-files test-install man completions package test-package clean e2e lab lab-shell

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

deps: ## install what a fresh Debian 12 machine lacks
	@scripts/deps.sh

build: $(CMDS) vgpuctl-libvirt vgpu-nvml ## build every binary into bin/

$(CMDS):
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/$@ ./cmd/$@

# libvirt runs the hook for every domain and waits for it: a static binary
# without cgo starts fastest and never links libvirt.
vgpu-hook: export CGO_ENABLED = 0

# vgpuctl is static too, so that gpus, carve, apply... never load libvirt's
# ~60 shared libraries; attach and detach exec its cgo build, vgpuctl-libvirt
# (docs/libvirt.md, "Who loads libvirt").
vgpuctl: export CGO_ENABLED = 0
vgpuctl-libvirt: export CGO_ENABLED = 1
# vgpud is static as well: NVIDIA's NVML (a C library), which MIG-backed
# profiles need, is loaded by vgpu-nvml, which vgpud and vgpuctl start
# when they need it (docs/agent.md, "NVML").
vgpud: export CGO_ENABLED = 0
vgpu-nvml: export CGO_ENABLED = 1
# The cgo helpers load shared libraries: position-independent, so that
# ASLR places them too (Debian's hardening; the static ones load none).
vgpuctl-libvirt:
	$(GO) build -buildmode=pie -ldflags '$(LDFLAGS)' -o $(BIN)/$@ ./cmd/vgpuctl
vgpu-nvml:
	$(GO) build -buildmode=pie -ldflags '$(LDFLAGS)' -o $(BIN)/$@ ./cmd/vgpu-nvml

vet: ## go vet, gofmt and a tidy go.mod
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	@out=$$(gofmt -l cmd pkg internal profiles e2e 2>/dev/null); if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet ./cmd/... ./pkg/...
	$(GO) vet -tags e2e ./e2e/lab
	$(GO) vet -tags labguest ./e2e/lab/guest
	@cd e2e/kubelet && { $(GO) mod tidy -diff >/dev/null || { echo "e2e/kubelet: go.mod/go.sum are not tidy: run go mod tidy there"; $(GO) mod tidy -diff; exit 1; }; }
	cd e2e/kubelet && $(GO) vet ./...

lint: vet ## vet plus staticcheck when installed
	@if command -v staticcheck >/dev/null; then staticcheck ./...; fi

test: deps vet test-race test-kubelet test-install test-package fuzz e2e ## the whole suite (the README's test command)

# e2e/libvirt runs after the rest, alone: its TCG guests migrate under a
# downtime policy, and beside the other packages a 2-core machine starves
# QEMU's monitor for minutes.
test-race: ## unit, CLI and process-level tests with the race detector
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/e2e/libvirt$$')
	$(GO) test -race -count=1 -timeout 30m ./e2e/libvirt

# e2e/kubelet is a module of its own: k8s.io/kubernetes stays out of the
# main one. Its first run builds the kubelet into /var/tmp/kubelet-lab
# ($$KUBELET_LAB); later runs find it there. No -race: vgpud runs as a
# process there, and a race build of the kubelet's packages would cost CI
# minutes for code that is not ours.
test-kubelet: ## vgpud with the kubelet's own device manager in process, and with a real kubelet on containerd (root; e2e/kubelet/README.md)
	cd e2e/kubelet && $(GO) test -count=1 -timeout 30m ./...

# TestSystemd's two systemd boots (make package, then a first boot and a
# reboot that autostarts two nested TCG domains) take 20-30 minutes of it on
# the shared 2-core machine under load (docs/lab.md); a limit for a hang.
E2E_TIMEOUT ?= 90m

e2e: ## the real-kernel lab: builds (cached) and boots a QEMU guest, runs vgpu in it (root; docs/lab.md)
	$(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) ./e2e/lab/...

lab: ## build the lab (cached in /var/cache/vgpu-lab) and print its directory
	@e2e/lab/build.sh

lab-shell: ## a root shell in the lab guest, with freshly built binaries in /lab/bin
	@e2e/lab/shell.sh

fuzz: ## run every fuzz target briefly (FUZZTIME=200000x executions each)
	$(GO) test -run='^$$' -fuzz='^FuzzParseAddress$$' -fuzztime=$(FUZZTIME) ./pkg/pci
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./pkg/profile
	$(GO) test -run='^$$' -fuzz='^FuzzParseRequest$$' -fuzztime=$(FUZZTIME) ./pkg/domxml

demo: deps build ## the README's main job: tour a simulated GPU host with the real CLI (root)
	@scripts/demo.sh

# e2e/libvirt's migration rows migrate TCG guests over shaped links, failing
# configurations until their limit: about an hour on a quiet 2-core machine.
bench: ## benchmarks, printed as a table; the lab's rows (vgpu vs shell loops and mdevctl) and the migration rows need root and take minutes
	@{ $(GO) test -run='^$$' -bench=. -benchmem -count=1 -timeout 3h ./... && \
	  $(GO) test -tags e2e -run='^$$' -bench='^BenchmarkLab$$' -benchtime=1x -count=1 -timeout $(E2E_TIMEOUT) ./e2e/lab; } | scripts/benchtable.sh

# Read-only, with binaries built before (here or elsewhere: --bin in
# CHECK_ARGS); docs/real-hosts.md says what it checks.
real-host-check: ## check vgpu read-only on a real GPU host with the binaries in bin/ (CHECK_ARGS: more flags); prints a report for docs/real-hosts.md
	@scripts/real-host-check.sh --bin $(BIN) $(CHECK_ARGS)

man: vgpuctl vgpuctl-libvirt ## man pages into bin/man (written by vgpuctl-libvirt, which links the renderer)
	$(BIN)/vgpuctl man $(BIN)/man

completions: vgpuctl ## vgpuctl's bash, zsh and fish completions into bin/completions
	@mkdir -p $(BIN)/completions
	$(BIN)/vgpuctl completion bash >$(BIN)/completions/vgpuctl.bash
	$(BIN)/vgpuctl completion zsh >$(BIN)/completions/_vgpuctl
	$(BIN)/vgpuctl completion fish >$(BIN)/completions/vgpuctl.fish

install: build man completions ## install binaries, helpers, the systemd unit, a config that manages nothing, the catalog, man pages, completions, docs (DESTDIR, PREFIX)
	@$(MAKE) -s --no-print-directory install-files

# The one list of what vgpu installs and where: make package packs the tree
# this makes (scripts/package.sh), so the package and make install agree.
# Uses what build, man and completions made.
install-files:
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(DATADIR)/profiles $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MODULESLOADDIR) $(DESTDIR)$(SYSCONFDIR)/vgpud \
		$(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/vendors \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 $(addprefix $(BIN)/,$(INSTALL_CMDS)) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(addprefix $(BIN)/,$(LIBEXEC_CMDS)) $(DESTDIR)$(LIBEXECDIR)/
	@# Compressed, as Debian's policy and RPM's brp-compress want; earlier
	@# installs left them plain, which man would read first.
	rm -f $(DESTDIR)$(MANDIR)/man1/vgpuctl*.1 $(DESTDIR)$(MANDIR)/man8/vgpud.8
	rm -rf $(BIN)/man-gz && mkdir -p $(BIN)/man-gz
	for f in $(BIN)/man/*.1 docs/man/*.8; do gzip -9n -c "$$f" >$(BIN)/man-gz/$${f##*/}.gz; done
	install -m 0644 $(BIN)/man-gz/*.1.gz $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(BIN)/man-gz/*.8.gz $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 profiles/*.yaml $(DESTDIR)$(DATADIR)/profiles/
	install -m 0644 $(HOST_DOCS) systemd/vgpud-gim.conf $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/vendors/*.md $(DESTDIR)$(DOCDIR)/vendors/
	install -m 0644 examples/config.yaml $(DESTDIR)$(DOCDIR)/examples/config.yaml
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' systemd/vgpud.service >$(DESTDIR)$(UNITDIR)/vgpud.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vgpud.service
	install -m 0644 systemd/modules-load.d/vgpu.conf $(DESTDIR)$(MODULESLOADDIR)/vgpu.conf
	install -m 0644 $(BIN)/completions/vgpuctl.bash $(DESTDIR)$(BASHCOMPDIR)/vgpuctl
	install -m 0644 $(BIN)/completions/_vgpuctl $(DESTDIR)$(ZSHCOMPDIR)/_vgpuctl
	install -m 0644 $(BIN)/completions/vgpuctl.fish $(DESTDIR)$(FISHCOMPDIR)/vgpuctl.fish
	@# A config that manages nothing, where none is: a real config.yaml is
	@# never touched.
	if [ ! -e $(DESTDIR)$(SYSCONFDIR)/vgpud/config.yaml ]; then \
		sed -e 's|@DOCDIR@|$(DOCDIR)|g' packaging/config.yaml >$(DESTDIR)$(SYSCONFDIR)/vgpud/config.yaml && \
		chmod 0644 $(DESTDIR)$(SYSCONFDIR)/vgpud/config.yaml; fi

test-install: ## make install into a temp DESTDIR, check it, and verify the unit with systemd-analyze
	@scripts/test-install.sh

# PKG_VERSION overrides the version scripts/version.sh takes from the tag.
package: ## a .deb and an .rpm of what make install installs, into bin/package (PKG_VERSION, PKGDIR)
	@v='$(PKG_VERSION)'; v=$${v:-$$(scripts/version.sh)} && \
	$(MAKE) -s --no-print-directory build man completions VERSION="$$v" LDFLAGS_EXTRA='-s -w' && \
	scripts/package.sh "$$v" '$(PKGDIR)'

test-package: ## build two versions of the packages, lintian the .deb, install, upgrade, remove and purge it on this machine (root)
	@scripts/test-package.sh

clean:
	rm -rf $(BIN)
