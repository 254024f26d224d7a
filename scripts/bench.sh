#!/bin/sh
# make bench: speed of privai-engine on synthetic models with Llama-3.2-1B's
# shape (dim 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab 32000),
# one per weight type, generated once into $BUILD/bench.  Prints the table
# rows and appends one JSON object per test to $BUILD/bench/results.jsonl.
#
# THREADS (default 2), REPS (default 3) and TYPES can be overridden.
# DEPTH=2048 adds, per type, prompt processing of 512 tokens and generation
# of 32 after DEPTH tokens already in the cache (llama-bench -p 512 -n 32
# -d DEPTH; one repetition: filling the cache dominates the run).
# LLAMA_BENCH=/path/to/llama-bench runs it on the same files with the same
# threads, alternating with privai on each test, and prints both with their
# ratio.  Where that llama-bench has no -d, the tests at depth take
# llama-batched-bench from the same folder (or LLAMA_BATCHED_BENCH): one
# run with prompts of DEPTH and DEPTH + 512 tokens in ubatches of 512, so
# the longer prompt's last ubatch is 512 tokens at a depth of DEPTH (its
# time is the difference of the two prompts' times, DEPTH_PAIRS pairs,
# default 3), and the shorter prompt's 32 generated tokens are generation
# at that depth.  Nothing here builds llama.cpp.
set -eu
BUILD=${BUILD:-build}
E=$BUILD/privai-engine
THREADS=${THREADS:-2}
REPS=${REPS:-3}
TYPES=${TYPES:-"Q8_0 Q4_0 Q2_K_M Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_XS F16 BF16"}
DEPTH=${DEPTH:-0}
LLAMA_BENCH=${LLAMA_BENCH:-}
LLAMA_BATCHED_BENCH=${LLAMA_BATCHED_BENCH:-${LLAMA_BENCH:+$(dirname "$LLAMA_BENCH")/llama-batched-bench}}
DEPTH_PAIRS=${DEPTH_PAIRS:-3}
dir=$BUILD/bench
mkdir -p "$dir"
shape="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000"
pairs=$dir/side-by-side.txt
: >"$pairs"

# one test: privai, then llama-bench if given; a line "type test privai llama" to $pairs
run_test() { # type model pp tg depth reps
	p=$("$E" bench -m "$2" -p "$3" -n "$4" -d "$5" -t "$THREADS" -r "$6" --json)
	echo "$p" | tee -a "$dir/results.jsonl"
	[ -n "$LLAMA_BENCH" ] || return 0
	if [ "$5" -eq 0 ]; then
		l=$("$LLAMA_BENCH" -m "$2" -p "$3" -n "$4" -t "$THREADS" -r "$6" -o jsonl 2>/dev/null) ||
			{ echo "llama-bench failed on $2" >&2; return 0; }
	elif "$LLAMA_BENCH" --help 2>&1 | grep -q -- --n-depth; then
		l=$("$LLAMA_BENCH" -m "$2" -p "$3" -n "$4" -d "$5" -t "$THREADS" -r "$6" -o jsonl 2>/dev/null) ||
			{ echo "llama-bench failed on $2" >&2; return 0; }
	elif [ -x "$LLAMA_BATCHED_BENCH" ]; then
		batched_at_depth "$1" "$2" "$3" "$4" "$5" "$p"
		return 0
	else
		echo "this llama-bench has no -d (--n-depth) and no llama-batched-bench is beside it:" \
			"no side-by-side at depth $5" >&2
		return 0
	fi
	echo "$l" | sed 's/^/llama.cpp: /'
	python3 - "$1" "$3" "$4" "$5" "$p" "$l" >>"$pairs" <<'EOF'
import json, sys
t, pp, tg, depth, mine, theirs = sys.argv[1:7]
mine = json.loads(mine)
rows = [json.loads(x) for x in theirs.splitlines() if x.strip().startswith("{")]
at = "" if depth == "0" else "@d" + depth
for r in rows:
    if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
        print(t, "pp%s%s" % (pp, at), mine["pp_tokens_per_s"], r["avg_ts"])
    elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
        print(t, "tg%s%s" % (tg, at), mine["tg_tokens_per_s"], r["avg_ts"])
EOF
}

# llama-batched-bench at depth (see the top): a line for pp and one for tg.
# The two prompts alternate DEPTH_PAIRS times and the median of the
# differences of each adjacent pair counts: llama-batched-bench runs each
# prompt once, and the bus this machine shares moves by a tenth within a
# minute.
batched_at_depth() { # type model pp tg depth privai-json
	npp=
	i=0
	while [ "$i" -lt "$DEPTH_PAIRS" ]; do
		npp=$npp${npp:+,}$5,$(($5 + $3))
		i=$((i + 1))
	done
	l=$("$LLAMA_BATCHED_BENCH" -m "$2" -c $(($5 + $3 + $4)) -b $(($5 + $3)) -ub "$3" -npp "$npp" \
		-ntg "$4" -npl 1 -t "$THREADS" --output-format jsonl 2>/dev/null) ||
		{ echo "llama-batched-bench failed on $2" >&2; return 0; }
	echo "$l" | sed 's/^/llama.cpp (batched-bench): /'
	python3 - "$1" "$3" "$4" "$5" "$6" "$l" >>"$pairs" <<'EOF'
import json, statistics, sys
t, pp, tg, depth, mine, theirs = sys.argv[1:7]
pp, tg, depth, mine = int(pp), int(tg), int(depth), json.loads(mine)
rows = [json.loads(x) for x in theirs.splitlines() if x.strip().startswith("{")]
short = [r for r in rows if r["pp"] == depth]
pairs = [(a, b) for a, b in zip(rows, rows[1:]) if a["pp"] == depth and b["pp"] == depth + pp]
if not pairs:
    sys.exit("llama-batched-bench printed no rows for prompts of %d and %d tokens" % (depth, depth + pp))
dt = statistics.median(b["t_pp"] - a["t_pp"] for a, b in pairs)
if dt > 0:
    print(t, "pp%d@d%d" % (pp, depth), mine["pp_tokens_per_s"], pp / dt)
else:
    print("llama-batched-bench: the longer prompt took no longer: no pp at depth for %s" % t, file=sys.stderr)
print(t, "tg%d@d%d" % (tg, depth), mine["tg_tokens_per_s"], statistics.median(r["speed_tg"] for r in short))
EOF
}

for t in $TYPES; do
	m=$dir/llama1b-$(echo "$t" | tr 'A-Z' 'a-z').gguf
	[ -f "$m" ] || "$E" synth -o "$m" $shape --type "$t"
	echo "== $t ($m)"
	run_test "$t" "$m" 128 32 0 "$REPS"
	[ "$DEPTH" -eq 0 ] || run_test "$t" "$m" 512 32 "$DEPTH" 1
done

if [ -s "$pairs" ]; then
	echo
	echo "| type | test | privai tok/s | llama.cpp tok/s | privai / llama.cpp |"
	echo "| --- | --- | --- | --- | --- |"
	awk '{ printf "| %s | %s | %.1f | %.1f | %.2fx |\n", $1, $2, $3, $4, $3 / $4 }' "$pairs"
fi
