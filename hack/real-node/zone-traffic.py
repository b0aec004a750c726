#!/usr/bin/env python3
"""Cross-zone traffic accounting for the real-node scenario (issue 41, part 1): the
Python half of zone-traffic.sh, which sets up the iptables chain this reads.

  zone-traffic.py zones "zone-a=10.88.1.0/24 zone-b=10.88.2.0/24,10.88.4.0/24 ..."
      Checks a zone list and prints it one zone a line, "NAME CIDR[,CIDR...]" (CIDRs
      normalised); exit 2 if a name or CIDR is bad, a zone is named twice, or two
      zones' ranges overlap (a packet must belong to one zone only).

  zone-traffic.py snapshot --ns NS --label LABEL --file FILE [--chain CHAIN]
      Reads the counters of the namespace's filter table (iptables-save -c) and appends
      one JSON line to FILE: time, label, bytes and packets per ordered zone pair
      ("zone-a>zone-b") and per zone ("zone-a=zone-a", same zone, for context), the
      jump's own counters (everything that reached the chain), the DROP rules ahead of
      the jump (a zone stopped: what it dropped was never forwarded, so not counted) and
      a warning for any other rule ahead of the jump (it could accept packets before
      they are counted). Exit 1 if the chain or the jump is missing.

  zone-traffic.py table FILE [--pushed-bytes PHASE=N]... [--queries PHASE=N]...
                       [--rf R] [--idle LABEL]...
      One phase per consecutive pair of snapshots, named by the later one's label (a
      label seen again is LABEL#2, LABEL#3, ... for --pushed-bytes and --queries):
      cross-zone bytes in all and per ordered zone pair, bytes per second, the same
      minus the idle rate (phases labelled idle, or --idle) times the phase's length,
      and where given, cross-zone bytes per byte pushed beside the physical floor
      (R-1: with replication factor R over R zones each written byte must reach R-1
      other zones) and per query. Ends with one JSON line, {"zone_traffic": ...}.

  zone-traffic.py sent-bytes SENT.jsonl PHASE [PHASE...]
      Bytes of the log lines loki-client.py logged as accepted for those phases (UTF-8
      length of each line, what Loki counts as bytes received, labels excluded).

Counters are those of iptables: bytes of the IPv4 packets (IP and TCP/UDP headers
included, Ethernet header not), counted when the packet is forwarded between two pods.
"""
import argparse
import ipaddress
import json
import os
import re
import shlex
import subprocess
import sys
import time

TAG = "lzo-zt"
JUMP_COMMENT = f"{TAG} jump"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def die(msg, code=2):
    print(f"zone-traffic: {msg}", file=sys.stderr)
    sys.exit(code)


# ---------------------------------------------------------------------------- zones
def parse_zones(spec):
    zones = {}
    for item in spec.split():
        name, sep, cidrs = item.partition("=")
        if not sep or not NAME_RE.match(name) or not cidrs:
            die(f"bad zone {item!r}: want NAME=CIDR[,CIDR...], NAME of letters, digits, . _ -")
        if name in zones:
            die(f"zone {name} named twice (list all its ranges in one NAME=CIDR,CIDR)")
        nets = []
        for c in cidrs.split(","):
            try:
                nets.append(ipaddress.IPv4Network(c, strict=False))
            except ValueError as e:
                die(f"zone {name}: {e}")
        zones[name] = nets
    if len(zones) < 2:
        die("at least two zones are needed for cross-zone traffic")
    items = [(z, n) for z, nets in zones.items() for n in nets]
    for i, (za, na) in enumerate(items):
        for zb, nb in items[i + 1:]:
            if na.overlaps(nb) and za != zb:
                die(f"zones {za} ({na}) and {zb} ({nb}) overlap")
    return zones


def cmd_zones(a):
    for z, nets in parse_zones(a.spec).items():
        print(z, ",".join(str(n) for n in nets))


# ---------------------------------------------------------------------------- snapshot
def netns_cmd(ns):
    path = ns if "/" in ns else f"/run/netns/{ns}"
    if not os.path.exists(path):
        die(f"no network namespace {path}", 1)
    return ["nsenter", f"--net={path}"]


RULE_RE = re.compile(r"^\[(\d+):(\d+)\] -A (\S+) (.*)$")


