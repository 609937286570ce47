# fjord — developer entry points.
#   make test   install the test peers if missing, then fmt, clippy, tests and
#               a bounded fuzz run of every target (FUZZ_SECONDS each)
#   make run    build, make demo titles if ./media is empty, serve it
#   make fuzz   run every fuzz target for FUZZ_SECONDS (nightly + cargo-fuzz)
#   make test-vm  the HTTPS and RTSPS tests again in a kernel that has kTLS (QEMU)
#   make peers  install the peers `fjord bench peers` compares fjord with

SHELL := /bin/bash
CARGO ?= cargo
PORT ?= 8554
HTTP_PORT ?= 8080
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := ffmpeg curl gstreamer1.0-tools gstreamer1.0-plugins-base \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly \
	gstreamer1.0-libav gstreamer1.0-rtsp \
	fuse3 python3-fusepy chromium python3-gi gir1.2-gstreamer-1.0 prometheus python3-pip \
	etcd-server qemu-system-x86

.PHONY: test test-vm deps run build peers live555 versitygw seaweedfs

# Installs ffmpeg, GStreamer (rtspsrc, rtpmp2tdepay, rtspclientsink and
# x264enc for the live publisher test, Python bindings),
# FUSE with python3-fusepy (the disk-error tests' faulty filesystem) and
# chromium and Prometheus' promtool (the metrics test) only when missing; live555's openRTSP (trick play) from
# Debian sid's packages when missing; then the browser test's npm packages (hls.js,
# dash.js, playwright-core; tests/browser/package-lock.json) and httplint
# (PyPI, tests/httplint/requirements.txt) into tests/httplint/site; and
# versitygw, the S3 server the edge tests use as the origin; etcd (Debian's
# etcd-server), the cluster tests' membership store; QEMU, which boots the
# kernel `make test-vm` runs the HTTPS tests in.
deps:
	@if ! command -v ffmpeg >/dev/null || ! command -v gst-launch-1.0 >/dev/null \
	    || ! command -v fusermount3 >/dev/null || ! command -v chromium >/dev/null \
	    || ! command -v promtool >/dev/null || ! python3 -m pip --version >/dev/null 2>&1 \
	    || ! command -v etcd >/dev/null || ! command -v qemu-system-x86_64 >/dev/null \
	    || ! /usr/bin/python3 -c 'import fusepy' >/dev/null 2>&1 \
	    || ! /usr/bin/python3 -c 'import gi; gi.require_version("Gst", "1.0")' >/dev/null 2>&1 \
	    || ! gst-inspect-1.0 rtpmp2tdepay >/dev/null 2>&1 \
	    || ! gst-inspect-1.0 rtspsrc >/dev/null 2>&1 \
	    || ! gst-inspect-1.0 rtspclientsink >/dev/null 2>&1 \
	    || ! gst-inspect-1.0 x264enc >/dev/null 2>&1; then \
	  echo "installing test peers: $(APT_PACKAGES)"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_PACKAGES); \
	fi
	@$(MAKE) --no-print-directory live555
	@$(MAKE) --no-print-directory versitygw
	@cmp -s tests/httplint/requirements.txt tests/httplint/site/.installed 2>/dev/null \
	  || { rm -rf tests/httplint/site && \
	       python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target tests/httplint/site \
	         -r tests/httplint/requirements.txt && \
	       cp tests/httplint/requirements.txt tests/httplint/site/.installed; }
	@cmp -s tests/browser/package-lock.json tests/browser/node_modules/.installed-lock 2>/dev/null \
	  || { npm ci --prefix tests/browser --no-audit --no-fund && \
	       cp tests/browser/package-lock.json tests/browser/node_modules/.installed-lock; }

test: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	CARGO="$(CARGO)" tests/run-suite.sh
	# Tests that assert wall-clock timing, alone: on a shared 2-core machine
	# the parallel suite's ffmpeg and GStreamer runs can stall them, and the
	# hypervisor steals 100-200 ms now and then even when the machine is
	# idle, so a run may be repeated twice; a real lateness fails all three.
	@for try in 1 2 3; do \
	  $(CARGO) test --workspace --release --test it -- --ignored --test-threads=1 && exit 0; \
	  echo "timing tests failed (try $$try of 3)"; \
	done; exit 1
	$(MAKE) --no-print-directory test-vm
	$(MAKE) fuzz FUZZ_SECONDS=$(CI_FUZZ_SECONDS) FUZZ_BUILD="--dev -s none"

