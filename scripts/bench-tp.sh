#!/bin/sh
# What splitting a model over ranks costs on one machine (docs/performance.md,
# "Tensor parallel"): a Llama-3.2-1B-shaped Q8_0 model with Llama 3's
# 128256-token vocabulary (so the output layer weighs what it does there),
# decoded by one rank on 2 threads, and by 2 ranks of 1 thread each over
# Open MPI (logits split by vocabulary, then all on rank 0) and over Gloo
# (ranks started apart, and started by one process a node, --nnodes).
# Two rounds, alternating.  On 2 cores a split cannot be faster than one
# rank; what it shows is what the collectives cost per token.
set -eu
BUILD=${BUILD:-build}
E=$BUILD/privai-engine
M=$BUILD/bench/llama1b-v128k-q8_0.gguf
mkdir -p "$BUILD/bench"
[ -f "$M" ] || "$E" synth -o "$M" --type Q8_0 --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 128256
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS="-m $M -p 128 -n 32 -r 2 --json"
show() {
	python3 -c 'import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
tp = "tp %d over %s: %d all-reduces, %.0f KiB, %.2f ms a token inside them; rank 0 holds %.0f MiB" % (
    j["tp"], j["tp_transport"], j["tp_allreduce_per_token"], j["tp_allreduce_bytes_per_token"] / 1024,
    j["tp_allreduce_ms_per_token"], j["tp_weight_bytes_rank0"] / 2**20) if "tp" in j else "one rank"
print("%-28s pp128 %7.1f  tg32 %6.2f   %s" % (sys.argv[1], j["pp_tokens_per_s"], j["tg_tokens_per_s"], tp))' "$1"
}
for round in 1 2; do
	echo "== round $round"
	"$E" bench $ARGS -t 2 --no-bandwidth | show "one rank, 2 threads"
	mpirun -np 2 "$E" bench --tp 2 $ARGS -t 1 | show "mpi, vocabulary split"
	PRIVAI_TP_OUTPUT=rank0 mpirun -x PRIVAI_TP_OUTPUT -np 2 "$E" bench --tp 2 $ARGS -t 1 | show "mpi, logits on rank 0"
	"$E" bench --tp 2 --node-rank 1 --dist-init 127.0.0.1:29591 $ARGS -t 1 >/dev/null &
	"$E" bench --tp 2 --node-rank 0 --dist-init 127.0.0.1:29591 $ARGS -t 1 | show "gloo, vocabulary split"
	wait
	# one process that starts its node's second rank, pinned apart (--nnodes)
	"$E" bench --tp 2 --nnodes 1 --dist-init 127.0.0.1:29592 $ARGS -t 1 2>/dev/null | show "gloo, one process a node"
done
