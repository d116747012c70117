# empathic: every target does its own set-up on a fresh Debian 12 machine.
CARGO ?= cargo
DEMO_DB ?= empathic.db
DEMO_REPORT ?= demo-report.html
# ONNX Runtime's PyPI library queues usage telemetry for Microsoft unless told not to. The
# binary turns it off itself (src/models/onnx.rs, TELEMETRY_OFF); this covers the tests and
# benchmarks that load models in their own process.
export ORT_DISABLE_TELEMETRY := 1

.PHONY: setup build demo test lint bench clean train-demo install collector install-collector deb trial

setup:
	./scripts/setup.sh

build: setup
	$(CARGO) build --release --locked
	@# The binary finds ONNX Runtime next to itself, as on a station.
	ln -sf ../../third_party/onnxruntime/libonnxruntime.so.1 target/release/libonnxruntime.so.1

# Imports the demo story bank and replays the bundled demo session into $(DEMO_DB)
# (the default database of every command, replacing an earlier demo run).
demo: build
	./target/release/empathic models verify
	./target/release/empathic stories import demo/stories/stories.jsonl --db $(DEMO_DB)
	./target/release/empathic replay demo/session --db $(DEMO_DB) --replace
	@echo
	@echo "the participant's speech, recognised on this machine (Moonshine tiny-en; nothing leaves it):"
	./target/release/empathic transcribe demo/session --format txt --score
	@echo
	./target/release/empathic sessions list --db $(DEMO_DB)
	@echo
	@echo "stories for the next session, never shown to P-DEMO, spread over predicted empathy:"
	./target/release/empathic stories recommend --participant P-DEMO --policy explore --db $(DEMO_DB)
	@echo
	@echo "session report (open it in any browser; it works offline):"
	./target/release/empathic report demo-0001 --db $(DEMO_DB) --out $(DEMO_REPORT)

# A trial station without devices: the live service with a video file as its camera and a
# virtual microphone, driven through one session by the reference app (docs/station.md).
trial: build
	./scripts/trial-station.sh

# The collector build is built first: tests/it/collector_build.rs runs it. The tests run a
# build with fail points compiled in (feature `failpoints`: stages made to fail on cue,
# runtime/pipeline/failures.rs); `make build` and installs never carry them.
test: setup collector
	$(CARGO) test --release --locked --features failpoints

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --locked --all-targets --features failpoints -- -D warnings
	$(CARGO) clippy --release --locked --no-default-features --lib --bins --target-dir $(COLLECTOR_TARGET) -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --release --locked --no-deps

# Criterion benchmarks and the replay throughput figure (see README, "Performance").
bench: build
	$(CARGO) bench --locked --bench window_assembler --bench acoustic --bench text --bench appearance --bench face --bench fusion --bench sync_load --bench video_signal --bench speech
	./scripts/replay_throughput.sh

# Development only: the fusion toolkit's whole loop on the recorded sessions (synthetic
# ratings), rebuilding the shipped synthetic models (tools/fusion/README.md). Needs PyPI torch.
train-demo: build
	test -x .venv-fusion/bin/python || (python3 -m venv .venv-fusion && .venv-fusion/bin/pip install -q -r tools/fusion/requirements.txt)
	./tools/fusion/train_demo.sh

