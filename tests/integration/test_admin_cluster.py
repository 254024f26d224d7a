"""privai-admin's nodes and GPUs against live daemons: this node's
inventory from a recorded /proc and /sys tree, GPUs from the recorded NVML
double (8 x H100), MIG layouts checked, applied and re-applied after a
simulated reboot, join tokens, a second privai-admin joining over REST,
heartbeats, unreachable and back, drain and resume on both sides, remove.

usage: python3 tests/integration/test_admin_cluster.py BUILD_DIR"""
import os
import signal
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, BUILD, "demo", "privai-demo.gguf")
XEON = os.path.join(ROOT, "tests", "fixtures", "hosts", "xeon-amx-2s")
DOUBLE = os.path.join(ROOT, BUILD, "libnvml-double.so")
PW = "correct horse battery staple"


def nvml_env(tmp, node, mig="1"):
    return {"PRIVAI_NVML_LIB": DOUBLE, "PRIVAI_NVML_DOUBLE_NODE": str(node), "PRIVAI_NVML_DOUBLE_MIG": mig,
            "PRIVAI_NVML_DOUBLE_STATE": os.path.join(tmp, f"nvml-{node}.state")}




def test_self_node(a):
    r = a.get("/api/v1/nodes")
    check(r.status == 200 and len(r.json["data"]) == 1, "one node: this one", r)
    n = r.json["data"][0]
    check(n["is_self"] == 1 and n["state"] == "ready" and n["name"] == "leader", "self registered, ready", n)
    check(n["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+" and n["cpu_cores"] == 8 and n["numa_nodes"] == 2,
          "CPU model, cores, NUMA from the fixture tree", n)
    inv = n["inventory"]
    check(inv["cpu"]["amx"] is True and inv["cpu"]["avx512"] is True and "amx_int8" in n["cpu_flags"],
          "AMX and AVX-512 flags", inv["cpu"])
    check(n["memory_bytes"] == 65536000 * 1024 and [x["cpus"] for x in inv["numa"]] == ["0-3,8-11", "4-7,12-15"],
          "memory and NUMA CPUs", inv["numa"])
    nic = [x for x in inv["nics"] if x["name"] == "ens1f0"]
    check(nic and nic[0]["speed_mbps"] == 100000 and nic[0]["numa_node"] == 1, "NIC with speed and NUMA node", nic)
    check(n["gpu_count"] == 8, "8 GPUs from NVML", n["gpu_count"])


def test_gpus(a, o, v):
    r = v.get("/api/v1/gpus")
    gpus = r.json["data"]
    check(r.status == 200 and len(gpus) == 8, "viewer lists 8 GPUs", r)
    g = gpus[2]
    check(g["name"] == "NVIDIA H100 80GB HBM3" and g["mig_table"] == "H100-80GB" and g["mig_enabled"] == 1 and
          g["pci_bus_id"] == "00000000:3A:00.0" and g["index"] == 2, "GPU 2: H100, MIG on, bus id", g)
    gid = g["id"]
    r = v.get(f"/api/v1/gpus/{gid}/mig")
    prof = {p["name"]: p for p in r.json["profiles"]}
    check(r.status == 200 and r.json["layout"] == [] and prof["3g.40gb"]["free_starts"] == [0, 4] and
          prof["7g.80gb"]["max"] == 1 and prof["1g.10gb"]["free_starts"] == list(range(7)),
          "empty layout: every start free", r.json.get("profiles", [])[:2])
    # a draft, checked without storing
    r = v.post(f"/api/v1/gpus/{gid}/mig/plan", {"instances": [{"profile": "3g.40gb", "start": 0},
                                                              {"profile": "2g.20gb"}]})
    prof = {p["name"]: p for p in r.json["profiles"]}
    check(r.status == 200 and r.json["valid"] and r.json["layout"][1] == {"profile": "2g.20gb", "start": 4,
          "size": 2, "compute": 2}, "plan places 2g.20gb at 4", r)
    check(prof["1g.10gb"]["free_starts"] == [6] and prof["3g.40gb"]["free_starts"] == [] and
          prof["2g.20gb"]["free_starts"] == [], "plan: only slot 6 is left, for 1g", prof["1g.10gb"])
    r = v.post(f"/api/v1/gpus/{gid}/mig/plan", {"instances": [{"profile": "4g.40gb", "start": 0},
                                                              {"profile": "3g.40gb", "start": 0}]})
    check(r.status == 200 and r.json["valid"] is False and "overlap" in r.json["reason"], "plan: overlap named", r)
    check(v.request("PUT", f"/api/v1/gpus/{gid}/mig", {"instances": []}).status == 403, "viewer cannot apply")
    check(o.request("PUT", f"/api/v1/gpus/{gid}/mig", {"instances": []}).status == 403, "operator cannot apply")

    want = [{"profile": "3g.40gb", "start": 4}, {"profile": "2g.20gb", "start": 0}, {"profile": "1g.10gb"},
            {"profile": "1g.10gb"}]
    r = a.request("PUT", f"/api/v1/gpus/{gid}/mig", {"instances": want})
    layout = [(x["profile"], x["start"], x["state"]) for x in (r.json or {}).get("layout", [])]
    check(r.status == 200 and layout == [("2g.20gb", 0, "applied"), ("1g.10gb", 2, "applied"),
                                         ("1g.10gb", 3, "applied"), ("3g.40gb", 4, "applied")],
          "layout applied through NVML", r)
    inst = sorted((x["profile"], x["start"]) for x in r.json["instances"])
    check(inst == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)], "NVML reports it back", inst)
    # refusals leave the stored layout alone
    bad = [
        ({"instances": [{"profile": "4g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 0}]}, 422,
         "invalid_layout", "overlap"),
        ({"instances": [{"profile": "3g.40gb", "start": 2}]}, 422, "invalid_layout", "start"),
        ({"instances": [{"profile": "7g.80gb"}, {"profile": "1g.10gb"}]}, 422, "invalid_layout", "fit"),
        ({"instances": [{"profile": "1g.10gb+me"}, {"profile": "1g.10gb+me"}]}, 422, "invalid_layout", ""),
        ({"instances": [{"profile": "9g.90gb"}]}, 422, "invalid_field", "no profile"),
        ({"instances": [{"profile": "1g.10gb", "start": 8}]}, 422, "invalid_field", "start"),
        ({"instances": [{"profile": "1g.10gb"}] * 8}, 422, "invalid_field", "at most 7"),
        ({"instances": "3g.40gb"}, 422, "invalid_field", "array"),
        ({"instances": [{"profile": "1g.10gb", "slot": 1}]}, 422, None, "slot"),
        ({"instances": [{"profile": "1g.10gb'; DROP TABLE gpus;--"}]}, 422, "invalid_field", "no profile"),
    ]
    for body, status, code, words in bad:
        r = a.request("PUT", f"/api/v1/gpus/{gid}/mig", body)
        check(r.status == status and (code is None or r.error_code() == code) and
              words.lower() in (r.json or {}).get("error", {}).get("message", "").lower(),
              f"refused: {str(body)[:60]}", r)
    r = a.get(f"/api/v1/gpus/{gid}/mig")
    check(len(r.json["layout"]) == 4 and len(r.json["instances"]) == 4, "refusals changed nothing", r.json["layout"])
    check(a.get("/api/v1/gpus/999999/mig").status == 404, "unknown GPU 404")
    r = a.get("/api/v1/audit?limit=100")
    acts = [(e["action"], e["result"]) for e in r.json["data"]]
    check(("gpu.mig", "ok") in acts and ("gpu.mig", "refused") in acts and
          all(not a.startswith("PUT ") for a, _ in acts),
          "applied and refused layouts audited", acts[:8])
    return gid


def test_reboot(adm, a, tmp, gid):
    """A reboot loses GPU instances; the stored layout comes back at start."""
    adm.stop()
    os.unlink(os.path.join(tmp, "nvml-0.state"))
    adm.start()
    a.port = adm.port
    a.login("admin", PW)
    r = a.get(f"/api/v1/gpus/{gid}/mig")
    inst = sorted((x["profile"], x["start"]) for x in r.json["instances"])
    check(inst == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)] and
          all(x["state"] == "applied" for x in r.json["layout"]), "layout re-applied after a reboot", r.json)
    check("MIG layouts applied again at start: 1" in open(adm.log_path).read(), "the re-apply is logged")


def test_mig_off_and_cpu_only(tmp):
    off = Admin(BUILD, os.path.join(tmp, "off"), PW, ports="19110-19119",
                env_extra=nvml_env(tmp, 3, mig="0"), extra=["--node-name", "off"])
    c = off.client()
    c.login("admin", PW)
    g = c.get("/api/v1/gpus").json["data"][0]
    r = c.request("PUT", f"/api/v1/gpus/{g['id']}/mig", {"instances": [{"profile": "7g.80gb"}]})
    check(g["mig_enabled"] == 0 and r.status == 409 and r.error_code() == "mig_disabled" and "reset" in
          r.json["error"]["message"], "MIG off: refused, mode never changed", r)
    off.stop()
    cpu = Admin(BUILD, os.path.join(tmp, "cpu"), PW, ports="19110-19119",
                env_extra={"PRIVAI_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"}, extra=["--node-name", "cpu"])
    c = cpu.client()
    c.login("admin", PW)
    n = c.get("/api/v1/nodes").json["data"][0]
    check(c.get("/api/v1/gpus").json["data"] == [] and n["gpu_count"] == 0 and
          "CPU-only" in n["inventory"].get("gpu_note", ""), "no NVML: a CPU-only node, not an error", n)
    cpu.stop()


def join_body(token, name="raw-node", report=None):
    rep = report if report is not None else {"cpu": {"model": "x", "flags": "", "cores": 4}, "memory_bytes": 1 << 30,
                                              "numa": [], "nics": []}
    return {"token": token, "name": name, "url": "http://127.0.0.1:9", "report": rep}


def test_join_rest(adm, a, o, tmp):
    """Join by hand over REST: every way a join or heartbeat can be wrong."""
    anon = adm.client()
    check(o.post("/api/v1/nodes/join-tokens", {}).status == 403, "operator cannot make join tokens")
    r = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 0})
    check(r.status == 422, "ttl checked", r)
    r = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 5})
    tok = r.json["token"]
    check(r.status == 201 and tok.startswith("join_") and "--join" in r.json["command"], "join token made", r)
    r = a.get("/api/v1/nodes/join-tokens")
    check(r.status == 200 and "token" not in r.json["data"][-1] and b"join_" not in r.body, "tokens never listed")
    r = anon.post("/api/v1/nodes/join", join_body("join_wrong"))
    check(r.status == 401 and r.error_code() == "invalid_join_token", "wrong join token 401", r)
    bad_reports = [{"cpu": "x"}, {"cpu": {"model": 5, "flags": "", "cores": 1}, "memory_bytes": 1, "numa": []},
                   {"cpu": {"model": "x", "flags": "", "cores": 1}, "memory_bytes": -1, "numa": []},
                   {"cpu": {"model": "x", "flags": "", "cores": 1}, "memory_bytes": 1, "numa": [],
                    "gpus": [{"uuid": "GPU-1", "name": "x"}]},
                   {"cpu": {"model": "x", "flags": "", "cores": 1}, "memory_bytes": 1, "numa": [],
                    "gpus": [{"uuid": "GPU-5e1a0c3d-7b2f-4c11-9a0e-000000000000", "name": "stolen", "index": 0,
                              "memory_bytes": 1}]}]
    for rep in bad_reports:
        r = anon.post("/api/v1/nodes/join", join_body(tok, report=rep))
        check(r.status == 422 and r.json["error"]["field"] == "report", f"bad report refused: {str(rep)[:50]}", r)
    for body, field in ((dict(join_body(tok), name="../x"), "name"), (dict(join_body(tok), url="file:///etc"), "url"),
                        (dict(join_body(tok), extra=1), "extra")):
        r = anon.post("/api/v1/nodes/join", body)
        check(r.status == 422 and r.json["error"]["field"] == field, f"join {field} checked", r)
    check(len(a.get("/api/v1/nodes").json["data"]) == 1, "refused joins stored nothing")
    r = anon.post("/api/v1/nodes/join", join_body(tok))
    check(r.status == 201 and r.json["secret"].startswith("node_") and r.json["node_id"] > 1,
          "the token still worked after refusals", r)
    nid, secret = r.json["node_id"], r.json["secret"]
    r = anon.post("/api/v1/nodes/join", join_body(tok, name="again"))
    check(r.status == 401, "a join token works once", r)
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"), timeout=10)
    check(db.execute("SELECT count(*) FROM join_tokens WHERE token_hash LIKE '%join_%'").fetchone()[0] == 0 and
          db.execute("SELECT secret_sha256 FROM nodes WHERE id = ?", (nid,)).fetchone()[0] != secret,
          "only hashes of tokens and secrets stored")
    t2 = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 5}).json["token"]
    db.execute("UPDATE join_tokens SET expires_at = 1 WHERE used_at IS NULL")
    db.commit()
    db.close()
    r = anon.post("/api/v1/nodes/join", join_body(t2, name="late"))
    check(r.status == 401, "an expired join token 401", r)
    t3 = a.post("/api/v1/nodes/join-tokens", {}).json["token"]
    r = anon.post("/api/v1/nodes/join", join_body(t3))
    check(r.status == 409 and r.json["error"]["field"] == "name", "a node name is unique", r)
    hb = f"/api/v1/nodes/{nid}/heartbeat"
    r = anon.post(hb, {}, headers={"X-Privai-Node-Secret": "node_wrong"})
    check(r.status == 401, "heartbeat with a wrong secret 401", r)
    r = anon.post(hb, {"report": {"cpu": 1}}, headers={"X-Privai-Node-Secret": secret})
    check(r.status == 422, "heartbeat with a bad report 422", r)
    r = anon.post(hb, {}, headers={"X-Privai-Node-Secret": secret})
    check(r.status == 200 and r.json["state"] == "ready" and r.json["mig"] == [], "heartbeat answered", r)
    r = anon.post(f"/api/v1/nodes/1/heartbeat", {}, headers={"X-Privai-Node-Secret": secret})
    check(r.status == 401, "a secret is for its own node only", r)
    # the metrics a member sends: its node as node:self, its GPUs; what is
    # malformed is refused by name, another node's subject too
    now = int(time.time())
    for rows, says in (("x", "array"), ([["gpu:GPU-1", "Temp", now, 1]], "metrics[0]"),
                       ([["gpu:GPU-1", "temp_c", now + 0.5, 1]], "metrics[0]"),
                       # beyond int64_t: once cast before any range check
                       ([["gpu:GPU-1", "temp_c", 1e300, 1]], "metrics[0]"),
                       ([["gpu:GPU-1", "temp_c", -1e300, 1]], "metrics[0]"),
                       ([["node:1", "cpu_pct", now, 1]], "is not node:self"),
                       ([["gpu:GPU 1", "temp_c", now, 1]], "is not node:self")):
        r = anon.post(hb, {"metrics": rows}, headers={"X-Privai-Node-Secret": secret})
        check(r.status == 422 and r.json["error"]["field"] == "metrics" and says in r.json["error"]["message"],
              f"heartbeat metrics {rows!r} refused", r)
    r = anon.post(hb, {"metrics": [["node:self", "cpu_pct", now, 12.5], ["gpu:GPU-raw-1", "temp_c", now, 40],
                                   ["deployment:1", "tokens_per_s", now, 9], ["gpu:GPU-raw-1", "temp_c", now - 999999, 1]]},
                  headers={"X-Privai-Node-Secret": secret})
    h = a.get(f"/api/v1/metrics/history?subject=node:{nid}").json
    g = a.get("/api/v1/metrics/history?subject=gpu:GPU-raw-1").json
    d = a.get("/api/v1/metrics/history?subject=deployment:1").json
    check(r.status == 200 and h["series"].get("cpu_pct") == [12.5] and g["series"].get("temp_c") == [40] and
          "tokens_per_s" not in d["series"], "a member's samples kept under its node; another node's deployment "
          "and a sample too old left out", (h, g, d))
    check(o.request("DELETE", f"/api/v1/nodes/{nid}").status == 403, "operator cannot remove a node")
    r = a.request("DELETE", f"/api/v1/nodes/{nid}")
    check(r.status == 204, "remove", r)
    r = anon.post(hb, {}, headers={"X-Privai-Node-Secret": secret})
    check(r.status == 410 and r.error_code() == "node_removed", "a removed node is told so: 410", r)
    r = a.get(f"/api/v1/nodes/{nid}")
    check(r.json["state"] == "removed", "the row stays, removed", r)
    r = a.request("DELETE", "/api/v1/nodes/1")
    check(r.status == 409 and r.error_code() == "is_self", "a node cannot remove itself", r)


