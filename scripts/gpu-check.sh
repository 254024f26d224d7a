#!/bin/sh
# The whole GPU check of the CUDA backend, in two halves:
#
#   scripts/gpu-check.sh stage GROUP...  here (Debian, no GPU): build, then
#       pack into .gpu/stage.tar.xz what the GPU machine lacks: the engine and
#       test binaries, privai-cuda.so and the NCCL pieces built with this
#       machine's nvcc, the non-system libraries they link, and the fixture
#       models of each GROUP with their golden logits (the lent machine takes
#       64 MiB a call, so the fixtures go over in groups: f16, q8, q4, bpe;
#       f16 is the one the serving suite and the batch checks need; the
#       group deploy adds privai-admin and its libraries, about 15 MB,
#       which fit beside q4 or q8 but not beside f16).
#   scripts/gpu-check.sh run           on the GPU machine, in the repository
#       root with .gpu/ carried: unpack, then the goldens, the paged and
#       scheduler tests and the serving suite on --device cuda (each under a
#       time limit, so that one hang does not spend the lease), a memcheck of
#       one evaluation when the goldens fail, a deployment on the GPU made
#       through privai-admin when the stage has it (DEPLOY=0 skips it), then
#       (BENCH=1) the speed runs;
#       everything is printed and copied to $OUT/gpu-check.log.  The GPU
#       pieces are rebuilt there only when the stage lacks them.
#
# Knobs for the run: TEST_LIMIT, SERVE_LIMIT, BENCH_LIMIT, MEMCHECK_LIMIT
# (seconds); SERVE=0 skips the serving suite; BENCH=1 with BENCH_MODELS and BASE (below); PROFILE=1 (Nsight
# Compute's kernel times, below); NCCL=0 skips the NCCL part; NEXT=0 skips
# the checks and bench of the kernels written since the last GPU run
# (PRIVAI_CUDA_NEXT=1, engine/src/kernels/cuda/cuda_kernels.h).  On an H100,
# TEST_LIMIT=60 SERVE_LIMIT=100 BENCH=1 BENCH_MODELS="1b-Q8_0 1b-Q4_K_M"
# PROFILE=1 PROFILE_LIMIT=90 NCCL=0 took 213 s, the machine's start (about
# 40 s) not counted.
#
# .gpu/ is ignored by git (.git/info/exclude) and never committed.
set -eu
G=.gpu                     # what is carried: the packed stage
S=${TMPDIR:-/tmp}/privai-gpu # where it is built and unpacked
TESTS="test_engine test_dequant_chunk test_golden test_paged test_scheduler"