def parse_save(text, chain):
    """Rules of FORWARD and CHAIN from iptables-save -c output of the filter table."""
    forward, ours, in_filter = [], [], False
    for line in text.splitlines():
        if line.startswith("*"):
            in_filter = line == "*filter"
            continue
        m = RULE_RE.match(line)
        if not (in_filter and m):
            continue
        pk, by, ch, rest = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        toks = shlex.split(rest)
        comment = toks[toks.index("--comment") + 1] if "--comment" in toks else ""
        target = toks[toks.index("-j") + 1] if "-j" in toks else ""
        rule = {"packets": pk, "bytes": by, "comment": comment, "target": target, "rule": rest}
        if ch == "FORWARD":
            forward.append(rule)
        elif ch == chain:
            ours.append(rule)
    return forward, ours


def cmd_snapshot(a):
    cmd = netns_cmd(a.ns) + ["iptables-save", "-c", "-t", "filter"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    t1 = time.time()
    if r.returncode != 0:
        die(f"{' '.join(cmd)}: {r.stderr.strip()}", 1)
    forward, ours = parse_save(r.stdout, a.chain)
    jumps = [i for i, f in enumerate(forward) if f["target"] == a.chain]
    if not jumps:
        die(f"no jump to {a.chain} in FORWARD of {a.ns} (zt_setup not run, or removed)", 1)
    pos = jumps[0]
    pairs, same = {}, {}
    for rule in ours:
        c = rule["comment"]
        if not c.startswith(TAG + " "):
            continue
        key = c[len(TAG) + 1:]
        if ">" in key:
            d = pairs
        elif "=" in key:
            key, d = key.split("=")[0], same
        else:
            continue
        e = d.setdefault(key, {"bytes": 0, "packets": 0})
        e["bytes"] += rule["bytes"]
        e["packets"] += rule["packets"]
    if not pairs:
        die(f"chain {a.chain} in {a.ns} has no zone pair rules", 1)
    drop = {"bytes": 0, "packets": 0}
    warnings = []
    for i, f in enumerate(forward[:pos]):
        if f["target"] == "DROP":
            drop["bytes"] += f["bytes"]
            drop["packets"] += f["packets"]
        else:
            warnings.append(f"FORWARD rule {i + 1} comes before the jump to {a.chain} and is not a DROP: "
                            f"packets it accepts are never counted: -A FORWARD {f['rule']}")
    if len(jumps) > 1:
        warnings.append(f"{len(jumps)} jumps to {a.chain} in FORWARD: packets are counted up to {len(jumps)} times")
    snap = {
        "t": round((t0 + t1) / 2, 4),
        "label": a.label,
        "ns": a.ns,
        "chain": a.chain,
        "jump_position": pos + 1,
        "pairs": pairs,
        "same": same,
        "jump": {"bytes": forward[pos]["bytes"], "packets": forward[pos]["packets"]},
        "dropped_ahead": drop,
        "warnings": warnings,
    }
    for w in warnings:
        print(f"zone-traffic: warning ({a.label}): {w}", file=sys.stderr)
    with open(a.file, "a") as f:
        f.write(json.dumps(snap, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------- table
def kv_list(items, what, conv):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            die(f"--{what} wants PHASE=N, got {it!r}")
        try:
            out[k] = conv(v)
        except ValueError:
            die(f"--{what} {it!r}: {v!r} is not a number")
    return out


def diff(a, b):
    """b - a per key; a counter that went down (chain re-created) restarts from zero."""
    out, reset = {}, False
    for k in set(a) | set(b):
        x = a.get(k, {"bytes": 0, "packets": 0})
        y = b.get(k, {"bytes": 0, "packets": 0})
        if y["bytes"] < x["bytes"] or y["packets"] < x["packets"]:
            reset = True
            out[k] = dict(y)
        else:
            out[k] = {"bytes": y["bytes"] - x["bytes"], "packets": y["packets"] - x["packets"]}
    return out, reset


def fmt(n, nd=0):
    if n is None:
        return "-"
    if nd == 0:
        return f"{round(n):,}"
    return f"{n:,.{nd}f}"


def build_table(snaps, pushed, queries, rf, idle_labels):
    if len(snaps) < 2:
        die("the file needs at least two snapshots (a baseline and one phase)", 1)
    phases, seen = [], {}
    for prev, cur in zip(snaps, snaps[1:]):
        label = cur["label"]
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        pairs, r1 = diff(prev["pairs"], cur["pairs"])
        same, r2 = diff(prev.get("same", {}), cur.get("same", {}))
        # The DROP rules come and go (a zone stopped, then back): a lower sum means
        # rules were removed, and the later sum is what the rules now there dropped.
        drops, _ = diff({"d": prev.get("dropped_ahead", {"bytes": 0, "packets": 0})},
                        {"d": cur.get("dropped_ahead", {"bytes": 0, "packets": 0})})
        secs = cur["t"] - prev["t"]
        cross = sum(p["bytes"] for p in pairs.values())
        phases.append({
            "label": label,
            "start": prev["t"],
            "secs": round(secs, 3),
            "pairs": {k: pairs[k] for k in sorted(pairs)},
            "same": {k: same[k] for k in sorted(same)},
            "cross_bytes": cross,
            "cross_packets": sum(p["packets"] for p in pairs.values()),
            "cross_Bps": round(cross / secs, 1) if secs > 0 else None,
            "dropped_by_rules_ahead": drops["d"],
            "counter_reset": r1 or r2,
            "warnings": cur.get("warnings", []),
        })
    idle = [p for p in phases if p["label"].split("#")[0] in idle_labels]
    idle_secs = sum(p["secs"] for p in idle)
    pair_names = sorted({k for p in phases for k in p["pairs"]})
    zones = sorted({z for k in pair_names for z in k.split(">")})
    if rf is None:
        rf = len(zones)
    floor = rf - 1
    idle_rate = None
    idle_pair_rate = {}
    if idle and idle_secs > 0:
        idle_rate = sum(p["cross_bytes"] for p in idle) / idle_secs
        idle_pair_rate = {k: sum(p["pairs"].get(k, {"bytes": 0})["bytes"] for p in idle) / idle_secs
                          for k in pair_names}
    for p in phases:
        if idle_rate is not None:
            p["cross_minus_idle"] = round(p["cross_bytes"] - idle_rate * p["secs"])
            p["pairs_minus_idle"] = {k: round(p["pairs"].get(k, {"bytes": 0})["bytes"] - idle_pair_rate[k] * p["secs"])
                                     for k in pair_names}
        else:
            p["cross_minus_idle"] = None
        net = p["cross_minus_idle"] if p["cross_minus_idle"] is not None else p["cross_bytes"]
        pb = pushed.get(p["label"])
        if pb:
            p["pushed_bytes"] = pb
            p["floor_bytes"] = floor * pb
            p["cross_per_byte_pushed"] = round(net / pb, 4)
            p["cross_per_byte_pushed_gross"] = round(p["cross_bytes"] / pb, 4)
            p["vs_floor"] = round(net / pb / floor, 3) if floor > 0 else None
        q = queries.get(p["label"])
        if q:
            p["queries"] = q
            p["bytes_per_query"] = round(net / q)
            p["bytes_per_query_gross"] = round(p["cross_bytes"] / q)
    return {
        "rf": rf,
        "floor_per_byte_pushed": floor,
        "zones": zones,
        "idle_phases": [p["label"] for p in idle],
        "idle_Bps": round(idle_rate, 1) if idle_rate is not None else None,
        "idle_pair_Bps": {k: round(v, 1) for k, v in idle_pair_rate.items()},
        "phases": phases,
        "ns": snaps[-1].get("ns"),
        "chain": snaps[-1].get("chain"),
    }


def print_table(s, out=sys.stdout):
    w = lambda *a: print(*a, file=out)
    phases = s["phases"]
    lw = max([12] + [len(p["label"]) for p in phases])
    w(f"Cross-zone traffic (iptables chain {s['chain']} in {s['ns']}): bytes of IPv4 packets "
      f"forwarded between pods of different zones (IP+TCP/UDP headers, no Ethernet header)")
    w(f"zones {', '.join(s['zones'])}; RF {s['rf']}: physical floor {s['floor_per_byte_pushed']} "
      f"cross-zone bytes per byte pushed, 0 for queries (every zone holds a copy)")
    if s["idle_Bps"] is not None:
        w(f"idle (gossip) rate from {', '.join(s['idle_phases'])}: {fmt(s['idle_Bps'])} B/s, "
          f"subtracted x phase length in 'minus idle'")
    else:
        w("no phase labelled idle: 'minus idle' not computed, ratios use the gross bytes")
    hdr = (f"{'phase':<{lw}} {'secs':>7} {'cross-zone B':>13} {'B/s':>10} {'minus idle':>12} "
           f"{'pushed B':>11} {'floor B':>11} {'x/pushed':>8} {'vs floor':>8} {'queries':>7} {'B/query':>10}")
    w("")
    w(hdr)
    w("-" * len(hdr))
    for p in phases:
        w(f"{p['label']:<{lw}} {p['secs']:>7.1f} {fmt(p['cross_bytes']):>13} {fmt(p['cross_Bps']):>10} "
          f"{fmt(p.get('cross_minus_idle')):>12} {fmt(p.get('pushed_bytes')):>11} {fmt(p.get('floor_bytes')):>11} "
          f"{fmt(p.get('cross_per_byte_pushed'), 3):>8} {fmt(p.get('vs_floor'), 2):>8} "
          f"{fmt(p.get('queries')):>7} {fmt(p.get('bytes_per_query')):>10}")
    pair_names = sorted({k for p in phases for k in p["pairs"]})
    same_names = sorted({k for p in phases for k in p["same"]})
    cw = [max(10, len(p["label"])) for p in phases]
    kw = max([16] + [len(k) for k in pair_names + same_names])
    w("")
    w(f"{'bytes from>to':<{kw}} " + " ".join(f"{p['label']:>{c}}" for p, c in zip(phases, cw)))
    for k in pair_names:
        w(f"{k:<{kw}} " + " ".join(f"{fmt(p['pairs'].get(k, {'bytes': 0})['bytes']):>{c}}" for p, c in zip(phases, cw)))
    if same_names:
        w(f"{'same zone (not cross-zone)':<{kw}}")
        for k in same_names:
            w(f"{k + '=' + k:<{kw}} " + " ".join(f"{fmt(p['same'].get(k, {'bytes': 0})['bytes']):>{c}}" for p, c in zip(phases, cw)))
    notes = []
    for p in phases:
        d = p["dropped_by_rules_ahead"]
        if d["packets"]:
            notes.append(f"{p['label']}: {fmt(d['bytes'])} B in {fmt(d['packets'])} packets dropped by DROP rules ahead "
                         f"of the count (a zone stopped), not counted as crossing")
        if p["counter_reset"]:
            notes.append(f"{p['label']}: a counter went down (chain re-created?): counted from zero")
        for wn in p["warnings"]:
            notes.append(f"{p['label']}: warning: {wn}")
    if notes:
        w("")
        for n in notes:
            w(n)
    w("")
    w(json.dumps({"zone_traffic": s}, sort_keys=True))


def cmd_table(a):
    snaps = []
    with open(a.file) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if line:
                try:
                    snaps.append(json.loads(line))
                except json.JSONDecodeError as e:
                    die(f"{a.file}:{n}: {e}", 1)
    pushed = kv_list(a.pushed_bytes, "pushed-bytes", lambda v: int(float(v)))
    queries = kv_list(a.queries, "queries", lambda v: int(float(v)))
    s = build_table(snaps, pushed, queries, a.rf, set(a.idle or ["idle"]))
    print_table(s)


def cmd_sent_bytes(a):
    want, total = set(a.phases), 0
    with open(a.file) as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                if e.get("phase") in want:
                    total += len(e["line"].encode())
    print(total)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("zones")
    p.add_argument("spec")
    p.set_defaults(f=cmd_zones)
    p = sub.add_parser("snapshot")
    p.add_argument("--ns", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--chain", default="LZO-ZONE-ACCT")
    p.set_defaults(f=cmd_snapshot)
    p = sub.add_parser("table")
    p.add_argument("file")
    p.add_argument("--pushed-bytes", action="append")
    p.add_argument("--queries", action="append")
    p.add_argument("--rf", type=int)
    p.add_argument("--idle", action="append")
    p.set_defaults(f=cmd_table)
    p = sub.add_parser("sent-bytes")
    p.add_argument("file")
    p.add_argument("phases", nargs="+")
    p.set_defaults(f=cmd_sent_bytes)
    a = ap.parse_args()
    if a.cmd == "snapshot" and not NAME_RE.match(a.label):
        die(f"bad label {a.label!r}: letters, digits, . _ - (a repeated label becomes LABEL#2 in the table)")
    a.f(a)


if __name__ == "__main__":
    main()