# A station from a checkout (the packages are `make deb`): the binary, ONNX Runtime, the
# models, the config (kept when present), the systemd unit and the service user
# (docs/station.md, "Installing a station from a checkout"). DESTDIR stages the same files
# elsewhere (no user is created then).
PREFIX ?= /usr
install: build
	@# Stripped (about 124 MB with line tables, see README); the debug info is kept beside
	@# it for crash reports, linked by a .gnu_debuglink so gdb finds it.
	objcopy --only-keep-debug target/release/empathic target/release/empathic.debug
	objcopy --strip-all --add-gnu-debuglink=target/release/empathic.debug target/release/empathic target/release/empathic.stripped
	install -D -m 0755 target/release/empathic.stripped $(DESTDIR)$(PREFIX)/bin/empathic
	install -D -m 0644 target/release/empathic.debug $(DESTDIR)$(PREFIX)/lib/debug$(PREFIX)/bin/empathic.debug
	install -D -m 0644 third_party/onnxruntime/libonnxruntime.so.1 $(DESTDIR)$(PREFIX)/lib/empathic/libonnxruntime.so.1
	mkdir -p $(DESTDIR)$(PREFIX)/share/empathic
	cp -r models $(DESTDIR)$(PREFIX)/share/empathic/
	install -D -m 0644 systemd/empathic.service $(DESTDIR)/lib/systemd/system/empathic.service
	install -D -m 0644 systemd/70-empathic-devices.rules.example $(DESTDIR)$(PREFIX)/share/doc/empathic/70-empathic-devices.rules.example
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/empathic/README.md
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/doc/empathic/docs docs/*.md
	test -e $(DESTDIR)/etc/empathic/station.toml || install -D -m 0640 firmware-config/station.toml $(DESTDIR)/etc/empathic/station.toml
	@# The state folder exists before the first start, so staff can record consent first
	@# (systemd's StateDirectory= would make it only at the first start).
	install -d -m 0750 $(DESTDIR)/var/lib/empathic
	@if [ -z "$(DESTDIR)" ]; then \
	  getent group empathic-ctl >/dev/null || groupadd --system empathic-ctl; \
	  id empathic >/dev/null 2>&1 || useradd --system --home-dir /var/lib/empathic --shell /usr/sbin/nologin --groups video,audio,empathic-ctl empathic; \
	  usermod -a -G empathic-ctl empathic; \
	  chgrp empathic /etc/empathic/station.toml; \
	  chown empathic:empathic /var/lib/empathic; \
	  systemctl daemon-reload 2>/dev/null || true; \
	  echo "installed: edit /etc/empathic/station.toml, then: systemctl enable --now empathic"; \
	fi

# The collector build, for the study's server: sync, the collector, the central databases,
# sessions, report, evaluate, export and participant; no capture, features or models, so it
# links neither OpenCV, ALSA, the camera library nor ONNX Runtime and needs only a Rust
# toolchain and a C compiler (SQLite is bundled). Its own target folder, so it and the full
# build do not rebuild each other (docs/sync.md, "The collector build").
COLLECTOR_TARGET ?= target/collector
collector:
	$(CARGO) build --release --locked --no-default-features --target-dir $(COLLECTOR_TARGET)

# Debian packages (docs/station.md, "Packages"), into target/deb/: empathic (the station),
# empathic-models (architecture-independent, versioned by models/), empathic-collector, and
# the debug symbols of both binaries. `VERSION=...` overrides the version (default: Cargo's
# version + the commit's date and hash).
deb: build collector
	./packaging/build-debs.sh

# The collector as a service (docs/sync.md, "Running the collector as a service"): the
# binary, its systemd unit, its config (kept when present) and its user.
install-collector: collector
	objcopy --strip-all $(COLLECTOR_TARGET)/release/empathic $(COLLECTOR_TARGET)/release/empathic.stripped
	install -D -m 0755 $(COLLECTOR_TARGET)/release/empathic.stripped $(DESTDIR)$(PREFIX)/bin/empathic
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/empathic/README.md
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/doc/empathic/docs docs/*.md
	install -D -m 0644 systemd/empathic-collect.service $(DESTDIR)/lib/systemd/system/empathic-collect.service
	test -e $(DESTDIR)/etc/empathic/collect.toml || install -D -m 0640 firmware-config/collect.toml $(DESTDIR)/etc/empathic/collect.toml
	install -d -m 0750 $(DESTDIR)/var/lib/empathic-collect $(DESTDIR)/var/lib/empathic-collect/pages
	@if [ -z "$(DESTDIR)" ]; then \
	  id empathic-collect >/dev/null 2>&1 || useradd --system --home-dir /var/lib/empathic-collect --shell /usr/sbin/nologin empathic-collect; \
	  chgrp empathic-collect /etc/empathic/collect.toml; \
	  chown -R empathic-collect:empathic-collect /var/lib/empathic-collect; \
	  systemctl daemon-reload 2>/dev/null || true; \
	  echo "installed: edit /etc/empathic/collect.toml, make the keys as empathic-collect (docs/sync.md), then: systemctl enable --now empathic-collect"; \
	fi

clean:
	$(CARGO) clean
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm $(DEMO_DB).reserve $(DEMO_REPORT)
