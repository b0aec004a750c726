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
      With --line-bytes N each line is padded to N bytes with random base64 (what a
      compressor cannot shrink much: the cross-zone accounting's volume).

  loki-client.py query --url http://QUERY-FRONTEND:3100 --tenant T --log SENT.jsonl
      Queries every stream of SENT.jsonl over its time range, widened by --slack
      seconds (1) on each side (query_range, forward), and prints one JSON line: lines
      expected, found, lost (expected, not found), unexpected, duplicates, per phase,
      HTTP requests sent (retries included), response bytes, and from Loki's stats the
      ingesters reached, lines the ingesters sent and chunks the queriers downloaded
      from the store. Exit 0 only when none is lost.

  loki-client.py steady --push-url http://DISTRIBUTOR:3100 --query-url http://QUERY-FRONTEND:3100
                       --tenant T --run ID --out REQUESTS.jsonl [--stop-file PATH]
      What a client sees: every --interval (0.1 s) one push and one query, each on a new
      connection with a --timeout (2 s) and no retry, from their own threads so that a
      request that hangs does not hold the next one back. Pushes carry one line with a
      unique id to each of --streams streams {job="lzo-steady", run=ID, mode="noretry",
      stream="sN"}; queries ask query_range for the last 30 s of stream s0. With
      --retry-pushes (the default) a second push of the same size goes every interval to
      mode="retry", and is sent once more, at once, when it fails. Every --verify-interval
      (2 s) a verifier queries the lines accepted and not yet seen (5 s timeout) and
      records how many are still missing. Every request is a line of REQUESTS.jsonl
      (kind, start, latency, ok, status, error). Runs until the stop file exists or
      SIGTERM/SIGINT; then it waits for its requests, queries every accepted line back
      (as `query` does, paginated, up to --final-timeout s) and writes the result as a
      record of kind "final".

  loki-client.py summary --log REQUESTS.jsonl --stop T --return T [--label NAME]
      The client's view of one outage, from REQUESTS.jsonl: per window (before the stop,
      between the stop and the return, after the return) and kind, requests, failed
      share and p50/p90/p99 latency (every request, failed ones with their timeout); the
      failure window of each kind (send time of the first failed request after the stop
      to that of the last); pushes that failed even retried once; lines lost at the end;
      the time from the stop until every accepted line was queryable and stayed so (the
      verifier). Prints a text block, then one line `SUMMARY {json}`.
"""
import argparse
import base64
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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
                    if a.line_bytes > len(line) + 5:
                        n = a.line_bytes - len(line) - 5
                        line += " pad=" + base64.b64encode(os.urandom(n))[:n].decode()
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
    requests = response_bytes = 0
    # Loki's own account of where the lines came from (the response's stats).
    stats = {"ingesters_reached": 0, "ingester_lines_sent": 0, "store_chunks_downloaded": 0}
    slack = int(a.slack * 1_000_000_000)
    for stream, entries in sorted(by_stream.items()):
        lo = min(e["ts"] for e in entries) - slack
        hi = max(e["ts"] for e in entries) + slack
        q = urllib.parse.urlencode({
            "query": f'{{job="{JOB}", stream="{stream}"}}', "start": lo, "end": hi,
            "limit": 5000, "direction": "forward"})
        for attempt in range(10):
            requests += 1
            try:
                _, body = request(a.url + "/loki/api/v1/query_range?" + q, a.tenant, timeout=60)
                response_bytes += len(body)
                break
            except Exception as e:
                if len(errors) < 5:
                    errors.append(f"{stream}: {e}")
                time.sleep(2)
        else:
            continue
        data = json.loads(body)["data"]
        result = data["result"]
        st = data.get("stats") or {}
        ing, store = st.get("ingester") or {}, (st.get("querier") or {}).get("store") or {}
        stats["ingesters_reached"] += ing.get("totalReached", 0)
        stats["ingester_lines_sent"] += ing.get("totalLinesSent", 0)
        stats["store_chunks_downloaded"] += store.get("totalChunksDownloaded", 0)
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
                      "lost_sample": sorted(lost)[:5], "errors": errors,
                      "requests": requests, "response_bytes": response_bytes, "stats": stats}))
    return 0 if not lost and len(want) > 0 else 1


STEADY_JOB = "lzo-steady"


class Recorder:
    """Appends records to a JSONL file, one writer at a time."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, rec):
        line = json.dumps(rec)
        with self.lock:
            self.f.write(line + "\n")


