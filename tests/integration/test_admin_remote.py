"""Deployments placed on another node, against two live privai-admins on
loopback: the leader stores the row, node-b learns it from the heartbeat
answer, fetches the model from the leader with its node secret (size and
GGUF checked), runs the engine with its own supervisor and reports the
state back; chat, metrics and logs go through the leader's proxy and
node-b's relay; keys, stop, options, drain, kill -9, delete and remove
follow; bad reports and wrong secrets are refused.

usage: python3 tests/integration/test_admin_remote.py BUILD_DIR"""
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import (Admin, Client, check, clean_up, dep_of, leader_and_node_b, stream_text, summary,  # noqa: E402
                      wait_for)

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, BUILD, "demo", "privai-demo.gguf")
PW = "correct horse battery staple"


def raw(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    h = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    out = r.status, r.read()
    conn.close()
    return out


def chat_via_node(port, dep, key):
    h = {"Authorization": "Bearer " + key} if key else {}
    st, body = raw(port, "POST", f"/api/v1/cluster/deployments/{dep}/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}, h)
    return st


def state_is(c, dep, *states):
    d = dep_of(c, dep)
    return d if d and d["state"] in states else None


def member_row(bc, dep):
    rows = [d for d in bc.get("/api/v1/deployments").json["data"] if d["leader_id"] == dep]
    return rows[0] if rows else None


def test_stream(o, b, dep, key):
    """Streams pass through the leader's proxy and node-b's relay, event by event."""
    ask = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 16, "temperature": 0}
    whole = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions", ask)
    want = whole.json["choices"][0]["message"]["content"] if whole.status == 200 else None
    r = o.open_stream(f"/api/v1/deployments/{dep}/v1/chat/completions", dict(ask, stream=True))
    ctype = r.getheader("Content-Type")
    text, n, _, done = stream_text(r)
    # the engine sends what text is ready when its writer asks, so on a
    # loaded machine the content may arrive as one event after the role's
    # (seen in CI's clean run); relaying event by event is proven with the
    # steerable fake engine in test_admin_stream.py
    check(r.status == 200 and ctype == "text/event-stream" and done and n >= 2 and text == want,
          "a chat streamed through the leader and node-b says what the whole one says", (r.status, n, text, want))
    app = Client(b.port)
    app.token = key
    r = app.open_stream(f"/api/v1/cluster/deployments/{dep}/v1/chat/completions", dict(ask, stream=True))
    text, n, _, done = stream_text(r)
    check(r.status == 200 and done and text == want, "and straight from node-b's endpoint with the key", (r.status, text))


def test_placed(adm, b, o, v, bc, nid):
    demo = [m for m in o.get("/api/v1/models").json["data"] if m["name"] == "demo"][0]
    r = o.post("/api/v1/deployments", {"name": "far", "model": "demo",
                                       "placement": {"kind": "cpu", "threads": 1, "node": "node-b"},
                                       "options": {"ctx": 256, "chat_template": "chatml"}})
    check(r.status == 201 and r.json["node"] == "node-b" and r.json["port"] is None and
          r.json["api_key"].startswith("sk-") and "waiting for its next heartbeat" in (r.json["reason"] or "") and
          r.json["endpoint"] == f"http://127.0.0.1:{b.port}/api/v1/cluster/deployments/{r.json['id']}/v1",
          "deployment placed on node-b: no port here, node-b's endpoint", r)
    dep, key = r.json["id"], r.json["api_key"]
    d = wait_for(lambda: state_is(o, dep, "ready", "failed"), 90)
    check(d and d["state"] == "ready" and d["started_at"], "node-b reports it ready", d)
    mine = member_row(bc, dep)
    check(mine and mine["name"] == "far" and mine["state"] == "ready" and mine["pid"] > 0 and
          mine["options"] == {"ctx": 256, "chat_template": "chatml"} and mine["placement"] == {"kind": "cpu", "threads": 1},
          "node-b runs it with its own supervisor", mine)
    m = [x for x in bc.get("/api/v1/models").json["data"] if x["name"] == "demo"]
    check(m and m[0]["state"] == "ready" and m[0]["source"] == "url" and m[0]["size_bytes"] == demo["size_bytes"] and
          f"/api/v1/nodes/{nid}/models/{demo['id']}/file" in m[0]["url"] and len(m[0]["sha256"]) == 64,
          "node-b fetched the model from the leader", m)
    with open(DEMO, "rb") as f:
        same = f.read() == open(m[0]["path"], "rb").read()
    check(same, "node-b's copy is byte for byte the leader's file")
    acts = [(e["actor"], e["action"]) for e in bc.get("/api/v1/audit?limit=100").json["data"]]
    check(("leader", "deployment.create") in acts and ("system", "model.download") in acts,
          "node-b's audit log says the leader placed it", acts[:6])

    r = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions",
               {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5})
    check(r.status == 200 and r.json["choices"][0]["message"]["role"] == "assistant" and r.json["model"] == "far",
          "chat through the leader's proxy and node-b's relay", r)
    test_stream(o, b, dep, key)
    check(chat_via_node(b.port, dep, key) == 200, "the endpoint on node-b takes the deployment's key")
    check(chat_via_node(b.port, dep, None) == 401 and chat_via_node(b.port, dep, "sk-wrong") == 401,
          "node-b's endpoint refuses no key and a wrong key")
    check(chat_via_node(b.port, dep + 1000, key) == 404, "node-b: no such deployment 404")
    # an OpenAI SDK pointed at the endpoint lists and retrieves its model
    auth = {"Authorization": "Bearer " + key}
    st, body = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/v1/models", headers=auth)
    st2, body2 = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/v1/models/far", headers=auth)
    check(st == 200 and [m["id"] for m in json.loads(body)["data"]] == ["far"] and st2 == 200 and
          json.loads(body2)["id"] == "far", "GET /v1/models and /v1/models/far at node-b's endpoint", (st, body, st2))
    st, _ = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/v1/models")
    st2, _ = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/v1/models", headers={"Authorization": "Bearer sk-wrong"})
    check(st == 401 and st2 == 401, "its models need the deployment's key", (st, st2))
    r = o.get(f"/api/v1/deployments/{dep}/v1/models")
    check(r.status == 200 and [m["id"] for m in r.json["data"]] == ["far"], "and through the leader's proxy", r)
    r = v.get(f"/api/v1/deployments/{dep}/metrics")
    check(r.status == 200 and b"vllm:num_requests_running" in r.body, "metrics through the leader", r.status)
    st, _ = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/metrics", headers={"Authorization": "Bearer " + key})
    check(st == 401, "node-b's metrics are for the leader's relay key only, not a deployment key", st)
    r = o.get(f"/api/v1/deployments/{dep}/logs?lines=5")
    check(r.status == 200 and b"ready" in r.body, "node-b's engine log through the leader", r)
    check(o.get(f"/api/v1/deployments/{dep}/logs?lines=0").status == 422, "log lines checked before relaying")
    st, _ = raw(b.port, "GET", f"/api/v1/cluster/deployments/{dep}/logs")
    check(st == 401, "node-b's log without the relay key 401", st)

    r = o.post(f"/api/v1/deployments/{dep}/keys", {"name": "app2"})
    k2, k2id = r.json["api_key"], r.json["id"]
    check(wait_for(lambda: chat_via_node(b.port, dep, k2) == 200, 15), "a key made on the leader works on node-b")
    check(o.request("DELETE", f"/api/v1/deployments/{dep}/keys/{k2id}").status == 204, "revoke it on the leader")
    check(wait_for(lambda: chat_via_node(b.port, dep, k2) == 401, 15), "and node-b refuses it")

    local = mine["id"]
    for method, path, body in (("PATCH", f"/api/v1/deployments/{local}", {"desired": "stopped"}),
                               ("DELETE", f"/api/v1/deployments/{local}", None),
                               ("POST", f"/api/v1/deployments/{local}/keys", {"name": "x"})):
        r = bc.request(method, path, body)
        check(r.status == 409 and r.error_code() == "leader_owned", f"node-b's own console: {method} refused", r)
    return dep, demo, key


