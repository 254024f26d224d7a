#!/usr/bin/env python3
"""The metrics history at its default size: 48 h of one-minute samples of
a full node (8 GPUs with 2 MIG instances each, the node, 4 deployments:
the series the sampler writes) put into a privai-admin store, then the
store's size and how long GET /api/v1/metrics/history takes for 1 h, 24 h
and 48 h (median of 5).  Prints JSON.
Usage: scripts/bench-metrics.py [BUILD] (or BUILD=...)"""
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from adminlib import Admin, users  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")
PW = "bench-metrics-password"
GPU = ["util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w", "ecc_corrected",
       "ecc_uncorrected"]
NODE = ["cpu_pct", "mem_used_bytes", "mem_total_bytes", "net_rx_bytes_per_s", "net_tx_bytes_per_s", "load1"]
DEP = ["tokens_per_s", "prompt_tokens_per_s", "requests_per_min", "ttft_p50_s", "ttft_p95_s", "itl_p50_s",
       "itl_p95_s", "running", "waiting", "kv_pct"]


def main():
    tmp = tempfile.mkdtemp(prefix="privai-bench-metrics-")
    state = os.path.join(tmp, "state")
    adm = Admin(BUILD, state, PW, extra=("--metrics-interval-s", "3600"), ports="19310-19319")
    adm.stop()
    series = [(f"gpu:GPU-{g}", n) for g in range(8) for n in GPU]
    series += [(f"mig:MIG-{g}-{i}", n) for g in range(8) for i in range(2) for n in ("mem_used_bytes", "mem_total_bytes")]
    series += [("node:1", n) for n in NODE] + [(f"deployment:{d}", n) for d in range(1, 5) for n in DEP]
    now = int(time.time()) // 60 * 60
    db = sqlite3.connect(os.path.join(state, "privai.db"))
    db.executemany("INSERT OR REPLACE INTO metric_samples VALUES (?, ?, ?, ?)",
                   ((s, n, now - k * 60, float(k % 97)) for k in range(48 * 60) for s, n in series))
    db.commit()
    rows = db.execute("SELECT count(*) FROM metric_samples").fetchone()[0]
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = os.path.getsize(os.path.join(state, "privai.db"))
    adm.start()
    _, _, v = users(adm, PW)
    out = {"series": len(series), "rows": rows, "store_bytes": size, "bytes_per_row": round(size / rows, 1)}
    for subj in ("gpu:GPU-3", "deployment:2"):
        for rng in ("1h", "24h", "48h"):
            ms = []
            for _ in range(5):
                t0 = time.perf_counter()
                r = v.get(f"/api/v1/metrics/history?subject={subj}&range={rng}")
                ms.append((time.perf_counter() - t0) * 1000)
                assert r.status == 200, r
            out[f"{subj.split(':')[0]} {rng} ms"] = round(statistics.median(ms), 1)
            out[f"{subj.split(':')[0]} {rng} points"] = len(r.json["t"])
    adm.stop()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