def timed(url, tenant, data=None, timeout=2.0):
    """One request, no retry: (ok, status, error, body, start, latency)."""
    start = time.time()
    status, err, body = None, None, b""
    try:
        status, body = request(url, tenant, data, timeout=timeout)
    except urllib.error.HTTPError as e:
        status = e.code
        err = f"HTTP {e.code}: {e.read()[:160].decode(errors='replace').strip()}"
    except Exception as e:  # timeout, refused, reset
        err = f"{type(e).__name__}: {e}"[:200]
    ok = err is None and status in (200, 204)
    return ok, status, err, body, start, time.time() - start


def paginate(url, tenant, selector, start_ns, end_ns, timeout, limit=5000):
    """Every entry of SELECTOR in [start_ns, end_ns), forward, page by page: a set of
    lines, or raises on the first failed request."""
    lines, cur = set(), start_ns
    for _ in range(1000):
        q = urllib.parse.urlencode({"query": selector, "start": cur, "end": end_ns,
                                    "limit": limit, "direction": "forward"})
        _, body = request(url + "/loki/api/v1/query_range?" + q, tenant, timeout=timeout)
        values = [v for r in json.loads(body)["data"]["result"] for v in r["values"]]
        new = {line for _, line in values} - lines
        lines |= new
        if len(values) < limit or not new:
            return lines
        cur = max(int(ts) for ts, _ in values)
    return lines


