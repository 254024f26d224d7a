#!/bin/sh
# The whole GPU check of the CUDA backend, in two halves:
#
#   scripts/gpu-check.sh stage GROUP   here (Debian, no GPU): build, then pack
#       into .gpu/stage.tar.xz what the GPU machine lacks: the engine and test
#       binaries, the non-system libraries they link, and the fixture models
#       of GROUP with their golden logits (the lent machine takes 64 MiB a
#       call, so the fixtures go over in groups: f16, q8, q4, bpe).
#   scripts/gpu-check.sh run           on the GPU machine, in the repository
#       root with .gpu/ carried: unpack, build privai-cuda.so with its nvcc, then the
#       goldens, the paged and scheduler tests and the serving suite on
#       --device cuda, then (BENCH=1) the speed runs; everything is printed
#       and copied to $OUT/gpu-check.log.
#
# .gpu/ is ignored by git (.git/info/exclude) and never committed.
set -eu
G=.gpu                     # what is carried: the packed stage
S=${TMPDIR:-/tmp}/privai-gpu # where it is built and unpacked
TESTS="test_engine test_dequant_chunk test_golden test_paged test_scheduler"

stage() {
	case ${1:-f16} in
	f16) models="tiny-llama-spm-f16" ;;
	q8) models="tiny-llama-spm-q8_0" ;;
	q4) models="tiny-llama-spm-q4_0" ;;
	bpe) models="tiny-llama3-bpe-q8_0" ;;
	*) echo "gpu-check: unknown group '$1' (f16, q8, q4, bpe)" >&2; exit 2 ;;
	esac
	fix=${PRIVAI_FIXTURES:-../shared/fixtures}
	make -s all
	rm -rf "$S" "$G"
	mkdir -p "$S/bin/tests" "$S/lib" "$S/fixtures/models" "$S/fixtures/golden" "$G"
	ex=$(git rev-parse --git-path info/exclude)
	mkdir -p "$(dirname "$ex")"
	grep -qx "/$G/" "$ex" 2>/dev/null || echo "/$G/" >>"$ex"
	cp build/privai-engine build/privai-bench "$S/bin/"
	for t in $TESTS; do cp "build/tests/$t" "$S/bin/tests/"; done
	strip --strip-debug "$S"/bin/privai-* "$S"/bin/tests/*
	# every library the binaries link but glibc's own
	for b in "$S"/bin/privai-* "$S"/bin/tests/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
		grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | while read -r l; do
		cp -L "$l" "$S/lib/"
	done
	for m in $models; do
		cp "$fix/models/$m.gguf" "$S/fixtures/models/"
		cp "$fix/golden/$m".p* "$S/fixtures/golden/"
	done
	echo "$models" | tr ' ' ',' >"$S/group"
	tar -C "$S" -cJf "$G/stage.tar.xz" .
	du -sh "$G/stage.tar.xz"
}

run() {
	out=${OUT:-/tmp}
	log=$out/gpu-check.log
	rm -rf "$S"
	mkdir -p "$S"
	tar -C "$S" -xJf "$G/stage.tar.xz"
	models=$(cat "$S/group")
	{
		echo "== gpu-check $(date -u +%FT%TZ), fixtures: $models"
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
		echo "== build privai-cuda.so"
		make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-cuda.so"
		export LD_LIBRARY_PATH="$S/lib" PRIVAI_CUDA_LIBRARY="$S/bin/privai-cuda.so"
		export PRIVAI_FIXTURES="$S/fixtures" PRIVAI_GOLDEN_MODELS="$models" PRIVAI_TEST_DEVICE=cuda
		"$S/bin/privai-engine" features
		for t in $TESTS; do
			echo "== $t (cuda)"
			"$S/bin/tests/$t" || echo "FAILED: $t"
		done
		echo "== serving suite (serve --device cuda)"
		BUILD="$S/bin" python3 tests/integration/test_serve.py || echo "FAILED: serving suite"
		nccl
		if [ "${BENCH:-0}" = 1 ]; then bench; fi
	} 2>&1 | tee "$log"
}

# NCCL as far as one GPU allows: the plugin builds with this machine's
# nvcc, two ranks meet at --dist-init and NCCL initialises; on one GPU it
# must then refuse two ranks on one device (NCCL's "Duplicate GPU"), which
# is the expected end here.  Split logits against one rank need 2 GPUs.
nccl() {
	echo "== build privai-nccl.so"
	make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-nccl.so" || { echo "FAILED: privai-nccl.so"; return; }
	m=$S/fixtures/models/$(echo "$models" | cut -d' ' -f1).gguf
	echo "== eval --tp 2 --device cuda, both ranks on GPU 0 (expected: NCCL refuses a duplicate GPU)"
	PRIVAI_NCCL_LIBRARY="$S/bin/privai-nccl.so" NCCL_DEBUG=WARN "$S/bin/privai-engine" eval --device cuda --tp 2 \
		--node-rank 1 --dist-init 127.0.0.1:29600 -m "$m" --prompt-ids 1,2,3 --dump-logits /tmp/nccl1.f32 &
	PRIVAI_NCCL_LIBRARY="$S/bin/privai-nccl.so" NCCL_DEBUG=WARN "$S/bin/privai-engine" eval --device cuda --tp 2 \
		--node-rank 0 --dist-init 127.0.0.1:29600 -m "$m" --prompt-ids 1,2,3 --dump-logits /tmp/nccl0.f32 ||
		echo "(exit $?)"
	wait || true
	echo "== privai-nccl-perf over every GPU (privai-fabric validate's all-reduce; one GPU: busbw 0 by definition)"
	make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-nccl-perf" || { echo "FAILED: privai-nccl-perf"; return; }
	"$S/bin/privai-nccl-perf" -b 1M -e 256M || echo "(exit $?)"
}

# Speed: synthetic models of Llama-3.2-1B's and Llama-3.1-8B's shapes,
# written on the GPU machine's disk.
bench() {
	E=$S/bin/privai-engine
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
	echo "usage: scripts/gpu-check.sh stage f16|q8|q4|bpe   (here), then: scripts/gpu-check.sh run   (on the GPU)" >&2
	exit 2
	;;
esac
