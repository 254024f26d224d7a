#!/bin/sh
# The whole GPU check of the CUDA backend, in two halves:
#
#   scripts/gpu-check.sh stage GROUP   here (Debian, no GPU): build, then copy
#       into .gpu/ what the GPU machine lacks: the engine and test binaries,
#       the non-system libraries they link, and the fixture models of GROUP
#       with their golden logits (the lent machine takes 64 MiB a call, so
#       the fixtures go over in groups: f16, q8 (q8_0 and q4_0), bpe).
#   scripts/gpu-check.sh run           on the GPU machine, in the repository
#       root with .gpu/ carried: build privai-cuda.so with its nvcc, then the
#       goldens, the paged and scheduler tests and the serving suite on
#       --device cuda, then (BENCH=1) the speed runs; everything is printed
#       and copied to $OUT/gpu-check.log.
#
# .gpu/ is ignored by git (.git/info/exclude) and never committed.
set -eu
G=.gpu
GROUP_f16="tiny-llama-spm-f16"
GROUP_q8="tiny-llama-spm-q8_0 tiny-llama-spm-q4_0"
GROUP_bpe="tiny-llama3-bpe-q8_0"
TESTS="test_engine test_dequant_chunk test_golden test_paged test_scheduler"

stage() {
	group=${1:-f16}
	eval "models=\${GROUP_$group:-}"
	[ -n "$models" ] || { echo "gpu-check: unknown group '$group' (f16, q8, bpe)" >&2; exit 2; }
	fix=${PRIVAI_FIXTURES:-../shared/fixtures}
	make -s all
	rm -rf "$G"
	mkdir -p "$G/bin/tests" "$G/lib" "$G/fixtures/models" "$G/fixtures/golden"
	grep -qx "/$G/" .git/info/exclude 2>/dev/null || echo "/$G/" >>.git/info/exclude
	cp build/privai-engine build/privai-bench "$G/bin/"
	for t in $TESTS; do cp "build/tests/$t" "$G/bin/tests/"; done
	# every library the binaries link but glibc's own
	for b in "$G"/bin/privai-* "$G"/bin/tests/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
		grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' | while read -r l; do
		cp -L "$l" "$G/lib/"
	done
	for m in $models; do
		cp "$fix/models/$m.gguf" "$G/fixtures/models/"
		cp "$fix/golden/$m".p* "$G/fixtures/golden/"
	done
	echo "$models" | tr ' ' ',' >"$G/group"
	du -sh "$G"
}

run() {
	out=${OUT:-/tmp}
	log=$out/gpu-check.log
	models=$(cat "$G/group")
	{
		echo "== gpu-check $(date -u +%FT%TZ), fixtures: $models"
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
		echo "== build privai-cuda.so"
		make -s NVCC="${NVCC:-nvcc}" BUILD="$G/bin" "$G/bin/privai-cuda.so"
		export LD_LIBRARY_PATH="$PWD/$G/lib" PRIVAI_CUDA_LIBRARY="$PWD/$G/bin/privai-cuda.so"
		export PRIVAI_FIXTURES="$PWD/$G/fixtures" PRIVAI_GOLDEN_MODELS="$models" PRIVAI_TEST_DEVICE=cuda
		"$G/bin/privai-engine" features
		for t in $TESTS; do
			echo "== $t (cuda)"
			"$G/bin/tests/$t" || echo "FAILED: $t"
		done
		echo "== serving suite (serve --device cuda)"
		BUILD="$G/bin" python3 tests/integration/test_serve.py || echo "FAILED: serving suite"
		if [ "${BENCH:-0}" = 1 ]; then bench; fi
	} 2>&1 | tee "$log"
}

# Speed: synthetic models of Llama-3.2-1B's and Llama-3.1-8B's shapes,
# written on the GPU machine's disk.
bench() {
	E=$G/bin/privai-engine
	mkdir -p /tmp/privai-bench
	s1="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000"
	s8="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256"
	for spec in "1b Q8_0 $s1" "1b Q4_K_M $s1" "8b F16 $s8" "8b Q8_0 $s8"; do
		set -- $spec
		name=$1 type=$2
		shift 2
		m=/tmp/privai-bench/$name-$type.gguf
		[ -f "$m" ] || "$E" synth -o "$m" "$@" --type "$type" >/dev/null
		echo "== bench $name $type"
		"$E" bench -m "$m" --device cuda -p 512 -n 128 -r 3 --json --no-bandwidth || echo "FAILED: bench $name $type"
	done
}

case ${1:-} in
stage) stage "${2:-f16}" ;;
run) run ;;
*)
	echo "usage: scripts/gpu-check.sh stage f16|q8|bpe   (here), then: scripts/gpu-check.sh run   (on the GPU)" >&2
	exit 2
	;;
esac