def steady(a):
    rec = Recorder(a.out)
    sent = open(a.sent, "a", buffering=1) if a.sent else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    lock = threading.Lock()
    accepted = {}  # line -> (ts, accepted_at)
    unseen = {}  # line -> ts, accepted and not yet seen by the verifier
    push_url = a.push_url + "/loki/api/v1/push"
    t0 = time.time()
    rec.write({"kind": "start", "t": t0, "run": a.run, "interval": a.interval,
               "timeout": a.timeout, "streams": a.streams, "retry_pushes": a.retry_pushes,
               "push_url": a.push_url, "query_url": a.query_url})

    def body_for(mode, seq):
        streams, lines = [], []
        base = time.time_ns()
        for s in range(a.streams):
            ts = base + s
            line = f"run={a.run} mode={mode} seq={seq} stream=s{s} id={uuid.uuid4().hex}"
            streams.append({"stream": {"job": STEADY_JOB, "run": a.run, "mode": mode,
                                       "stream": f"s{s}"}, "values": [[str(ts), line]]})
            lines.append((ts, line))
        return json.dumps({"streams": streams}).encode(), lines

    def accept(lines, mode):
        now = time.time()
        with lock:
            for ts, line in lines:
                accepted[line] = (ts, now)
                unseen[line] = ts
        if sent:
            for ts, line in lines:
                sent.write(json.dumps({"mode": mode, "ts": ts, "line": line, "at": now}) + "\n")

    def do_push(seq, mode, attempts):
        body, lines = body_for(mode, seq)
        kind = "push" if mode == "noretry" else "push_retry"
        for attempt in range(1, attempts + 1):
            ok, status, err, _, start, lat = timed(push_url, a.tenant, body, a.timeout)
            last = ok or attempt == attempts
            rec.write({"kind": kind, "seq": seq, "attempt": attempt, "start": start,
                       "latency": round(lat, 4), "ok": ok, "status": status, "error": err,
                       "lines": len(lines), "final": last})
            if ok:
                accept(lines, mode)
                return

    def do_query(seq):
        end = time.time_ns()
        q = urllib.parse.urlencode({
            "query": f'{{job="{STEADY_JOB}", run="{a.run}", mode="noretry", stream="s0"}}',
            "start": end - 30 * 10**9, "end": end, "limit": 100, "direction": "backward"})
        ok, status, err, body, start, lat = timed(
            a.query_url + "/loki/api/v1/query_range?" + q, a.tenant, None, a.timeout)
        n = None
        if ok:
            try:
                n = sum(len(r["values"]) for r in json.loads(body)["data"]["result"])
            except Exception as e:
                ok, err = False, f"bad answer: {e}"[:200]
        rec.write({"kind": "query", "seq": seq, "attempt": 1, "start": start,
                   "latency": round(lat, 4), "ok": ok, "status": status, "error": err,
                   "entries": n, "final": True})

    def verifier():
        selector = f'{{job="{STEADY_JOB}", run="{a.run}"}}'
        while not stop.wait(a.verify_interval):
            start = time.time()
            with lock:
                pending = dict(unseen)
            err = None
            if pending:
                try:
                    got = paginate(a.query_url, a.tenant, selector, min(pending.values()),
                                   time.time_ns() + 10**9, a.verify_timeout)
                    with lock:
                        for line in got & pending.keys():
                            unseen.pop(line, None)
                except Exception as e:
                    err = f"{type(e).__name__}: {e}"[:200]
            with lock:
                left = sum(1 for line in pending if line in unseen)
            rec.write({"kind": "verify", "start": start, "latency": round(time.time() - start, 4),
                       "ok": err is None, "error": err, "pending_before": len(pending),
                       "pending_after": left})

    vt = threading.Thread(target=verifier, daemon=True)
    vt.start()
    pool = ThreadPoolExecutor(max_workers=a.workers)
    seq, skipped, nxt = 0, 0, time.time()
    while not stop.is_set():
        if a.stop_file and os.path.exists(a.stop_file):
            break
        seq += 1
        pool.submit(do_push, seq, "noretry", 1)
        pool.submit(do_query, seq)
        if a.retry_pushes:
            pool.submit(do_push, seq, "retry", 2)
        nxt += a.interval
        delay = nxt - time.time()
        if delay < -a.interval:  # fell behind (CPU): do not burst to catch up
            skipped += int(-delay / a.interval)
            nxt = time.time()
        elif delay > 0:
            stop.wait(delay)
    t_stop = time.time()
    stop.set()
    pool.shutdown(wait=True)
    vt.join(timeout=a.verify_timeout * 3)
    rec.write({"kind": "stop", "t": t_stop, "ticks": seq, "skipped_ticks": skipped})

    # Every accepted line back, as `query` does, per mode over its whole time range.
    t_final = time.time()
    want = set(accepted)
    found, errors, attempts = set(), [], 0
    while True:
        attempts += 1
        for mode in ("noretry", "retry"):
            tss = [ts for line, (ts, _) in accepted.items() if f" mode={mode} " in line]
            if not tss:
                continue
            try:
                found |= paginate(a.query_url, a.tenant,
                                  f'{{job="{STEADY_JOB}", run="{a.run}", mode="{mode}"}}',
                                  min(tss), max(tss) + 1, 60) & want
            except Exception as e:
                if len(errors) < 5:
                    errors.append(f"{mode}: {type(e).__name__}: {e}"[:200])
        if want <= found or time.time() - t_final > a.final_timeout:
            break
        time.sleep(3)
    lost = sorted(want - found)
    rec.write({"kind": "final", "t": time.time(), "expected": len(want), "found": len(found),
               "lost": len(lost), "lost_sample": lost[:5], "attempts": attempts,
               "seconds": round(time.time() - t_final, 1), "errors": errors})
    print(json.dumps({"run": a.run, "ticks": seq, "expected": len(want), "lost": len(lost)}))
    return 0 if not lost else 1


def pct(values, q):
    if not values:
        return None
    v = sorted(values)  # nearest rank
    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]


