#!/usr/bin/env python3
"""What Kubernetes shows of a zone outage, polled: the record the client-view variants
(client-view.sh) time their stop and return against. Runs inside the test's network
namespace, as root (it reads kube-proxy's rules with iptables-save).

  zone-watch.py watch --api URL --token-file F --ca CA --namespace NS --selector SEL
                      --services S1,S2 --out WATCH.jsonl [--interval 0.5] [--stop-file P]
      Every interval, one JSONL record: each node's Ready condition (status, reason,
      lastTransitionTime), each node Lease's renewTime and leaseDurationSeconds, the
      ready and not-ready addresses of each Service's Endpoints (with their pods), each
      pod of SEL (node, IP, Ready and loki.grafana.com/zone-available conditions), and
      the pod IPs each Service has DNAT rules for in kube-proxy's nat table.

  zone-watch.py events --log WATCH.jsonl --node NODE --stop T --return T
      From the record: when the node's Lease was last renewed before the stop, when the
      node went NotReady, when its pods' Ready went False (and the reason), when they
      left each Service's Endpoints and kube-proxy's rules, and after the return when the
      node was Ready again and each Service had all its endpoints ready. One JSON line,
      seconds after the stop (or after the return for the *_back figures).
"""
import argparse
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime

ZONE_AVAILABLE = "loki.grafana.com/zone-available"


def ts(s):
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    m = re.match(r"(.*\.\d{6})\d*(\+.*)", s)  # MicroTime: at most 6 digits for fromisoformat
    if m:
        s = m.group(1) + m.group(2)
    return datetime.fromisoformat(s).timestamp()


def watch(a):
    ctx = ssl.create_default_context(cafile=a.ca)
    token = open(a.token_file).read().strip()
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))

    def get(path):
        req = urllib.request.Request(a.api + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
            return json.load(r)

    services = [s for s in a.services.split(",") if s]
    out = open(a.out, "a", buffering=1)
    while not stop and not (a.stop_file and os.path.exists(a.stop_file)):
        t = time.time()
        r = {"t": t}
        try:
            r["nodes"] = {}
            for n in get("/api/v1/nodes")["items"]:
                c = next((c for c in n["status"].get("conditions", []) if c["type"] == "Ready"), {})
                r["nodes"][n["metadata"]["name"]] = [c.get("status"), c.get("reason"),
                                                     ts(c.get("lastTransitionTime"))]
            r["leases"] = {
                l["metadata"]["name"]: [ts(l["spec"].get("renewTime")), l["spec"].get("leaseDurationSeconds")]
                for l in get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]}
            r["ep"] = {}
            for s in services:
                try:
                    e = get(f"/api/v1/namespaces/{a.namespace}/endpoints/{s}")
                except urllib.error.HTTPError:
                    continue
                ready, notready = {}, {}
                for sub in e.get("subsets") or []:
                    for x in sub.get("addresses") or []:
                        ready[x["ip"]] = (x.get("targetRef") or {}).get("name")
                    for x in sub.get("notReadyAddresses") or []:
                        notready[x["ip"]] = (x.get("targetRef") or {}).get("name")
                r["ep"][s] = {"ready": ready, "notready": notready}
            r["pods"] = {}
            for p in get(f"/api/v1/namespaces/{a.namespace}/pods?labelSelector={a.selector}")["items"]:
                conds = {c["type"]: c for c in p["status"].get("conditions", [])}
                rd, za = conds.get("Ready", {}), conds.get(ZONE_AVAILABLE)
                r["pods"][p["metadata"]["name"]] = {
                    "node": p["spec"].get("nodeName"), "ip": p["status"].get("podIP"),
                    "ready": rd.get("status"), "reason": rd.get("reason"),
                    "za": None if za is None else za.get("status"),
                    "deleting": bool(p["metadata"].get("deletionTimestamp"))}
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"[:200]
        try:
            nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                                 timeout=5).stdout
            dnat = {}
            for line in nat.splitlines():
                m = re.search(r'--comment "?([^" ]+)"? .*-j DNAT .*--to-destination ([\d.]+):', line)
                if m and line.startswith("-A KUBE-SEP-"):
                    svc = m.group(1).split("/")[-1].split(":")[0]
                    dnat.setdefault(svc, []).append(m.group(2))
            r["dnat"] = {s: sorted(set(dnat.get(s, []))) for s in services}
        except Exception as e:
            r["dnat_error"] = str(e)[:200]
        out.write(json.dumps(r) + "\n")
        time.sleep(max(0.0, a.interval - (time.time() - t)))
    return 0


