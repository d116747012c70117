# empathic: every target does its own set-up on a fresh Debian 12 machine.
CARGO ?= cargo
DEMO_DB ?= empathic.db
DEMO_REPORT ?= demo-report.html

.PHONY: setup build demo test lint bench clean train-demo

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
	./target/release/empathic sessions list --db $(DEMO_DB)
	@echo
	@echo "session report (open it in any browser; it works offline):"
	./target/release/empathic report demo-0001 --db $(DEMO_DB) --out $(DEMO_REPORT)

test: setup
	$(CARGO) test --release --locked

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings

# Criterion benchmarks and the replay throughput figure (see README, "Performance").
bench: build
	$(CARGO) bench --locked --bench window_assembler --bench acoustic --bench text --bench appearance --bench face --bench fusion
	./scripts/replay_throughput.sh

# Development only: the fusion toolkit's whole loop on the recorded sessions (synthetic
# ratings), rebuilding the shipped synthetic models (tools/fusion/README.md). Needs PyPI torch.
train-demo: build
	test -x .venv-fusion/bin/python || (python3 -m venv .venv-fusion && .venv-fusion/bin/pip install -q -r tools/fusion/requirements.txt)
	./tools/fusion/train_demo.sh

clean:
	$(CARGO) clean
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm $(DEMO_REPORT)