def test_second_admin(adm, a, o, tmp):
    """A second privai-admin joins with a token, heartbeats, takes a MIG
    layout planned for it, follows a drain, goes unreachable and back."""
    tok = a.post("/api/v1/nodes/join-tokens", {}).json["token"]
    env = dict(nvml_env(tmp, 1), PRIVAI_JOIN_TOKEN=tok)
    b = Admin(BUILD, os.path.join(tmp, "b"), PW, ports="19120-19129", env_extra=env,
              extra=["--node-name", "node-b", "--join", f"http://127.0.0.1:{adm.port}", "--heartbeat-s", "1",
                     "--metrics-interval-s", "1"])
    try:
        node = wait_for(lambda: [n for n in a.get("/api/v1/nodes").json["data"] if n["name"] == "node-b"], 15)
        check(node and node[0]["state"] == "ready" and node[0]["gpu_count"] == 8 and
              node[0]["url"] == f"http://127.0.0.1:{b.port}", "node-b joined with its 8 GPUs", node)
        nid = node[0]["id"]
        bc = b.client()
        bc.login("admin", PW)
        r = bc.get("/api/v1/cluster")
        check(r.json["role"] == "member" and r.json["membership"]["node_id"] == nid and
              "secret" not in r.json["membership"], "node-b is a member", r)
        gb = [g for g in a.get("/api/v1/gpus").json["data"] if g["node"] == "node-b"]
        check(len(gb) == 8 and gb[0]["uuid"].endswith("000000010000"), "node-b's GPUs, its own UUIDs", gb[:1])
        # node-b's history reaches the leader with its heartbeats
        mine = bc.get("/api/v1/nodes").json["data"][0]["id"]
        there = wait_for(lambda: a.get(f"/api/v1/metrics/history?subject=node:{nid}").json["series"].get(
            "mem_total_bytes"), 15)
        here = bc.get(f"/api/v1/metrics/history?subject=node:{mine}").json["series"].get("mem_total_bytes")
        check(there and here and there[-1] == here[-1], "node-b's memory charted on the leader, as node-b sampled it",
              (there, here))
        g3 = wait_for(lambda: a.get(f"/api/v1/metrics/history?subject=gpu:{gb[3]['uuid']}").json["series"].get(
            "temp_c"), 15)
        check(g3 and g3[-1] == 34, "and its GPU 3's temperature", g3)
        r = a.request("PUT", f"/api/v1/gpus/{gb[5]['id']}/mig", {"instances": [{"profile": "4g.40gb"},
                                                                               {"profile": "3g.40gb"}]})
        check(r.status == 202 and all(x["state"] == "planned" for x in r.json["layout"]), "remote layout planned", r)
        ok = wait_for(lambda: all(x["state"] == "applied" for x in
                                  a.get(f"/api/v1/gpus/{gb[5]['id']}/mig").json["layout"]), 15)
        check(ok, "node-b applied it and said so")
        mine = [g for g in bc.get("/api/v1/gpus").json["data"] if g["uuid"] == gb[5]["uuid"]][0]
        check(sorted(x["profile"] for x in mine["instances"]) == ["3g.40gb", "4g.40gb"],
              "node-b's own NVML has the instances", mine["instances"])
        model = a.get("/api/v1/models").json["data"][0]["name"]
        r = o.post("/api/v1/deployments", {"name": "there", "model": model,
                                           "placement": {"kind": "cpu", "node": "no-such-node"}})
        check(r.status == 422 and r.error_code() == "invalid_field" and r.json["error"]["field"] == "placement.node",
              "a deployment on an unknown node is refused (test_admin_remote.py places them on node-b)", r)
        check(not any(d["name"] == "there" for d in a.get("/api/v1/deployments").json["data"]), "none was stored")
        r = o.post(f"/api/v1/nodes/{nid}/drain")
        check(r.status == 200 and r.json["state"] == "draining", "operator drains node-b", r)
        ok = wait_for(lambda: bc.get("/api/v1/nodes").json["data"][0]["state"] == "draining", 10)
        check(ok, "node-b follows the drain")
        r = o.post(f"/api/v1/nodes/{nid}/resume")
        ok = wait_for(lambda: bc.get("/api/v1/nodes").json["data"][0]["state"] == "ready", 10)
        check(r.status == 200 and ok, "and the resume", r)
        b.stop(signal.SIGKILL)
        ok = wait_for(lambda: [n for n in a.get("/api/v1/nodes").json["data"] if n["id"] == nid][0]["state"] ==
                      "unreachable", 20)
        check(ok, "killed node-b turns unreachable")
        b.start()
        ok = wait_for(lambda: [n for n in a.get("/api/v1/nodes").json["data"] if n["id"] == nid][0]["state"] ==
                      "ready", 20)
        check(ok, "restarted node-b is ready again, without a new token")
        acts = {e["action"] for e in a.get("/api/v1/audit?limit=200").json["data"] if e["result"] == "ok"}
        check({"node.join", "node.drain", "node.resume", "node.unreachable", "node.reachable"} <= acts,
              "node changes audited", acts)
        check(a.request("DELETE", f"/api/v1/nodes/{nid}").status == 204, "remove node-b")
        bc = b.client()
        bc.login("admin", PW)
        ok = wait_for(lambda: bc.get("/api/v1/cluster").json["membership"]["state"] == "removed", 10)
        check(ok, "node-b learns it was removed")
        check(not [g for g in a.get("/api/v1/gpus").json["data"] if g["node"] == "node-b"], "its GPUs are gone")
    finally:
        b.stop(signal.SIGKILL)


