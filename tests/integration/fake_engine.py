#!/usr/bin/env python3
"""A stand-in for `privai-engine serve` whose answers a test steers, so the
admin's proxy can be checked on what a real engine does only by chance of
timing: an event held back until the client has the one before, an
upstream that breaks off mid-stream, a client that goes away.

It takes the engine's command line (only --port matters), answers /health,
and picks a behaviour from the first message's content.  FAKE_ENGINE_DIR
is where it reads the gate file and writes what it saw, the command line
included (argv-PORT).

`features --json` answers FAKE_ENGINE_FEATURES (default: the CPU and CUDA
backends), and fails while FAKE_ENGINE_DIR/features-fail exists, so the admin's GPU placements can be driven to the engine's
command line on a machine without a GPU; the real engine's CUDA path is
not what this checks."""
import hashlib
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR = os.environ.get("FAKE_ENGINE_DIR", ".")


def event(text):
    return "data: " + json.dumps({"object": "chat.completion.chunk",
                                  "choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


def big_body(n):
    """n bytes (a multiple of 32) that differ at every offset: the test rebuilds them."""
    return b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n // 32))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send_chunk(self, text):
        data = text.encode() if isinstance(text, str) else text
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def do_GET(self):
        body = b"ok\n" if self.path == "/health" else b"fake_engine_up 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        with open(os.path.join(DIR, "auth"), "w") as f:
            f.write(self.headers.get("Authorization", ""))
        with open(os.path.join(DIR, "peers"), "a") as f:
            f.write(f"{self.client_address[1]}\n")
        what = (req.get("messages") or [{}])[0].get("content", "")
        if what == "gated":
            self.start_stream()
            self.send_chunk(event("first"))
            gate = os.path.join(DIR, "gate")
            deadline = time.time() + 20
            while not os.path.exists(gate) and time.time() < deadline:
                time.sleep(0.02)
            self.send_chunk(event("after-gate" if os.path.exists(gate) else "gate-timeout"))
            self.send_chunk("data: [DONE]\n\n")
            self.send_chunk(b"")
        elif what == "broken":
            self.start_stream()
            self.send_chunk(event("first"))
            self.close_connection = True
            self.connection.shutdown(2)  # no last chunk: the answer is cut off
        elif what == "hangup":
            self.close_connection = True
            self.connection.shutdown(2)  # no answer at all
        elif what == "gone":
            self.start_stream()
            self.send_chunk(event("first"))
            try:
                for i in range(400):
                    time.sleep(0.05)
                    self.send_chunk(event(f"more {i}"))
            except OSError:
                with open(os.path.join(DIR, "gone"), "w") as f:
                    f.write("the proxy closed the stream\n")
                self.close_connection = True
                return
            self.send_chunk(b"")
        elif what.startswith("big "):
            body = big_body(int(what[4:]))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            body = json.dumps({"error": {"message": "the queue is full", "type": "rate_limit_error"}}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def main():
    if sys.argv[1:2] == ["features"]:
        if os.path.exists(os.path.join(DIR, "features-fail")):  # an engine that cannot answer yet
            sys.exit("fake engine: features refused while features-fail exists")
        print(os.environ.get("FAKE_ENGINE_FEATURES", '{"backends":["cpu","cuda"],"cpu_simd":"scalar","collectives":["gloo","nccl"]}'))
        return
    port = int(sys.argv[sys.argv.index("--port") + 1])
    with open(os.path.join(DIR, f"argv-{port}"), "w") as f:
        f.write("\n".join(sys.argv[1:]) + "\n")
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