def events(a):
    recs = []
    for line in open(a.log):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    recs = [r for r in recs if "nodes" in r and "pods" in r]
    stop, ret = a.stop, getattr(a, "return")
    rel = lambda t, base=stop: None if t is None else round(t - base, 1)
    at_stop = [r for r in recs if r["t"] <= stop]
    after = [r for r in recs if r["t"] > stop]
    ev = {"node": a.node, "polls": len(recs)}
    if not at_stop or not after:
        ev["error"] = "no record around the stop"
        print(json.dumps(ev))
        return 1
    base = at_stop[-1]
    dead = {n: p for n, p in base["pods"].items() if p["node"] == a.node and not p["deleting"]}
    dead_ips = {p["ip"] for p in dead.values() if p["ip"]}
    ev["pods"] = sorted(dead)
    lease = [r["leases"].get(a.node, [None, None]) for r in recs if r["t"] <= stop + 60]
    renews = sorted({l[0] for l in lease if l[0] and l[0] <= stop + 0.5})
    ev["lease_duration"] = lease[-1][1] if lease else None
    ev["last_renew"] = rel(renews[-1]) if renews else None

    def first(rs, cond):
        return next((r for r in rs if cond(r)), None)

    during = [r for r in after if r["t"] < ret]
    r = first(during, lambda r: (r["nodes"].get(a.node) or [None])[0] != "True")
    ev["node_notready"] = rel(r["t"]) if r else None
    ev["node_notready_transition"] = rel(r["nodes"][a.node][2]) if r else None
    r = first(during, lambda r: all((r["pods"].get(n) or {}).get("ready") != "True" for n in dead))
    ev["pods_notready"] = rel(r["t"]) if r else None
    ev["pods_notready_reason"] = sorted({(r["pods"].get(n) or {}).get("reason") or "-" for n in dead}) if r else None
    r = first(during, lambda r: any((r["pods"].get(n) or {}).get("za") == "False" for n in dead))
    ev["zone_available_false"] = rel(r["t"]) if r else None
    ev["endpoints_out"], ev["dnat_out"] = {}, {}
    for s in base.get("ep", {}):
        mine = dead_ips & set(base["ep"][s]["ready"])
        if not mine:
            ev["endpoints_out"][s] = "none there"
            continue
        r = first(during, lambda r: not (mine & set(r.get("ep", {}).get(s, {}).get("ready", {}))))
        ev["endpoints_out"][s] = rel(r["t"]) if r else None
        r = first(during, lambda r: "dnat" in r and not (mine & set(r["dnat"].get(s, []))))
        ev["dnat_out"][s] = rel(r["t"]) if r else None
    back = [r for r in recs if r["t"] >= ret]
    r = first(back, lambda r: (r["nodes"].get(a.node) or [None])[0] == "True")
    ev["node_ready_back"] = rel(r["t"], ret) if r else None
    ev["endpoints_back"] = {}
    for s in base.get("ep", {}):
        want = len(base["ep"][s]["ready"])
        r = first(back, lambda r: len(r.get("ep", {}).get(s, {}).get("ready", {})) >= want)
        ev["endpoints_back"][s] = rel(r["t"], ret) if r else None
    print(json.dumps(ev))
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--api", required=True)
    w.add_argument("--token-file", required=True)
    w.add_argument("--ca", required=True)
    w.add_argument("--namespace", required=True)
    w.add_argument("--selector", required=True)
    w.add_argument("--services", default="")
    w.add_argument("--out", required=True)
    w.add_argument("--interval", type=float, default=0.5)
    w.add_argument("--stop-file")
    e = sub.add_parser("events")
    e.add_argument("--log", required=True)
    e.add_argument("--node", required=True)
    e.add_argument("--stop", type=float, required=True)
    e.add_argument("--return", type=float, required=True)
    a = p.parse_args()
    return watch(a) if a.cmd == "watch" else events(a)


if __name__ == "__main__":
    sys.exit(main())
