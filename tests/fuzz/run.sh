#!/bin/sh
# The fuzzers: each parser that takes outside input, built with clang
# (libFuzzer + ASan + UBSan) and run for FUZZ_SECONDS (default 10) from its
# committed seed corpus (tests/fuzz/corpus/TARGET; new finds go to
# BUILD/fuzz/corpus-TARGET, not into the tree).  Inputs that once failed
# stay as regressions (tests/fuzz/regressions/TARGET) and are run first.
#
#   gguf             the GGUF reader, tokenizer and model loader
#   openai           the OpenAI request parser (openai_params.c)
#   chat_template    the chat-template renderer
#   json_constraint  JSON mode's byte and token automaton
#   admin_json       a joined node's heartbeat report, deployment options
#   sysfs            /proc, /sys and the preflight report, as read
#
# Prints each target's executions and "N passed, N failed".  FUZZ_TARGETS
# picks some.
set -u
BUILD=${BUILD:-build}
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
FUZZ_TARGETS=${FUZZ_TARGETS:-gguf openai chat_template json_constraint json_schema admin_json sysfs}
out=$BUILD/fuzz
obj=$out/obj
mkdir -p "$obj" "$out/artifacts"
FLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -pthread"
INC="-Iengine/include -Iengine/src -Iappliance/lib -Iappliance/admin $(pkg-config --cflags libxml-2.0 2>/dev/null)"
LIBS="-lpcre2-8 -lm -lcjson -lmicrohttpd -lsodium -lsystemd -lsqlite3 -lcurl -lgnutls -ldl -lvirt"
pass=0
fail=0

# sanitizer reports quote the input: keep the log text
printable() { LC_ALL=C tr -c '[:print:]\n\t' '?'; }

# the code under test, instrumented once (objects kept between runs) and
# archived, so each harness links only what it uses.  The SIMD kernels
# (files with __m256/__m512 in them) are built without instrumentation:
# no fuzzer aims at them, the ASan+UBSan build runs every suite over them,
# and instrumented they took clang 8 of the stage's 9 minutes on 2 cores
# (cpu_kquants_x8.c alone 455 s, against 5 s plain).
PLAIN="-std=c11 -D_GNU_SOURCE -g -O1 -pthread"
if [ ! -f "$BUILD/gen/admin_schema.c" ]; then
	echo "fuzz: $BUILD/gen/admin_schema.c is missing (make all first)"
	echo "0 passed, 1 failed"
	exit 1
fi
srcs="$(ls engine/src/*.c engine/src/kernels/*.c engine/src/server/*.c appliance/lib/*.c) \
$(ls appliance/admin/*.c appliance/admin/*/*.c | grep -v '^appliance/admin/main/') $BUILD/gen/admin_schema.c"
# a header changed since an object was built may change its layout: the
# newest header counts as a dependency of every object
newest_h=$(ls -t engine/include/privai/*.h engine/src/*.h engine/src/*/*.h appliance/lib/*.h appliance/admin/*.h \
	appliance/admin/*/*.h 2>/dev/null | head -1)
for s in $srcs; do
	o=$obj/$(echo "$s" | tr / _).o
	{ [ "$o" -nt "$s" ] && [ "$o" -nt "$newest_h" ]; } || echo "$s $o"
done | xargs -r -n 2 -P "$(nproc)" sh -c \
	'f="'"$FLAGS -fsanitize=fuzzer-no-link"'"; grep -q "__m256\|__m512" "$0" && f="'"$PLAIN"'"
	clang $f '"$INC"' -c "$0" -o "$1" 2>>'"$out"'/build.log || echo "$0" >>'"$out"'/failed'
if [ -s "$out/failed" ]; then
	tail -40 "$out/build.log" >&2
	echo "fuzz: these did not build: $(cat "$out/failed")"
	rm -f "$out/failed"
	echo "0 passed, 1 failed"
	exit 1