def test_adapters(tmp, o, bc, dep):
    """A LoRA adapter of the model, registered on the leader, reaches
    node-b with its next heartbeats and is served there; deleted on the
    leader, it goes from node-b too."""
    ad = os.path.join(tmp, "ad.gguf")
    p = subprocess.run([os.path.join(BUILD, "privai-engine"), "lora", "synth", "-m", DEMO, "-o", ad, "--rank", "8"],
                       capture_output=True, text=True)
    r = o.post("/api/v1/models/upload?name=ad&base_model=demo", raw=open(ad, "rb").read() if p.returncode == 0 else b"",
               headers={"Content-Type": "application/octet-stream"})
    check(r.status == 201 and r.json["served_by"]["other_nodes"] == [dep],
          "an adapter registered on the leader names the deployment on node-b", (p.stderr, r))
    ad_id = r.json.get("id")
    m = wait_for(lambda: [x for x in bc.get("/api/v1/models").json["data"] if x["name"] == "ad" and x["state"] == "ready"], 30)
    check(m and m[0]["kind"] == "lora" and m[0]["base_model"] == "demo" and m[0]["sha256"] == r.json.get("sha256"),
          "node-b fetched it as an adapter of its copy of the model", m)

    def ask(model):
        r = o.post(f"/api/v1/deployments/{dep}/v1/completions", {"model": model, "prompt": "Hello there", "max_tokens": 2,
                                                                  "temperature": 0, "logprobs": 3})
        return (r.status, r.json["choices"][0]["logprobs"]["top_logprobs"] if r.status == 200 else r.json)
    got = wait_for(lambda: (lambda x: x if x[0] == 200 else None)(ask("ad")), 15)
    base = ask("far")
    check(got and base[0] == 200 and got[1] != base[1], "node-b's engine serves it by name (%s vs %s)" % (got, base))
    check(o.request("DELETE", f"/api/v1/models/{ad_id}").status == 204, "the adapter deleted on the leader")
    check(wait_for(lambda: not [x for x in bc.get("/api/v1/models").json["data"] if x["name"] == "ad"], 30),
          "and on node-b")
    check(ask("ad")[0] == 404, "where its engine no longer serves it", ask("ad"))


