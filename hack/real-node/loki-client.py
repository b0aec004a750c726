#!/usr/bin/env python3
"""Pushes numbered log lines to Loki and reads them back: the data check of the real-Loki
scenario (hack/real-node/loki.sh). Runs inside the test's network namespace; every
address it is given is a Service or pod address there.

  loki-client.py push  --url http://DISTRIBUTOR:3100 --tenant T --phase P --streams S
                       --lines N --log SENT.jsonl
      S streams {job="lzo-e2e-real", stream="sNN"}, N lines each, pushed 5 lines per
      stream per request; a request that fails is retried (1 s apart, 60 tries), as a
      client such as Promtail does. Appends every accepted line to SENT.jsonl. Prints
      one JSON line: lines accepted, requests, retries, lines never accepted, seconds.

  loki-client.py query --url http://QUERY-FRONTEND:3100 --tenant T --log SENT.jsonl
      Queries every stream of SENT.jsonl over its time range (query_range, forward) and
      prints one JSON line: lines expected, found, lost (expected, not found), unexpected,
      duplicates, per phase. Exit 0 only when none is lost.
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

JOB = "lzo-e2e-real"


def request(url, tenant, data=None, timeout=15):
    headers = {"X-Scope-OrgID": tenant}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def push(a):
    start = time.time()
    base_ns = time.time_ns()
    per_req = 5
    accepted = requests = retries = failed = 0
    errors = []
    with open(a.log, "a") as log:
        seq = 0
        for first in range(0, a.lines, per_req):
            streams, sent = [], []
            for s in range(a.streams):
                values = []
                for i in range(first, min(first + per_req, a.lines)):
                    seq += 1
                    ts = base_ns + seq * 1000
                    line = f"phase={a.phase} stream=s{s:02d} seq={i} id={uuid.uuid4().hex}"
                    values.append([str(ts), line])
                    sent.append({"phase": a.phase, "stream": f"s{s:02d}", "ts": ts, "line": line})
                streams.append({"stream": {"job": JOB, "stream": f"s{s:02d}"}, "values": values})
            body = json.dumps({"streams": streams}).encode()
            for attempt in range(60):
                requests += 1
                try:
                    status, _ = request(a.url + "/loki/api/v1/push", a.tenant, body)
                    if status in (200, 204):
                        break
                    err = f"HTTP {status}"
                except urllib.error.HTTPError as e:
                    err = f"HTTP {e.code}: {e.read()[:200].decode(errors='replace').strip()}"
                except Exception as e:  # connection refused, timeout
                    err = str(e)
                retries += 1
                if len(errors) < 5:
                    errors.append(err)
                time.sleep(1)
            else:
                failed += len(sent)
                continue
            accepted += len(sent)
            for e in sent:
                log.write(json.dumps(e) + "\n")
    print(json.dumps({"phase": a.phase, "accepted": accepted, "requests": requests,
                      "retries": retries, "never_accepted": failed,
                      "seconds": round(time.time() - start, 1), "errors": errors}))
    return 0 if failed == 0 else 1


def query(a):
    sent = [json.loads(l) for l in open(a.log)]
    by_stream = {}
    for e in sent:
        by_stream.setdefault(e["stream"], []).append(e)
    found, dups, unexpected = set(), 0, 0
    want = {e["line"] for e in sent}
    errors = []
    for stream, entries in sorted(by_stream.items()):
        lo = min(e["ts"] for e in entries) - 1_000_000_000
        hi = max(e["ts"] for e in entries) + 1_000_000_000
        q = urllib.parse.urlencode({
            "query": f'{{job="{JOB}", stream="{stream}"}}', "start": lo, "end": hi,
            "limit": 5000, "direction": "forward"})
        for attempt in range(10):
            try:
                _, body = request(a.url + "/loki/api/v1/query_range?" + q, a.tenant, timeout=60)
                break
            except Exception as e:
                if len(errors) < 5:
                    errors.append(f"{stream}: {e}")
                time.sleep(2)
        else:
            continue
        result = json.loads(body)["data"]["result"]
        seen = set()
        for r in result:
            for _, line in r["values"]:
                if line in seen:
                    dups += 1
                seen.add(line)
                if line in want:
                    found.add(line)
                else:
                    unexpected += 1
    lost = want - found
    phases = {}
    for e in sent:
        p = phases.setdefault(e["phase"], {"expected": 0, "found": 0})
        p["expected"] += 1
        p["found"] += e["line"] in found
    print(json.dumps({"expected": len(want), "found": len(found), "lost": len(lost),
                      "unexpected": unexpected, "duplicates": dups, "phases": phases,
                      "lost_sample": sorted(lost)[:5], "errors": errors}))
    return 0 if not lost and len(want) > 0 else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("push")
    pq = sub.add_parser("query")
    for x in (pp, pq):
        x.add_argument("--url", required=True)
        x.add_argument("--tenant", required=True)
        x.add_argument("--log", required=True)
    pp.add_argument("--phase", required=True)
    pp.add_argument("--streams", type=int, default=10)
    pp.add_argument("--lines", type=int, default=50)
    a = p.parse_args()
    return push(a) if a.cmd == "push" else query(a)


if __name__ == "__main__":
    sys.exit(main())
