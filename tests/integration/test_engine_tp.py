#!/usr/bin/env python3
"""privai-engine split over ranks (tensor parallel) under Open MPI's mpirun.

Real processes, real MPI (Open MPI from Debian, shared memory between the
ranks of this machine):
  - eval --tp 2 and --tp 4 (oversubscribed on 2 cores) write the same
    logits as one rank, on every fixture model and on synthetic ones that
    the fixtures lack (F32 weights, qwen2 biases, K-quants);
  - rank counts that cannot work are refused with the reason;
  - serve --tp 2 answers a chat completion with the same text as one rank,
    its follower sleeps while the server is idle, a follower that hangs
    takes the group down naming it, one that dies is named by mpirun, and
    SIGTERM drains the group;
  - bench --tp 2 reports what the all-reduces cost per token;
  - ranks started apart (as each node's privai-admin starts its own) meet
    at --dist-init over Gloo: the same logits, the same served text, and
    a hung or dead rank named by the one that waited for it;
  - --nnodes: one process a node starts the node's other ranks (pinned
    apart on CPUs, a device each on GPUs): the same logits and text, and
    no rank outlives its node's process or fails unnamed.
Standard library only (and adminlib's children_of).  Prints "N passed, N failed".
"""
import array
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import children_of  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")
ENGINE = os.path.join(BUILD, "privai-engine")
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.environ.get("PRIVAI_FIXTURES", os.path.join(HERE, "..", "..", "..", "shared", "fixtures"))
SAN = "san" in BUILD
SLOW = 3 if SAN else 1

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)
        sys.stdout.flush()


def mpi_env():
    e = dict(os.environ)
    # CI runs as root; mpirun refuses that unless told it is meant
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             # containers often forbid the cross-process copy (ptrace) shared memory would use
             OMPI_MCA_btl_vader_single_copy_mechanism="none")
    if SAN:
        # Open MPI keeps its own allocations to the end: not ours to report.
        # Its components stay loaded so that the stacks name them.
        e.update(LSAN_OPTIONS="suppressions=%s:fast_unwind_on_malloc=0:print_suppressions=0"
                 % os.path.join(HERE, "..", "lsan-mpi.supp"),
                 OMPI_MCA_mca_base_component_disable_dlclose="1")
    return e


def mpirun(n, args, timeout=120):
    cmd = ["mpirun", "--oversubscribe", "-np", str(n), ENGINE] + args
    return subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=timeout * SLOW)


def floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def rel_l2(a, b):
    num = math.sqrt(sum((x - y) * (x - y) for x, y in zip(a, b)))
    den = math.sqrt(sum(x * x for x in a))
    return num / den if den else num


def eval_alone(model, ids, out):
    r = subprocess.run([ENGINE, "eval", "-m", model, "--prompt-ids", ids, "--dump-logits", out, "-t", "1"],
                       capture_output=True, text=True, timeout=120 * SLOW)
    return r.returncode == 0


def compare_tp(name, model, ids, bound, sizes=(2, 4), tmp="/tmp", golden=None, golden_bound=None):
    alone = os.path.join(tmp, "alone.f32")
    if not eval_alone(model, ids, alone):
        check(False, "%s: eval alone" % name)
        return
    want = floats(alone)
    for n in sizes:
        out = os.path.join(tmp, "tp%d.f32" % n)
        if os.path.exists(out):
            os.unlink(out)
        r = mpirun(n, ["eval", "--tp", str(n), "-m", model, "--prompt-ids", ids, "--dump-logits", out, "-t", "1"])
        check(r.returncode == 0, "%s tp %d: exit %d: %s" % (name, n, r.returncode, r.stderr[-800:]))
        if r.returncode != 0 or not os.path.exists(out):
            continue
        got = floats(out)
        check(len(got) == len(want), "%s tp %d: %d logits, %d alone" % (name, n, len(got), len(want)))
        e = rel_l2(want, got)
        check(e <= bound, "%s tp %d: relative L2 %.3g to one rank (bound %g)" % (name, n, e, bound))
        print("   %s tp %d: relative L2 to one rank %.2g" % (name, n, e))
        if golden is not None:
            g = floats(golden)
            row = len(g) // len(ids.split(","))
            eg = max(rel_l2(g[i:i + row], got[i:i + row]) for i in range(0, len(g), row))
            check(eg <= golden_bound, "%s tp %d: worst position %.3g from llama.cpp's logits" % (name, n, eg))


