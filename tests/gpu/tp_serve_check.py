#!/usr/bin/env python3
"""`dsv4 serve --tp 2 --backend cuda` against `--tp 1` on real GPUs (run by tests/gpu/run_tp_serve.sh).

Phase "same" starts TP 1 (GPU 0) and TP 2 with local ranks (GPUs 0 and 1) on MODEL; phase "faults" TP 2 with ranks
started by hand whose rank 1 refuses backend stream REFUSE (`--test-refuse-stream`, tests only); "all" runs both
at once. MODEL needs attention heads in multiples of 8 (4 per rank for the CUDA sparse attention): the small
preset, not tiny. They check:
  1. same replies (phase "same"): /v1/chat/completions at temperature 0 and seeded sampling with logprobs, drafted and plain,
     streaming and not, and four requests at once, give the same content on TP 1 and TP 2 (ids and times
     aside), drafted == plain, streamed == whole, concurrent == solo;
  2. a refusal on one rank ends that request with the rank's reason and serving continues (the next request
     equals the first);
  3. a killed rank (SIGKILL to rank 1 mid-request) ends rank 0 within seconds with exit code 70;
  4. SIGTERM to rank 0 stops every rank cleanly (exit 0) after the same plan (phase "same").
Prints PASS/FAIL per check; exit status 0 when all pass.
Usage: tp_serve_check.py DSV4 MODEL LOGDIR [all|same|faults]
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

DSV4, MODEL, LOGS = sys.argv[1], sys.argv[2], sys.argv[3]
REFUSE = 2  # rank 1 of the third server refuses the second stream it is asked to open
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, name, args):
        self.name, self.log = name, os.path.join(LOGS, name + ".log")
        self.proc = subprocess.Popen([DSV4, "serve", "--model", MODEL, "--backend", "cuda", "--context", "2048",
                                      "--parallel", "4"] + args,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def wait_exit(self, seconds):
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None


def post(port, body, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        if body.get("stream"):
            return r.status, stream_content(data)
        return r.status, content(data)
    except Exception as e:  # a server that went away mid-request
        return -1, str(e)
    finally:
        c.close()


def content(data):
    """The reply without its id and creation time: what must be equal bit for bit."""
    try:
        j = json.loads(data)
    except ValueError:
        return data
    for k in ("id", "created", "system_fingerprint"):
        j.pop(k, None)
    return json.dumps(j, sort_keys=True)


def stream_content(data):
    """Streamed deltas joined: the text, the finish reason and every logprob entry."""
    text, finish, logprobs = [], None, []
    for line in data.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            j = json.loads(line[6:])
        except ValueError:
            return data
        for ch in j.get("choices", []):
            text.append(ch.get("delta", {}).get("content") or "")
            finish = ch.get("finish_reason") or finish
            if ch.get("logprobs"):
                logprobs += ch["logprobs"].get("content") or []
    return json.dumps({"text": "".join(text), "finish": finish, "logprobs": logprobs}, sort_keys=True)


def whole_as_stream(reply):
    try:
        ch = json.loads(reply)["choices"][0]
    except (ValueError, KeyError, IndexError):
        return "not a completion: " + reply[:300]
    lp = (ch.get("logprobs") or {}).get("content") or []
    return json.dumps({"text": ch["message"]["content"], "finish": ch["finish_reason"], "logprobs": lp}, sort_keys=True)


def wait_ready(port, server, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if server.proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def chat(prompt, n, **extra):
    b = {"model": "deepseek-v4", "messages": [{"role": "user", "content": prompt}], "max_tokens": n,
         "ignore_eos": True, "temperature": 0}
    b.update(extra)
    return b


def start_all(specs):
    """specs: (name, args, http port or None); every server with a port must become ready."""
    t0 = time.time()
    servers = [Server(n, a) for n, a, _ in specs]
    ready = [wait_ready(p, s, 120) for (_, _, p), s in zip(specs, servers) if p]
    check(all(ready), "servers ready after %.1f s: %s" % (time.time() - t0, ready))
    if not all(ready):
        for s in servers:
            print("---- %s\n%s" % (s.name, s.text()[-3000:]))
            s.proc.kill()
        return None
    return servers


def same_replies():
    """TP 2 == TP 1, drafted == plain, streamed == whole, concurrent == solo; clean stops."""
    p1, p2 = free_port(), free_port()
    servers = start_all([("tp1", ["--port", str(p1)], p1),
                         ("tp2", ["--tp", "2", "--master-port", "0", "--port", str(p2)], p2)])
    if not servers:
        return
    one, two = servers
    bodies = [chat("Hello there", 24, draft=False), chat("Hello there", 24, draft=True),
              chat("The quick brown fox", 20, temperature=0.9, seed=7, logprobs=True, top_logprobs=3, draft=False),
              chat("The quick brown fox", 20, temperature=0.9, seed=7, logprobs=True, top_logprobs=3, draft=True)]
    prompts = ["Tell me about rivers", "Count to ten", "What is a prime number?", "Write a haiku"]
    results = {}

    def session(port, name):
        r = {"solo": [post(port, b) for b in bodies]}
        r["streamed"] = [post(port, dict(b, stream=True)) for b in bodies[1:3]]
        r["alone"] = [post(port, chat(p, 16, draft=True)) for p in prompts]
        out = [None] * len(prompts)

        def run(i):
            out[i] = post(port, chat(prompts[i], 16, draft=True))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        r["together"], r["together_s"] = out, time.time() - t0
        results[name] = r

    sessions = [threading.Thread(target=session, args=a) for a in ((p1, "tp1"), (p2, "tp2"))]
    for t in sessions:
        t.start()
    for t in sessions:
        t.join()
    for name in ("tp1", "tp2"):
        r = results[name]
        bad = [(st, body[:400]) for st, body in r["solo"] + r["streamed"] + r["alone"] + r["together"] if st != 200]
        check(not bad, "%s: every request answered 200 %s" % (name, bad[:3]))
        check(r["solo"][0][1] == r["solo"][1][1], "%s: drafted == plain at temperature 0" % name)
        check(r["solo"][2][1] == r["solo"][3][1], "%s: drafted == plain, seeded sampling with logprobs" % name)
        for k, (st, text) in enumerate(r["streamed"]):
            check(st == 200 and text == whole_as_stream(r["solo"][k + 1][1]), "%s: streamed == whole, request %d" %
                  (name, k + 1))
        check(r["together"] == r["alone"], "%s: 4 concurrent requests == each alone (%.2f s together)" %
              (name, r["together_s"]))
    for i, b in enumerate(bodies):
        check(results["tp1"]["solo"][i] == results["tp2"]["solo"][i],
              "TP 2 == TP 1: request %d (temperature %s, draft %s)" % (i, b["temperature"], b["draft"]))
    for key in ("streamed", "together"):
        check(results["tp1"][key] == results["tp2"][key], "TP 2 == TP 1: %s replies" % key)
    print("first reply (tp2): %s" % results["tp2"]["solo"][0][1][:300], flush=True)
    for s in (one, two):
        s.proc.send_signal(signal.SIGTERM)
    codes = [one.wait_exit(20), two.wait_exit(20)]
    check(codes == [0, 0], "SIGTERM: tp1 and tp2 exited %s" % codes)
    stops = re.findall(r"rank (\d+) stopped after ([^\n:]*\))", two.text())
    check(len(stops) == 2 and stops[0][1] == stops[1][1], "tp2: both ranks stopped after the same plan: %s" % stops)
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()


def faults():
    """A refusal on one rank ends only its request; a killed rank ends every rank with 70."""
    p3, m3 = free_port(), free_port()
    hand = ["--tp", "2", "--master-port", str(m3), "--fabric-timeout-seconds", "2"]
    servers = start_all([("fault-rank0", hand + ["--rank", "0", "--port", str(p3)], p3),
                         ("fault-rank1", hand + ["--rank", "1", "--test-refuse-stream", str(REFUSE)], None)])
    if not servers:
        return
    f0, f1 = servers
    first = post(p3, chat("Hello there", 8, draft=False))
    refused = post(p3, chat("Hello there", 8, draft=False))
    third = post(p3, chat("Hello there", 8, draft=False))
    check(first[0] == 200, "fault server: first request 200")
    check(refused[0] != 200 and "rank 1: test refusal: rank 1 refuses stream %d" % REFUSE in refused[1],
          "a refusal on rank 1 ends the request with its reason (status %d: %s)" % (refused[0], refused[1][:200]))
    check(third[0] == 200 and third[1] == first[1], "serving continues after the refusal (the next reply equals the first)")
    cut = [None]
    client = threading.Thread(target=lambda: cut.__setitem__(0, post(p3, chat("Tell me a long story", 1900), 30)))
    client.start()
    time.sleep(1.0)
    k0 = time.time()
    f1.proc.send_signal(signal.SIGKILL)
    code = f0.wait_exit(10)
    took = time.time() - k0
    client.join()
    check(code == 70 and took < 5.0, "killed rank 1 mid-request: rank 0 exited %s after %.2f s (want 70 within 5 s)" %
          (code, took))
    check("rank 1 was lost" in f0.text(), "rank 0 names the lost rank")
    check(cut[0] is not None and cut[0][0] != 200, "the cut request did not pretend to finish (%s)" %
          (cut[0][0] if cut[0] else None))
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()


def main():
    phase = sys.argv[4] if len(sys.argv) > 4 else "all"
    # "all" runs both phases at once (their servers on different ports; the GPUs hold them all).
    phases = [f for name, f in (("same", same_replies), ("faults", faults)) if phase in ("all", name)]
    threads = [threading.Thread(target=f) for f in phases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("%d checks failed: %s" % (len(failures), failures) if failures else "ALL PASSED", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
