#!/usr/bin/env python3
"""A deployment on this host's GPU, made the way the console makes it.

privai-admin runs with the real engine and the host's own NVML (no double):
the node's inventory must say the engine drives CUDA, a deployment is
created with a GPU placement (POST /api/v1/deployments, what the console's
form sends), and it must answer chat completions through the admin's
proxy, whole and streamed, with the same greedy text as the same model
deployed on the CPU beside it.  The engine's own /metrics must show it
holding the GPU's memory.

This needs a GPU: scripts/gpu-check.sh runs it on the lent machine.  Where
nvidia-smi finds none it says so and skips.  PRIVAI_DEPLOY_CHECK_CPU=1 runs
every step with a CPU placement where the GPU one would be, to check the
script itself on a machine without a GPU (what it then proves is only
that: the GPU's own checks are left out and counted as skipped).

usage: python3 tests/integration/test_gpu_deploy.py BUILD MODEL.gguf"""
import http.client
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import Admin, check, clean_up, stream_text, wait_for  # noqa: E402
import adminlib  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MODEL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(BUILD, "demo", "privai-demo.gguf")
CPU_ONLY = os.environ.get("PRIVAI_DEPLOY_CHECK_CPU") == "1"
PW = "gpu-deploy-check-password-1"
OPTIONS = {"ctx": 512, "chat_template": "llama2"}
ASK = {"messages": [{"role": "user", "content": "Tell me a story about a dog."}], "max_tokens": 32, "temperature": 0}
SKIPPED = 0


def gpus_here():
    """nvidia-smi -L's lines, or None with why there are none."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("GPU ")]
    return (lines, "") if r.returncode == 0 and lines else (None, (r.stdout + r.stderr).strip()[:200])


def pick_gpu(gpus):
    """A placement on the first GPU not in MIG mode, else on its first MIG instance."""
    for g in gpus:
        if not g.get("mig_enabled") and not g.get("mig_mode"):
            return {"kind": "gpu", "gpus": [g["uuid"]]}, g
    for g in gpus:
        for inst in g.get("instances") or []:
            if str(inst.get("uuid", "")).startswith("MIG-"):
                return {"kind": "gpu", "gpus": [inst["uuid"]]}, g
    return None, None


def engine_metrics(port, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": "Bearer " + key})
    r = conn.getresponse()
    body = r.read().decode(errors="replace")
    conn.close()
    values = {}
    for line in body.splitlines():
        if line.startswith("privai:device_memory"):
            name, value = line.split("{")[0].split(" ")[0], line.rsplit(" ", 1)[1]
            values[name] = float(value)
    return r.status, values


def deploy(c, name, placement):
    r = c.post("/api/v1/deployments", {"name": name, "model": "demo", "placement": placement, "options": OPTIONS})
    check(r.status == 201 and str(r.json.get("api_key", "")).startswith("sk-"),
          f"deployment '{name}' created with placement {placement}", r)
    if r.status != 201:
        return None, None
    d = wait_for(lambda: (lambda j: j if j and j["state"] in ("ready", "failed") else None)(
        c.get(f"/api/v1/deployments/{r.json['id']}").json), timeout=240)
    check(d is not None and d["state"] == "ready", f"deployment '{name}' is ready", d)
    return (d if d and d["state"] == "ready" else None), r.json["api_key"]


def chat(c, d, what):
    r = c.post(f"/api/v1/deployments/{d['id']}/v1/chat/completions", ASK, timeout=120)
    ok = r.status == 200 and r.json["choices"][0]["message"]["content"] and r.json["usage"]["completion_tokens"] > 0
    check(ok, f"{what} answers a chat completion through the admin's proxy", r)
    return r.json["choices"][0]["message"]["content"] if ok else None


def checks(c, lines):
    global SKIPPED
    node = c.get("/api/v1/nodes").json["data"][0]
    eng = node["inventory"].get("engine", {})
    gpus = c.get("/api/v1/gpus").json["data"]
    if CPU_ONLY:
        placement, gpu = {"kind": "cpu"}, None
        SKIPPED += 4  # the inventory's CUDA, its GPUs, the engine's device memory, the GPU freed
    else:
        check("cuda" in eng.get("backends", []), "the node's engine drives CUDA", eng)
        check(len(gpus) == len(lines), f"the admin lists the {len(lines)} GPU(s) nvidia-smi lists",
              [(g.get("index"), g.get("uuid")) for g in gpus])
        placement, gpu = pick_gpu(gpus)
        if not check(placement is not None, "a GPU or MIG instance to deploy on", gpus):
            return
    on_gpu, key = deploy(c, "on-gpu", placement)
    on_cpu, _ = deploy(c, "on-cpu", {"kind": "cpu"})
    if on_gpu is None:
        return
    if gpu is not None:
        status, mem = engine_metrics(on_gpu["port"], key)
        check(status == 200 and mem.get("privai:device_memory_bytes", 0) > 0 and
              0 < mem.get("privai:device_memory_budget_bytes", 0) <= mem["privai:device_memory_bytes"],
              "the engine's /metrics shows the GPU's memory and its share of it", (status, mem))
    text = chat(c, on_gpu, "the GPU deployment")
    if on_cpu is not None:
        want = chat(c, on_cpu, "the CPU deployment")
        check(text is not None and text == want, "the GPU and the CPU give the same greedy answer", (text, want))
    r = c.open_stream(f"/api/v1/deployments/{on_gpu['id']}/v1/chat/completions",
                      dict(ASK, stream=True, stream_options={"include_usage": True}), timeout=120)
    streamed, n, usage, done = stream_text(r)
    check(r.status == 200 and done and n > 2 and streamed == text and usage and usage["completion_tokens"] > 0,
          "a streamed chat on the GPU adds up to the whole answer", (n, streamed, text, usage))
    r = c.request("PATCH", f"/api/v1/deployments/{on_gpu['id']}", {"desired": "stopped"})
    check(r.status == 200, "the GPU deployment stops", r)
    if gpu is not None:
        held = {g["uuid"]: g.get("deployment") for g in c.get("/api/v1/gpus").json["data"]}
        check(held.get(gpu["uuid"]) is None, "its GPU is free once it is stopped", held)
    print(f"GPU deployment: {placement}, answer: {text!r}")


def main():
    lines, why = gpus_here()
    if lines is None and not CPU_ONLY:
        print(f"skipped: no NVIDIA GPU here (nvidia-smi -L: {why or 'nothing'})")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    tmp = tempfile.mkdtemp(prefix="privai-gpu-deploy-")
    adm = None
    try:
        adm = Admin(BUILD, os.path.join(tmp, "node"), PW, ports="19300-19309",
                    extra=("--engine", os.path.join(BUILD, "privai-engine"), "--demo-model", MODEL,
                           "--node-name", "gpu-node"))
        c = adm.client()
        c.login("admin", PW)
        checks(c, lines)
    finally:
        if adm is not None:
            adm.stop()
        clean_up(tmp, lines=60)
    print(f"{adminlib.PASSED} passed, {adminlib.FAILED} failed, {SKIPPED} skipped")
    return 1 if adminlib.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