def test_lifecycle(adm, b, o, bc, nid, dep, secret):
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "stopped"})
    check(r.status == 200, "stop it on the leader", r)
    d = wait_for(lambda: state_is(o, dep, "stopped"), 30)
    check(d and member_row(bc, dep)["state"] == "stopped", "node-b stopped it and said so", d)
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "running", "options": {"ctx": 512, "chat_template": "chatml"}})
    d = wait_for(lambda: state_is(o, dep, "ready", "failed"), 60)
    mine = member_row(bc, dep)
    check(d and d["state"] == "ready" and mine["options"]["ctx"] == 512, "started again with new options", mine)
    argv = open(f"/proc/{mine['pid']}/cmdline", "rb").read().split(b"\0")
    check(argv[argv.index(b"--ctx") + 1] == b"512", "node-b's engine runs with --ctx 512", argv)

    # a heartbeat with a bad report is refused whole
    for bad, why in (([{"id": dep, "state": "exploded"}], b"deployments[0].state is not"),
                     ([{"id": "x", "state": "ready"}], b"deployments[0].id must be"),
                     ({"id": dep}, b"must be an array"),
                     ([{"id": dep, "state": "ready"}, {"id": dep, "state": "ready", "reason": "r" * 800}],
                      b"deployments[1].reason must be"),
                     ([{"id": dep, "state": "ready", "restarts": -1}], b"deployments[0]: restarts")):
        st, body = raw(adm.port, "POST", f"/api/v1/nodes/{nid}/heartbeat", {"deployments": bad},
                       {"X-Privai-Node-Secret": secret})
        check(st == 422 and why in body, f"bad report refused: {why.decode()}", (st, body[:160]))
    st, _ = raw(adm.port, "POST", f"/api/v1/nodes/{nid}/heartbeat", {"tls_pin": "sha256//short"},
                {"X-Privai-Node-Secret": secret})
    check(st == 422, "a malformed key pin refused", st)
    check(state_is(o, dep, "ready"), "the refused reports changed nothing")

    # the model file: that node's secret, and models placed on it only
    mid = o.get(f"/api/v1/deployments/{dep}").json["model_id"]
    st, _ = raw(adm.port, "GET", f"/api/v1/nodes/{nid}/models/{mid}/file")
    check(st == 401, "model file without the node secret 401", st)
    st, _ = raw(adm.port, "GET", f"/api/v1/nodes/{nid}/models/{mid}/file", headers={"X-Privai-Node-Secret": "node_x"})
    check(st == 401, "model file with a wrong secret 401", st)
    st, body = raw(adm.port, "GET", f"/api/v1/nodes/{nid}/models/{mid}/file", headers={"X-Privai-Node-Secret": secret})
    check(st == 200 and body == open(DEMO, "rb").read(), "model file with node-b's secret: the file", st)
    st, _ = raw(adm.port, "GET", f"/api/v1/nodes/{nid}/models/{mid + 50}/file", headers={"X-Privai-Node-Secret": secret})
    check(st == 404, "a model not placed on node-b 404", st)
    st, _ = raw(adm.port, "GET", f"/api/v1/nodes/1/models/{mid}/file", headers={"X-Privai-Node-Secret": secret})
    check(st == 401, "node-b's secret is not the leader's node", st)

    # drain node-b from the leader
    check(o.post(f"/api/v1/nodes/{nid}/drain").status == 200, "drain node-b")
    d = wait_for(lambda: state_is(o, dep, "stopped"), 30)
    check(d and "drained" in (d["reason"] or ""), "its deployment stopped there, reason drained", d)
    r = o.post("/api/v1/deployments", {"name": "more", "model": "demo", "placement": {"kind": "cpu", "node": "node-b"}})
    check(r.status == 409 and r.error_code() == "node_draining", "nothing new is placed on a draining node", r)
    check(o.post(f"/api/v1/nodes/{nid}/resume").status == 200, "resume node-b")
    check(wait_for(lambda: state_is(o, dep, "ready"), 60), "and it runs again")

    # node-b killed: its deployment's state is not known; back when it is
    b.stop(signal.SIGKILL)
    d = wait_for(lambda: state_is(o, dep, "pending"), 20)
    check(d and "node node-b is unreachable" in (d["reason"] or ""), "node-b unreachable: pending, the reason names it", d)
    r = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    check(r.status == 409 and r.error_code() == "not_ready" and "unreachable" in r.json["error"]["message"],
          "the proxy says the node is unreachable", r)
    b.start()
    check(wait_for(lambda: state_is(o, dep, "ready"), 60), "node-b back: ready again")


