#!/bin/sh
# make bench: speed of privai-engine on synthetic models with Llama-3.2-1B's
# shape (dim 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab 32000),
# one per weight type, generated once into $BUILD/bench.  Prints the table
# rows and appends one JSON object per type to $BUILD/bench/results.jsonl.
# THREADS (default 2), REPS (default 3) and TYPES can be overridden.
set -eu
BUILD=${BUILD:-build}
E=$BUILD/privai-engine
THREADS=${THREADS:-2}
REPS=${REPS:-3}
TYPES=${TYPES:-"Q8_0 Q4_0 Q4_K_M F16 BF16"}
dir=$BUILD/bench
mkdir -p "$dir"
shape="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000"
for t in $TYPES; do
	m=$dir/llama1b-$(echo "$t" | tr 'A-Z' 'a-z').gguf
	[ -f "$m" ] || "$E" synth -o "$m" $shape --type "$t"
	echo "== $t ($m)"
	"$E" bench -m "$m" -p 128 -n 32 -t "$THREADS" -r "$REPS" --json | tee -a "$dir/results.jsonl"
done