def summarize(recs, stop, ret):
    """The figures of one outage from the records of `steady`."""
    start = next((r["t"] for r in recs if r["kind"] == "start"), None)
    end = next((r["t"] for r in recs if r["kind"] == "stop"), None)
    final = next((r for r in recs if r["kind"] == "final"), None)

    def window(t):
        return "before" if t < stop else ("during" if t < ret else "after")

    # A logical request per (kind, seq): push_retry's is failed only if its last attempt is.
    reqs = [r for r in recs if r["kind"] in ("push", "query", "push_retry") and r.get("final")]
    first = {(r["kind"], r["seq"]): r for r in recs
             if r["kind"] in ("push", "query", "push_retry") and r.get("attempt") == 1}
    out = {"start": start, "end": end, "stop": stop, "return": ret, "windows": {}, "kinds": {}}
    for kind in ("push", "query", "push_retry"):
        rs = [r for r in reqs if r["kind"] == kind]
        for w in ("before", "during", "after"):
            ws = [r for r in rs if window(first[(kind, r["seq"])]["start"]) == w]
            failed = [r for r in ws if not r["ok"]]
            # The latency the client saw: from its first attempt's send to the answer.
            lat = [r["start"] + r["latency"] - first[(kind, r["seq"])]["start"] for r in ws]
            errs = {}
            for r in failed:
                e = (r.get("error") or f"HTTP {r.get('status')}").split(":")[0][:60]
                errs[e] = errs.get(e, 0) + 1
            out["windows"].setdefault(w, {})[kind] = {
                "requests": len(ws), "failed": len(failed),
                "failed_share": round(len(failed) / len(ws), 4) if ws else None,
                "p50_ms": None if not lat else round(pct(lat, 50) * 1000),
                "p90_ms": None if not lat else round(pct(lat, 90) * 1000),
                "p99_ms": None if not lat else round(pct(lat, 99) * 1000),
                "errors": errs}
        def span(lo, hi):
            f = sorted(first[(kind, r["seq"])]["start"] for r in rs
                       if not r["ok"] and lo <= first[(kind, r["seq"])]["start"] < hi)
            return {"failed": len(f),
                    "window_s": round(f[-1] - f[0], 1) if f else 0.0,
                    "first_s": round(f[0] - lo, 1) if f else None,
                    "last_s": round(f[-1] - lo, 1) if f else None}
        # The outage (stop to return) and the return (after it) are two episodes: each
        # has its failure window, from the send time of its first failed request to
        # that of its last.
        outage, back = span(stop, ret), span(ret, float("inf"))
        # Attempts that failed, even those retried with success (push_retry).
        att_failed = sorted(r["start"] for r in recs if r["kind"] == kind and not r["ok"]
                            and r["start"] >= stop)
        out["kinds"][kind] = {
            "failed_after_stop": outage["failed"] + back["failed"],
            "failure_window_s": outage["window_s"],
            "first_failed_s": outage["first_s"],
            "last_failed_s": outage["last_s"],
            "return_failed": back["failed"],
            "return_window_s": back["window_s"],
            "return_first_failed_s": back["first_s"],
            "return_last_failed_s": back["last_s"],
            "failed_attempts_after_stop": len(att_failed),
        }
    # The verifier: from the stop until every line accepted so far was queryable and
    # stayed so through the outage: the end of the first complete round after the last
    # round sent before the return that failed or missed a line (that round may come
    # after the return). Rounds after the return are counted apart.
    rounds = sorted((r for r in recs if r["kind"] == "verify" and r["start"] >= stop),
                    key=lambda r: r["start"])
    isbad = lambda r: not r["ok"] or r["pending_after"] > 0
    bad = [i for i, r in enumerate(rounds) if isbad(r) and r["start"] < ret]
    good_from = (bad[-1] + 1) if bad else 0
    good = next((r for r in rounds[good_from:] if not isbad(r)), None)
    if good is not None:
        queryable = round(good["start"] + good["latency"] - stop, 1)
    elif final and final["lost"] == 0:
        queryable = round(final["t"] - stop, 1)  # only the final read-back found them all
    else:
        queryable = None
    bad_back = [r for r in rounds if isbad(r) and r["start"] >= ret]
    out["verify"] = {"rounds_after_stop": len(rounds), "incomplete_rounds": len(bad),
                     "max_pending": max((r["pending_after"] for r in rounds), default=0),
                     "stop_to_all_queryable_s": queryable,
                     "incomplete_rounds_after_return": len(bad_back),
                     "after_return_first_s": round(bad_back[0]["start"] - ret, 1) if bad_back else None,
                     "after_return_last_s": round(bad_back[-1]["start"] - ret, 1) if bad_back else None}
    out["final"] = final
    return out


