#!/usr/bin/env python3
"""make bench: what constrained decoding costs per generated token.

Serves the f16 fixture model (32000-token vocabulary) and generates 200
tokens of a chat reply, best of three, without a constraint and under
each constraint the server has: JSON mode, a json_schema, guided_regex
and a forced tool call.  The difference from the unconstrained rate is
the mask's cost: one pass over the vocabulary per token.  Prints one
line per case and a JSON object per case to $BUILD/bench/constrained.jsonl.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
import test_serve  # noqa: E402  (the server harness: start, request, stop)

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
          "required": ["items"]}
TOOL = {"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}
CASES = [
    ("unconstrained", {}),
    ("json_object", {"response_format": {"type": "json_object"}}),
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}),
    ("guided_regex", {"guided_regex": "[a-z ]{1,400}"}),
    ("forced tool call", {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "note"}}}),
]


def main():
    build = os.environ.get("BUILD", "build")
    os.makedirs(os.path.join(build, "bench"), exist_ok=True)
    s = test_serve.Server("--chat-template", "chatml")
    if not s.wait_ready():
        print("bench-constrained: the server did not start")
        return 1
    base = None
    with open(os.path.join(build, "bench", "constrained.jsonl"), "a") as out:
        for name, extra in CASES:
            best = 0.0
            for rep in range(3):
                body = dict({"messages": [{"role": "user", "content": "go"}], "max_tokens": 200, "seed": rep,
                             "ignore_eos": True}, **extra)
                t0 = time.monotonic()
                st, j = s.request("POST", "/v1/chat/completions", body)
                dt = time.monotonic() - t0
                if st == 200:
                    best = max(best, j["usage"]["completion_tokens"] / dt)
            ms = 1000.0 / best if best else float("nan")
            base = ms if base is None else base
            print("%-18s %7.0f tok/s  %6.2f ms/token  (+%.2f ms for the mask)" % (name, best, ms, ms - base))
            out.write(json.dumps({"test": "constrained", "case": name, "tok_s": round(best, 1),
                                  "ms_per_token": round(ms, 3), "vocab": 32000}) + "\n")
    s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
