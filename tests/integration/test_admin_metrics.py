#!/usr/bin/env python3
"""The metrics history (issue 23) against a live privai-admin sampling
every second: this node's CPU, memory and network from a procfs fixture
the test moves on (so each rate is known), each GPU and MIG instance of
the NVML double (its recorded utilization, temperature, power, ECC
counts and memory), and a real engine's tokens/s, requests, TTFT and ITL
percentiles, queue and KV-cache use once requests ran; the history's
shape (columns with nulls), its range and subject checks, who may read it,
and that samples outlive a restart.
Usage: test_admin_metrics.py BUILD"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "..", "shared", "fixtures")
MODEL = os.path.join(FIXTURES, "models", "tiny-llama-spm-f16.gguf")
HOST = os.path.join(ROOT, "tests", "fixtures", "hosts", "xeon-amx-2s")
DOUBLE = os.path.join(BUILD, "libnvml-double.so")
PW = "metrics-test-password-1"
GPU0 = "GPU-5e1a0c3d-7b2f-4c11-9a0e-00000000000"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def proc_tree(sysroot, busy, idle, rx, tx):
    write(os.path.join(sysroot, "proc", "stat"), f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    write(os.path.join(sysroot, "proc", "net", "dev"),
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
          "carrier compressed\n"
          # loopback moves too, and by more: counting it would show
          f"    lo: {rx * 7} 10 0 0 0 0 0 0 {rx * 7} 10 0 0 0 0 0 0\n"
          f"  eth0: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0\n")
    write(os.path.join(sysroot, "proc", "loadavg"), "1.25 0.50 0.25 1/100 4242\n")
    write(os.path.join(sysroot, "proc", "meminfo"),
          "MemTotal:       65536000 kB\nMemFree:         1000000 kB\nMemAvailable:   16384000 kB\n")


def history(c, subject, rng="1h"):
    r = c.get(f"/api/v1/metrics/history?subject={subject}&range={rng}")
    return r.json if r.status == 200 else None


def values(h, name):
    return [v for v in (h or {}).get("series", {}).get(name, []) if v is not None]


def test_node_and_gpus(adm, v, sysroot, node_id):
    subj = f"node:{node_id}"
    # two reads a known time apart: the counters moved by 300 busy of 400
    # jiffies, and eth0 by 4 MB in and 2 MB out, over 2 s of sampling
    h = wait_for(lambda: history(v, subj) if values(history(v, subj), "mem_total_bytes") else None, timeout=20)
    check(h is not None and values(h, "mem_total_bytes")[-1] == 65536000 * 1024 and
          values(h, "mem_used_bytes")[-1] == (65536000 - 16384000) * 1024,
          "the node's memory in use is its total less what is available", h)
    check(values(h, "load1")[-1:] == [1.25], "the load average is sampled", h and h["series"].get("load1"))
    check(values(h, "cpu_pct") == [], "no CPU rate while the counters stand still", h and h["series"].get("cpu_pct"))
    proc_tree(sysroot, 1300, 800, 5000000, 3000000)
    h = wait_for(lambda: (lambda x: x if values(x, "cpu_pct") else None)(history(v, subj)), timeout=20)
    cpu = values(h, "cpu_pct")
    check(cpu and abs(cpu[0] - 75.0) < 1e-9, "CPU busy share between two samples (300 of 400 jiffies)", cpu)
    rx, tx = values(h, "net_rx_bytes_per_s"), values(h, "net_tx_bytes_per_s")
    nz = [(a, b) for a, b in zip(rx, tx) if a > 0]
    check(len(nz) == 1 and abs(nz[0][0] / nz[0][1] - 2.0) < 1e-9,
          "network rates from eth0 alone (loopback left out): 4 MB in for 2 MB out", (rx, tx))
    check(len(h["t"]) == len(h["series"]["mem_total_bytes"]) and all(
        len(col) == len(h["t"]) for col in h["series"].values()), "each column is as long as the times", h)
    check(h["interval_s"] == 1 and h["keep_hours"] == 48 and h["to"] - h["from"] == 3600, "the answer says its range", h)
    check(any(x is None for x in h["series"]["cpu_pct"]), "a value a sample lacks is null", h["series"]["cpu_pct"])

    g = history(v, f"gpu:{GPU0}3")
    check(g and values(g, "util_pct")[-1] == 50 and values(g, "temp_c")[-1] == 34 and values(g, "power_w")[-1] == 73
          and values(g, "ecc_corrected")[-1] == 3 and values(g, "ecc_uncorrected")[-1] == 0,
          "GPU 3's utilization, temperature, power and ECC counts as NVML reports them", g and g["series"])
    check(values(g, "mem_used_bytes")[-1] == 609222656 + 3 * 1073741824 and
          values(g, "mem_total_bytes")[-1] == 85520809984, "GPU 3's memory", g and g["series"])
    g7 = history(v, f"gpu:{GPU0}7")
    check(values(g7, "ecc_uncorrected")[-1:] == [2], "GPU 7's uncorrected ECC errors", g7 and g7["series"])
    subjects = v.get("/api/v1/metrics/subjects").json["data"]
    migs = [s for s in subjects if s["subject"].startswith("mig:")]
    check(len([s for s in subjects if s["subject"].startswith("gpu:")]) == 8 and len(migs) == 2,
          "every GPU and both MIG instances are sampled", [s["subject"] for s in subjects])
    m = {s["subject"]: history(v, s["subject"]) for s in migs}
    totals = sorted(values(x, "mem_total_bytes")[-1] for x in m.values())
    check(totals == [9856 << 20, 19968 << 20] and all("util_pct" not in x["series"] for x in m.values()),
          "a MIG instance has its profile's memory and no utilization of its own", m)


def test_engine(adm, o, v, dep):
    subj = f"deployment:{dep}"
    # rates are between two scrapes: the first one is the baseline
    check(wait_for(lambda: values(history(v, subj), "tokens_per_s"), timeout=20), "the engine was scraped twice")
    for i in range(3):
        r = o.post(f"/api/v1/deployments/{dep}/v1/completions",
                   {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0,
                    "ignore_eos": True})
        check(r.status == 200, f"completion {i} answered", r)
    h = wait_for(lambda: (lambda x: x if values(x, "tokens_per_s") and max(values(x, "tokens_per_s")) > 0 else None)(
        history(v, subj)), timeout=20)
    check(h is not None, "the deployment's tokens/s rose after the requests", history(v, subj))
    time.sleep(2)  # a sample after the last request
    h = history(v, subj)
    s = (h or {}).get("series", {})
    # rates over the time between scrapes (rate_interval_s: about the 1 s
    # between samples, longer when a tick is late): rate x interval, summed,
    # is the count
    dt = s.get("rate_interval_s", [])
    gen = sum(r * d for r, d in zip(s.get("tokens_per_s", []), dt) if r is not None and d is not None)
    check(abs(gen - 48) < 0.5, "48 tokens generated in all, as the three answers had", gen)
    reqs = sum(r * d for r, d in zip(s.get("requests_per_min", []), dt) if r is not None and d is not None) / 60
    check(abs(reqs - 3) < 0.05, "three requests finished", reqs)
    ttft, itl = values(h, "ttft_p50_s"), values(h, "itl_p95_s")
    check(ttft and all(0 < x < 30 for x in ttft) and itl and all(0 < x < 30 for x in itl),
          "TTFT and ITL percentiles from the engine's histograms", (ttft, itl))
    check(values(h, "waiting") and max(values(h, "waiting")) == 0 and values(h, "kv_pct") and
          all(0 <= x <= 100 for x in values(h, "kv_pct")), "queue and KV-cache use sampled", s.keys())


def test_checks(v, node_id):
    for q, field in (("subject=node:1;drop&range=1h", "subject"), ("subject=pod:1", "subject"),
                     (f"subject=node:{node_id}&range=5m", "range"), ("range=1h", "subject")):
        r = v.get(f"/api/v1/metrics/history?{q}")
        check(r.status == 422 and r.json["error"].get("field") == field, f"history?{q} refused naming {field}", r)
    r = v.get(f"/api/v1/metrics/history?subject=node:{node_id}&range=24h")
    check(r.status == 200 and r.json["to"] - r.json["from"] == 86400, "a 24 h range", r)
    r = v.get("/api/v1/metrics/history?subject=deployment:999")
    check(r.status == 200 and r.json["t"] == [] and r.json["series"] == {}, "an unknown subject has no samples", r)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-metrics-")
    sysroot = os.path.join(tmp, "host")
    shutil.copytree(HOST, sysroot)
    proc_tree(sysroot, 1000, 700, 1000000, 1000000)
    root = os.path.join(tmp, "models")
    os.makedirs(root)
    shutil.copy(MODEL, os.path.join(root, "tiny.gguf"))
    state_file = os.path.join(tmp, "nvml-state")
    write(state_file, "0 19 0 1\n0 14 2 2\n")
    env = {"PRIVAI_NVML_LIB": DOUBLE, "PRIVAI_NVML_DOUBLE_STATE": state_file}
    extra = ("--model-root", root, "--sys-root", sysroot, "--metrics-interval-s", "1")
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=extra, env_extra=env, ports="19280-19289")
    try:
        a, o, v = users(adm, PW)
        node_id = a.get("/api/v1/nodes").json["data"][0]["id"]
        test_node_and_gpus(adm, v, sysroot, node_id)
        test_checks(v, node_id)
        o.post("/api/v1/models", {"name": "tiny", "path": os.path.join(root, "tiny.gguf")})
        dep = o.post("/api/v1/deployments", {"name": "tiny", "model": "tiny",
                                             "placement": {"kind": "cpu", "threads": 1},
                                             "options": {"ctx": 256}}).json["id"]
        d = wait_for(lambda: (lambda j: j if j["state"] in ("ready", "failed") else None)(
            v.get(f"/api/v1/deployments/{dep}").json), timeout=90)
        check(d and d["state"] == "ready", "deployed", d)
        test_engine(adm, o, v, dep)
        r = adm.client().get(f"/api/v1/metrics/history?subject=node:{node_id}")
        check(r.status == 401, "the history needs a signed-in user", r)
        before = len(history(v, f"node:{node_id}")["t"])
        check(adm.stop() == 0, "the admin exits cleanly (no sanitizer report)", open(adm.log_path).read()[-2000:])
        adm.start()
        v = adm.client()
        v.login("vic", PW)
        check(len(history(v, f"node:{node_id}")["t"]) >= before, "the history outlives a restart")
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop()
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