def on_leader(o, dep):
    d = dep_of(o, dep)
    return d if d and d["node"] == "leader" and d["state"] == "ready" and d["pid"] else None


def on_node_b(o, bc, dep):
    d = dep_of(o, dep)
    mine = member_row(bc, dep)
    return d if d and d["node"] == "node-b" and d["state"] == "ready" and mine and mine["state"] == "ready" else None


def test_move(a, b, o, bc, nid, dep, key):
    """A deployment moves between nodes keeping its id, name and keys: by
    an operator, and off a node being drained."""
    old_port = member_row(bc, dep)["port"]
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"placement": {"kind": "cpu", "threads": 1, "node": "leader"}})
    check(r.status == 200 and r.json["node"] == "leader" and r.json["port"] and "moved from node-b" in (r.json["reason"] or ""),
          "moved to the leader: a port here, the reason says from where", r)
    d = wait_for(lambda: on_leader(o, dep), 60)
    check(d is not None and d["name"] == "far" and d["placement"] == {"kind": "cpu", "threads": 1}, "ready on the leader", d)
    check(wait_for(lambda: member_row(bc, dep) is None, 15) and wait_for(lambda: raw_refused(old_port), 30),
          "node-b dropped it and its engine there stopped")
    r = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    check(r.status == 200, "chat through the same proxy endpoint", r)
    check(engine_key_works(d["port"], key), "the deployment's key works on the leader's engine")
    local_port = d["port"]

    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"placement": {"kind": "cpu", "threads": 1, "node": "node-b"}})
    check(r.status == 200 and r.json["node"] == "node-b" and r.json["port"] is None, "moved back to node-b", r)
    check(wait_for(lambda: on_node_b(o, bc, dep), 60), "ready on node-b again")
    check(wait_for(lambda: raw_refused(local_port), 30), "the leader's engine for it stopped")
    check(chat_via_node(b.port, dep, key) == 200, "the key works on node-b's endpoint")

    for body, field in (({"deployments": "teleport"}, "deployments"), ({"deployments": "move", "x": 1}, "x")):
        r = o.post(f"/api/v1/nodes/{nid}/drain", body)
        check(r.status == 422 and r.json["error"]["field"] == field, f"drain refused: {body}", r)
    check(dep_of(o, dep)["node"] == "node-b" and o.get(f"/api/v1/nodes/{nid}").json["state"] == "ready",
          "a refused drain changed nothing")
    b_self = [n for n in bc.get("/api/v1/nodes").json["data"] if n["is_self"]][0]["id"]
    r = bc.post(f"/api/v1/nodes/{b_self}/drain", {"deployments": "move"})
    check(r.status == 409 and r.error_code() == "not_leader", "a member cannot move deployments itself", r)

    r = o.post(f"/api/v1/nodes/{nid}/drain", {"deployments": "move"})
    check(r.status == 200 and r.json["state"] == "draining" and
          r.json["moved"] == [{"id": dep, "name": "far", "from": "node-b", "to": "leader"}],
          "drain node-b moving its deployments: the reply says what went where", r)
    d = wait_for(lambda: on_leader(o, dep), 60)
    check(d is not None and "drained" not in (d["reason"] or ""), "it runs on the leader, not stopped", d)
    check(wait_for(lambda: member_row(bc, dep) is None, 15), "and node-b dropped it")
    acts = [e for e in a.get("/api/v1/audit?limit=100").json["data"] if e["action"] == "deployment.move"]
    check(len(acts) == 3 and acts[0]["actor"] == "olga" and acts[0]["detail"] == {"from": "node-b", "to": "leader",
          "id": dep, "name": "far"}, "each move is in the audit log, from and to", acts[:1])
    check(o.post(f"/api/v1/nodes/{nid}/resume").status == 200, "resume node-b")
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"placement": {"kind": "cpu", "threads": 1, "node": "node-b"}})
    check(r.status == 200 and wait_for(lambda: on_node_b(o, bc, dep), 60), "and back on node-b", r)


