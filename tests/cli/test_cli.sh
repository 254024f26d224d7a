#!/bin/sh
# privai-engine as a user meets it: every subcommand on the demo model and
# on models this script writes, and the errors bad input must get (a clear
# message and a non-zero exit, never a crash).
set -u
BUILD=${BUILD:-build}
E=$BUILD/privai-engine
DEMO=$BUILD/demo/privai-demo.gguf
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect_fail NAME PATTERN CMD...: non-zero exit (not a signal) and PATTERN on stderr
expect_fail() {
	name=$1 pat=$2
	shift 2
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ $rc -eq 0 ] || [ $rc -gt 125 ]; then
		bad "$name: exit $rc"
	elif ! grep -q -- "$pat" "$T/err"; then
		bad "$name: stderr lacks '$pat': $(cat "$T/err")"
	else
		ok
	fi
}

# demo model: generation is deterministic per seed and differs across seeds
a=$("$E" run -m "$DEMO" -p "Private data" -n 24 -s 7 2>/dev/null)
b=$("$E" run -m "$DEMO" -p "Private data" -n 24 -s 7 2>/dev/null)
c=$("$E" run -m "$DEMO" -p "Private data" -n 24 -s 8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "same seed gave different text"
[ "$a" != "$c" ] && ok || bad "different seeds gave the same text"
g1=$("$E" run -m "$DEMO" -p "hello world" -n 16 --temp 0 2>/dev/null)
g2=$("$E" run -m "$DEMO" -p "hello world" -n 16 --temp 0 -t 1 2>/dev/null)
[ "$g1" = "$g2" ] && ok || bad "greedy output depends on the thread count"
printf 'the model\nthe data\n' | "$E" run -m "$DEMO" -p "hello" -n 8 -i >"$T/chat" 2>/dev/null
[ "$(wc -l <"$T/chat")" -eq 3 ] && ok || bad "interactive mode did not answer each line"

ids=$("$E" tokenize -m "$DEMO" "the data keeps")
[ -n "$ids" ] && ok || bad "tokenize printed nothing"
"$E" info -m "$DEMO" >"$T/info" && grep -q "architecture:   llama" "$T/info" && grep -q "KV cache" "$T/info" && ok || bad "info"
# 4 layers x 4 KV heads x 32 values x K and V x 2 bytes (the cache is f16)
grep -q "KV cache:       2048 bytes/token (f16), 8.0 MiB at context 4096" "$T/info" && ok ||
	bad "info: KV cache size: $(grep 'KV cache' "$T/info")"

"$E" eval -m "$DEMO" --prompt-ids "$(echo "$ids" | tr ' ' ',')" --dump-logits "$T/l.f32" && ok || bad "eval"
n=$(echo "$ids" | wc -w)
vocab=$(sed -n 's/^vocabulary: *\([0-9]*\).*/\1/p' "$T/info")
[ "$(stat -c %s "$T/l.f32")" -eq $((n * vocab * 4)) ] && ok || bad "eval wrote the wrong number of logits"

"$E" bench -m "$DEMO" -p 16 -n 4 -r 1 --json --no-bandwidth >"$T/bench" && grep -q '"pp_tokens_per_s"' "$T/bench" &&
	grep -q '"tg_tokens_per_s"' "$T/bench" && ok || bad "bench --json"
# -b: sequences side by side, each in its own blocks, past a KV block (16)
"$E" bench -m "$DEMO" -p 8 -d 20 -n 4 -b 3 -r 1 --json --no-bandwidth >"$T/bench3" &&
	grep -q '"parallel":3,' "$T/bench3" && ! grep -q '"tg_tokens_per_s":0.00' "$T/bench3" && ok || bad "bench -b 3"
# the bound: bandwidth measured before and after each repetition's
# generation, and the mean share of its own bound each one reached
"$E" bench -m "$DEMO" -p 8 -n 4 -r 3 --json >"$T/benchbw" && python3 - "$T/benchbw" <<'EOF2' && ok || bad "bench's bound: $(cat "$T/benchbw")"
import json, sys
d = json.load(open(sys.argv[1]))
tg, bw = d["tg_reps"], d["read_bandwidth_reps"]
assert len(tg) == 3 and len(bw) == 3 and all(b > 0 and a > 0 for b, a in bw), d
mean = lambda v: sum(v) / len(v)
assert abs(d["tg_tokens_per_s"] - mean(tg)) <= 0.01, d
assert abs(d["read_bandwidth_gb_s"] - mean([(b + a) / 2 for b, a in bw])) <= 0.01, d
share = mean([t * d["weight_bytes_per_token"] / ((b + a) / 2 * 1e9) for t, (b, a) in zip(tg, bw)])
assert abs(d["tg_fraction_of_bound"] - share) <= 0.001 + 0.001 * share, (share, d)
EOF2
"$E" bench -m "$DEMO" -b 0 2>"$T/bench0" && bad "bench -b 0 was taken" || grep -q -- "-b" "$T/bench0" && ok ||
	bad "bench -b 0: $(cat "$T/bench0")"

# synthetic models of both architectures, quantized, actually run
"$E" synth -o "$T/f16.gguf" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type F16 2>/dev/null && ok || bad "synth F16"
for q in Q8_0 Q4_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS Q4_1 Q5_0 Q5_1 IQ4_NL; do
	"$E" quantize "$T/f16.gguf" "$T/$q.gguf" $q && "$E" run -m "$T/$q.gguf" -p "the" -n 4 >/dev/null 2>&1 &&
		"$E" info -m "$T/$q.gguf" | grep -q "$q x" && ok || bad "quantize to $q"
done
"$E" synth -o "$T/qwen2.gguf" --arch qwen2 --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 256 --type Q4_K_M 2>/dev/null &&
	"$E" run -m "$T/qwen2.gguf" -p "the" -n 4 >/dev/null 2>&1 && ok || bad "qwen2 with Q4_K_M"
# the low-bit mixes: Q3_K_M and llama.cpp's Q2_K, tensor by tensor as its quantizer picks them
for mix in "Q3_K_M:Q3_K x9 Q4_K x4 Q5_K x2 Q6_K x1" "Q2_K_M:Q2_K x9 Q3_K x4 Q4_K x2 Q6_K x1"; do
	"$E" synth -o "$T/mix.gguf" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type "${mix%%:*}" 2>/dev/null &&
		"$E" info -m "$T/mix.gguf" | grep -q "${mix#*:}" && "$E" run -m "$T/mix.gguf" -p "the" -n 4 >/dev/null 2>&1 &&
		ok || bad "synth ${mix%%:*}: $("$E" info -m "$T/mix.gguf" 2>&1 | grep 'tensor types')"
done
# the weights are drawn in slices, each from its count in one stream: the same file at any thread count, another with
# another seed
for t in 1 3; do
	"$E" synth -o "$T/t$t.gguf" --dim 128 --layers 1 --heads 4 --kv-heads 2 --ff 256 --type Q4_K_M -t $t 2>/dev/null
done
"$E" synth -o "$T/seed2.gguf" --dim 128 --layers 1 --heads 4 --kv-heads 2 --ff 256 --type Q4_K_M --seed 2 2>/dev/null
cmp -s "$T/t1.gguf" "$T/t3.gguf" && ! cmp -s "$T/t1.gguf" "$T/seed2.gguf" && ok ||
	bad "synth -t 1 and -t 3 differ, or --seed changes nothing"

# bad input
expect_fail "missing file" "cannot open" "$E" run -m "$T/none.gguf" -p hi
head -c 5000 "$DEMO" >"$T/trunc.gguf"
expect_fail "truncated file" "truncated" "$E" run -m "$T/trunc.gguf" -p hi
printf 'GGML' | dd of="$T/magic.gguf" bs=1 count=4 conv=notrunc 2>/dev/null
cat "$DEMO" >>"$T/magic.gguf"
expect_fail "bad magic" "not a GGUF file" "$E" info -m "$T/magic.gguf"
: >"$T/empty.gguf"
expect_fail "empty file" "empty" "$E" info -m "$T/empty.gguf"
expect_fail "directory" "not a regular file" "$E" info -m "$T"
expect_fail "prompt longer than context" "does not fit" "$E" run -m "$DEMO" -c 16 -p "$(printf 'the data %.0s' $(seq 1 40))"
expect_fail "eval prompt longer than context" "longer than" "$E" eval -m "$DEMO" --prompt-ids "$(seq -s, 1 5000)" --dump-logits "$T/x"
expect_fail "token id outside vocab" "outside the vocabulary" "$E" eval -m "$DEMO" --prompt-ids 1,999999 --dump-logits "$T/x"
expect_fail "bad ids" "comma-separated" "$E" eval -m "$DEMO" --prompt-ids 1,x --dump-logits "$T/x"
expect_fail "top-p out of range" "top_p" "$E" run -m "$DEMO" -p hi --top-p 2
expect_fail "n not a number" "integer" "$E" run -m "$DEMO" -p hi -n lots
expect_fail "quantize target" "cannot quantize" "$E" quantize "$DEMO" "$T/o.gguf" IQ2_XXS
expect_fail "unknown command" "unknown command" "$E" frobnicate
expect_fail "synth bad shape" "divide" "$E" synth -o "$T/s.gguf" --dim 100 --heads 3
expect_fail "invalid utf-8 prompt" "invalid UTF-8" "$E" tokenize -m "$DEMO" "$(printf 'a\377b')"

# the CUDA backend is a library loaded on demand: where it cannot run,
# features says why and every command that asks for it fails with that reason
feat=$("$E" features --json)
if echo "$feat" | grep -q '"backends":\["cpu","cuda"\]'; then
	echo "cuda: $(echo "$feat" | sed 's/.*"cuda":"\([^"]*\)".*/\1/')"
	ok
else
	why=$(echo "$feat" | sed -n 's/.*"unavailable":{"cuda":"\([^"]*\)".*/\1/p')
	[ -n "$why" ] && ok || bad "features gives no reason for the missing CUDA backend: $feat"
	if [ -f "$BUILD/privai-cuda.so" ] && ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
		echo "$why" | grep -q "NVIDIA driver" && ok || bad "no driver here, but features says: $why"
	fi
	expect_fail "serve on a missing CUDA" "--device cuda: " "$E" serve -m "$DEMO" --port 0 --device cuda
	expect_fail "run on a missing CUDA" "$(echo "$why" | cut -c1-30)" "$E" run -m "$DEMO" -p hi --device cuda
fi
# which kernel path each weight type takes on this CPU, from the backend's own decision
echo "$feat" | grep -q '"cpu_paths":{.*"Q8_0":{"decode":"int8[, ][^"]*","prefill":"int8 [^"]*","batch":"int8[, ][^"]*"}' &&
	ok || bad "features --json lacks Q8_0's integer paths: $feat"
# a decode batch of Q4_0 takes two tokens a vector where 512-bit vpdpbusd
# does 1.5x a 256-bit one's products (measured at start, "cpu_vnni512_speedup"),
# or where PRIVAI_PAIRS=1 says; PRIVAI_PAIRS=0 keeps a token a vector
if echo "$feat" | grep -q '"cpu_simd":"avx512'; then
	ratio=$(echo "$feat" | sed -n 's/.*"cpu_vnni512_speedup":\([0-9.]*\).*/\1/p')
	want=false
	[ -n "$ratio" ] && awk "BEGIN { exit !($ratio >= 1.5) }" && want=true
	echo "$feat" | grep -q "\"cpu_pairs\":$want," && ok ||
		bad "features --json: a 512-bit vpdpbusd at ${ratio}x, but pairs not $want: $feat"
	for v in 0 1; do
		f=$(PRIVAI_PAIRS=$v "$E" features --json)
		has=0
		echo "$f" | grep -q '"Q4_0":{[^}]*"batch":"[^"]*two tokens a 512-bit vector"' && has=1
		[ $has = $v ] && echo "$f" | grep -q "\"cpu_pairs\":$([ $v = 1 ] && echo true || echo false)," && ok ||
			bad "PRIVAI_PAIRS=$v: Q4_0's decode batches on pairs: $has: $f"
	done
	# measured again by this run: the figure, not the same one
	"$E" features | grep -q "^cpu pairs: .*vpdpbusd does [0-9]*\.[0-9][0-9]x" && ok ||
		bad "features does not show the 512-bit vpdpbusd's speed: $("$E" features | grep pairs)"
else
	echo "$feat" | grep -q '"cpu_pairs":false,"cpu_vnni512_speedup":0.00' && ok ||
		bad "features --json: pairs without 512-bit vectors: $feat"
fi
echo "$feat" | grep -q '"F16":{"decode":"fused half-to-float dot[",]' && ok || bad "features --json lacks F16's decode path"
# the decode prefetch's distances, as the kernels have them, in both forms
l2=$(echo "$feat" | sed -n 's/.*"cpu_prefetch_l2_ahead":\([0-9]*\).*/\1/p')
l1=$(echo "$feat" | sed -n 's/.*"cpu_prefetch_l1_ahead":\([0-9]*\).*/\1/p')
if echo "$feat" | grep -q '"cpu_simd":"avx'; then
	[ -n "$l2" ] && [ -n "$l1" ] && [ "$l2" -gt "$l1" ] && [ "$l1" -gt 0 ] && ok ||
		bad "features --json: prefetch distances L2 '$l2', L1 '$l1': $feat"
	PRIVAI_PREFETCH=1 "$E" features |
		grep -q "^cpu decode prefetch: one token, quantized on (each line asked for $l2 bytes ahead into L2 and $l1 into L1)" &&
		ok || bad "features' prefetch line disagrees with --json ($l2, $l1): $(PRIVAI_PREFETCH=1 "$E" features | grep prefetch)"
fi
# float decode a row at a time, the token in L1, where the AVX-512 kernels
# run without the dense prefetch; four rows a pass where it is on
if echo "$feat" | grep -q '"cpu_simd":"avx512'; then
	for pf in 0 1; do
		f=$(PRIVAI_PREFETCH=$pf "$E" features --json)
		one=0
		echo "$f" | grep -q '"F16":{"decode":"fused half-to-float dot, rows one at a time up to 4096 values' &&
			echo "$f" | grep -q '"BF16":{"decode":"[^"]*rows one at a time up to 8192 values' && one=1
		[ $one = $((1 - pf)) ] && ok || bad "PRIVAI_PREFETCH=$pf: float decode a row at a time: $one: $f"
	done
fi
expect_fail "CUDA library named but absent" "installed without its CUDA backend" \
	env PRIVAI_CUDA_LIBRARY="$T/nope.so" "$E" run -m "$DEMO" -p hi --device cuda
expect_fail "CUDA library that is something else" "not a privai CUDA backend" \
	env PRIVAI_CUDA_LIBRARY="$PWD/$BUILD/libnvml-double.so" "$E" bench -m "$DEMO" -p 4 -n 2 --device cuda
expect_fail "two GPUs in one process refused, saying how to split" \
	"--tp N --nnodes M --dist-init HOST:PORT starts a rank a GPU" \
	"$E" serve -m "$DEMO" --port 0 --device cuda --gpus GPU-a,GPU-b
expect_fail "a GPU memory share above 1" "at most 1" "$E" serve -m "$DEMO" --port 0 --device cuda --gpu-memory-utilization 1.5
expect_fail "a GPU memory share of 0" "above 0" "$E" serve -m "$DEMO" --port 0 --device cuda --gpu-memory-utilization 0
expect_fail "a header timeout of 0" "between 0.1 and 3600" "$E" serve -m "$DEMO" --port 0 --header-timeout 0
expect_fail "a negative body rate" "between 0 and 1e9" "$E" serve -m "$DEMO" --port 0 --min-body-rate -5
expect_fail "a per-client cap that is not a number" "--max-connections-per-client" "$E" serve -m "$DEMO" --port 0 --max-connections-per-client lots
expect_fail "--lora without NAME=" "NAME=PATH" "$E" serve -m "$DEMO" --port 0 --lora adapter.gguf
expect_fail "lora merge without an adapter" "merge needs" "$E" lora merge -m "$DEMO" -o /tmp/never.gguf
expect_fail "unknown device" "no compute backend 'tpu'" "$E" eval -m "$DEMO" --prompt-ids 1,2 --dump-logits "$T/x" --device tpu

# make bench's side-by-side at depth where llama-bench has no -d: the
# llama-batched-bench beside it, two prompts alternating, the median
# difference of each pair as 512 tokens at depth.  Stand-ins print fixed
# rows (their pairs' differences 1, 4 and 2 s: 256 tok/s), the demo model
# stands in for the 1B one.
mkdir -p "$T/lb" "$T/bb/bench"
ln -s "$PWD/$E" "$T/bb/privai-engine"
ln -s "$PWD/$DEMO" "$T/bb/bench/llama1b-q8_0.gguf"
cat >"$T/lb/llama-bench" <<'EOF'
#!/bin/sh
case "$*" in *--help*) echo "usage: llama-bench [-p N] [-n N]"; exit 0 ;; esac
echo '{"n_prompt": 128, "n_gen": 0, "avg_ts": 100.0}'
echo '{"n_prompt": 0, "n_gen": 32, "avg_ts": 10.0}'
EOF
cat >"$T/lb/llama-batched-bench" <<'EOF'
#!/bin/sh
echo "$*" >"$(dirname "$0")/args"
i=0
for t in 1.0 2.0 1.0 5.0 1.0 3.0; do
	[ $((i % 2)) -eq 0 ] && pp=64 && tg=$((10 * (i / 2 + 1))) || { pp=576; tg=1; }
	echo "{\"pp\": $pp, \"tg\": 32, \"pl\": 1, \"t_pp\": $t, \"speed_tg\": $tg}"
	i=$((i + 1))
done
EOF
chmod +x "$T/lb/llama-bench" "$T/lb/llama-batched-bench"
BUILD="$T/bb" TYPES=Q8_0 REPS=1 DEPTH=64 LLAMA_BENCH="$T/lb/llama-bench" scripts/bench.sh >"$T/bench.out" 2>&1
side=$(cat "$T/bb/bench/side-by-side.txt" 2>/dev/null)
grep -q -- "-ub 512 -npp 64,576,64,576,64,576 -ntg 32 -npl 1" "$T/lb/args" 2>/dev/null && ok ||
	bad "bench.sh at depth: batched-bench's arguments: $(cat "$T/lb/args" 2>/dev/null)"
echo "$side" | awk '$2 == "pp512@d64" && $4 == 256 { f = 1 } END { exit !f }' && ok ||
	bad "bench.sh at depth: pp512 from the median pair's difference: $side $(cat "$T/bench.out")"
echo "$side" | awk '$2 == "tg32@d64" && $4 == 20 { f = 1 } END { exit !f }' && ok ||
	bad "bench.sh at depth: tg32 from the short prompts' median: $side"
echo "$side" | awk '$2 == "pp128" && $4 == 100 { f = 1 } END { exit !f }' && ok ||
	bad "bench.sh: pp128 from llama-bench: $side"
grep -q "| Q8_0 | pp512@d64 | " "$T/bench.out" && ok || bad "bench.sh at depth: no table row: $(cat "$T/bench.out")"

echo "cli: $pass checks"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