build:
	$(CARGO) build --release

# The HTTPS tests again, in Debian's own kernel booted in QEMU
# (tests/vm/run.sh: fetched once into ~/.cache/fjord/vm): it has kTLS,
# which the test machines' kernels lack, so there each HTTPS and RTSPS
# connection's keys go to the kernel, HTTPS bodies by sendfile and RTSPS's
# interleaved RTP by the engine's writev. About three minutes under
# TCG on two cores; a failure is run again one test at a time, once, as
# the guest's timers slip when the host is loaded.
VM_TESTS := kernel_tls:: tls::https_ tls::a_resumed tls::clients_stalling tls::hls_and_dash \
  tls::a_stalled_rtsps
test-vm:
	@it=$$($(CARGO) test --release -p fjord --test it --no-run 2>&1 | \
	  sed -n 's/.*Executable tests\/it\/main.rs (\(.*\))$$/\1/p'); \
	[ -x "$$it" ] || { echo "test-vm: no it test binary"; exit 1; }; \
	tests/vm/run.sh --timeout 900 "$$it" $(VM_TESTS) --test-threads=2 || { \
	  echo "test-vm: failed; once more, one test at a time"; \
	  tests/vm/run.sh --timeout 900 "$$it" $(VM_TESTS) --test-threads=1; }

run: build
	@if [ -z "$$(ls -A media 2>/dev/null)" ]; then \
	  if ! command -v ffmpeg >/dev/null; then \
	    $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ffmpeg; \
	  fi; \
	  mkdir -p media && echo "making media/demo.ts (60 s H.264 + AAC)" && \
	  ffmpeg -nostdin -loglevel error -y \
	    -f lavfi -i testsrc2=size=1280x720:rate=25 \
	    -f lavfi -i sine=frequency=440:sample_rate=48000 -t 60 \
	    -c:v libx264 -preset veryfast -g 25 -b:v 3M -c:a aac -b:a 128k \
	    -f mpegts media/demo.ts.tmp && mv media/demo.ts.tmp media/demo.ts && \
	  echo "making media/demo.mp4 (the same, remuxed)" && \
	  ffmpeg -nostdin -loglevel error -y -i media/demo.ts -c copy -f mp4 media/demo.mp4.tmp && \
	  mv media/demo.mp4.tmp media/demo.mp4; \
	fi
	@echo "serving ./media on rtsp://127.0.0.1:$(PORT)/ — try:"
	@echo "  ffplay rtsp://127.0.0.1:$(PORT)/demo.ts"
	@echo "  ffplay rtsp://127.0.0.1:$(PORT)/demo.mp4"
	@echo "  gst-launch-1.0 playbin uri=rtsp://127.0.0.1:$(PORT)/demo.ts"
	@echo "  curl -O http://127.0.0.1:$(HTTP_PORT)/demo.mp4      (a download; ffplay takes the URL too)"
	@echo "  ffplay http://127.0.0.1:$(HTTP_PORT)/demo.ts/index.m3u8   (HLS; demo.mp4/index.m3u8 too)"
	@echo "  ffplay http://127.0.0.1:$(HTTP_PORT)/demo.mp4/manifest.mpd  (DASH)"
	@echo "status page: http://127.0.0.1:9090/  (metrics: /metrics, API: docs/api.md)"
	exec target/release/fjord serve --root media --port $(PORT) --http-port $(HTTP_PORT)