def test_model_clash(adm, o, bc):
    """A model of node-b's own has the name of the leader's: the copy takes
    another name there, and the deployment runs."""
    tiny = os.path.join(ROOT, "..", "shared", "fixtures", "models", "tiny-llama-spm-q4_0.gguf")
    mine = open(DEMO, "rb").read()
    r = bc.request("POST", "/api/v1/models/upload?name=clash", raw=mine,
                   headers={"Content-Type": "application/octet-stream"})
    check(r.status == 201, "node-b has a model 'clash' of its own", r)
    src = os.path.join(adm.state, "models", "clash-src.gguf")
    with open(src, "wb") as f:
        f.write(open(tiny, "rb").read())
    r = o.post("/api/v1/models", {"name": "clash", "path": src})
    check(r.status == 201, "and the leader another", r)
    lid = r.json["id"]
    r = o.post("/api/v1/deployments", {"name": "clashing", "model": "clash", "options": {"ctx": 256},
                                       "placement": {"kind": "cpu", "threads": 1, "node": "node-b"}})
    dep = r.json["id"]
    d = wait_for(lambda: state_is(o, dep, "ready", "failed"), 90)
    check(d and d["state"] == "ready", "the leader's 'clash' deployed on node-b is ready", d)
    models = {m["name"]: m for m in bc.get("/api/v1/models").json["data"]}
    alt = models.get(f"clash.from-leader-{lid}")
    check(models["clash"]["size_bytes"] == len(mine) and alt is not None and
          alt["size_bytes"] == os.path.getsize(tiny) and member_row(bc, dep)["model_id"] == alt["id"],
          "node-b's own 'clash' is untouched; the copy is 'clash.from-leader-N' and runs", sorted(models))
    check(o.request("DELETE", f"/api/v1/deployments/{dep}").status == 204, "the clashing deployment deleted")


def engine_key_works(port, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "x", "max_tokens": 2}),
                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    st = conn.getresponse().status
    conn.close()
    return st == 200


