# empathic: every target does its own set-up on a fresh Debian 12 machine.
CARGO ?= cargo
DEMO_DB ?= demo.db

.PHONY: setup build demo test lint bench clean

setup:
	./scripts/setup.sh

build: setup
	$(CARGO) build --release --locked
	@# The binary finds ONNX Runtime next to itself, as on a station.
	ln -sf ../../third_party/onnxruntime/libonnxruntime.so.1 target/release/libonnxruntime.so.1

# Replays the bundled demo session into $(DEMO_DB) (replacing an earlier demo run).
demo: build
	./target/release/empathic replay demo/session --db $(DEMO_DB) --replace
	@echo
	./target/release/empathic sessions list --db $(DEMO_DB)

test: setup
	$(CARGO) test --release --locked

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings

# Criterion benchmarks and the replay throughput figure (see README, "Performance").
bench: build
	$(CARGO) bench --locked --bench window_assembler
	./scripts/replay_throughput.sh

clean:
	$(CARGO) clean
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
