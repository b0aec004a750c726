#!/usr/bin/env python3
"""A minimal cluster DNS for the real-node test cluster, standing in for CoreDNS (whose
image cannot be pulled here). UDP only, A records only, answers from the API server:

  <service>.<namespace>.svc.<domain>            the ClusterIP; for a headless Service the
                                                 addresses of its Endpoints (ready ones,
                                                 and not-ready ones when the Service
                                                 publishes them), as CoreDNS does
  <hostname>.<service>.<namespace>.svc.<domain>  that endpoint's address (StatefulSet pods)

A name it knows answers AAAA and other types with no records (NOERROR); every other name,
inside the domain or not, is NXDOMAIN: nothing is forwarded, nothing leaves the machine.
It lists Services and Endpoints every --refresh seconds.

  cluster-dns.py --listen 10.88.0.1 --api https://10.88.0.1:6443 --token T --ca CA.crt
  cluster-dns.py resolve 10.88.0.1 NAME      (a client: prints NAME's addresses)
"""
import argparse
import json
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request

A, AAAA = 1, 28


def fetch(args, ctx, path):
    req = urllib.request.Request(args.api + path, headers={"Authorization": "Bearer " + args.token})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        return json.load(r)["items"]


def build(args, ctx):
    """name (lower case, no trailing dot) -> list of IPv4 addresses"""
    dom = args.domain
    names = {}
    eps = {(e["metadata"]["namespace"], e["metadata"]["name"]): e
           for e in fetch(args, ctx, "/api/v1/endpoints")}
    for s in fetch(args, ctx, "/api/v1/services"):
        ns, name = s["metadata"]["namespace"], s["metadata"]["name"]
        fqdn = f"{name}.{ns}.svc.{dom}".lower()
        ip = s["spec"].get("clusterIP")
        addrs, hosts = [], {}
        for sub in eps.get((ns, name), {}).get("subsets") or []:
            lists = [sub.get("addresses") or []]
            if s["spec"].get("publishNotReadyAddresses"):
                lists.append(sub.get("notReadyAddresses") or [])
            for lst in lists:
                for a in lst:
                    if a["ip"] not in addrs:
                        addrs.append(a["ip"])
                    if a.get("hostname"):
                        hosts.setdefault(f"{a['hostname']}.{fqdn}", []).append(a["ip"])
        if ip and ip != "None":
            names[fqdn] = [ip]
        else:
            names[fqdn] = addrs
        names.update(hosts)
    return names


def parse_question(msg):
    labels, i = [], 12
    while True:
        n = msg[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:
            raise ValueError("compressed question")
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack_from(">HH", msg, i)
    return ".".join(labels).lower(), qtype, qclass, msg[12:i + 4]


def answer(msg, names):
    ident, flags, qd = struct.unpack_from(">HHH", msg, 0)
    if qd != 1 or flags & 0x8000:
        return None
    name, qtype, qclass, question = parse_question(msg)
    rd = flags & 0x0100
    addrs = names.get(name.rstrip("."))
    rcode = 3 if addrs is None else 0  # NXDOMAIN / NOERROR
    answers = b""
    count = 0
    if addrs and qtype == A and qclass == 1:
        for ip in addrs:
            # Name: a pointer to the question's name at offset 12.
            answers += struct.pack(">HHHIH", 0xC00C, A, 1, 5, 4) + socket.inet_aton(ip)
            count += 1
    # QR, AA, RD as asked, RA (answers are final), rcode.
    hdr = struct.pack(">HHHHHH", ident, 0x8000 | 0x0400 | rd | 0x0080 | rcode, 1, count, 0, 0)
    return hdr + question + answers


def resolve(server, port, name):
    """The A records SERVER gives for NAME (a client, for the test's own check)."""
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
    q += struct.pack(">HH", A, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(q, (server, port))
    r, _ = s.recvfrom(4096)
    an = struct.unpack_from(">H", r, 6)[0]
    rcode = struct.unpack_from(">H", r, 2)[0] & 0xF
    i, ips = len(q), []
    for _ in range(an):
        _, typ, _, _, ln = struct.unpack_from(">HHHIH", r, i)
        i += 12
        if typ == A:
            ips.append(socket.inet_ntoa(r[i:i + ln]))
        i += ln
    return rcode, ips


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "resolve":
        # cluster-dns.py resolve SERVER NAME: prints the addresses, exit 1 on NXDOMAIN
        rcode, ips = resolve(sys.argv[2], 53, sys.argv[3])
        print(" ".join(ips) or ("NXDOMAIN" if rcode == 3 else "-"))
        return 0 if rcode == 0 else 1
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--api", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--domain", default="cluster.local")
    p.add_argument("--refresh", type=float, default=1.0)
    args = p.parse_args()
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.check_hostname = False  # the serving certificate names localhost, not the address
    state = {"names": {}}

    def refresh():
        while True:
            try:
                state["names"] = build(args, ctx)
            except Exception as e:  # keep the last good answers
                print(f"cluster-dns: refresh failed: {e}", file=sys.stderr, flush=True)
            time.sleep(args.refresh)

    threading.Thread(target=refresh, daemon=True).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.listen, args.port))
    print(f"cluster-dns: serving {args.domain} on {args.listen}:{args.port}", file=sys.stderr, flush=True)
    while True:
        msg, peer = sock.recvfrom(4096)
        try:
            out = answer(msg, state["names"])
        except Exception as e:
            print(f"cluster-dns: bad query from {peer}: {e}", file=sys.stderr, flush=True)
            continue
        if out:
            sock.sendto(out, peer)


if __name__ == "__main__":
    sys.exit(main())