def test_gone(adm, b, a, o, bc, nid, dep):
    port = member_row(bc, dep)["port"]
    check(o.request("DELETE", f"/api/v1/deployments/{dep}").status == 204, "delete it on the leader")
    check(wait_for(lambda: member_row(bc, dep) is None, 15), "node-b drops its row")
    check(wait_for(lambda: raw_refused(port), 30), "and its engine stops")
    acts = [(e["actor"], e["action"]) for e in bc.get("/api/v1/audit?limit=100").json["data"]]
    check(("leader", "deployment.delete") in acts, "node-b's audit log has the delete", acts[:5])
    r = o.post("/api/v1/deployments", {"name": "last", "model": "demo", "placement": {"kind": "cpu", "node": "node-b"}})
    last = r.json["id"]
    check(r.status == 201 and wait_for(lambda: state_is(o, last, "ready"), 60), "another placed and ready", r)
    r = o.post("/api/v1/deployments", {"name": "parked", "model": "demo", "placement": {"kind": "cpu", "node": "node-b"}})
    parked = r.json["id"]
    check(o.request("PATCH", f"/api/v1/deployments/{parked}", {"desired": "stopped"}).status == 200,
          "a third placed there, stopped")
    check(a.request("DELETE", f"/api/v1/nodes/{nid}?deployments=sideways").status == 422, "a bad ?deployments= 422")
    r = a.request("DELETE", f"/api/v1/nodes/{nid}?deployments=move")
    check(r.status == 200 and r.json["moved"] == [{"id": last, "name": "last", "from": "node-b", "to": "leader"}],
          "remove node-b moving its running deployments: the reply says where", r)
    d = wait_for(lambda: on_leader(o, last), 60)
    check(d is not None, "the running one runs on the leader now", dep_of(o, last))
    d = dep_of(o, parked)
    check(d["state"] == "stopped" and d["desired"] == "stopped" and d["node"] == "node-b" and "removed" in d["reason"],
          "the stopped one stays, stopped, the reason says the node was removed", d)


class FakeLeader:
    """A leader that says what the test wants: node-c's checks of the specs
    in a heartbeat answer and of the model file it fetches."""

    def __init__(self):
        import hashlib
        import http.server
        import threading
        self.specs, self.beats, self.file = [], [], open(DEMO, "rb").read()
        self.sha = hashlib.sha256(self.file).hexdigest()
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, status, obj=None, data=None):
                data = data if data is not None else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                if self.path == "/api/v1/nodes/join":
                    return self.reply(201, {"node_id": 7, "secret": "node_fake-secret", "heartbeat_s": 1})
                fake.beats.append((self.headers.get("X-Privai-Node-Secret"), body))
                self.reply(200, {"state": "ready", "heartbeat_s": 1, "mig": [], "deployments": fake.specs,
                                 "relay_key_sha256": "ab" * 32})

            def do_GET(self):
                if self.headers.get("X-Privai-Node-Secret") != "node_fake-secret":
                    return self.reply(401, {})
                self.reply(200, data=fake.file)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def spec(self, id, name="d", model_id=1, model_name="m", sha=None, size=None, **kw):
        d = {"id": id, "name": name, "desired": "running", "placement": {"kind": "cpu", "threads": 1},
             "options": {"chat_template": "chatml"}, "keys": [],
             "model": {"id": model_id, "name": model_name, "sha256": sha,
                       "size_bytes": len(self.file) if size is None else size}}
        d.update(kw)
        return d

    def reports(self):
        """The deployments reports of node-c's last heartbeat, by id."""
        return {r["id"]: r for r in self.beats[-1][1].get("deployments", [])} if self.beats else {}


