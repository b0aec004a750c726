#!/usr/bin/env python3
"""A DNS client for the real-node check: asks SERVER (UDP port 53) for the A records of
NAME and prints them, NXDOMAIN, or "-" for an empty answer; exits 1 unless the answer is
NOERROR. The cluster DNS it asks is CoreDNS (lib.sh); the rig has no dig.

  dns-query.py SERVER NAME
"""
import socket
import struct
import sys

A = 1


def skip_name(r, i):
    """The offset past the (possibly compressed) name at offset i."""
    while True:
        n = r[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n


def resolve(server, port, name):
    """The rcode and the A records SERVER gives for NAME."""
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
        i = skip_name(r, i)
        typ, _, _, ln = struct.unpack_from(">HHIH", r, i)
        i += 10
        if typ == A:
            ips.append(socket.inet_ntoa(r[i:i + ln]))
        i += ln
    return rcode, ips


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rcode, ips = resolve(sys.argv[1], 53, sys.argv[2])
    print(" ".join(ips) or ("NXDOMAIN" if rcode == 3 else "-"))
    return 0 if rcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
