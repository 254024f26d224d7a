"""A deployment split over two nodes (tensor parallel), against two live
privai-admins on loopback: the leader runs rank 0 and serves; node-b
learns of its follower rank from the heartbeat answer, fetches the model,
runs the rank with its own supervisor and reports it; the ranks meet at
the leader's --dist-init port over Gloo.  A chat completion through the
leader's proxy says what the same model says on one node; a killed
follower is restarted and the group answers again; draining node-b stops
the group and it starts again after the resume; bad placements are
refused by name; deleting the deployment stops the follower.

usage: python3 tests/integration/test_admin_group.py BUILD_DIR"""
import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, children_of, clean_up, dep_of, leader_and_node_b, summary, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, BUILD, "demo", "privai-demo.gguf")
PW = "correct horse battery staple"
SLOW = 3 if "san" in BUILD else 1
ASK = {"messages": [{"role": "user", "content": "Private AI keeps data on premises."}], "max_tokens": 16,
       "temperature": 0}


def chat(o, dep):
    r = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions", ASK)
    return r.json["choices"][0]["message"]["content"] if r.status == 200 else None


def follower_of(bc, dep):
    rows = [d for d in bc.get("/api/v1/deployments").json["data"] if d["leader_id"] == dep]
    return rows[0] if rows else None


def test_refused(o):
    for placement, field, words in (
            ({"kind": "cpu", "threads": 1, "ranks": ["leader"]}, "placement.ranks", "2 to 16 node names"),
            ({"kind": "cpu", "threads": 1, "ranks": ["node-b", "leader"]}, "placement.ranks", "must be this node"),
            ({"kind": "cpu", "threads": 1, "ranks": ["leader", "leader"]}, "placement.ranks", "named twice"),
            ({"kind": "cpu", "threads": 1, "ranks": ["leader", "nowhere"]}, "placement.ranks", "is no node"),
            ({"kind": "cpu", "threads": 0, "ranks": ["leader", "node-b"]}, "placement.threads", "needs placement.threads"),
            ({"kind": "cpu", "threads": 1, "node": "node-b", "ranks": ["leader", "node-b"]}, "placement.node",
             "rank 0 runs on this node")):
        r = o.post("/api/v1/deployments", {"name": "bad", "model": "demo", "placement": placement})
        check(r.status == 422 and r.json["error"]["field"] == field and words in r.json["error"]["message"],
              f"refused: {words}", r)


def test_sizing(o):
    """The sizing answer proposes the split when one node's memory is too
    small: a KV cache between what one node and two nodes leave a rank."""
    G = 1 << 30
    demo = [m for m in o.get("/api/v1/models").json["data"] if m["name"] == "demo"][0]["id"]
    nodes = {n["name"]: n for n in o.get("/api/v1/nodes").json["data"]}
    mem = min(nodes["leader"]["memory_bytes"], nodes["node-b"]["memory_bytes"])
    usable = mem - max(mem / 10, 2 * G)
    r = o.get(f"/api/v1/models/{demo}/sizing?context=1024")
    w, per_seq = r.json["weights_bytes"], r.json["kv_bytes_per_token"] * 1024
    # one node: w + T + 2 GiB > usable; two: w/2 + T/2 + 2 GiB <= usable (4 KV heads split)
    want_kv = 1.5 * usable - 3 * G - w
    r = o.get(f"/api/v1/models/{demo}/sizing?context=1024&concurrency={int(want_kv // per_seq)}")
    cpu = r.json.get("cpu") or {}
    check(r.status == 200 and cpu.get("ranks") == 2 and
          cpu.get("placement") == {"kind": "cpu", "threads": min(nodes["leader"]["cpu_cores"], nodes["node-b"]["cpu_cores"]),
                                   "ranks": ["leader", "node-b"]} and
          cpu["per_rank_bytes"] <= cpu["usable_bytes_per_node"] and "split over 2 nodes" in cpu["why"],
          "sizing proposes the split over leader and node-b when one node is too small", cpu)