def test_drain_self(a, o):
    """Draining this node stops its deployments; resuming starts them."""
    dep = wait_for(lambda: [d for d in a.get("/api/v1/deployments").json["data"] if d["state"] == "ready"], 60)
    check(dep, "demo deployment ready")
    r = o.post("/api/v1/nodes/1/drain")
    check(r.status == 200 and r.json["state"] == "draining", "drain this node", r)
    d = wait_for(lambda: [d for d in a.get("/api/v1/deployments").json["data"] if d["state"] == "stopped"], 30)
    check(d and d[0]["desired"] == "stopped" and "drained" in (d[0]["reason"] or ""), "its deployment stopped", d)
    models = a.get("/api/v1/models").json["data"]
    r = o.post("/api/v1/deployments", {"name": "more", "model": models[0]["id"]})
    check(r.status == 409 and r.error_code() == "node_draining", "nothing new starts while draining", r)
    r = o.request("PATCH", f"/api/v1/deployments/{dep[0]['id']}", {"desired": "running"})
    check(r.status == 409, "nor restarts", r)
    check(o.post("/api/v1/nodes/1/resume").status == 200, "resume")
    d = wait_for(lambda: [d for d in a.get("/api/v1/deployments").json["data"] if d["state"] == "ready"], 60)
    check(d and d[0]["desired"] == "running", "the drained deployment runs again", d)