def synth(path, *args):
    r = subprocess.run([ENGINE, "synth", "-o", path] + list(args), capture_output=True, text=True)
    check(r.returncode == 0, "synth %s: %s" % (args, r.stderr))


def test_logits(tmp):
    # the fixture models, against one rank and llama.cpp's own logits;
    # under ASan (memory errors, not numerics, which the plain build
    # checks at both sizes) tp 4 on the first only
    for n, (m, bound, gbound) in enumerate((("tiny-llama-spm-f16", 1e-4, 2e-3), ("tiny-llama-spm-q8_0", 2e-3, 2e-2),
                                            ("tiny-llama-spm-q4_0", 2e-3, 2e-2),
                                            ("tiny-llama3-bpe-q8_0", 2e-3, 2e-2))):
        with open(os.path.join(FIX, "golden", m + ".p1.json")) as f:
            ids = ",".join(str(i) for i in json.load(f)["prompt_ids"])
        compare_tp(m, os.path.join(FIX, "models", m + ".gguf"), ids, bound, tmp=tmp,
                   sizes=(2,) if SAN and n > 0 else (2, 4),
                   golden=os.path.join(FIX, "golden", m + ".p1.logits.f32"), golden_bound=gbound)
    ids = ",".join(str((i * 7919 + 11) % 4000) for i in range(40))
    # F32 weights: the 1e-5.  On one and two layers; random weights
    # grow rounding with depth (the scalar and AVX-512 paths of one engine
    # differ by 5e-5 at four layers), which test_tp.c covers with 1e-4.
    for layers in (1, 2):
        p = os.path.join(tmp, "f32-%d.gguf" % layers)
        synth(p, "--type", "F32", "--dim", "256", "--layers", str(layers), "--heads", "8", "--kv-heads", "4",
              "--ff", "768", "--vocab", "4000")
        compare_tp("synthetic F32, %d layer(s)" % layers, p, ids, 1e-5, tmp=tmp)
    # qwen2: Q, K and V biases sliced with their rows; 2 KV heads shared by 2 ranks each at tp 4
    p = os.path.join(tmp, "qwen2.gguf")
    synth(p, "--arch", "qwen2", "--type", "Q8_0", "--dim", "256", "--layers", "2", "--heads", "8", "--kv-heads", "2",
          "--ff", "512", "--vocab", "4000")
    compare_tp("synthetic qwen2 Q8_0", p, ids, 2e-3, tmp=tmp)
    # K-quants: 256-value blocks, so tp 2 of 512 columns works and tp 4 would cut them
    p = os.path.join(tmp, "q4km.gguf")
    synth(p, "--type", "Q4_K_M", "--dim", "512", "--layers", "1", "--heads", "8", "--kv-heads", "8", "--ff", "1024",
          "--vocab", "4000")
    compare_tp("synthetic Q4_K_M", p, ids, 2e-3, sizes=(2,), tmp=tmp)
    r = mpirun(4, ["eval", "--tp", "4", "-m", p, "--prompt-ids", ids, "--dump-logits", os.path.join(tmp, "x"),
                   "-t", "1"])
    check(r.returncode != 0 and "blk.0.attn_output.weight is Q4_K, stored in blocks of 256 values" in r.stderr
          and "would cut a block" in r.stderr, "Q4_K at tp 4 refused by name: %s" % r.stderr[-400:])


