#!/bin/sh
# Build the GGUF fuzzer with clang (libFuzzer + ASan + UBSan) and run it for
# FUZZ_SECONDS on a seed corpus of small valid models the project writes
# itself.  Prints "N passed, N failed" like the other suites.
set -eu
BUILD=${BUILD:-build}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
out=$BUILD/fuzz
mkdir -p "$out/corpus" "$out/artifacts"
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iengine/include -Iengine/src -pthread"
srcs=$(ls engine/src/*.c engine/src/kernels/*.c)
if ! clang $CFLAGS tests/fuzz/fuzz_gguf.c $srcs -o "$out/fuzz_gguf" -lpcre2-8 -lm 2>"$out/build.log"; then
	cat "$out/build.log" >&2
	echo "fuzz: build failed"
	echo "0 passed, 1 failed"
	exit 1
fi
# seeds: tiny models of each tokenizer kind (the demo SPM vocabulary and,
# when the shared fixtures are there, a BPE one)
engine=$BUILD/privai-engine
if [ -x "$engine" ]; then
	"$engine" synth -o "$out/corpus/seed-spm.gguf" --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 32 --type F32 2>/dev/null || true
	"$engine" synth -o "$out/corpus/seed-qwen2.gguf" --arch qwen2 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 32 --type Q8_0 2>/dev/null || true
fi
ulimit -v unlimited 2>/dev/null || true
# inputs that once crashed or exhausted memory must stay harmless
if ! "$out/fuzz_gguf" -rss_limit_mb=4096 tests/fuzz/regressions/* >"$out/regressions.log" 2>&1; then
	tail -40 "$out/regressions.log" >&2
	echo "fuzz: a saved regression input fails again (tests/fuzz/regressions)"
	echo "0 passed, 1 failed"
	exit 1
fi
if "$out/fuzz_gguf" "$out/corpus" -max_total_time="$FUZZ_SECONDS" -max_len=262144 -rss_limit_mb=4096 \
	-artifact_prefix="$out/artifacts/" -print_final_stats=1 >"$out/fuzz.log" 2>&1; then
	runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/fuzz.log" | grep -o '[0-9]*$' || echo "?")
	echo "fuzz: gguf reader survived $runs inputs in ${FUZZ_SECONDS}s"
	echo "1 passed, 0 failed"
else
	tail -40 "$out/fuzz.log" >&2
	echo "fuzz: crash, input saved under $out/artifacts"
	echo "0 passed, 1 failed"
	exit 1
fi