def raw_get(port, path, method="GET"):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_accept_encoding=True)  # sent as written, not normalised
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, r.headers, body


def test_webui_static(tmp):
    """The console's files: served with a self-only CSP; nothing outside
    the directory, hidden, or of an unknown type."""
    web = os.path.join(tmp, "web")
    os.makedirs(os.path.join(web, "js"))
    with open(os.path.join(web, "index.html"), "w") as f:
        f.write("<!doctype html><title>t</title>")
    with open(os.path.join(web, "js", "app.js"), "w") as f:
        f.write("export default 1;")
    with open(os.path.join(web, ".hidden.js"), "w") as f:
        f.write("secret")
    with open(os.path.join(tmp, "outside.txt"), "w") as f:
        f.write("OUTSIDE-7f3a")
    os.symlink(os.path.join(tmp, "outside.txt"), os.path.join(web, "leak.txt"))
    w = Admin(BUILD, os.path.join(tmp, "web-state"), PW, ports="19110-19119", extra=["--webui", web])
    try:
        st, hd, body = raw_get(w.port, "/")
        csp = hd.get("Content-Security-Policy", "")
        check(st == 200 and b"<title>t</title>" in body and hd.get("Content-Type", "").startswith("text/html") and
              "default-src 'self'" in csp and "unsafe-inline" not in csp, "index served with a self-only CSP", hd)
        st, hd, _ = raw_get(w.port, "/js/app.js")
        check(st == 200 and hd.get("Content-Type", "").startswith("text/javascript"), "a module served as JavaScript")
        for path in ("/leak.txt", "/.hidden.js", "/js/../../outside.txt", "/../outside.txt", "/%2e%2e/outside.txt",
                     "/js/%2e%2e/%2e%2e/outside.txt", "/privai.db", "/js/"):
            st, _, body = raw_get(w.port, path)
            check(st == 404 and b"OUTSIDE-7f3a" not in body and b"secret" not in body, f"static {path} refused", st)
        st, _, _ = raw_get(w.port, "/index.html", method="POST")
        check(st == 404, "POST to a static file is not served", st)
    finally:
        w.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="privai-cluster-test-")
    adm = Admin(BUILD, os.path.join(tmp, "leader"), PW, ports="19100-19109", env_extra=nvml_env(tmp, 0),
                extra=["--node-name", "leader", "--sys-root", XEON, "--heartbeat-s", "1", "--demo-model", DEMO,
                       "--login-rate", "1000"])
    try:
        a, o, v = users(adm, PW)
        test_self_node(a)
        gid = test_gpus(a, o, v)
        test_reboot(adm, a, tmp, gid)
        o.port = adm.port
        o.login("olga", PW)
        test_join_rest(adm, a, o, tmp)
        test_second_admin(adm, a, o, tmp)
        test_drain_self(a, o)
        check(adm.stop() == 0, "SIGTERM: clean exit")
        test_mig_off_and_cpu_only(tmp)
        test_webui_static(tmp)
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop(signal.SIGKILL)
        clean_up(tmp, 60)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
