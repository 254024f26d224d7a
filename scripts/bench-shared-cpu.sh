#!/bin/sh
# make bench: privai-engine when its CPUs are shared.  An appliance runs the
# admin, several engines and host services on the same cores, so an engine
# with its default settings must keep a fair share of its speed:
#   solo        one engine alone (generation tokens/s, default thread count)
#   two         two engines at the same time, each with default settings
#   busy        one engine beside one busy process per CPU (a parallel
#               compile's load)
# and prints each case's tokens/s and its fraction of solo.  MODEL (default:
# the Q8_0 fixture), N (tokens, default 200) and ENGINE can be overridden;
# BENCH_ARGS adds options to each run (--fixed-threads: the pool keeps all
# its threads at work on busy CPUs, as before it adapted).
set -eu
BUILD=${BUILD:-build}
ENGINE=${ENGINE:-$BUILD/privai-engine}
MODEL=${MODEL:-${PRIVAI_FIXTURES:-../shared/fixtures}/models/tiny-llama-spm-q8_0.gguf}
N=${N:-200}
T=$(mktemp -d)
hogs=""
cleanup() {
	for h in $hogs; do kill "$h" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT

[ -f "$MODEL" ] || { echo "bench-shared-cpu: no model at $MODEL" >&2; exit 1; }
tg() { # generation tokens/s of one bench run, written to $1
	# shellcheck disable=SC2086 # BENCH_ARGS is a list of options
	"$ENGINE" bench -m "$MODEL" -p 8 -n "$N" -r 1 --json --no-bandwidth ${BENCH_ARGS:-} >"$1" 2>/dev/null
}
rate() { sed -n 's/.*"tg_tokens_per_s":\([0-9.]*\).*/\1/p' "$1"; }
frac() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f %%", 100 * a / b }'; }

tg "$T/solo" && solo=$(rate "$T/solo")
tg "$T/a" &
pa=$!
tg "$T/b" &
pb=$!
wait $pa $pb
a=$(rate "$T/a") b=$(rate "$T/b")
for _ in $(seq 1 "$(nproc)"); do
	sh -c 'while :; do :; done' &
	hogs="$hogs $!"
done
tg "$T/busy" && busy=$(rate "$T/busy")
echo "== shared CPUs: $(basename "$MODEL"), $N tokens, default threads${BENCH_ARGS:+ $BENCH_ARGS}, $(nproc) CPUs ($ENGINE)"
echo "| case | tokens/s | of solo |"
echo "| --- | --- | --- |"
echo "| solo | $solo | 100 % |"
echo "| two engines at once: first | $a | $(frac "$a" "$solo") |"
echo "| two engines at once: second | $b | $(frac "$b" "$solo") |"
echo "| beside $(nproc) busy processes | $busy | $(frac "$busy" "$solo") |"