fi
rm -f "$out/libfuzzed.a"
ar rcs "$out/libfuzzed.a" "$obj"/*.o

# a model for the harnesses that need a tokenizer, and seeds for gguf
engine=$BUILD/privai-engine
mkdir -p "$out/seeds-gguf"
"$engine" synth -o "$out/seeds-gguf/seed-spm.gguf" --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 32 --type F32 2>/dev/null
"$engine" synth -o "$out/seeds-gguf/seed-qwen2.gguf" --arch qwen2 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 32 \
	--type Q8_0 2>/dev/null
PRIVAI_FUZZ_MODEL=$out/seeds-gguf/seed-qwen2.gguf
export PRIVAI_FUZZ_MODEL
ulimit -v unlimited 2>/dev/null || true

# One target: its harness built, its saved regressions, then the fuzzing.
# Prints what happened and, last, "pass" or "fail" (the caller counts).
fuzz_target() {
	t=$1
	bin=$out/fuzz_$t
	if ! clang $FLAGS -fsanitize=fuzzer $INC "tests/fuzz/fuzz_$t.c" "$out/libfuzzed.a" -o "$bin" $LIBS \
		2>"$out/build-$t.log"; then
		cat "$out/build-$t.log"
		echo "fuzz: $t: the harness did not build"
		echo fail
		return
	fi
	if [ -d "tests/fuzz/regressions/$t" ] &&
		! "$bin" -rss_limit_mb=4096 tests/fuzz/regressions/"$t"/* >"$out/regressions-$t.log" 2>&1; then
		tail -40 "$out/regressions-$t.log" | printable
		echo "fuzz: $t: a saved regression input fails again (tests/fuzz/regressions/$t)"
		echo fail
		return
	fi
	mkdir -p "$out/corpus-$t"
	seeds=tests/fuzz/corpus/$t
	[ "$t" = gguf ] && seeds=$out/seeds-gguf
	touch "$out/started-$t"
	if "$bin" "$out/corpus-$t" "$seeds" -max_total_time="$FUZZ_SECONDS" -max_len=262144 -rss_limit_mb=4096 \
		-artifact_prefix="$out/artifacts/$t-" -print_final_stats=1 >"$out/fuzz-$t.log" 2>&1; then
		runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/fuzz-$t.log" | grep -o '[0-9]*$')
		echo "fuzz: $t survived ${runs:-?} inputs in ${FUZZ_SECONDS}s"
		echo pass
		return
	fi
	# a CI log shows only the suite's last lines, and the input may be
	# binary: the sanitizer's verdict, then the input in base64, so
	# that a crash seen only in CI can be replayed here
	{
		grep -a -m 4 -E 'ERROR|SUMMARY|runtime error' "$out/fuzz-$t.log"
		grep -a -m 6 -E '^ +#[0-9]+ ' "$out/fuzz-$t.log" | cut -c1-160
	} | printable
	for a in $(find "$out/artifacts" -name "$t-*" -newer "$out/started-$t"); do
		echo "fuzz: $t: input $(basename "$a") ($(wc -c <"$a") bytes), base64:"
		head -c 1024 "$a" | base64
	done
	echo "fuzz: $t: crash, input saved under $out/artifacts"
	echo fail
}

# Each fuzzer is one process on one core: as many at once as there are
# cores (each still gets its FUZZ_SECONDS), the results in target order.
jobs=$(nproc)
set -- $FUZZ_TARGETS
while [ $# -gt 0 ]; do
	batch=""
	while [ $# -gt 0 ] && [ "$(echo $batch | wc -w)" -lt "$jobs" ]; do
		batch="$batch $1"
		fuzz_target "$1" >"$out/result-$1" 2>&1 &
		shift
	done
	wait
	for t in $batch; do
		sed '$d' "$out/result-$t"
		if [ "$(tail -1 "$out/result-$t")" = pass ]; then
			pass=$((pass + 1))
		else
			fail=$((fail + 1))
		fi
	done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