def summary(a):
    recs = []
    for line in open(a.log):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    s = summarize(recs, a.stop, getattr(a, "return"))
    s["label"] = a.label
    ms = lambda v: "-" if v is None else f"{v}"
    share = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    print(f"client view{' ' + a.label if a.label else ''}: stop at +{a.stop - s['start']:.1f} s, "
          f"return at +{getattr(a, 'return') - s['start']:.1f} s after the client started, "
          f"client stopped at +{(s['end'] or 0) - s['start']:.1f} s")
    print(f"  {'window':<7} {'kind':<11} {'requests':>8} {'failed':>7} {'share':>7} "
          f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7}  errors")
    for w in ("before", "during", "after"):
        for kind in ("push", "push_retry", "query"):
            k = s["windows"][w][kind]
            print(f"  {w:<7} {kind:<11} {k['requests']:>8} {k['failed']:>7} "
                  f"{share(k['failed_share']):>7} {ms(k['p50_ms']):>7} {ms(k['p90_ms']):>7} "
                  f"{ms(k['p99_ms']):>7}  {k['errors'] or ''}")
    for kind in ("push", "push_retry", "query"):
        k = s["kinds"][kind]
        print(f"  {kind}: outage: {k['failed_after_stop'] - k['return_failed']} failed, failure window "
              f"{k['failure_window_s']} s (sent +{k['first_failed_s']} .. +{k['last_failed_s']} s after "
              f"the stop); after the return: {k['return_failed']} failed, window {k['return_window_s']} s "
              f"(+{k['return_first_failed_s']} .. +{k['return_last_failed_s']} s after the return); "
              f"failed attempts after the stop, retried or not: {k['failed_attempts_after_stop']}")
    v, f = s["verify"], s["final"] or {}
    print(f"  verifier: {v['rounds_after_stop']} rounds after the stop, {v['incomplete_rounds']} "
          f"incomplete or failed before the return (at most {v['max_pending']} lines missing); "
          f"stop -> every accepted line queryable: {v['stop_to_all_queryable_s']} s; after the "
          f"return {v['incomplete_rounds_after_return']} incomplete or failed (+{v['after_return_first_s']} "
          f".. +{v['after_return_last_s']} s)")
    print(f"  final read-back: {f.get('found', '?')} of {f.get('expected', '?')} accepted lines "
          f"found, {f.get('lost', '?')} lost {f.get('lost_sample') or ''} {f.get('errors') or ''}")
    print("SUMMARY " + json.dumps(s))
    return 0


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
    pp.add_argument("--line-bytes", type=int, default=0)
    pq.add_argument("--slack", type=float, default=1.0)
    ps = sub.add_parser("steady")
    ps.add_argument("--push-url", required=True)
    ps.add_argument("--query-url", required=True)
    ps.add_argument("--tenant", required=True)
    ps.add_argument("--run", required=True)
    ps.add_argument("--out", required=True)
    ps.add_argument("--sent")
    ps.add_argument("--stop-file")
    ps.add_argument("--interval", type=float, default=0.1)
    ps.add_argument("--timeout", type=float, default=2.0)
    ps.add_argument("--streams", type=int, default=3)
    ps.add_argument("--retry-pushes", type=int, default=1)
    ps.add_argument("--verify-interval", type=float, default=2.0)
    ps.add_argument("--verify-timeout", type=float, default=5.0)
    ps.add_argument("--final-timeout", type=float, default=120.0)
    ps.add_argument("--workers", type=int, default=128)
    pm = sub.add_parser("summary")
    pm.add_argument("--log", required=True)
    pm.add_argument("--stop", type=float, required=True)
    pm.add_argument("--return", type=float, required=True)
    pm.add_argument("--label", default="")
    a = p.parse_args()
    return {"push": push, "query": query, "steady": steady, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