def test_refusals(tmp):
    model = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    out = os.path.join(tmp, "x.f32")
    t0 = time.time()
    r = mpirun(3, ["eval", "--tp", "3", "-m", model, "--prompt-ids", "1,2,3", "--dump-logits", out])
    check(r.returncode != 0 and "the model's 8 attention heads do not divide among 3 ranks (rank counts that "
          "work: 1, 2, 4, 8)" in r.stderr, "tp 3 refused with the counts that work: %s" % r.stderr[-400:])
    check(time.time() - t0 < 30 * SLOW, "the refusal ends every rank (%.1f s)" % (time.time() - t0))
    r = subprocess.run([ENGINE, "eval", "--tp", "2", "-m", model, "--prompt-ids", "1,2,3", "--dump-logits", out],
                       capture_output=True, text=True, env=mpi_env(), timeout=60)
    check(r.returncode != 0 and "--tp 2, but the MPI launcher started 1 rank (run it under mpirun -np 2)"
          in r.stderr, "--tp without mpirun says how to run it: %s" % r.stderr)
    r = subprocess.run([ENGINE, "eval", "--tp", "2", "--device", "cuda", "-m", model, "--prompt-ids", "1",
                        "--dump-logits", out], capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "GPU ranks meet at --dist-init HOST:PORT (NCCL's bootstrap), one process a GPU"
          in r.stderr, "GPU ranks without --dist-init refused: %s" % r.stderr)
    if os.path.exists(os.path.join(BUILD, "privai-nccl.so")) and not os.path.exists("/dev/nvidia0"):
        # the NCCL plugin loads, and a rank without a GPU says so rather than hang its peer
        port = free_port()
        args = ["eval", "--device", "cuda", "--tp", "2", "--dist-init", "127.0.0.1:%d" % port, "-m", model,
                "--prompt-ids", "1", "--dump-logits", out]
        p1 = subprocess.Popen([ENGINE] + args + ["--node-rank", "1"], stderr=subprocess.PIPE, text=True)
        r = subprocess.run([ENGINE] + args + ["--node-rank", "0"], capture_output=True, text=True, timeout=60)
        e1 = p1.communicate(timeout=60)[1]
        check(r.returncode != 0 and p1.returncode != 0 and "rank 0 has no usable CUDA device" in r.stderr and
              "rank 1 has no usable CUDA device" in e1, "NCCL ranks without a GPU refused: %s / %s" % (r.stderr, e1))
    r = subprocess.run([ENGINE, "serve", "--tp", "2", "--lora", "a=b.gguf", "-m", model], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode != 0 and "LoRA adapters do not run on a model split" in r.stderr, "LoRA with --tp refused")
    # features says which transports load here, and why one does not
    j = json.loads(subprocess.run([ENGINE, "features", "--json"], capture_output=True, text=True).stdout)
    check("mpi" in j.get("collectives", []) and "gloo" in j.get("collectives", []),
          "features lists the MPI and Gloo collectives: %s" % j.get("collectives"))
    env = dict(os.environ, PRIVAI_GLOO_LIBRARY="/nonexistent/privai-gloo.so")
    j = json.loads(subprocess.run([ENGINE, "features", "--json"], capture_output=True, text=True, env=env).stdout)
    check("gloo" not in j.get("collectives", []) and "privai-gloo.so not found: /nonexistent/privai-gloo.so"
          in j.get("collectives_unavailable", {}).get("gloo", ""), "a missing plugin is named: %s"
          % j.get("collectives_unavailable"))
    r = subprocess.run([ENGINE, "eval", "--tp", "2", "--dist-init", "127.0.0.1:1", "-m", model, "--prompt-ids", "1",
                        "--dump-logits", out], capture_output=True, text=True, env=env, timeout=60)
    check(r.returncode != 0 and "without its Gloo collectives" in r.stderr, "--tp without the plugin says which: %s"
          % r.stderr.strip())
    r = subprocess.run([ENGINE, "eval", "--tp-deadline", "0", "-m", model], capture_output=True, text=True)
    check(r.returncode != 0 and "--tp-deadline must be 1 to 86400 seconds" in r.stderr, "a bad deadline refused")