def test_member_checks(tmp):
    """node-c joined a leader that sends bad specs: each is refused with the
    reason in node-c's next heartbeat, nothing of it stored; a file that is
    not what the spec says is not used."""
    fake = FakeLeader()
    c = Admin(BUILD, os.path.join(tmp, "c"), PW, ports="19140-19144", env_extra={"PRIVAI_JOIN_TOKEN": "join_fake"},
              extra=["--node-name", "node-c", "--join", f"http://127.0.0.1:{fake.port}", "--heartbeat-s", "1"])
    try:
        bad = {
            11: (fake.spec(11, name="../evil"), "not a deployment name"),
            12: (fake.spec(12, model_name="../../etc/x"), "model must have"),
            13: (fake.spec(13, placement={"kind": "gpu"}), "placement.gpus must list"),
            24: (fake.spec(24, placement={"kind": "gpu", "gpus": ["GPU-x"], "tensor_parallel": 1}),
                 "has no CUDA backend"),
            14: (fake.spec(14, placement={"kind": "cpu", "threads": 100000}), "placement.threads"),
            15: (fake.spec(15, options={"ctx": 8}), "options.ctx"),
            16: (fake.spec(16, options={"rm": 1}), "unknown field"),
            17: (fake.spec(17, keys=["not-a-hash"]), "keys must be"),
            18: (fake.spec(18, desired="maybe"), "desired"),
            19: (fake.spec(19, model_id=0), "model must have"),
            20: (fake.spec(20, placement={"kind": "cpu", "threads": 1, "shell": "x"}), "unknown placement field"),
        }
        fake.specs = [b for b, _ in bad.values()] + [
            fake.spec(21, name="wrong-sha", model_id=2, model_name="m2", sha="0" * 64),
            fake.spec(22, name="wrong-size", model_id=3, model_name="m3", size=len(fake.file) + 1),
            fake.spec(23, name="good", model_id=4, model_name="m4", sha=fake.sha, keys=["cd" * 32])]
        ok = wait_for(lambda: all(i in fake.reports() for i in list(bad) + [21, 22]) and
                      fake.reports()[21]["state"] == "failed" and fake.reports()[22]["state"] == "failed", 30)
        rep = fake.reports()
        check(ok, "node-c reported every spec it could not take", sorted(rep))
        for i, (_, why) in bad.items():
            r = rep.get(i, {})
            check(r.get("state") == "failed" and why in r.get("reason", ""), f"spec {i} refused: {why}", r)
        check("SHA-256" in rep[21]["reason"], "a file with another SHA-256 is not used", rep[21])
        check("bytes, not" in rep[22]["reason"], "a file of another size is not used", rep[22])
        check(fake.beats[-1][0] == "node_fake-secret", "heartbeats carry node-c's secret")
        cc = c.client()
        cc.login("admin", PW)
        good = wait_for(lambda: (lambda r: r if r and r["state"] == "ready" else None)(fake.reports().get(23)), 60)
        check(good and good["started_at"], "the good spec runs and is reported ready", fake.reports().get(23))
        deps = {d["name"]: d for d in cc.get("/api/v1/deployments").json["data"]}
        check(set(deps) == {"wrong-sha", "wrong-size", "good"} and deps["good"]["leader_id"] == 23,
              "node-c stored only the well-formed specs", sorted(deps))
        models = {m["name"]: m for m in cc.get("/api/v1/models").json["data"]}
        check(models["m2"]["state"] == "failed" and models["m4"]["sha256"] == fake.sha and
              not os.path.exists(os.path.join(tmp, "etc")), "failed fetches are marked, nothing outside", models)
        keys = open(os.path.join(tmp, "c", "deployments", str(deps["good"]["id"]), "api-keys")).read()
        check("sha256:" + "cd" * 32 in keys and "sha256:" + "ab" * 32 in keys,
              "the engine's key file has the leader's key hash and its relay key hash", keys)
        fake.specs = []
        check(wait_for(lambda: not cc.get("/api/v1/deployments").json["data"], 15),
              "a spec the leader drops is dropped here")
    finally:
        c.stop(signal.SIGKILL)
        fake.srv.shutdown()


def raw_refused(port):
    try:
        raw(port, "GET", "/health")
        return False
    except OSError:
        return True


def main():
    tmp = tempfile.mkdtemp(prefix="privai-remote-test-")
    adm = b = None
    try:
        adm, b, a, o, v, nid = leader_and_node_b(BUILD, tmp, PW, DEMO, "19140-19144", "19145-19149")
        bc = b.client()
        bc.login("admin", PW)
        db = sqlite3.connect(os.path.join(tmp, "b", "privai.db"))
        secret = db.execute("SELECT secret FROM membership").fetchone()[0]
        db.close()
        r = o.post("/api/v1/deployments", {"name": "x", "model": "demo",
                                           "placement": {"kind": "cpu", "threads": 1000, "node": "node-b"}})
        check(r.status == 422 and r.json["error"]["field"] == "placement.threads" and "node-b" in
              r.json["error"]["message"], "threads checked against node-b's CPUs", r)
        dep, demo, key = test_placed(adm, b, o, v, bc, nid)
        test_adapters(tmp, o, bc, dep)
        test_lifecycle(adm, b, o, bc, nid, dep, secret)
        bc = b.client()
        bc.login("admin", PW)
        test_move(a, b, o, bc, nid, dep, key)
        test_model_clash(adm, o, bc)
        bc = b.client()
        bc.login("admin", PW)
        test_gone(adm, b, a, o, bc, nid, dep)
        check(adm.stop() == 0 and b.stop() == 0, "SIGTERM: both exit cleanly")
        test_member_checks(tmp)
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        if adm is not None:
            adm.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)
        clean_up(tmp, 60)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
