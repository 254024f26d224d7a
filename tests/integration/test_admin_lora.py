#!/usr/bin/env python3
"""LoRA adapters in the control plane (issue 22) against a live
privai-admin and real engines: an adapter is registered as a model that
depends on its base (by path, upload, resumable upload and URL), checked
against the base's tensors, refused by name when it does not fit or names
no base; the base's deployment serves it by name with the output of the
merged-weights reference; one registered while the base runs is served at
once, one deleted is no longer served; the base cannot be deleted while
adapters name it; an adapter cannot be deployed or sized on its own.
Usage: test_admin_lora.py BUILD"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402
from test_admin import FileServer  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "..", "shared", "fixtures")
BASE = os.path.join(FIXTURES, "models", "tiny-llama-spm-f16.gguf")
ENGINE = os.path.join(BUILD, "privai-engine")
PW = "lora-test-password-1"
OCTET = {"Content-Type": "application/octet-stream"}
PROMPT = "Once upon a time"


def gguf_adapter(path, tensors, arch="llama"):
    """A minimal GGUF v3 LoRA adapter: general.type adapter, adapter.type
    lora, and F32 tensors {name: (ne0, ne1)} of zeros."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    kv = [("general.architecture", arch), ("general.type", "adapter"), ("adapter.type", "lora")]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, v in kv:
        out += s(k) + struct.pack("<I", 8) + s(v)
    offset = 0
    for name, (ne0, ne1) in tensors.items():
        out += s(name) + struct.pack("<IQQIQ", 2, ne0, ne1, 0, offset)
        offset += (ne0 * ne1 * 4 + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for name, (ne0, ne1) in tensors.items():
        out += b"\0" * ((ne0 * ne1 * 4 + 31) // 32 * 32)
    with open(path, "wb") as f:
        f.write(out)


def complete(o, dep, model):
    """Greedy text from deployment dep for `model` (a base or an adapter)."""
    r = o.post(f"/api/v1/deployments/{dep}/v1/completions",
               {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True})
    return r.json["choices"][0]["text"] if r.status == 200 else (r.status, r.json)


def engine_args(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def ready(v, dep, other_than=None):
    return wait_for(lambda: (lambda j: j if j["state"] in ("ready", "failed") and j["pid"] != other_than else None)(
        v.get(f"/api/v1/deployments/{dep}").json), timeout=90)


def test_register(o, v, root):
    """By path: the rules, then a good adapter."""
    r = o.post("/api/v1/models", {"name": "base", "path": os.path.join(root, "base.gguf")})
    check(r.status == 201 and r.json["kind"] == "model" and r.json["base_model"] is None, "base registered", r)
    base_id = r.json["id"]
    ad = os.path.join(root, "ad1.gguf")
    for body, field, says in (
            ({"name": "ad1", "path": ad}, "base_model", "name the model it adapts"),
            ({"name": "ad1", "path": ad, "base_model": "nope"}, "base_model", "no ready model 'nope'"),
            ({"name": "b2", "path": os.path.join(root, "base.gguf"), "base_model": "base"}, "base_model",
             "this file is a model"),
            ({"name": "a:b", "path": ad, "base_model": "base"}, "base_model", "an adapter's name"),
            ({"name": "bad", "path": os.path.join(root, "misfit.gguf"), "base_model": "base"}, "base_model",
             "blk.0.attn_q.weight.lora_a"),
            ({"name": "bad", "path": os.path.join(root, "stray.gguf"), "base_model": "base"}, "base_model",
             "blk.0.attn_zz.weight, which the base model does not have"),
            ({"name": "bad", "path": os.path.join(root, "other-arch.gguf"), "base_model": "base"}, "base_model",
             "for a qwen2 model")):
        r = o.post("/api/v1/models", body)
        check(r.status == 422 and r.json["error"]["field"] == field and says in r.json["error"]["message"],
              f"refused: {says}", r)
    r = o.post("/api/v1/models", {"name": "ad1", "path": ad, "base_model": "base"})
    check(r.status == 201 and r.json["kind"] == "lora" and r.json["base_model"] == "base" and
          r.json["base_model_id"] == base_id and r.json["lora_rank"] == 8 and r.json["n_layer"] is None and
          r.json["served_by"] == {"loaded": [], "failed": [], "other_nodes": []},
          "adapter registered with its base (by name)", r)
    ad1_id = r.json["id"]
    names = [m["name"] for m in v.get("/api/v1/models").json["data"]]
    check(names == ["base", "ad1"], "the refusals stored nothing", names)
    r = v.get(f"/api/v1/models/{base_id}")
    check(r.json["adapters"] == 1, "the base counts its adapters", r)
    r = v.get(f"/api/v1/models/{ad1_id}/sizing?gpu=H100-80GB")
    check(r.status == 422 and r.error_code() == "lora_adapter", "an adapter is sized with its base", r)
    r = o.post("/api/v1/deployments", {"name": "x", "model": "ad1", "placement": {"kind": "cpu", "threads": 1}})
    check(r.status == 422 and r.error_code() == "lora_adapter" and "deploy 'base'" in r.json["error"]["message"],
          "an adapter cannot be deployed on its own", r)
    return base_id, ad1_id


def test_serving(o, v, root, base_id):
    """The base's deployment serves its adapters; the merged model is the reference."""
    dep = o.post("/api/v1/deployments", {"name": "base", "model": "base", "placement": {"kind": "cpu", "threads": 1},
                                         "options": {"ctx": 256}}).json["id"]
    r = o.post("/api/v1/models", {"name": "merged", "path": os.path.join(root, "merged.gguf")})
    ref = o.post("/api/v1/deployments", {"name": "merged", "model": "merged",
                                         "placement": {"kind": "cpu", "threads": 1}, "options": {"ctx": 256}}).json["id"]
    d = ready(v, dep)
    check(d and d["state"] == "ready", "base deployed", d)
    check(ready(v, ref)["state"] == "ready", "merged reference deployed")
    args = engine_args(d["pid"]) if d else []
    check(b"--lora" in args and f"ad1={os.path.join(root, 'ad1.gguf')}".encode() in args and
          args.count(b"--lora-dir") == 2 and args.count(root.encode()) == 1, "the engine runs with the adapter and the model directories", args)
    plain, with_ad = complete(o, dep, "base"), complete(o, dep, "ad1")
    want = complete(o, ref, "merged")
    check(isinstance(with_ad, str) and with_ad == want and with_ad != plain,
          "the adapter served by the base's deployment = the merged model", (plain, with_ad, want))
    check(complete(o, dep, "base:ad1") == with_ad, "also as base:ad1")

    # registered while the base runs: served at once, without a restart
    pid = d["pid"]
    r = o.post("/api/v1/models", {"name": "ad2", "path": os.path.join(root, "ad2.gguf"), "base_model": str(base_id)})
    check(r.status == 201 and r.json["served_by"]["loaded"] == [dep], "a new adapter is loaded by the running engine", r)
    ad2_id = r.json["id"]
    out2 = complete(o, dep, "ad2")
    check(isinstance(out2, str) and out2 not in (plain, with_ad) and v.get(f"/api/v1/deployments/{dep}").json["pid"] == pid,
          "and served by name, no restart", (out2, plain, with_ad))
    r = o.request("DELETE", f"/api/v1/models/{base_id}")
    check(r.status == 409 and "ad1, ad2" in r.json["error"]["message"], "the base cannot go while adapters name it", r)
    r = o.request("DELETE", f"/api/v1/models/{ad2_id}")
    check(r.status == 204 and os.path.exists(os.path.join(root, "ad2.gguf")), "adapter deleted (its path file stays)", r)
    gone = complete(o, dep, "ad2")
    check(isinstance(gone, tuple) and gone[0] == 404, "a deleted adapter is no longer served", gone)
    check(complete(o, dep, "ad1") == with_ad, "the other adapter still is")
    return dep, ref


def test_other_ways(adm, o, v, root, dep):
    """Upload, resumable upload and URL download of adapters."""
    data = open(os.path.join(root, "ad2.gguf"), "rb").read()
    r = o.post("/api/v1/models/upload?name=up1", raw=data, headers=OCTET)
    check(r.status == 422 and r.json["error"]["field"] == "base_model", "an uploaded adapter needs its base", r)
    r = o.post("/api/v1/models/upload?name=up1&base_model=base", raw=data, headers=OCTET)
    check(r.status == 201 and r.json["kind"] == "lora" and r.json["served_by"]["loaded"] == [dep],
          "upload with ?base_model= registered and loaded", r)
    check(isinstance(complete(o, dep, "up1"), str), "the uploaded adapter is served")
    r = o.post("/api/v1/uploads", {"name": "up2", "size": len(data), "base_model": "base"})
    check(r.status == 201 and r.json["base_model"] == "base", "resumable upload of an adapter begun", r)
    uid = r.json["id"]
    o.request("PUT", f"/api/v1/uploads/{uid}?offset=0", raw=data[:1000], headers=OCTET)
    r = o.request("PUT", f"/api/v1/uploads/{uid}?offset=1000", raw=data[1000:], headers=OCTET)
    check(r.status == 201 and r.json["kind"] == "lora" and r.json["base_model"] == "base" and
          r.json["served_by"]["loaded"] == [dep], "and finished as an adapter of its base", r)
    r = o.post("/api/v1/uploads", {"name": "up3", "size": len(data)})
    uid = r.json["id"]
    r = o.request("PUT", f"/api/v1/uploads/{uid}?offset=0", raw=data, headers=OCTET)
    check(r.status == 422 and r.json["error"]["field"] == "base_model" and
          o.get(f"/api/v1/uploads/{uid}").status == 404, "an adapter uploaded without its base is removed", r)

    srv = FileServer(root)
    try:
        o2 = adm.client()
        o2.login("admin", PW)
        o2.request("PUT", "/api/v1/settings/model_url_hosts", {"value": f"127.0.0.1:{srv.port}"})
        r = o.post("/api/v1/models", {"name": "dl1", "url": f"http://127.0.0.1:{srv.port}/ad2.gguf",
                                      "base_model": "base"})
        check(r.status == 202, "adapter download started", r)
        m = wait_for(lambda: (lambda j: j if j["state"] != "importing" else None)(v.get(f"/api/v1/models/{r.json['id']}").json))
        check(m and m["state"] == "ready" and m["kind"] == "lora" and m["base_model"] == "base",
              "a downloaded adapter is ready as an adapter of its base", m)
        check(isinstance(complete(o, dep, "dl1"), str), "and served by the running base")
        r = o.post("/api/v1/models", {"name": "dl2", "url": f"http://127.0.0.1:{srv.port}/ad2.gguf"})
        m = wait_for(lambda: (lambda j: j if j["state"] != "importing" else None)(v.get(f"/api/v1/models/{r.json['id']}").json))
        check(m and m["state"] == "failed" and "name the model it adapts" in (m["error"] or ""),
              "a downloaded adapter without a base fails and says why", m)
        r = o.post("/api/v1/models", {"name": "dl3", "url": f"http://127.0.0.1:{srv.port}/ad2.gguf",
                                      "base_model": "nope"})
        check(r.status == 422 and r.json["error"]["field"] == "base_model", "a download naming no base is refused", r)
    finally:
        srv.close()


def test_restart(o, v, root, dep):
    """A restart starts the engine with the adapters the store holds."""
    pid = v.get(f"/api/v1/deployments/{dep}").json["pid"]
    o.request("PATCH", f"/api/v1/deployments/{dep}", {"options": {"ctx": 200}})
    d = ready(v, dep, other_than=pid)
    args = engine_args(d["pid"]) if d else []
    loras = sorted(a.split(b"=")[0] for i, a in enumerate(args) if i > 0 and args[i - 1] == b"--lora")
    check(loras == [b"ad1", b"dl1", b"up1", b"up2"], "restarted with every adapter of its base, not the deleted", loras)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-lora-")
    root = os.path.join(tmp, "models")
    os.makedirs(root)
    shutil.copy(BASE, os.path.join(root, "base.gguf"))
    made = [subprocess.run([ENGINE, "lora", "synth", "-m", BASE, "-o", os.path.join(root, "ad1.gguf"), "--rank", "8"],
                           capture_output=True, text=True),
            subprocess.run([ENGINE, "lora", "synth", "-m", BASE, "-o", os.path.join(root, "ad2.gguf"), "--rank", "4",
                            "--seed", "7"], capture_output=True, text=True),
            subprocess.run([ENGINE, "lora", "merge", "-m", BASE, "--lora", os.path.join(root, "ad1.gguf"), "-o",
                            os.path.join(root, "merged.gguf")], capture_output=True, text=True)]
    check(all(p.returncode == 0 for p in made), "adapters and the merged reference made", [p.stderr for p in made])
    gguf_adapter(os.path.join(root, "misfit.gguf"), {"blk.0.attn_q.weight.lora_a": (100, 4),
                                                     "blk.0.attn_q.weight.lora_b": (4, 256)})
    gguf_adapter(os.path.join(root, "stray.gguf"), {"blk.0.attn_zz.weight.lora_a": (256, 4),
                                                    "blk.0.attn_zz.weight.lora_b": (4, 256)})
    gguf_adapter(os.path.join(root, "other-arch.gguf"), {"blk.0.attn_q.weight.lora_a": (256, 4),
                                                         "blk.0.attn_q.weight.lora_b": (4, 256)}, arch="qwen2")
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=("--model-root", root), ports="19260-19269")
    try:
        _, o, v = users(adm, PW)
        base_id, _ = test_register(o, v, root)
        dep, _ = test_serving(o, v, root, base_id)
        test_other_ways(adm, o, v, root, dep)
        test_restart(o, v, root, dep)
        check(adm.stop() == 0, "the admin exits cleanly (no sanitizer report)", open(adm.log_path).read()[-2000:])
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop()
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