class Group:
    """serve --tp N under mpirun, its log read as it comes."""

    def __init__(self, n, model, *args):
        self.port = free_port()
        self.log_path = tempfile.mktemp(prefix="tp-serve-")
        self.logf = open(self.log_path, "w")
        self.p = subprocess.Popen(["mpirun", "--oversubscribe", "-np", str(n), ENGINE, "serve", "--tp", str(n),
                                   "-m", model, "--port", str(self.port), "--threads", "1", "--ctx", "512",
                                   "--parallel", "4", "--chat-template", "llama2", "--model-name", "m"] + list(args),
                                  stdout=self.logf, stderr=subprocess.STDOUT, env=mpi_env())

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self):
        for _ in range(int(60 * SLOW / 0.2)):
            if "ready:" in self.log():
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def rank_pid(self, rank):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().split(b"\0")
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if (os.path.basename(cmd[0]) == b"privai-engine" and str(self.port).encode() in cmd
                    and ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env):
                return int(pid)
        return None

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.logf.close()
        os.unlink(self.log_path)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def chat(port, timeout=60):
    body = {"model": "m", "messages": [{"role": "user", "content": "Private AI keeps data on premises."}],
            "max_tokens": 24, "temperature": 0}
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout * SLOW) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_serve(tmp):
    model = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    alone = subprocess.Popen([ENGINE, "serve", "-m", model, "--port", "0", "--threads", "1", "--ctx", "512",
                              "--parallel", "4", "--chat-template", "llama2", "--model-name", "m"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in alone.stderr:
            m = re.search(r"listening on [0-9.]+:(\d+)", line)
            port = int(m.group(1)) if m else port
            if "ready:" in line:
                break
        want = chat(port)
        SERVED["alone"] = want
    finally:
        alone.kill()
        alone.wait()

    g = Group(2, model, "--tp-deadline", "3")
    try:
        check(g.wait_ready(), "serve --tp 2 gets ready: %s" % g.log()[-600:])
        check("split over 2 ranks (mpi); rank 0 holds" in g.log(), "the server says it is split")
        got = chat(g.port)
        check(got == want and len(want) > 0, "the same text at temperature 0 split and alone: %r / %r" % (got, want))
        # a second request: the followers' caches kept up with rank 0's
        check(chat(g.port) == want, "and again, from the prefix cache")
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % g.port, timeout=30) as r:
            text = r.read().decode()
        ar = re.search(r'^privai:tp_allreduce_total\{[^}]*\} (\d+)$', text, re.M)
        ab = re.search(r'^privai:tp_allreduce_bytes_total\{[^}]*\} (\d+)$', text, re.M)
        check(re.search(r'^privai:tp_ranks\{[^}]*\} 2$', text, re.M) and ar and ab and int(ar.group(1)) > 0 and
              re.search(r'^privai:tp_allreduce_seconds_total\{[^}]*\} [0-9.]+$', text, re.M),
              "/metrics counts the all-reduces: %s" % [l for l in text.splitlines() if "tp_" in l])
        # two a layer of 4 layers: 8 a forward pass, each a hidden row of 256 floats (1 KiB) a token
        def num(name):
            m = re.search(r'^%s\{[^}]*\} (\d+)$' % re.escape(name), text, re.M)
            return int(m.group(1)) if m else -1
        passes, tokens = num("privai:forward_passes_total"), num("privai:batched_tokens_total")
        check(passes > 0 and num("privai:tp_steps_total") == passes and num("privai:tp_allreduce_total") == 8 * passes
              and num("privai:tp_allreduce_bytes_total") == 8 * 1024 * tokens,
              "8 all-reduces a pass, 1 KiB a token each: passes %d, tokens %d, %s" %
              (passes, tokens, [l for l in text.splitlines() if l.startswith("privai:tp_")]))
        follower = g.rank_pid(1)
        check(follower is not None, "rank 1 is found")
        if follower:
            c0 = cpu_seconds(follower)
            time.sleep(2)
            used = cpu_seconds(follower) - c0
            check(used < 0.3 * SLOW, "an idle follower sleeps: %.2f s of CPU in 2 s" % used)
            # a follower that stops answering: rank 0 gives up after the deadline and names it
            os.kill(follower, signal.SIGSTOP)
            try:
                chat(g.port, timeout=20)
                check(False, "a request to a group with a hung rank fails")
            except Exception:
                pass
            try:
                g.p.wait(30 * SLOW)
            except subprocess.TimeoutExpired:
                pass
            check(g.p.poll() is not None, "the group is down after a rank hung")
            check(re.search(r"rank 0 of 2 \(.*\): .* waited \d+ s \(deadline 3 s\); no answer from rank 1 \(hung or "
                            r"dead: the group stops\)", g.log()), "the message names rank 1: %s" % g.log()[-800:])
            check(g.rank_pid(1) is None, "no rank is left behind")
    finally:
        g.stop()

    g = Group(2, model)
    try:
        check(g.wait_ready(), "a second group gets ready")
        follower = g.rank_pid(1)
        if follower:
            os.kill(follower, signal.SIGKILL)
            try:
                g.p.wait(30 * SLOW)
            except subprocess.TimeoutExpired:
                pass
            check(g.p.poll() not in (None, 0), "a dead rank ends the group (exit %s)" % g.p.poll())
            check("process rank 1" in g.log() and "signal 9" in g.log(), "mpirun names the dead rank: %s"
                  % g.log()[-600:])
            check(g.rank_pid(0) is None, "rank 0 is gone too")
    finally:
        g.stop()

    g = Group(2, model)
    try:
        check(g.wait_ready(), "a third group gets ready")
        chat(g.port)
        g.p.send_signal(signal.SIGTERM)
        try:
            g.p.wait(40 * SLOW)
        except subprocess.TimeoutExpired:
            pass
        check(g.p.poll() is not None and "stopped (0 requests cancelled" in g.log(),
              "SIGTERM drains rank 0, which stops the followers: %s" % g.log()[-400:])
        check(g.rank_pid(1) is None, "the follower is gone")
    finally:
        g.stop()


def test_bench():
    model = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    r = mpirun(2, ["bench", "--tp", "2", "-m", model, "-p", "32", "-n", "8", "-r", "1", "-t", "1", "--json"])
    check(r.returncode == 0, "bench --tp 2: %s" % r.stderr[-400:])
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        j = {}
    # two all-reduces a layer, each a row of hidden state (256 floats) per token
    check(j.get("tp") == 2 and j.get("tp_allreduce_per_token") == 8, "8 all-reduces per token: %s" % j)
    check(j.get("tp_allreduce_bytes_per_token") == 8 * 256 * 4, "8 KiB per token: %s" % j)
    check(j.get("tp_weight_bytes_rank0", 0) > 0, "rank 0's weights reported: %s" % j)


def start_apart(n, args, log_dir):
    """n engine processes of one group, started apart, rank n-1 first:
    rank 0 (which listens at --dist-init) comes last, as it may."""
    port = free_port()
    procs = []
    for rank in reversed(range(n)):
        log = open(os.path.join(log_dir, "rank%d.log" % rank), "w")
        procs.append((rank, log, subprocess.Popen([ENGINE] + args + ["--tp", str(n), "--node-rank", str(rank),
                                                                      "--dist-init", "127.0.0.1:%d" % port],
                                                  stdout=log, stderr=subprocess.STDOUT, env=mpi_env())))
        time.sleep(0.3)
    return sorted(procs)


def log_of(log_dir, rank):
    with open(os.path.join(log_dir, "rank%d.log" % rank)) as f:
        return f.read()


def test_apart(tmp):
    m = "tiny-llama3-bpe-q8_0"
    model, ids = golden_prompt(m)
    alone = os.path.join(tmp, "alone.f32")
    eval_alone(model, ids, alone)
    for n in (2, 4):
        out = os.path.join(tmp, "apart%d.f32" % n)
        procs = start_apart(n, ["eval", "-m", model, "--prompt-ids", ids, "--dump-logits", out, "-t", "1"], tmp)
        codes = [p.wait(120 * SLOW) for _, _, p in procs]
        check(codes == [0] * n, "eval in %d processes started apart: exits %s: %s" % (n, codes, log_of(tmp, 0)[-400:]))
        if os.path.exists(out):
            e = rel_l2(floats(alone), floats(out))
            check(e <= 2e-3, "%s over Gloo, %d ranks: relative L2 %.3g to one rank" % (m, n, e))
            print("   %s over Gloo, %d ranks: relative L2 to one rank %.2g" % (m, n, e))
    for args, want in ((["--node-rank", "1"], "--node-rank and --nnodes go with --dist-init HOST:PORT"),
                       (["--dist-init", "127.0.0.1:1", "--node-rank", "2"], "--node-rank 2 of a group of 2 (0 to 1)"),
                       (["--dist-init", "127.0.0.1:1", "--nnodes", "3"], "--nnodes 3 does not divide --tp 2"),
                       (["--dist-init", "no-port"], "--dist-init takes HOST:PORT, not 'no-port'"),
                       (["--dist-init", "127.0.0.1:0"], "--dist-init takes HOST:PORT, not '127.0.0.1:0' (a port of 1"),
                       (["--dist-init", "host:99999"], "--dist-init takes HOST:PORT, not 'host:99999'")):
        r = subprocess.run([ENGINE, "eval", "--tp", "2", "-m", model, "--prompt-ids", "1", "--dump-logits",
                            os.path.join(tmp, "x")] + args, capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and want in r.stderr, "refused: %s (%s)" % (want, r.stderr.strip()))

    # a follower told to stop while rank 0 never comes (its admin died): it ends by itself
    model_f = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    p = subprocess.Popen([ENGINE, "serve", "--tp", "2", "--node-rank", "1", "--dist-init", "127.0.0.1:%d" % free_port(),
                          "-m", model_f, "--drain-timeout", "1"], stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        err = p.communicate(timeout=40 * SLOW)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
    check(p.returncode not in (None, 0) and "no stop from rank 0 in 11 s: ending" in err and time.time() - t0 < 30 * SLOW,
          "a lone follower ends 11 s after SIGTERM: %s" % err.strip())

    # serve: rank 0 answers, rank 1 follows; then rank 1 hangs, then a group whose rank 1 dies
    model = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    for fault in ("hang", "death"):
        port = free_port()
        procs = start_apart(2, ["serve", "-m", model, "--port", str(port), "--threads", "1", "--ctx", "512",
                                "--parallel", "4", "--chat-template", "llama2", "--model-name", "m",
                                "--tp-deadline", "3"], tmp)
        try:
            for _ in range(int(60 * SLOW / 0.2)):
                if "ready:" in log_of(tmp, 0) or procs[0][2].poll() is not None:
                    break
                time.sleep(0.2)
            check("split over 2 ranks (gloo)" in log_of(tmp, 0), "rank 0 serves a group over Gloo: %s"
                  % log_of(tmp, 0)[-400:])
            got = chat(port)
            check(got == SERVED.get("alone"), "the same text as one rank: %r / %r" % (got, SERVED.get("alone")))
            follower = procs[1][2].pid
            if fault == "hang":
                c0 = cpu_seconds(follower)
                time.sleep(2)
                used = cpu_seconds(follower) - c0
                check(used < 0.3 * SLOW, "an idle Gloo follower sleeps: %.2f s of CPU in 2 s" % used)
                os.kill(follower, signal.SIGSTOP)
            else:
                os.kill(follower, signal.SIGKILL)
                procs[1][2].wait()
            # nothing is asked: idle rank 0's ping finds the fault, within
            # its 2 s interval and the 3 s deadline
            try:
                procs[0][2].wait(30 * SLOW)
            except subprocess.TimeoutExpired:
                pass
            check(procs[0][2].poll() not in (None, 0), "idle rank 0 ends by itself after its peer's %s" % fault)
            check(re.search(r"rank 0 of 2 \(.*\): an? .* of step \d+ failed \(.*\); no answer from rank 1 \(hung "
                            r"or dead: the group stops\)", log_of(tmp, 0)), "rank 0 names rank 1 after its %s: %s"
                  % (fault, log_of(tmp, 0)[-500:]))
            if fault == "hang":
                os.kill(follower, signal.SIGCONT)
                try:
                    procs[1][2].wait(30 * SLOW)
                except subprocess.TimeoutExpired:
                    pass
                check(procs[1][2].poll() not in (None, 0) and "no answer from rank 0" in log_of(tmp, 1),
                      "the hung rank, woken, finds rank 0 gone and ends: %s" % log_of(tmp, 1)[-300:])
        finally:
            for _, log, p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                    p.wait()
                log.close()


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def golden_prompt(m):
    """A fixture model's path and its golden prompt's ids, comma-separated."""
    with open(os.path.join(FIX, "golden", m + ".p1.json")) as f:
        return os.path.join(FIX, "models", m + ".gguf"), ",".join(str(i) for i in json.load(f)["prompt_ids"])


def test_node_ranks(tmp):
    """--nnodes: one process a node starts the node's other ranks."""
    m = "tiny-llama3-bpe-q8_0"
    model, ids = golden_prompt(m)
    alone = os.path.join(tmp, "alone-nodes.f32")
    eval_alone(model, ids, alone)
    # 4 ranks on 2 "nodes" (two processes here), and 2 ranks in one process
    for tp, nnodes in ((4, 2), (2, 1)):
        out, port = os.path.join(tmp, "nodes-%d-%d.f32" % (tp, nnodes)), free_port()
        procs = []
        for node in reversed(range(nnodes)):
            log = open(os.path.join(tmp, "node%d.log" % node), "w")
            procs.append((node, log, subprocess.Popen(
                [ENGINE, "eval", "-m", model, "--prompt-ids", ids, "--dump-logits", out, "-t", "1", "--tp", str(tp),
                 "--nnodes", str(nnodes), "--node-rank", str(node), "--dist-init", "127.0.0.1:%d" % port],
                stdout=log, stderr=subprocess.STDOUT, env=mpi_env())))
        codes = [p.wait(120 * SLOW) for _, _, p in sorted(procs)]
        for _, log, _ in procs:
            log.close()
        logs = "".join(open(os.path.join(tmp, "node%d.log" % n)).read() for n in range(nnodes))
        check(codes == [0] * nnodes, "eval --tp %d --nnodes %d: exits %s: %s" % (tp, nnodes, codes, logs[-400:]))
        started = sorted(int(r) for r in re.findall(r"rank (\d+) of %d on this node" % tp, logs))
        check(started == list(range(tp)), "each node's process starts its %d ranks: %s" % (tp // nnodes, started))
        if os.path.exists(out):
            e = rel_l2(floats(alone), floats(out))
            check(e <= 2e-3, "%s, %d ranks over %d node processes: relative L2 %.3g to one rank" % (m, tp, nnodes, e))
    for args, want in ((["--tp", "2", "--nnodes", "3"], "--nnodes 3 does not divide --tp 2"),
                       (["--tp", "4", "--nnodes", "2", "--node-rank", "2"], "--node-rank 2 of 2 nodes (0 to 1)")):
        r = subprocess.run([ENGINE, "eval", "-m", model, "--prompt-ids", "1", "--dump-logits", os.path.join(tmp, "x"),
                            "--dist-init", "127.0.0.1:1"] + args, capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and want in r.stderr, "refused: %s (%s)" % (want, r.stderr.strip()))
    # GPU ranks: one device each, from CUDA_VISIBLE_DEVICES (no GPU here: the devices are named, then refused)
    env = dict(mpi_env(), CUDA_VISIBLE_DEVICES="GPU-a,GPU-b,GPU-c")
    r = subprocess.run([ENGINE, "eval", "--device", "cuda", "-m", model, "--prompt-ids", "1", "--dump-logits",
                        os.path.join(tmp, "x"), "--tp", "2", "--nnodes", "1", "--dist-init", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60, env=env)
    check(r.returncode != 0 and "2 ranks a node (--tp 2 over --nnodes 1) take 2 GPUs, one each; "
          "CUDA_VISIBLE_DEVICES lists 3" in r.stderr, "GPUs that are not one a rank refused: %s" % r.stderr.strip())
    env["CUDA_VISIBLE_DEVICES"] = "GPU-a,GPU-b"
    r = subprocess.run([ENGINE, "eval", "--device", "cuda", "-m", model, "--prompt-ids", "1", "--dump-logits",
                        os.path.join(tmp, "x"), "--tp", "2", "--nnodes", "1", "--dist-init", "127.0.0.1:%d" % free_port()],
                       capture_output=True, text=True, timeout=120, env=env)
    check(re.search(r"rank 0 of 2 on this node \(pid \d+, GPU GPU-a\)", r.stderr) and
          re.search(r"rank 1 of 2 on this node \(pid \d+, GPU GPU-b\)", r.stderr),
          "each GPU rank gets its own device: %s" % r.stderr.strip()[-400:])

    # NCCL's settings from privai-fabric's directory: the topology file and
    # nccl.env, a variable already set winning; a line that is not one refused
    conf = os.path.join(tmp, "etc-privai")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "nccl-topo.xml"), "w") as f:
        f.write('<system version="1"/>\n')
    with open(os.path.join(conf, "nccl.env"), "w") as f:
        f.write("# from privai-fabric\nNCCL_IB_HCA=mlx5_0,mlx5_1\n\nNCCL_SOCKET_IFNAME=ens1f0\n")
    env = dict(mpi_env(), CUDA_VISIBLE_DEVICES="GPU-a,GPU-b", PRIVAI_NCCL_CONFIG_DIR=conf, NCCL_SOCKET_IFNAME="eth9")
    env.pop("NCCL_TOPO_FILE", None)
    env.pop("NCCL_IB_HCA", None)
    gpu_eval = [ENGINE, "eval", "--device", "cuda", "-m", model, "--prompt-ids", "1", "--dump-logits",
                os.path.join(tmp, "x"), "--tp", "2", "--nnodes", "1", "--dist-init", "127.0.0.1:%d" % free_port()]
    r = subprocess.run(gpu_eval, capture_output=True, text=True, timeout=120, env=env)
    check("NCCL settings: NCCL_TOPO_FILE=%s/nccl-topo.xml (privai-fabric's topology), NCCL_IB_HCA=mlx5_0,mlx5_1 "
          "(nccl.env)\n" % conf in r.stderr, "GPU ranks take the fabric's topology file and nccl.env, the "
          "environment's NCCL_SOCKET_IFNAME kept: %s" % r.stderr.strip()[-400:])
    with open(os.path.join(conf, "nccl.env"), "a") as f:
        f.write("LD_PRELOAD=/tmp/x.so\n")
    r = subprocess.run(gpu_eval, capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode != 0 and "nccl.env:5: not an NCCL setting (NCCL_NAME=VALUE, printable): 'LD_PRELOAD=/tmp/x.so'"
          in r.stderr and "on this node" not in r.stderr, "a line of nccl.env that is not NCCL's is refused "
          "before any rank starts: %s" % r.stderr.strip())

    # serve: one process, two ranks, pinned apart; the same text as one rank
    model = os.path.join(FIX, "models", "tiny-llama-spm-q8_0.gguf")
    # a child that dies before the group forms (node 1 never comes, so no
    # peer would notice): its node's process ends at once, naming it; a
    # hung child whose node's process is killed dies with it
    for fault in ("child", "parent", None):
        port, log_path = free_port(), os.path.join(tmp, "node-serve.log")
        log = open(log_path, "w")
        tp = ["--tp", "4", "--nnodes", "2"] if fault == "child" else ["--tp", "2", "--nnodes", "1"]
        p = subprocess.Popen([ENGINE, "serve", "-m", model, "--port", str(port), "--threads", "1", "--ctx", "512",
                              "--parallel", "4", "--chat-template", "llama2", "--model-name", "m",
                              "--dist-init", "127.0.0.1:%d" % free_port(), "--tp-deadline", "3"] + tp,
                             stdout=log, stderr=subprocess.STDOUT, env=mpi_env())
        try:
            for _ in range(int(60 * SLOW / 0.2)):
                text = open(log_path).read()
                if p.poll() is not None or ("ready:" in text if fault != "child" else "rank 1 of 4 on this" in text):
                    break
                time.sleep(0.2)
            kids = children_of(p.pid)
            check(len(kids) == 1, "serve %s runs its second rank as its child: %s" % (" ".join(tp), kids))
            if fault is None:
                got = chat(port)
                check(got == SERVED.get("alone"), "the same text as one rank: %r / %r" % (got, SERVED.get("alone")))
                if kids and os.cpu_count() >= 2:
                    cpus = [open("/proc/%d/status" % q).read().split("Cpus_allowed_list:")[1].split()[0]
                            for q in (p.pid, kids[0])]
                    check(cpus[0] != cpus[1], "the two ranks are pinned to CPUs of their own: %s" % cpus)
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(40 * SLOW)
                except subprocess.TimeoutExpired:
                    pass
                check(p.poll() == 0 and not any(alive(k) for k in kids), "SIGTERM stops both ranks (exit %s)" % p.poll())
            elif fault == "child" and kids:
                os.kill(kids[0], signal.SIGKILL)
                try:
                    p.wait(10 * SLOW)
                except subprocess.TimeoutExpired:
                    pass
                check(p.poll() not in (None, 0) and re.search(
                    r"rank 1 of 4 \(pid %d, started by this node's first rank\) was killed by signal 9: the group "
                    r"stops" % kids[0], open(log_path).read()),
                      "a child rank dead before the group formed ends its node's process, named: %s"
                      % open(log_path).read()[-300:])
            elif fault == "parent" and kids:
                os.kill(kids[0], signal.SIGSTOP)
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                gone = False
                for _ in range(int(10 / 0.1)):
                    if not alive(kids[0]):
                        gone = True
                        break
                    time.sleep(0.1)
                check(gone, "a node's process killed: its child rank, hung, dies with it")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            for k in children_of(p.pid):
                os.kill(k, signal.SIGKILL)
            log.close()


SERVED = {}


def main():
    if shutil.which("mpirun") is None:
        print("FAIL mpirun not found (openmpi-bin; make deps installs it)")
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        test_logits(tmp)
        test_refusals(tmp)
        test_serve(tmp)
        test_bench()
        test_apart(tmp)
        test_node_ranks(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