# Runs every fuzz target for FUZZ_SECONDS each, FUZZ_JOBS at a time (nightly
# toolchain and cargo-fuzz, installed when missing); a failing target's log
# is printed. `make test` runs them briefly, built unoptimised without
# AddressSanitizer: it builds in a third of the time, and overflow checks
# stay on (the parsers are safe Rust).
FUZZ_SECONDS ?= 30
FUZZ_BUILD ?= -O
FUZZ_JOBS ?= $(shell nproc)
CI_FUZZ_SECONDS ?= 8
.PHONY: fuzz
fuzz:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) +nightly fuzz build $(FUZZ_BUILD) && mkdir -p target/logs && \
	$(CARGO) +nightly fuzz list | xargs -P $(FUZZ_JOBS) -I{} sh -c \
	  '$(CARGO) +nightly fuzz run $(FUZZ_BUILD) {} -- -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	     >target/logs/{}.log 2>&1 \
	   && echo "fuzz {}: $$(grep -o "Done [0-9]* runs" target/logs/{}.log)" \
	   || { tail -n 60 target/logs/{}.log; echo "fuzz target {} failed"; exit 255; }'

# The servers `fjord bench peers` measures beside fjord: GStreamer's
# rtsp-server (Python bindings, tsparse, rtpmp2tpay) and live555MediaServer;
# ethtool, which `fjord bench soak --veth` sets the veth pair's offloads with.
# Debian bookworm has no livemedia-utils: then live555 comes from Debian sid's
# packages, unpacked under /opt/live555 (bench/peers/live555-from-sid.sh).
PEER_PACKAGES := ffmpeg nginx-light python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-bad ethtool
peers:
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(PEER_PACKAGES)
	@$(MAKE) --no-print-directory live555

# versitygw, a real S3 server (POSIX-backed) for the edge tests' origin,
# when missing: `go install` from the Go module proxy into $(go env
# GOPATH)/bin, where the tests look (tests/it/common/s3.rs). It builds in
# one to four minutes on two cores; Go from Debian when there is none.
VERSITYGW := github.com/versity/versitygw/cmd/versitygw@v1.8.0
versitygw: export PATH := $(PATH):/usr/local/go/bin
versitygw:
	@if ! command -v versitygw >/dev/null && ! [ -x "$${GOPATH:-$$HOME/go}/bin/versitygw" ]; then \
	  if ! command -v go >/dev/null; then \
	    $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends golang-go; \
	  fi; \
	  echo "installing versitygw (the edge tests' S3 server): go install $(VERSITYGW)"; \
	  go install $(VERSITYGW); \
	fi

# SeaweedFS's `weed`, the distributed origin of `fjord bench cluster` (not
# of `make test`: it builds in about ten minutes on two cores), when missing,
# into ~/.cache/fjord/seaweedfs/bin where the bench looks. `go install` of it
# fails (its go.mod has replace directives), so its module is fetched from the
# Go module proxy and built as the main module.
SEAWEEDFS := github.com/seaweedfs/seaweedfs@v0.0.0-20261109003541-7506e5f91cd6
SEAWEEDFS_DIR := $(HOME)/.cache/fjord/seaweedfs
seaweedfs: export PATH := $(PATH):/usr/local/go/bin
seaweedfs:
	@if ! [ -x $(SEAWEEDFS_DIR)/bin/weed ]; then \
	  echo "building SeaweedFS (fjord bench cluster's origin): $(SEAWEEDFS)"; \
	  src=$$(go mod download -json $(SEAWEEDFS) | sed -n 's/.*"Dir": "\(.*\)",/\1/p') && \
	  mkdir -p $(SEAWEEDFS_DIR)/bin && rm -rf $(SEAWEEDFS_DIR)/src && cp -r "$$src" $(SEAWEEDFS_DIR)/src && chmod -R u+w $(SEAWEEDFS_DIR)/src && \
	  cd $(SEAWEEDFS_DIR)/src && go build -o $(SEAWEEDFS_DIR)/bin/weed ./weed && rm -rf $(SEAWEEDFS_DIR)/src; \
	fi

# live555MediaServer and openRTSP (livemedia-utils), when missing.
live555:
	@if ! command -v live555MediaServer >/dev/null || ! command -v openRTSP >/dev/null; then \
	  if apt-cache policy livemedia-utils | grep -q 'Candidate: [0-9]'; then \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends livemedia-utils; \
	  else \
	    echo "livemedia-utils is not in this distribution: taking it from Debian sid"; \
	    $(SUDO) bash bench/peers/live555-from-sid.sh; \
	  fi; \
	fi