stage() {
	models=
	admin=0
	for g in "${@:-f16}"; do
		case $g in
		f16) models="$models tiny-llama-spm-f16" ;;
		q8) models="$models tiny-llama-spm-q8_0" ;;
		q4) models="$models tiny-llama-spm-q4_0" ;;
		bpe) models="$models tiny-llama3-bpe-q8_0" ;;
		deploy) admin=1 ;;
		*) echo "gpu-check: unknown group '$g' (f16, q8, q4, bpe, deploy)" >&2; exit 2 ;;
		esac
	done
	models=${models# }
	fix=${PRIVAI_FIXTURES:-../shared/fixtures}
	make -s all
	rm -rf "$S" "$G"
	mkdir -p "$S/bin/tests" "$S/lib" "$S/fixtures/models" "$S/fixtures/golden" "$G"
	ex=$(git rev-parse --git-path info/exclude)
	mkdir -p "$(dirname "$ex")"
	grep -qx "/$G/" "$ex" 2>/dev/null || echo "/$G/" >>"$ex"
	cp build/privai-engine build/privai-bench "$S/bin/"
	if [ "$admin" = 1 ]; then cp build/privai-admin "$S/bin/"; fi
	for t in $TESTS; do cp "build/tests/$t" "$S/bin/tests/"; done
	for g in privai-cuda.so privai-nccl.so privai-nccl-perf; do
		if [ -f "build/$g" ]; then cp "build/$g" "$S/bin/"; fi
	done
	strip --strip-debug "$S"/bin/privai-* "$S"/bin/tests/*
	# every library the host binaries link but glibc's own; CUDA's come
	# from the GPU machine's toolkit
	for b in "$S"/bin/privai-engine "$S"/bin/privai-bench "$S"/bin/privai-admin "$S"/bin/tests/*; do
		if [ -f "$b" ]; then ldd "$b"; fi
	done |
		awk '$3 ~ /^\// {print $3}' | sort -u |
		grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | while read -r l; do
		cp -L "$l" "$S/lib/"
	done
	# the serving suite's tool-calling checks need jsonschema, which the
	# GPU machine's image lacks: Debian's pure-Python package goes along,
	# with pyrsistent's Python half (its C part is built for Debian's Python)
	mkdir -p "$S/py" "$S/deb"
	if (cd "$S/deb" && apt-get download python3-jsonschema python3-pyrsistent >/dev/null 2>&1); then
		for d in "$S"/deb/*.deb; do dpkg -x "$d" "$S/deb/x"; done
		cp -r "$S"/deb/x/usr/lib/python3/dist-packages/* "$S/py/"
		rm -f "$S"/py/*.so
	else
		echo "gpu-check: python3-jsonschema not fetched; the serving suite's tool checks will fail there" >&2
	fi
	rm -rf "$S/deb"
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
		if [ -f "$S/bin/privai-cuda.so" ]; then
			echo "== privai-cuda.so as staged (built with $(strings "$S/bin/privai-cuda.so" | grep -m1 -o 'V[0-9][0-9.]*' || echo nvcc))"
		else
			echo "== build privai-cuda.so"
			make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-cuda.so"
		fi
		export LD_LIBRARY_PATH="$S/lib" PRIVAI_CUDA_LIBRARY="$S/bin/privai-cuda.so"
		export PRIVAI_FIXTURES="$S/fixtures" PRIVAI_GOLDEN_MODELS="$models" PRIVAI_TEST_DEVICE=cuda
		"$S/bin/privai-engine" features
		failed=
		for t in $TESTS; do
			echo "== $t (cuda)"
			timeout "${TEST_LIMIT:-120}" "$S/bin/tests/$t" || { echo "FAILED: $t (exit $?)"; failed="$failed $t"; }
		done
		case $failed in *test_golden*) memcheck ;; esac
		# the kernels not yet run on a GPU, off by default until they have
		# passed these
		if [ "${NEXT:-1}" = 1 ]; then
			for t in test_golden test_paged test_scheduler; do
				echo "== $t (cuda, PRIVAI_CUDA_NEXT=1)"
				PRIVAI_CUDA_NEXT=1 timeout "${TEST_LIMIT:-120}" "$S/bin/tests/$t" || {
					echo "FAILED: $t with PRIVAI_CUDA_NEXT=1 (exit $?)"
					if [ "$t" = test_golden ]; then
						export PRIVAI_CUDA_NEXT=1
						memcheck
						unset PRIVAI_CUDA_NEXT
					fi
				}
			done
		fi
		if [ -x "$S/bin/privai-admin" ] && [ "${DEPLOY:-1}" = 1 ]; then deploy; fi
		if [ "${BENCH:-0}" = 1 ]; then bench; fi
		if [ "${SERVE:-1}" = 1 ]; then
			echo "== serving suite (serve --device cuda)"
			PYTHONPATH="$S/py${PYTHONPATH:+:$PYTHONPATH}" BUILD="$S/bin" timeout "${SERVE_LIMIT:-240}" python3 tests/integration/test_serve.py ||
				echo "FAILED: serving suite (exit $?)"
		fi
		if [ "${PROFILE:-0}" = 1 ]; then profile; fi
		if [ "${NCCL:-1}" = 1 ]; then nccl; fi
	} 2>&1 | tee "$log"
}

# A deployment on the GPU the way the console makes one: privai-admin with
# the real engine and the host's NVML, a GPU placement, chat completions
# through its proxy, compared with the same model on the CPU
# (tests/integration/test_gpu_deploy.py).  On the first fixture model of
# the stage, else on the demo model written here.
deploy() {
	m=$S/fixtures/models/$(echo "$models" | cut -d' ' -f1).gguf
	if [ -z "$models" ]; then
		m=$S/demo.gguf
		"$S/bin/privai-engine" synth --demo -o "$m" >/dev/null 2>&1 || { echo "FAILED: synth --demo"; return; }
	fi
	echo "== a GPU deployment through privai-admin (test_gpu_deploy.py, $(basename "$m"))"
	timeout "${DEPLOY_LIMIT:-300}" python3 tests/integration/test_gpu_deploy.py "$S/bin" "$m" ||
		echo "FAILED: GPU deployment (exit $?)"
}

# compute-sanitizer over one short evaluation of the first fixture model:
# the first bad access names the kernel.
memcheck() {
	m=$S/fixtures/models/$(echo "$models" | cut -d' ' -f1).gguf
	echo "== compute-sanitizer memcheck: eval --device cuda"
	timeout "${MEMCHECK_LIMIT:-120}" compute-sanitizer --tool memcheck --print-limit 5 "$S/bin/privai-engine" eval --device cuda \
		-m "$m" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12 --dump-logits /tmp/memcheck.f32 2>&1 | tail -40 || true
}

# NCCL as far as one GPU allows: the plugin builds with this machine's
# nvcc, two ranks meet at --dist-init and NCCL initialises; on one GPU it
# must then refuse two ranks on one device (NCCL's "Duplicate GPU"), which
# is the expected end here.  Split logits against one rank need 2 GPUs.
nccl() {
	[ -f "$S/bin/privai-nccl.so" ] || make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-nccl.so" ||
		{ echo "FAILED: privai-nccl.so"; return; }
	m=$S/fixtures/models/$(echo "$models" | cut -d' ' -f1).gguf
	echo "== eval --tp 2 --device cuda, both ranks on GPU 0 (expected: NCCL refuses a duplicate GPU)"
	PRIVAI_NCCL_LIBRARY="$S/bin/privai-nccl.so" NCCL_DEBUG=WARN "$S/bin/privai-engine" eval --device cuda --tp 2 \
		--node-rank 1 --dist-init 127.0.0.1:29600 -m "$m" --prompt-ids 1,2,3 --dump-logits /tmp/nccl1.f32 &
	PRIVAI_NCCL_LIBRARY="$S/bin/privai-nccl.so" NCCL_DEBUG=WARN "$S/bin/privai-engine" eval --device cuda --tp 2 \
		--node-rank 0 --dist-init 127.0.0.1:29600 -m "$m" --prompt-ids 1,2,3 --dump-logits /tmp/nccl0.f32 ||
		echo "(exit $?)"
	wait || true
	echo "== privai-nccl-perf over every GPU (privai-fabric validate's all-reduce; one GPU: busbw 0 by definition)"
	[ -f "$S/bin/privai-nccl-perf" ] || make -s NVCC="${NVCC:-nvcc}" BUILD="$S/bin" "$S/bin/privai-nccl-perf" ||
		{ echo "FAILED: privai-nccl-perf"; return; }
	timeout 60 "$S/bin/privai-nccl-perf" -b 1M -e 256M || echo "(exit $?)"
}

# Speed: synthetic models of Llama-3.2-1B's and Llama-3.1-8B's shapes,
# written on the GPU machine's disk (BENCH_MODELS picks among "1b-Q8_0
# 1b-Q4_K_M 8b-Q8_0 8b-F16").  BASE=/path/to/another/privai-cuda.so runs
# each model on that build first, for an A/B in one lease; BENCH_DEPTH=D
# runs each again with D tokens in the context before the measured ones.
bench() {
	E=$S/bin/privai-engine
	mkdir -p /tmp/privai-bench
	for name in ${BENCH_MODELS:-1b-Q8_0 1b-Q4_K_M 8b-Q8_0 8b-F16}; do
		m=/tmp/privai-bench/$name.gguf
		echo "== bench $name"
		synth "$name" "$m" || continue
		for depth in 0 ${BENCH_DEPTH:-}; do
			for lib in ${BASE:+"$BASE"} "$S/bin/privai-cuda.so"; do
				bench_one "$lib" PRIVAI_CUDA_LIBRARY="$lib"
			done
			if [ "${NEXT:-1}" = 1 ]; then bench_one PRIVAI_CUDA_NEXT=1 PRIVAI_CUDA_NEXT=1; fi
		done
	done
}

# One bench of model $m ($name): a label, then the environment it runs in.
bench_one() {
	label=$1
	shift
	echo "-- $label, depth $depth"
	env "$@" timeout "${BENCH_LIMIT:-90}" "$E" bench -m "$m" --device cuda -p 512 -n 128 -d "$depth" -r 3 --json \
		--no-bandwidth || echo "FAILED: bench $name, $label (exit $?)"
}

synth() {
	[ -f "$2" ] && return 0
	case $1 in
	1b-*) shape="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000" ;;
	8b-*) shape="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256" ;;
	*) echo "FAILED: unknown bench model $1"; return 1 ;;
	esac
	# drawn on every core: the 1B shape took 43 s on one thread here, the 8B
	# one did not finish in 180 s on the H100 host before synth used them all
	# shellcheck disable=SC2086 # $shape is words to split
	timeout "${SYNTH_LIMIT:-420}" "$S/bin/privai-engine" synth -o "$2" $shape --type "${1#*-}" ||
		{ echo "FAILED: synth $1"; return 1; }
}

# Where a forward pass's time goes on the GPU: Nsight Compute's duration of
# every kernel of a 1B Q8_0 bench (-p 512 -n 4, its warm-up included),
# summed by kernel; the raw table is $OUT/ncu.csv.
profile() {
	m=/tmp/privai-bench/1b-Q8_0.gguf
	# the next kernels' profile where they are checked: the default's is
	# in docs/performance.md
	echo "== ncu: kernel time by kernel, bench 1b-Q8_0 -p 512 -n 4, PRIVAI_CUDA_NEXT=${NEXT:-1}"
	synth 1b-Q8_0 "$m" || return
	PRIVAI_CUDA_NEXT=${NEXT:-1} timeout "${PROFILE_LIMIT:-120}" ncu --csv --metrics gpu__time_duration.sum --launch-count "${PROFILE_KERNELS:-1500}" \
		"$S/bin/privai-engine" bench -m "$m" --device cuda -p 512 -n 4 -r 1 --no-bandwidth \
		>"${OUT:-/tmp}/ncu.csv" 2>/dev/null || echo "(ncu exit $?)"
	python3 - "${OUT:-/tmp}/ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
h = rows[0]
ki, gi, vi, ui = h.index("Kernel Name"), h.index("Grid Size"), h.index("Metric Value"), h.index("Metric Unit")
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", ""))
    v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(r[ui], 1.0)
    k = r[ki].split("(")[0][:60]
    tot[k] += v
    cnt[k] += 1
all_us = sum(tot.values())
print("%d kernels, %.0f us in all" % (sum(cnt.values()), all_us))
for k, v in tot.most_common(25):
    print("%10.0f us %5.1f%% %6d x %8.1f us  %s" % (v, 100 * v / all_us, cnt[k], v / cnt[k], k))
PY
}

case ${1:-} in
stage)
	shift
	stage "$@"
	;;
run) run ;;
*)
	echo "usage: scripts/gpu-check.sh stage f16|q8|q4|bpe...   (here), then: scripts/gpu-check.sh run   (on the GPU)" >&2
	exit 2
	;;
esac
