#!/bin/sh
# make bench, serving part: privai-engine serve on the 1B-class Q8_0
# synthetic model (the one scripts/bench.sh generates), loaded by
# privai-bench at concurrency 1 and 8 (CONCURRENCY overrides) with two
# workloads: WORKLOADS="in/out ..." (default "128/64 16/128": prefill-heavy
# and decode-heavy).  Prints the tables; appends JSON to
# $BUILD/bench/serve.jsonl and writes $BUILD/bench/serve-IN-OUT.csv.
# SERVE_ARGS adds options to the server (--fixed-threads, say).
set -eu
BUILD=${BUILD:-build}
E=$BUILD/privai-engine
THREADS=${THREADS:-2}
CONCURRENCY=${CONCURRENCY:-1,8}
WORKLOADS=${WORKLOADS:-"128/64 16/128"}
dir=$BUILD/bench
mkdir -p "$dir"
m=${MODEL:-$dir/llama1b-q8_0.gguf}
[ -f "$m" ] || "$E" synth -o "$m" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 --type Q8_0
log=$dir/serve.log
# shellcheck disable=SC2086 # SERVE_ARGS is a list of options
"$E" serve -m "$m" --port 0 --threads "$THREADS" --ctx 1024 --parallel 16 ${SERVE_ARGS:-} 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 600); do
	grep -q "ready:" "$log" 2>/dev/null && port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log") && break
	kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
	sleep 0.1
done
[ -n "$port" ] || { echo "bench-serve: the server did not become ready"; cat "$log"; exit 1; }
for wl in $WORKLOADS; do
	IN=${wl%/*}
	OUT=${wl#*/}
	echo "== serving: $(basename "$m"), $IN in / $OUT out, concurrency $CONCURRENCY, $THREADS threads"
	"$BUILD/privai-bench" --url "http://127.0.0.1:$port" --concurrency "$CONCURRENCY" --input-tokens "$IN" \
		--output-tokens "$OUT" --json "$dir/serve.jsonl" --csv "$dir/serve-$IN-$OUT.csv"
done
kill -TERM $pid
wait $pid
trap - EXIT