def test_split(o, bc):
    # the same model on one node, for the text a split must give
    r = o.post("/api/v1/deployments", {"name": "solo", "model": "demo", "placement": {"kind": "cpu", "threads": 1},
                                       "options": {"ctx": 256, "chat_template": "chatml"}})
    check(r.status == 201 and "dist_port" not in r.json["placement"],
          "one-node deployment created, with no port for ranks to meet on", r)
    solo = r.json["id"]
    d = wait_for(lambda: (lambda j: j if j and j["state"] in ("ready", "failed") else None)(dep_of(o, solo)),
                 90 * SLOW)
    want = chat(o, solo) if d and d["state"] == "ready" else None
    check(want, "one node answers", d)
    o.request("DELETE", f"/api/v1/deployments/{solo}")

    r = o.post("/api/v1/deployments", {"name": "split", "model": "demo",
                                       "placement": {"kind": "cpu", "threads": 1, "ranks": ["leader", "node-b"]},
                                       "options": {"ctx": 256, "chat_template": "chatml"}})
    check(r.status == 201 and r.json["placement"]["ranks"] == ["leader", "node-b"] and
          isinstance(r.json["placement"].get("dist_port"), int) and
          [(k["rank"], k["node"]) for k in r.json["ranks"]] == [(0, "leader"), (1, "node-b")],
          "split deployment created: rank 0 here, rank 1 on node-b, a rendezvous port", r)
    dep = r.json["id"]
    seen = [None]  # the last state read, for the failure's message

    def split_up():
        seen[0] = j = dep_of(o, dep)
        return j if j and j["state"] in ("ready", "failed") and j["ranks"][1]["state"] == "ready" else None
    d = wait_for(split_up, 120 * SLOW)
    check(d and d["state"] == "ready" and d["ranks"][1]["state"] == "ready" and
          d["ranks"][1]["reason"] == "follows rank 0", "both ranks up: rank 0 ready, node-b's follower running",
          d or seen[0])
    if d is None:  # what each rank's engine said, for whoever reads the failure
        for rank in (0, 1):
            r = o.get(f"/api/v1/deployments/{dep}/logs?rank={rank}&lines=40")
            print(f"   --- rank {rank}'s log ({r.status})\n" + r.body.decode(errors="replace")[-3000:], file=sys.stderr)
    f = follower_of(bc, dep)
    check(f and f["pid"] and f["placement"].get("rank") == 1 and f["placement"].get("tp") == 2 and
          f["placement"].get("dist_init", "").endswith(":%d" % d["placement"]["dist_port"]),
          "node-b runs rank 1, meeting rank 0 at the leader's port", f)
    got = chat(o, dep)
    check(got == want, "the same text split over two nodes as on one: %r / %r" % (got, want))
    log = o.get(f"/api/v1/deployments/{dep}/logs?lines=40")
    check(log.status == 200 and b"split over 2 ranks (gloo)" in log.body, "rank 0's log says it is split", log.status)
    # rank 1's log, from node-b through its relay: the engine's line as it started there
    log1 = o.get(f"/api/v1/deployments/{dep}/logs?rank=1&lines=40")
    check(log1.status == 200 and b"rank 1 of 2 (gloo) follows rank 0" in log1.body,
          "rank 1's log comes from node-b", (log1.status, log1.body[-300:]))
    r = o.get(f"/api/v1/deployments/{dep}/logs?rank=7")
    check(r.status == 404 and "no rank 7" in r.json["error"]["message"], "a rank it does not have: 404", r)
    r = o.get(f"/api/v1/deployments/{dep}/logs?rank=x")
    check(r.status == 422 and r.json["error"]["field"] == "rank", "a bad rank: 422", r)

    check(d and d["reason"] == "2 of 2 ranks up", "the group's reason counts its ranks", d and d["reason"])

    # a follower killed: rank 0's ping finds it gone and ends the group,
    # so the leader restarts rank 0 with nothing asked; node-b starts its
    # rank again, and the group answers again
    if f and f["pid"]:
        before = d["restarts"]
        os.kill(f["pid"], signal.SIGKILL)
        seen, why = set(), []

        def restarted():
            j = dep_of(o, dep)
            if j:
                seen.add(j["state"])
                why.extend([j["reason"]] if "rank 1" in (j["reason"] or "") else [])
            return j if j and j["restarts"] > before else None
        d2 = wait_for(restarted, 60 * SLOW, 0.2)
        check(d2, "with nothing asked, rank 0 ends the group and is restarted (states seen: %s)" % sorted(seen), d2)
        check(any("no answer from rank 1" in w for w in why), "the leader says rank 1 did not answer", why[-1:])
        deadline, again = time.time() + 150 * SLOW, None
        while time.time() < deadline and again != want:
            again = chat(o, dep)
            if again != want:
                time.sleep(2)
        check(again == want, "after rank 1 was killed the group answers again, the same text", again)
        f2 = follower_of(bc, dep)
        check(f2 and f2["pid"] and f2["pid"] != f["pid"], "node-b restarted its rank", f2)

    # draining node-b stops the group (a rank is not moved: the nodes are the placement's)
    nid = [n for n in o.get("/api/v1/nodes").json["data"] if n["name"] == "node-b"][0]["id"]
    r = o.post(f"/api/v1/nodes/{nid}/drain", {})
    d = dep_of(o, dep)
    check(r.status == 200 and d["desired"] == "stopped" and "node-b, which was drained" in (d["reason"] or ""),
          "draining node-b stops the split deployment, saying why", d)
    check(wait_for(lambda: (lambda f: f is None or f["state"] == "stopped")(follower_of(bc, dep)), 30 * SLOW),
          "node-b stops its rank")
    o.post(f"/api/v1/nodes/{nid}/resume", {})
    o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "running"})
    d = wait_for(lambda: (lambda j: j if j and j["state"] == "ready" else None)(dep_of(o, dep)), 120 * SLOW)
    check(d and chat(o, dep) == want, "started again after the resume, the same text", d)

    r = o.request("DELETE", f"/api/v1/deployments/{dep}")
    check(r.status == 204, "split deployment deleted", r)
    check(wait_for(lambda: follower_of(bc, dep) is None, 30 * SLOW), "node-b dropped its rank")
    return want


