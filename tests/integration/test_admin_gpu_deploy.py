"""GPU placements of deployments against live daemons and the recorded NVML
double (8 x H100).

The engine here is fake_engine.py answering `features --json` with the
CUDA backend: this checks what the admin decides and the command line it
gives the engine (--device cuda --gpus UUID,... --tp N --nnodes 1), not a
GPU's work, which needs the engine's CUDA backend.  The last part runs the
real engine, which has no CUDA backend, and checks that GPU placements are
refused up front with the reason.

usage: python3 tests/integration/test_admin_gpu_deploy.py BUILD_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
HERE = os.path.dirname(os.path.abspath(__file__))
DOUBLE = os.path.join(BUILD, "libnvml-double.so")
DEMO = os.path.join(BUILD, "demo", "privai-demo.gguf")
PW = "gpu-deploy-password-1"


def start(tmp, name, engine, mig, fdir, more=()):
    env = {"PRIVAI_NVML_LIB": DOUBLE, "PRIVAI_NVML_DOUBLE_MIG": mig,
           "PRIVAI_NVML_DOUBLE_STATE": os.path.join(tmp, name + ".nvml"), "FAKE_ENGINE_DIR": fdir}
    adm = Admin(BUILD, os.path.join(tmp, name), PW, extra=("--demo-model", DEMO, "--engine", engine,
                                                          "--node-name", name, *more), env_extra=env,
                ports="19190-19199")
    c = adm.client()
    c.login("admin", PW)
    return adm, c


def deploy(c, name, placement, options=None):
    body = {"name": name, "model": "demo", "placement": placement}
    if options is not None:
        body["options"] = options
    return c.post("/api/v1/deployments", body)


def ready(c, did):
    return wait_for(lambda: (lambda j: j if j and j["state"] == "ready" else None)(
        c.get(f"/api/v1/deployments/{did}").json), timeout=60)


def engine_argv(fdir, port):
    path = os.path.join(fdir, f"argv-{port}")
    return open(path).read().split("\n") if os.path.exists(path) else []


def refused(r, status, code, field, words, what):
    body = r.json or {}
    err = body.get("error", {}) if isinstance(body.get("error"), dict) else body
    msg = err.get("message", "")
    check(r.status == status and err.get("code") == code and err.get("field") == field and words in msg, what,
          (r.status, body))


def test_whole_gpus(c, fdir):
    self_node = c.get("/api/v1/nodes").json["data"][0]
    check(self_node["inventory"]["engine"]["backends"] == ["cpu", "cuda"],
          "the node reports its engine's backends", self_node["inventory"].get("engine"))
    gpus = c.get("/api/v1/gpus").json["data"]
    uuid = [g["uuid"] for g in gpus]
    # a LoRA adapter of the model: adapters run on the CPU backend only, so
    # a GPU placement starts without it rather than not at all
    ad = os.path.join(fdir, "ad.gguf")
    p = subprocess.run([os.path.join(BUILD, "privai-engine"), "lora", "synth", "-m", DEMO, "-o", ad],
                       capture_output=True, text=True)
    r = c.post("/api/v1/models/upload?name=ad&base_model=demo", raw=open(ad, "rb").read() if p.returncode == 0 else b"",
               headers={"Content-Type": "application/octet-stream"})
    check(r.status == 201 and r.json["kind"] == "lora", "an adapter of the model registered", (p.stderr, r))
    r = deploy(c, "tp2", {"kind": "gpu", "gpus": [0, 1]})
    dist = r.json["placement"].get("dist_port") if r.status == 201 else None
    check(r.status == 201 and r.json["placement"] == {"kind": "gpu", "gpus": uuid[0:2], "tensor_parallel": 2,
                                                      "dist_port": dist} and isinstance(dist, int),
          "two GPUs by index, stored by UUID with tensor_parallel 2 and a port for the ranks to meet on", r)
    tp2 = r.json["id"]
    d = ready(c, tp2)
    check(d is not None, "the deployment on two GPUs is ready", d)
    argv = engine_argv(fdir, d["port"]) if d else []
    def after(opt):
        return argv[argv.index(opt) + 1] if opt in argv else None
    # a rank a GPU (NCCL's way): the engine starts the second itself, and they meet on loopback
    check(after("--device") == "cuda" and after("--gpus") == ",".join(uuid[0:2]) and after("--tp") == "2" and
          after("--nnodes") == "1" and after("--dist-init") == "127.0.0.1:%s" % dist and "--threads" not in argv
          and "--tensor-parallel" not in argv,
          "the engine gets --device cuda --gpus UUID,UUID --tp 2 --nnodes 1 --dist-init 127.0.0.1:PORT", argv)
    check("--lora" not in argv and "--lora-dir" not in argv,
          "an engine split over GPUs starts without adapters (it refuses them)", argv)
    check("--max-connections-per-client" in argv and argv[argv.index("--max-connections-per-client") + 1] == "0",
          "the engine has no per-address cap: every client comes through the admin, from loopback", argv)
    held = {g["index"]: g["deployment"] for g in c.get("/api/v1/gpus").json["data"]}
    check(held[0] == "tp2" and held[1] == "tp2" and held[2] is None, "GET /gpus says which deployment holds each",
          held)

    refused(deploy(c, "clash", {"kind": "gpu", "gpus": [uuid[1]]}), 409, "gpu_busy", "placement.gpus",
            "held by deployment 'tp2'", "a GPU another deployment holds is refused, naming it")
    refused(deploy(c, "many", {"kind": "gpu", "count": 7}), 409, "insufficient_gpus", "placement.count",
            "6 free whole GPUs", "count beyond the free GPUs is refused with how many are free")
    r = deploy(c, "picked", {"kind": "gpu", "count": 2})
    check(r.status == 201 and r.json["placement"]["gpus"] == uuid[2:4], "count 2 picks the free GPUs 2 and 3", r)
    picked = r.json["id"] if r.status == 201 else None

    bad = [({"kind": "gpu", "gpus": [9]}, 422, "invalid_field", "placement.gpus", "no GPU 9"),
           ({"kind": "gpu", "gpus": ["GPU-nope"]}, 422, "invalid_field", "placement.gpus", "no GPU GPU-nope"),
           ({"kind": "gpu", "gpus": ["MIG-nope"]}, 422, "invalid_field", "placement.gpus", "no MIG instance"),
           ({"kind": "gpu", "gpus": [4, 4]}, 422, "invalid_field", "placement.gpus", "named twice"),
           ({"kind": "gpu", "gpus": [4.5]}, 422, "invalid_field", "placement.gpus", "must be a GPU index"),
           ({"kind": "gpu", "gpus": "4"}, 422, "invalid_field", "placement.gpus", "must be an array"),
           ({"kind": "gpu", "gpus": []}, 422, "invalid_field", "placement.gpus", "must be an array"),
           ({"kind": "gpu"}, 422, "invalid_field", "placement.gpus", "one of the two"),
           ({"kind": "gpu", "gpus": [4], "count": 1}, 422, "invalid_field", "placement.gpus", "one of the two"),
           ({"kind": "gpu", "gpus": [4], "threads": 2}, 422, "invalid_field", "placement.threads", "for kind cpu"),
           ({"kind": "cpu", "count": 2}, 422, "invalid_field", "count", "for kind gpu"),
           ({"kind": "gpu", "gpus": [4, 5], "tensor_parallel": 1}, 422, "invalid_field",
            "placement.tensor_parallel", "one engine splits the model over all its GPUs"),
           ({"kind": "gpu", "gpus": [4, 5, 6]}, 422, "invalid_field", "placement.tensor_parallel",
            "8 attention heads; 3 GPUs do not divide them"),
           ({"kind": "gpu", "gpus": [4], "node": "nowhere"}, 422, "invalid_field", "placement.node", "no node")]
    for placement, status, code, field, words in bad:
        refused(deploy(c, "bad", placement), status, code, field, words, f"refused: {placement}")
    refused(deploy(c, "huge", {"kind": "gpu", "gpus": [4]}, {"kv_cache_mib": 200000}), 422, "does_not_fit",
            "placement.gpus", "KV cache 195.3 GiB", "a KV cache beyond one GPU is refused with the figures")
    r = deploy(c, "huge8", {"kind": "gpu", "gpus": [4, 5]}, {"kv_cache_mib": 100000})
    check(r.status == 201 and r.json["placement"]["tensor_parallel"] == 2,
          "the same model with half the KV cache over two GPUs fits (8 heads, 4 KV heads: tp 2)", r)
    check(c.get("/api/v1/deployments").json["data"][-1]["name"] == "huge8" and
          not any(d["name"] in ("bad", "huge", "clash", "many") for d in c.get("/api/v1/deployments").json["data"]),
          "nothing refused was stored")

    # a stopped deployment lets its GPUs go; starting it again checks them
    r = c.request("PATCH", f"/api/v1/deployments/{tp2}", {"desired": "stopped"})
    check(r.status == 200, "stop the deployment on GPUs 0 and 1", r)
    # the row keeps the old engine's state until the supervisor's next tick
    # stops it (a clean-clone run under load read its "ready" after the
    # restart below, and the old engine's argv): wait as a client would
    check(wait_for(lambda: c.get(f"/api/v1/deployments/{tp2}").json["state"] == "stopped", timeout=60),
          "it stops", c.get(f"/api/v1/deployments/{tp2}").json)
    held = {g["index"]: g["deployment"] for g in c.get("/api/v1/gpus").json["data"]}
    check(held[0] is None, "its GPUs are free once it is stopped", held)
    r = deploy(c, "took0", {"kind": "gpu", "gpus": [0]})
    check(r.status == 201, "another deployment takes GPU 0", r)
    refused(c.request("PATCH", f"/api/v1/deployments/{tp2}", {"desired": "running"}), 409, "gpu_busy",
            "placement.gpus", "held by deployment 'took0'", "starting it again while its GPU is taken is refused")
    refused(c.request("PATCH", f"/api/v1/deployments/{picked}", {"options": {"kv_cache_mib": 200000}}), 422,
            "does_not_fit", "placement.gpus", "does_not_fit" and "GiB",
            "new options that do not fit its GPUs are refused")
    r = c.request("PATCH", f"/api/v1/deployments/{tp2}", {"placement": {"kind": "gpu", "gpus": [6, 7]}})
    check(r.status == 200 and r.json["placement"]["gpus"] == uuid[6:8], "a stopped one moves to free GPUs", r)
    r = c.request("PATCH", f"/api/v1/deployments/{tp2}", {"desired": "running"})
    check(r.status == 200, "and starts there", r)
    d = ready(c, tp2)
    argv = engine_argv(fdir, d["port"]) if d else []
    check(d is not None and "--gpus" in argv and argv[argv.index("--gpus") + 1] == ",".join(uuid[6:8]),
          "its engine runs on GPUs 6 and 7", argv)
    r = c.request("PATCH", f"/api/v1/deployments/{tp2}", {"placement": {"kind": "gpu", "gpus": [7, 6]}})
    check(r.status == 200, "a deployment's own GPUs are free to it (re-placed on the same two)", r)
    audit = c.get("/api/v1/audit?limit=200").json["data"]
    check(any(e["action"] == "deployment.create" and e["result"] == "refused" and
              "gpu_busy" in str(e.get("detail")) for e in audit), "a refused placement is in the audit log",
          [e for e in audit if e["result"] == "refused"][:3])


def test_mig(c, fdir):
    gpus = c.get("/api/v1/gpus").json["data"]
    g2 = [g for g in gpus if g["index"] == 2][0]
    r = c.request("PUT", f"/api/v1/gpus/{g2['id']}/mig", {"instances": [{"profile": "3g.40gb", "start": 0},
                                                                         {"profile": "3g.40gb", "start": 4}]})
    check(r.status == 200, "two 3g.40gb instances on GPU 2", r)
    inst = c.get(f"/api/v1/gpus/{g2['id']}").json["instances"]
    migs = [i.get("uuid", "") for i in inst]
    check(len(migs) == 2 and all(u.startswith("MIG-") for u in migs) and migs[0] != migs[1],
          "each instance has its MIG UUID from NVML", inst)
    r = deploy(c, "slice", {"kind": "gpu", "gpus": [migs[0]]})
    check(r.status == 201 and r.json["placement"]["gpus"] == [migs[0]] and r.json["placement"]["tensor_parallel"] == 1,
          "a deployment on one MIG instance", r)
    d = ready(c, r.json["id"]) if r.status == 201 else None
    argv = engine_argv(fdir, d["port"]) if d else []
    check(d is not None and argv[argv.index("--gpus") + 1] == migs[0], "its engine gets the MIG UUID", argv)
    refused(deploy(c, "whole", {"kind": "gpu", "gpus": [2]}), 422, "invalid_field", "placement.gpus",
            "is in MIG mode", "a GPU in MIG mode is not used whole")
    refused(deploy(c, "two", {"kind": "gpu", "gpus": migs}), 422, "invalid_field", "placement.gpus",
            "exactly one MIG instance", "two MIG instances in one placement are refused (CUDA's rule)")
    refused(deploy(c, "again", {"kind": "gpu", "gpus": [migs[0]]}), 409, "gpu_busy", "placement.gpus",
            "held by deployment 'slice'", "a MIG instance another deployment holds is refused")
    refused(deploy(c, "big", {"kind": "gpu", "gpus": [migs[1]]}, {"kv_cache_mib": 40000}), 422, "does_not_fit",
            "placement.gpus", "MIG 3g.40gb on GPU 2", "a MIG instance has its share of the memory only")
    refused(deploy(c, "pick", {"kind": "gpu", "count": 1}), 409, "insufficient_gpus", "placement.count",
            "0 free whole GPUs (0 not in MIG mode, of 8)", "count picks whole GPUs only")
    r = c.request("PUT", f"/api/v1/gpus/{g2['id']}/mig", {"instances": []})
    check(r.status == 409 and r.error_code() == "gpu_busy" and "slice" in r.json["error"]["message"],
          "the layout under a running deployment cannot be changed", r)


def test_no_cuda(c):
    node = c.get("/api/v1/nodes").json["data"][0]
    check(node["inventory"]["engine"]["backends"] == ["cpu"], "the real engine reports the CPU backend only",
          node["inventory"].get("engine"))
    why = node["inventory"]["engine"].get("unavailable", {}).get("cuda", "")
    check(why != "", "the engine's reason for having no CUDA reaches the inventory", node["inventory"]["engine"])
    refused(deploy(c, "gpu", {"kind": "gpu", "gpus": [0]}), 422, "unsupported", "placement.kind",
            "cannot use CUDA: " + why[:40], "without the CUDA backend a GPU placement is refused up front, with why")
    refused(deploy(c, "gpu", {"kind": "gpu", "gpus": [9]}), 422, "invalid_field", "placement.gpus", "no GPU 9",
            "a bad GPU is still named as such first")
    engine = os.path.join(BUILD, "privai-engine")
    out = subprocess.run([engine, "features", "--json"], capture_output=True, text=True)
    check(out.returncode == 0 and '"backends":["cpu"]' in out.stdout, "privai-engine features --json", out.stdout)
    out = subprocess.run([engine, "serve", "-m", DEMO, "--device", "cuda", "--gpus", "GPU-1"], capture_output=True,
                         text=True)
    check(out.returncode == 1 and "--device cuda: " + why[:40] in out.stderr,
          "serve --device cuda says why it cannot", out.stderr)
    out = subprocess.run([engine, "serve", "-m", DEMO, "--gpus", "GPU-1"], capture_output=True, text=True)
    check(out.returncode == 1 and "are for --device cuda" in out.stderr, "--gpus without --device cuda", out.stderr)


def test_engine_late(tmp, engine, fdir):
    """An engine that cannot say what it runs on when the admin starts (a
    first boot's cold disk, say) is asked again until it can, and GPU
    placements follow, with no restart."""
    gate = os.path.join(fdir, "features-fail")
    open(gate, "w").close()
    adm, c = start(tmp, "late", engine, "0", fdir, more=("--engine-retry-s", "1"))
    try:
        eng = c.get("/api/v1/nodes").json["data"][0]["inventory"]["engine"]
        check(eng.get("backends") == [] and "features --json failed" in eng.get("error", ""),
              "an engine that fails at start: no backends, and why", eng)
        refused(deploy(c, "early", {"kind": "gpu", "gpus": [0]}), 422, "unsupported", "placement.kind",
                "cannot use CUDA", "a GPU placement is refused meanwhile")
        os.unlink(gate)
        eng = wait_for(lambda: (lambda e: e if e.get("backends") == ["cpu", "cuda"] else None)(
            c.get("/api/v1/nodes").json["data"][0]["inventory"]["engine"]), timeout=30)
        check(eng is not None and "error" not in eng, "asked again, the engine's backends reach the inventory", eng)
        r = deploy(c, "later", {"kind": "gpu", "gpus": [0]})
        check(r.status == 201, "and a GPU placement is taken, with no restart", r)
        log = open(adm.log_path).read()
        check("asked again every 1 s" in log and "answers now: runs on [\"cpu\",\"cuda\"]" in log,
              "the log says it will ask again, and when the engine answered", log[-1500:])
        check(adm.stop() == 0, "[late] the admin exits cleanly", log[-2000:])
    finally:
        adm.stop()


def test_group(tmp, engine, fdir):
    """A GPU group over two nodes (tensor parallel 4: 2 GPUs on the leader,
    2 on gpu-b): the leader picks each node's GPUs, starts rank 0's node
    process and sends gpu-b its part; each engine gets its GPUs, --tp 4
    --nnodes 2, its node's number and where to meet."""
    def env(node):
        return {"PRIVAI_NVML_LIB": DOUBLE, "PRIVAI_NVML_DOUBLE_NODE": str(node), "PRIVAI_NVML_DOUBLE_MIG": "0",
                "PRIVAI_NVML_DOUBLE_STATE": os.path.join(tmp, "g%d.nvml" % node), "FAKE_ENGINE_DIR": fdir}
    lead = Admin(BUILD, os.path.join(tmp, "g-leader"), PW, ports="19190-19194", env_extra=env(1),
                 extra=["--node-name", "gpu-leader", "--heartbeat-s", "1", "--demo-model", DEMO, "--engine", engine])
    b = None
    try:
        c = lead.client()
        c.login("admin", PW)
        tok = c.post("/api/v1/nodes/join-tokens", {}).json["token"]
        b = Admin(BUILD, os.path.join(tmp, "g-b"), PW, ports="19195-19199", env_extra=dict(env(2), PRIVAI_JOIN_TOKEN=tok),
                  extra=["--node-name", "gpu-b", "--join", f"http://127.0.0.1:{lead.port}", "--heartbeat-s", "1",
                         "--engine", engine])

        def gpus_of(node):
            return [g["uuid"] for g in sorted((g for g in c.get("/api/v1/gpus").json["data"] if g["node"] == node),
                                              key=lambda g: g["index"])]
        check(wait_for(lambda: len(gpus_of("gpu-b")) == 8, 30), "gpu-b joined with its 8 GPUs")
        ul, ub = gpus_of("gpu-leader"), gpus_of("gpu-b")
        check(len(ul) == 8 and not set(ul) & set(ub), "the two nodes' GPUs have UUIDs of their own", (ul, ub))

        # sizing proposes the placement: 405B in BF16 at 8k needs 16 H100s, 8 on each of 2 nodes
        r = c.post("/api/v1/sizing", {"gpu": "H100-80GB", "parameters": 405_000_000_000, "bits_per_weight": 16,
                                      "layers": 126, "heads": 128, "kv_heads": 8, "head_dim": 128, "context": 8192,
                                      "concurrency": 1})
        check(r.status == 200 and r.json["gpus"] == 16 and r.json["nodes"] == 2 and
              r.json["placement"] == {"kind": "gpu", "count": 8, "ranks": ["gpu-leader", "gpu-b"]} and
              r.json["placement_why"] == "8 GPUs on each of 2 nodes (tensor parallel 16)",
              "sizing proposes 8 GPUs on each of the two nodes for 405B", r)
        r = c.post("/api/v1/sizing", {"gpu": "H100-80GB", "parameters": 1_000_000_000_000, "bits_per_weight": 16,
                                      "layers": 126, "heads": 128, "kv_heads": 8, "head_dim": 128, "context": 8192,
                                      "concurrency": 1})
        check(r.status == 200 and r.json["nodes"] == 4 and r.json["placement"] is None and
              r.json["placement_why"] == "this cluster has only 2 ready nodes with 8 whole GPUs, not 4",
              "a model needing 4 nodes gets no placement on 2, and why", r)
        demo_id = [m for m in c.get("/api/v1/models").json["data"] if m["name"] == "demo"][0]["id"]
        r = c.get(f"/api/v1/models/{demo_id}/sizing?context=256")
        check(r.status == 200 and r.json["placement"] == {"kind": "gpu", "count": 1} and
              r.json["placement_why"] == "1 GPU of this node", "the demo model: one GPU of this node", r)

        r = deploy(c, "group", {"kind": "gpu", "count": 2, "ranks": ["gpu-leader", "gpu-b"]})
        pl = r.json.get("placement", {}) if r.status == 201 else {}
        check(r.status == 201 and pl.get("tensor_parallel") == 4 and pl.get("count") == 2 and
              pl.get("gpus") == ul[0:2] and pl.get("rank_gpus") == [ul[0:2], ub[0:2]] and
              isinstance(pl.get("dist_port"), int) and pl.get("ranks") == ["gpu-leader", "gpu-b"],
              "2 GPUs on each of two nodes: tensor parallel 4, each node's GPUs picked, a port to meet on", r)
        dep = r.json["id"] if r.status == 201 else None
        d = ready(c, dep) if dep else None
        argv = engine_argv(fdir, d["port"]) if d else []

        def after(args, opt):
            return args[args.index(opt) + 1] if opt in args else None
        want = {"--device": "cuda", "--gpus": ",".join(ul[0:2]), "--tp": "4", "--nnodes": "2", "--node-rank": "0",
                "--dist-init": "127.0.0.1:%s" % pl.get("dist_port")}
        check(d and {k: after(argv, k) for k in want} == want and "--lora-dir" not in argv,
              "the leader's engine is node 0 of the group, on its two GPUs", argv)
        bc = b.client()
        bc.login("admin", PW)

        def follower():
            rows = [x for x in bc.get("/api/v1/deployments").json["data"] if x["leader_id"] == dep]
            return rows[0] if rows and rows[0]["state"] == "ready" else None
        f = wait_for(follower, 30)
        fargv = engine_argv(fdir, f["port"]) if f else []
        want.update({"--gpus": ",".join(ub[0:2]), "--node-rank": "1"})
        check(f and f["placement"].get("rank") == 1 and {k: after(fargv, k) for k in want} == want,
              "gpu-b's engine is node 1, on its own two GPUs, meeting the leader's", (f, fargv))
        held = {g["uuid"]: g["deployment"] for g in c.get("/api/v1/gpus").json["data"]}
        check([held[u] for u in ul[0:3] + ub[0:3]] == ["group", "group", None, "group", "group", None],
              "the leader's GPU list says which GPUs of both nodes the group holds", held)
        d = wait_for(lambda: (lambda j: j if j and j["ranks"][1]["state"] == "ready" else None)(
            c.get(f"/api/v1/deployments/{dep}").json), 30)
        check(d and d["state"] == "ready" and d["reason"] == "2 of 2 ranks up", "the group is up: both nodes' ranks", d)

        refused(deploy(c, "clash-b", {"kind": "gpu", "gpus": [ub[1]], "node": "gpu-b"}), 409, "gpu_busy",
                "placement.gpus", "held by deployment 'group'", "a GPU of gpu-b the group holds is refused, naming it")
        r = deploy(c, "beside", {"kind": "gpu", "count": 1, "node": "gpu-b"})
        check(r.status == 201 and r.json["placement"]["gpus"] == [ub[2]], "count 1 on gpu-b picks the first GPU the "
              "group leaves free", r)
        if r.status == 201:
            c.request("DELETE", "/api/v1/deployments/%d" % r.json["id"])
        refused(deploy(c, "toomany", {"kind": "gpu", "count": 7, "ranks": ["gpu-leader", "gpu-b"]}), 409,
                "insufficient_gpus", "placement.count", "has 6 free whole GPUs", "a node without 7 free GPUs is refused")
        refused(deploy(c, "odd", {"kind": "gpu", "count": 3, "ranks": ["gpu-leader", "gpu-b"]}), 422,
                "invalid_field", "placement.tensor_parallel", "6 GPUs do not divide them",
                "6 GPUs over the demo's heads are refused")
        refused(deploy(c, "named", {"kind": "gpu", "gpus": [4], "ranks": ["gpu-leader", "gpu-b"]}), 422,
                "invalid_field", "placement.count", "takes placement.count", "named GPUs over nodes are refused")
        refused(deploy(c, "backwards", {"kind": "gpu", "count": 1, "ranks": ["gpu-b", "gpu-leader"]}), 422,
                "invalid_field", "placement.ranks", "must be this node", "rank 0 elsewhere is refused")

        r = c.request("DELETE", f"/api/v1/deployments/{dep}")
        check(r.status == 204 and wait_for(lambda: not [x for x in bc.get("/api/v1/deployments").json["data"]
                                                        if x["leader_id"] == dep], 30),
              "the group deleted: gpu-b drops its part", r)
    finally:
        if b is not None:
            b.stop()
        lead.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="privai-gpu-")
    engine = os.path.join(tmp, "fake_engine.py")
    shutil.copy2(os.path.join(HERE, "fake_engine.py"), engine)
    os.chmod(engine, 0o755)
    fdir = os.path.join(tmp, "fake")
    os.makedirs(fdir)
    try:
        for name, eng, mig, test in (("whole", engine, "0", lambda c: test_whole_gpus(c, fdir)),
                                     ("mig", engine, "1", lambda c: test_mig(c, fdir)),
                                     ("cpuonly", os.path.join(BUILD, "privai-engine"), "0", test_no_cuda)):
            adm, c = start(tmp, name, eng, mig, fdir)
            try:
                test(c)
                check(adm.stop() == 0, f"[{name}] the admin exits cleanly", open(adm.log_path).read()[-2000:])
            finally:
                adm.stop()
        test_engine_late(tmp, engine, fdir)
        test_group(tmp, engine, fdir)
    finally:
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