def test_ranks_per_node(o, bc, want):
    """Several ranks a node (one a NUMA node): the engine starts them, each
    with its own CPUs; on this node alone, then over both nodes."""
    for placement, field, words in (
            ({"kind": "cpu", "threads": 0, "ranks_per_node": 2}, "placement.threads", "each rank's CPUs"),
            ({"kind": "cpu", "threads": 1, "ranks_per_node": 3}, "placement.ranks_per_node", "cannot be split over 3"),
            ({"kind": "cpu", "threads": 1, "ranks_per_node": 2, "ranks": ["leader", "node-b"], "node": "node-b"},
             "placement.node", "rank 0 runs on this node"),
            ({"kind": "cpu", "threads": 1, "ranks_per_node": 2, "node": "node-b"}, "placement.node",
             "runs on this node, or over placement.ranks"),
            ({"kind": "gpu", "count": 1, "ranks_per_node": 2}, "placement.ranks_per_node", "a rank a GPU")):
        r = o.post("/api/v1/deployments", {"name": "bad", "model": "demo", "placement": placement})
        check(r.status == 422 and r.json["error"]["field"] == field and words in r.json["error"]["message"],
              f"refused: {words}", r)
    r = o.post("/api/v1/deployments", {"name": "numa", "model": "demo",
                                       "placement": {"kind": "cpu", "threads": 1, "ranks_per_node": 2},
                                       "options": {"ctx": 256, "chat_template": "chatml"}})
    pl = r.json.get("placement", {}) if r.status == 201 else {}
    check(r.status == 201 and pl.get("ranks_per_node") == 2 and pl.get("threads") == 1 and
          isinstance(pl.get("dist_port"), int), "two ranks on this node, a CPU each, a port to meet on", r)
    dep = r.json["id"] if r.status == 201 else None
    d = wait_for(lambda: (lambda j: j if j and j["state"] in ("ready", "failed") else None)(dep_of(o, dep)),
                 90 * SLOW) if dep else None
    check(d and d["state"] == "ready" and d["cpus"] and len(d["cpus"].replace("-", ",").split(",")) == 2,
          "ready, holding 2 CPUs for its two ranks", d)
    got = chat(o, dep) if d else None
    check(got == want, "the same text from two ranks on one node: %r / %r" % (got, want))
    kids = children_of(d["pid"]) if d and d.get("pid") else []
    check(len(kids) == 1, "the engine runs its second rank as its child", kids)
    log = o.get(f"/api/v1/deployments/{dep}/logs?lines=60") if dep else None
    check(log and b"rank 1 of 2 on this node" in log.body and b"split over 2 ranks (gloo)" in log.body,
          "the log says where each rank runs", log and log.body[-400:])
    if dep:
        o.request("DELETE", f"/api/v1/deployments/{dep}")

    # over both nodes: 4 ranks, 2 a node
    r = o.post("/api/v1/deployments", {"name": "wide", "model": "demo",
                                       "placement": {"kind": "cpu", "threads": 1, "ranks_per_node": 2,
                                                     "ranks": ["leader", "node-b"]},
                                       "options": {"ctx": 256, "chat_template": "chatml"}})
    check(r.status == 201, "2 ranks on each of 2 nodes", r)
    dep = r.json["id"] if r.status == 201 else None
    d = wait_for(lambda: (lambda j: j if j and j["state"] in ("ready", "failed") and j["ranks"][1]["state"] == "ready"
                          else None)(dep_of(o, dep)), 120 * SLOW) if dep else None
    check(d and d["state"] == "ready", "the group of 4 is up", d)
    f = follower_of(bc, dep) if dep else None
    check(f and f["placement"].get("rank") == 1 and f["placement"].get("nnodes") == 2 and
          f["placement"].get("tp") == 4 and f["placement"].get("ranks_per_node") == 2,
          "node-b runs node 1 of 2: ranks 2 and 3", f)
    got = chat(o, dep) if d else None
    check(got == want, "the same text from 4 ranks on 2 nodes: %r / %r" % (got, want))
    if dep:
        o.request("DELETE", f"/api/v1/deployments/{dep}")
        check(wait_for(lambda: follower_of(bc, dep) is None, 30 * SLOW), "node-b dropped its part")


def main():
    tmp = tempfile.mkdtemp(prefix="privai-group-test-")
    adm = b = None
    try:
        adm, b, a, o, v, nid = leader_and_node_b(BUILD, tmp, PW, DEMO, "19150-19154", "19155-19159")
        bc = b.client()
        bc.login("admin", PW)
        test_refused(o)
        test_sizing(o)
        want = test_split(o, bc)
        test_ranks_per_node(o, bc, want)
        check(adm.stop() == 0 and b.stop() == 0, "SIGTERM: both exit cleanly")
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        if adm is not None:
            adm.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)
        clean_up(tmp, 80)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
