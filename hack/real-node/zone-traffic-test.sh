#!/usr/bin/env bash
# Test of zone-traffic.sh (cross-zone traffic accounting, issue 41): no cluster, no Loki.
#
#   sudo hack/real-node/zone-traffic-test.sh
#
# 1. The table's arithmetic on a made-up snapshot file (idle subtraction, per byte
#    pushed, floor, per query, a repeated label, a counter reset): exact numbers.
# 2. The counting, on a miniature of lib.sh's network: a namespace with a bridge cni0
#    (10.88.0.1/16, bridge-nf-call-iptables 1) and four "pod" namespaces on veths, in
#    three zones, zone-a holding two node ranges:
#      a1 10.88.1.2 (zone-a)  a2 10.88.4.2 (zone-a)  b1 10.88.2.2 (zone-b)  c1 10.88.3.2 (zone-c)
#    Known payloads are sent between them (python3 sockets), in phases, and the table's
#    JSON line is checked:
#      idle      nothing sent: every counter 0
#      udp       datagrams of known sizes: each pair's bytes exactly datagrams x (size +
#                28) (20 B IPv4 + 8 B UDP header), same-zone datagrams only in zone-a=zone-a
#      tcp       TCP streams of known sizes, each way: bytes = payload + one IPv4 header
#                (20 B) and one TCP header (20-60 B; 32 with timestamps) per counted
#                packet, so 40 x packets <= bytes - payload <= 80 x packets; pairs that
#                carry only ACKs have payload 0; the same-zone stream is not cross-zone
#      service   a1 to a Service VIP DNATed to b1 in nat PREROUTING (as kube-proxy
#                does): both directions counted on their zone pair, real addresses
#      hidden    a copy of kube-proxy's KUBE-FORWARD (as lib.sh's kube-proxy writes it,
#                no --cluster-cidr: RELATED,ESTABLISHED accepted from any source) jumped
#                to ABOVE the count: the snapshot warns, and of a 100,000 B TCP stream
#                only its SYN (NEW, 60 B) is counted: why the jump must stay on top
#      zone-down zone-b stopped as loki.sh does (DROP rules, comment lzo-e2e-zone-down,
#                inserted at FORWARD position 1): traffic to and from zone-b is 0 in the
#                table, while the DROP rules' own counters show it was sent; a-c
#                traffic still counted exactly
#      zone-back the rules removed as loki_zone_return does: a-b counted again
#    and zt_setup run twice leaves one jump; run during a zone stop it puts the jump
#    below the DROP rules; zt_teardown leaves FORWARD as it was.
#    The namespace mirrors lib.sh's: bridge-nf-call-iptables 1 (the default where
#    br_netfilter is loaded; set if not, in this namespace only) and ip_forward 1 (the
#    CNI bridge plugin sets it there at the first pod).
# Nothing leaves the machine: every address is in namespaces this script creates, which
# it deletes on exit. Exits non-zero on any mismatch. A few seconds.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/real-node/zone-traffic.sh
source "$here/zone-traffic.sh"

[ "$(id -u)" = 0 ] || { echo "zone-traffic-test: needs root (network namespaces, iptables)" >&2; exit 1; }
for c in ip iptables iptables-save nsenter python3; do
  command -v "$c" >/dev/null || { echo "zone-traffic-test: $c missing" >&2; exit 1; }
done

T=$(mktemp -d /tmp/lzo-zt-test.XXXXXX)
# The interpreter itself, not a version manager's shim (pyenv's costs ~0.3 s a start).
PY=$(python3 -c 'import sys; print(sys.executable)')
ZT_PYTHON=$PY
ID=zt$$
BR=$ID-br
PODS=(a1 a2 b1 c1)
declare -A IP=([a1]=10.88.1.2 [a2]=10.88.4.2 [b1]=10.88.2.2 [c1]=10.88.3.2)
CREATED=()
PIDS=()
FAILS=0

cleanup() {
  local p n
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for n in "${CREATED[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
check() { # DESCRIPTION COND...
  local d=$1
  shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}

# ------------------------------------------------------------------ 1. table arithmetic
echo "== table arithmetic (made-up snapshots)"
"$PY" - "$T/synthetic.jsonl" <<'PY'
import json, sys
z = {"bytes": 0, "packets": 0}
def snap(t, label, ab, ba, ac, same_a=0, dropped=0):
    return {"t": t, "label": label, "ns": "x", "chain": "LZO-ZONE-ACCT", "jump_position": 1,
            "pairs": {"zone-a>zone-b": {"bytes": ab, "packets": ab // 100},
                      "zone-b>zone-a": {"bytes": ba, "packets": ba // 100},
                      "zone-a>zone-c": {"bytes": ac, "packets": ac // 100}},
            "same": {"zone-a": {"bytes": same_a, "packets": same_a // 100}},
            "jump": z, "dropped_ahead": {"bytes": dropped, "packets": dropped // 100}, "warnings": []}
with open(sys.argv[1], "w") as f:
    for s in [snap(1000.0, "start", 0, 0, 0),
              snap(1010.0, "idle", 600, 300, 100),                     # 1,000 B in 10 s: 100 B/s
              snap(1015.0, "push", 600 + 1_000_000, 300 + 500, 100 + 1_000_000, 7_000),
              snap(1017.0, "query", 1_000_600 + 20_000, 800, 1_000_100, 7_000),
              snap(1019.0, "query", 1_020_600 + 4_000, 800, 1_000_100, 7_000, 9_000),
              snap(1029.0, "reset", 2_000, 0, 0)]:
        f.write(json.dumps(s) + "\n")
PY
zt_table "$T/synthetic.jsonl" --pushed-bytes push=1000000 --queries query=4 --queries 'query#2=2' --rf 3 >"$T/synthetic.out"
cat "$T/synthetic.out"
"$PY" - "$T/synthetic.out" >"$T/synthetic.check" <<'PY' || true
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["zone_traffic"]
p = {x["label"]: x for x in s["phases"]}
want = [
    ("phases in order", [x["label"] for x in s["phases"]], ["idle", "push", "query", "query#2", "reset"]),
    ("idle rate 1,000 B / 10 s", s["idle_Bps"], 100.0),
    ("idle pair rate zone-a>zone-b", s["idle_pair_Bps"]["zone-a>zone-b"], 60.0),
    ("idle minus idle", p["idle"]["cross_minus_idle"], 0),
    ("push cross-zone bytes", p["push"]["cross_bytes"], 2_000_500),
    ("push seconds", p["push"]["secs"], 5.0),
    ("push B/s", p["push"]["cross_Bps"], 400_100.0),
    ("push minus idle (100 B/s x 5 s)", p["push"]["cross_minus_idle"], 2_000_000),
    ("push zone-a>zone-b minus idle (60 B/s x 5 s)", p["push"]["pairs_minus_idle"]["zone-a>zone-b"], 1_000_000 - 300),
    ("push per byte pushed (net)", p["push"]["cross_per_byte_pushed"], 2.0),
    ("push per byte pushed (gross)", p["push"]["cross_per_byte_pushed_gross"], 2.0005),
    ("push floor bytes (RF 3: 2 x pushed)", p["push"]["floor_bytes"], 2_000_000),
    ("push vs floor", p["push"]["vs_floor"], 1.0),
    ("push same zone (not cross)", p["push"]["same"]["zone-a"]["bytes"], 7_000),
    ("query bytes per query ((20,000 - 200) / 4)", p["query"]["bytes_per_query"], 4_950),
    ("query#2 bytes per query ((4,000 - 200) / 2)", p["query#2"]["bytes_per_query"], 1_900),
    ("query#2 dropped by rules ahead", p["query#2"]["dropped_by_rules_ahead"]["bytes"], 9_000),
    ("reset flagged", p["reset"]["counter_reset"], True),
    ("reset counted from zero", p["reset"]["cross_bytes"], 2_000),
    ("rf", s["rf"], 3),
]
for d, got, exp in want:
    print(("ok  " if got == exp else "FAIL") + f" {d}: {got}" + ("" if got == exp else f", want {exp}"))
PY
while read -r st rest; do if [ "$st" = ok ]; then ok "table: $rest"; else bad "table: $rest"; fi; done <"$T/synthetic.check"
check "table: every arithmetic check ran" [ "$(grep -c . "$T/synthetic.check")" = 20 ]
check "table: a label with a space is refused by zt_snapshot" bash -c "! '$PY' '$here/zone-traffic.py' snapshot --ns x --label 'a b' --file /dev/null 2>/dev/null"
check "zones: overlapping zones refused" bash -c "! '$PY' '$here/zone-traffic.py' zones 'a=10.88.1.0/24 b=10.88.1.128/25' 2>/dev/null"
check "zones: several CIDRs for one zone accepted" \
  [ "$("$PY" "$here/zone-traffic.py" zones 'a=10.88.1.0/24,10.88.4.0/24 b=10.88.2.0/24' | tr '\n' ' ')" = "a 10.88.1.0/24,10.88.4.0/24 b 10.88.2.0/24 " ]

# ------------------------------------------------------------------ 2. network
echo "== network: $BR with cni0 10.88.0.1/16 and pods ${PODS[*]}"
ip netns add "$BR"
CREATED+=("$BR")
ip -n "$BR" link set lo up
ip -n "$BR" link add cni0 type bridge
ip -n "$BR" addr add 10.88.0.1/16 dev cni0
ip -n "$BR" link set cni0 up
nf=$(nsenter --net="/run/netns/$BR" cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo missing)
if [ "$nf" = 0 ]; then
  # Our own namespace only (the sysctl is per network namespace since Linux 5.3).
  nsenter --net="/run/netns/$BR" sh -c 'echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables'
  nf=$(nsenter --net="/run/netns/$BR" cat /proc/sys/net/bridge/bridge-nf-call-iptables)
fi
[ "$nf" = 1 ] || { echo "zone-traffic-test: bridge-nf-call-iptables is '$nf' in a new namespace (br_netfilter not available?): bridged traffic cannot be counted" >&2; exit 1; }
echo "   bridge-nf-call-iptables in $BR: $nf (as in lib.sh's namespace: bridged frames pass iptables FORWARD)"
# The CNI bridge plugin with isGateway (cni.conflist.in) turns IPv4 forwarding on in
# lib.sh's namespace at the first pod; br_netfilter needs it to send a frame DNATed to a
# Service's pod back over the bridge (without it the packet is routed to nowhere).
nsenter --net="/run/netns/$BR" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
for p in "${PODS[@]}"; do
  ip netns add "$ID-$p"
  CREATED+=("$ID-$p")
  ip -n "$BR" link add "v-$p" type veth peer name eth0 netns "$ID-$p"
  ip -n "$BR" link set "v-$p" master cni0 up
  ip -n "$ID-$p" link set lo up
  ip -n "$ID-$p" addr add "${IP[$p]}/16" dev eth0
  ip -n "$ID-$p" link set eth0 up
  ip -n "$ID-$p" route add default via 10.88.0.1
done

# Traffic: a sink per pod (TCP 5001: reads to EOF, logs the bytes; UDP 5002: logs each
# datagram), and senders.
cat >"$T/net.py" <<'PY'
import json, socket, struct, sys, threading, time
cmd = sys.argv[1]
if cmd == "sink":
    log = open(sys.argv[2], "a", buffering=1)
    t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("0.0.0.0", 5001)); t.listen(16)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 5002))
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    def tcp_conn(c, peer):
        n = 0
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            n += len(b)
        log.write(json.dumps({"proto": "tcp", "peer": peer[0], "bytes": n}) + "\n")
        c.close()
    def tcp():
        while True:
            c, peer = t.accept()
            threading.Thread(target=tcp_conn, args=(c, peer), daemon=True).start()
    threading.Thread(target=tcp, daemon=True).start()
    open(sys.argv[3], "w").close()  # ready
    while True:
        b, peer = u.recvfrom(1 << 16)
        log.write(json.dumps({"proto": "udp", "peer": peer[0], "bytes": len(b)}) + "\n")
elif cmd == "tcp":  # IP[:PORT] BYTES [TIMEOUT]: send BYTES, half-close, wait for the sink's close
    ip, _, port = sys.argv[2].partition(":")
    n = int(sys.argv[3])
    s = socket.create_connection((ip, int(port or 5001)), timeout=float(sys.argv[4]) if len(sys.argv) > 4 else 10)
    chunk = b"x" * 65536
    left = n
    while left:
        left -= s.send(chunk[:min(left, len(chunk))])
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    # struct tcp_info (linux/tcp.h): tcpi_bytes_sent, tcpi_bytes_retrans (u64) at
    # offsets 200 and 208 (Linux 4.19+): data bytes put on the wire, retransmissions
    # included, the payload iptables saw.
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    sent, retrans = struct.unpack_from("QQ", info, 200)
    print(json.dumps({"payload": n, "bytes_sent": sent, "bytes_retrans": retrans}))
    s.close()
elif cmd == "udp":  # IP COUNT SIZE: COUNT datagrams of SIZE bytes of payload
    ip, count, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(count):
        s.sendto(b"u" * size, (ip, 5002))
        if i % 50 == 49:
            time.sleep(0.002)  # far below the 1,000-packet backlog of a veth
PY
for p in "${PODS[@]}"; do
  nsenter --net="/run/netns/$ID-$p" "$PY" "$T/net.py" sink "$T/sink-$p.log" "$T/ready-$p" &
  PIDS+=($!)
done
for _ in $(seq 100); do
  n=0
  for p in "${PODS[@]}"; do [ -e "$T/ready-$p" ] && n=$((n + 1)); done
  [ "$n" = "${#PODS[@]}" ] && break
  sleep 0.05
done
[ "$n" = "${#PODS[@]}" ] || { echo "zone-traffic-test: the sinks did not start" >&2; exit 1; }
in_pod() { local p=$1; shift; nsenter --net="/run/netns/$ID-$p" "$@"; }
tcp() { # FROM TO BYTES [TIMEOUT]; logs the sender's own count of data bytes sent
  in_pod "$1" "$PY" "$T/net.py" tcp "${IP[$2]:-$2}" "$3" ${4:+"$4"} >"$T/tcp-$1-${2%%:*}.json"
}
udp() { in_pod "$1" "$PY" "$T/net.py" udp "${IP[$2]}" "$3" "$4"; }      # FROM TO COUNT SIZE
settle() { sleep 0.2; }  # UDP datagrams are forwarded in softirq at once; margin only
# ARP before the first counted phase: ARP is not IP and never counted, but resolve
# neighbours now so the phases time only their own sends.
for p in "${PODS[@]}"; do for q in "${PODS[@]}"; do
  [ "$p" = "$q" ] || in_pod "$p" ping -c1 -W1 "${IP[$q]}" >/dev/null 2>&1 || true
done; done

ZONES="zone-a=10.88.1.0/24,10.88.4.0/24 zone-b=10.88.2.0/24 zone-c=10.88.3.0/24"
FORWARD_BEFORE=$(nsenter --net="/run/netns/$BR" iptables -S FORWARD)
zt_setup "$BR" "$ZONES"
zt_setup "$BR" "$ZONES"  # again: rebuilt, still one jump
check "zt_setup twice: one jump to $ZT_CHAIN, at FORWARD position 1" \
  [ "$(nsenter --net="/run/netns/$BR" iptables -S FORWARD | grep -c -- "-j $ZT_CHAIN")/$(nsenter --net="/run/netns/$BR" iptables -S FORWARD | sed -n 2p | grep -c -- "-j $ZT_CHAIN")" = 1/1 ]
check "zt_setup: 6 ordered pairs in 10 rules (zone-a has 2 ranges) + 3 zones' same-zone rules in 6 (zone-a: 2 x 2)" \
  [ "$(nsenter --net="/run/netns/$BR" iptables -S "$ZT_CHAIN" | grep -c -- '-j RETURN')" = 16 ]
nsenter --net="/run/netns/$BR" iptables -S "$ZT_CHAIN" | sed 's/^/   /'
CREATED+=("$ID-nonf")
check "zt_setup refuses a namespace where bridged traffic skips iptables (bridge-nf-call-iptables 0)" bash -c "
  ip netns add $ID-nonf && nsenter --net=/run/netns/$ID-nonf sh -c 'echo 0 >/proc/sys/net/bridge/bridge-nf-call-iptables' &&
  source '$here/zone-traffic.sh' && ! zt_setup $ID-nonf '$ZONES' 2>/dev/null; r=\$?; ip netns del $ID-nonf; exit \$r"

F=$T/zt.jsonl
zt_snapshot "$BR" start "$F"

# idle: nothing sent
sleep 0.3
zt_snapshot "$BR" idle "$F"

# udp: exact sizes
udp a1 b1 200 1000   # zone-a>zone-b  200 x 1,028
udp b1 c1 100 500    # zone-b>zone-c  100 x 528
udp c1 a2 50 1200    # zone-c>zone-a  (zone-a's second range) 50 x 1,228
udp a1 a2 100 1000   # zone-a=zone-a  100 x 1,028, not cross-zone
settle
zt_snapshot "$BR" udp "$F"

# tcp: streams each way
tcp a1 b1 1000000    # zone-a>zone-b
tcp b1 a1 250000     # zone-b>zone-a
tcp c1 a2 400000     # zone-c>zone-a
tcp a2 a1 500000     # zone-a=zone-a
settle
zt_snapshot "$BR" tcp "$F"

# service: a1 connects to a Service VIP, DNATed in PREROUTING to b1 (as kube-proxy does);
# br_netfilter sends the DNATed frame back over the bridge to b1's port ("bridged DNAT"),
# through FORWARD
nsenter --net="/run/netns/$BR" iptables -t nat -A PREROUTING -d 10.96.0.10/32 -p tcp --dport 80 \
  -j DNAT --to-destination 10.88.2.2:5001
tcp a1 10.96.0.10:80 300000   # zone-a>zone-b through the VIP; the replies (ACKs) b1>a1
settle
zt_snapshot "$BR" service "$F"

# hidden: kube-proxy's KUBE-FORWARD, as lib.sh's kube-proxy (no --cluster-cidr) writes
# it, jumped to above the count (as if kube-proxy had prepended its jump after zt_setup)
ipt_br() { nsenter --net="/run/netns/$BR" iptables "$@"; }
ipt_br -N ZT-TEST-KUBE-FORWARD
ipt_br -A ZT-TEST-KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
ipt_br -A ZT-TEST-KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
ipt_br -A ZT-TEST-KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
ipt_br -I FORWARD 1 -m comment --comment "kubernetes forwarding rules" -j ZT-TEST-KUBE-FORWARD
tcp c1 b1 100000     # zone-c>zone-b: only the SYN is NEW, the rest accepted above the count
settle
zt_snapshot "$BR" hidden "$F" 2>"$T/hidden.err"
ipt_br -D FORWARD -m comment --comment "kubernetes forwarding rules" -j ZT-TEST-KUBE-FORWARD
ipt_br -F ZT-TEST-KUBE-FORWARD
ipt_br -X ZT-TEST-KUBE-FORWARD
cat "$T/hidden.err" | sed 's/^/   /'
check "snapshot warns about a non-DROP rule above the jump" grep -q "is not a DROP" "$T/hidden.err"

# zone-down: zone-b stopped the way loki.sh stops a zone
dead_range=10.88.2.0/24
for rule in "FORWARD -s $dead_range" "FORWARD -d $dead_range" "OUTPUT -d $dead_range" "INPUT -s $dead_range"; do
  # shellcheck disable=SC2086
  nsenter --net="/run/netns/$BR" iptables -I ${rule%% *} 1 ${rule#* } -j DROP -m comment --comment lzo-e2e-zone-down
done
check "zone stop: both FORWARD DROP rules now above the jump (positions 1-2, jump 3)" \
  [ "$(nsenter --net="/run/netns/$BR" iptables -S FORWARD | sed -n 4p | grep -c -- "-j $ZT_CHAIN")" = 1 ]
udp a1 b1 100 1000   # to zone-b: dropped
udp b1 c1 100 1000   # from zone-b: dropped
udp c1 a1 50 800     # zone-c>zone-a: 50 x 828, still forwarded
if in_pod a1 "$PY" "$T/net.py" tcp "${IP[b1]}" 100000 0.5 >/dev/null 2>&1; then tcp_down=connected; else tcp_down=failed; fi
settle
zt_snapshot "$BR" zone-down "$F"
check "zone stop: a TCP connection from zone-a to zone-b fails (its SYN dropped)" [ "$tcp_down" = failed ]

# zone-back: the rules removed as loki_zone_return does
while rule=$(nsenter --net="/run/netns/$BR" iptables -S | grep -m1 'lzo-e2e-zone-down'); do
  eval "nsenter --net=/run/netns/\$BR iptables ${rule/-A /-D }"
done
udp a1 b1 100 1000   # zone-a>zone-b  100 x 1,028
settle
zt_snapshot "$BR" zone-back "$F"

echo "== the table"
zt_table "$F" --pushed-bytes tcp=1650000 --queries udp=4 --rf 3 | tee "$T/table.out"

# What the sinks received (the other end of the check: every datagram and byte arrived).
"$PY" - "$T" <<'PY' >"$T/recv.txt"
import json, sys, glob, os
ip = {"10.88.1.2": "a1", "10.88.4.2": "a2", "10.88.2.2": "b1", "10.88.3.2": "c1"}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "sink-*.log"))):
    to = f.rsplit("sink-", 1)[1][:-4]
    agg = {}
    for line in open(f):
        e = json.loads(line)
        k = (e["proto"], ip[e["peer"]])
        c = agg.setdefault(k, [0, 0])
        c[0] += 1; c[1] += e["bytes"]
    for (proto, frm), (n, b) in sorted(agg.items()):
        print(f"{proto} {frm}>{to} {n} {b}")
PY
echo "== received by the sinks (proto from>to messages bytes)"
sed 's/^/   /' "$T/recv.txt"

"$PY" - "$T/table.out" "$T/recv.txt" "$T" >"$T/net.check" <<'PY' || true
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["zone_traffic"]
recv = {}
for line in open(sys.argv[2]):
    proto, pair, n, b = line.split()
    recv[(proto, pair)] = (int(n), int(b))
P = {p["label"]: p for p in s["phases"]}
pairs = ["zone-a>zone-b", "zone-a>zone-c", "zone-b>zone-a", "zone-b>zone-c", "zone-c>zone-a", "zone-c>zone-b"]
out = []
def check(d, ok, detail):
    out.append(("ok  " if ok else "FAIL") + f" {d}: {detail}")
def b(ph, k):
    return P[ph]["pairs"].get(k, {"bytes": 0})["bytes"]
def pk(ph, k):
    return P[ph]["pairs"].get(k, {"packets": 0})["packets"]

check("phases", [p["label"] for p in s["phases"]] == ["idle", "udp", "tcp", "service", "hidden", "zone-down", "zone-back"],
      [p["label"] for p in s["phases"]])
check("idle: every cross-zone counter 0", P["idle"]["cross_bytes"] == 0, P["idle"]["cross_bytes"])
# udp: exact
want = {"zone-a>zone-b": 200 * 1028, "zone-b>zone-c": 100 * 528, "zone-c>zone-a": 50 * 1228}
for k in pairs:
    check(f"udp {k}: exactly datagrams x (payload + 28 B IPv4/UDP headers)", b("udp", k) == want.get(k, 0),
          f"{b('udp', k):,} B in {pk('udp', k)} packets, want {want.get(k, 0):,}")
check("udp: cross-zone total = sum of the three cross-zone flows", P["udp"]["cross_bytes"] == sum(want.values()),
      f"{P['udp']['cross_bytes']:,}")
check("udp: the zone-a=zone-a datagrams counted as same zone, exactly", P["udp"]["same"]["zone-a"]["bytes"] == 100 * 1028,
      f"{P['udp']['same']['zone-a']['bytes']:,}")
check("udp: the sinks received every datagram forwarded, over the whole test (a1>b1 200 udp + 100 zone-back; "
      "b1>c1 100 udp, its 100 of zone-down dropped; c1>a2 50; a1>a2 100)",
      [recv.get(("udp", x), (0, 0))[0] for x in ["a1>b1", "b1>c1", "c1>a2", "a1>a2"]] == [300, 100, 50, 100],
      [recv.get(("udp", x), (0, 0)) for x in ["a1>b1", "b1>c1", "c1>a2", "a1>a2"]])
check("udp: bytes per query (4 given) = cross-zone / 4 (idle rate 0)", P["udp"]["bytes_per_query"] == round(sum(want.values()) / 4),
      P["udp"]["bytes_per_query"])
# tcp: payload + 20 B IPv4 + 20..60 B TCP per packet. The payload on the wire is the
# sender's tcpi_bytes_sent: the stream plus any retransmission (a tail loss probe on a
# loaded machine resends the last segment, and those bytes do cross).
tcpi = {f: json.load(open(f"{sys.argv[3]}/tcp-{f}.json")) for f in ["a1-b1", "b1-a1", "c1-a2", "a2-a1"]}
payload = {"zone-a>zone-b": tcpi["a1-b1"]["bytes_sent"], "zone-b>zone-a": tcpi["b1-a1"]["bytes_sent"],
           "zone-c>zone-a": tcpi["c1-a2"]["bytes_sent"],
           "zone-a>zone-c": 0}  # a>c: the ACKs of c1>a2 only
check("tcp: each sender sent its stream, retransmissions apart (tcpi_bytes_sent - tcpi_bytes_retrans = stream)",
      all(v["bytes_sent"] - v["bytes_retrans"] == v["payload"] for v in tcpi.values()),
      {k: (v["bytes_sent"], v["bytes_retrans"]) for k, v in tcpi.items()})
for k in pairs:
    by, n = b("tcp", k), pk("tcp", k)
    if k not in payload:
        check(f"tcp {k}: nothing sent, 0", by == 0, f"{by:,} B")
        continue
    over = by - payload[k]
    ok = n > 0 and 40 * n <= over <= 80 * n
    if payload[k]:
        ok = ok and over <= 0.05 * payload[k]
    check(f"tcp {k}: payload (bytes sent) {payload[k]:,} + 40..80 B per packet" + (", overhead <= 5%" if payload[k] else " (ACKs)"),
          ok, f"{by:,} B in {n} packets: {over:,} B over the payload, {over / n if n else 0:.1f} B per packet")
check("tcp: the sinks received every byte (a1>b1 + 300,000 of the service phase, b1>a1, c1>a2, a2>a1)",
      [recv.get(("tcp", x), (0, 0))[1] for x in ["a1>b1", "b1>a1", "c1>a2", "a2>a1"]] == [1_300_000, 250_000, 400_000, 500_000],
      [recv.get(("tcp", x), (0, 0))[1] for x in ["a1>b1", "b1>a1", "c1>a2", "a2>a1"]])
same = P["tcp"]["same"]["zone-a"]["bytes"]
check("tcp: the zone-a=zone-a stream (a2>a1, 500,000 B + its ACKs) only in zone-a=zone-a, not cross-zone",
      500_000 < same <= 500_000 * 1.1 and P["tcp"]["cross_bytes"] == sum(b("tcp", k) for k in pairs)
      and P["tcp"]["cross_bytes"] < 1_650_000 * 1.05,
      f"same zone {same:,} B, cross-zone {P['tcp']['cross_bytes']:,} B")
check("tcp: per byte pushed (1,650,000 given) = cross-zone / 1,650,000; vs floor = that / 2",
      P["tcp"]["cross_per_byte_pushed"] == round(P["tcp"]["cross_bytes"] / 1_650_000, 4)
      and P["tcp"]["vs_floor"] == round(P["tcp"]["cross_bytes"] / 1_650_000 / 2, 3),
      f"{P['tcp']['cross_per_byte_pushed']} per byte, {P['tcp']['vs_floor']} of the floor")
# service
vip = json.load(open(f"{sys.argv[3]}/tcp-a1-10.96.0.10.json"))["bytes_sent"]
ab, ba, nab, nba = b("service", "zone-a>zone-b"), b("service", "zone-b>zone-a"), pk("service", "zone-a>zone-b"), pk("service", "zone-b>zone-a")
check("service: a1 -> VIP -> b1 counted as zone-a>zone-b, real addresses: bytes sent + 40..80 B per packet",
      nab > 0 and 40 * nab <= ab - vip <= 80 * nab, f"{ab:,} B in {nab} packets, {vip:,} B sent")
check("service: the replies b1 -> a1 (un-DNATed only after FORWARD) counted as zone-b>zone-a: headers only",
      nba > 0 and 40 * nba <= ba <= 80 * nba, f"{ba:,} B in {nba} packets")
check("service: nothing else crossed", P["service"]["cross_bytes"] == ab + ba, f"{P['service']['cross_bytes']:,}")
check("service: the sink b1 got the 300,000 B through the VIP",
      recv.get(("tcp", "a1>b1"), (0, 0)) == (2, 1_300_000), recv.get(("tcp", "a1>b1")))
# hidden
check("hidden: with KUBE-FORWARD above the jump, of c1>b1's 100,000 B only the SYN is counted (60 B), "
      "nothing of b1's replies, and the table warns",
      (b("hidden", "zone-c>zone-b"), pk("hidden", "zone-c>zone-b"), b("hidden", "zone-b>zone-c")) == (60, 1, 0)
      and any("not a DROP" in w for w in P["hidden"]["warnings"])
      and recv.get(("tcp", "c1>b1"), (0, 0))[1] == 100_000,
      f"zone-c>zone-b {b('hidden', 'zone-c>zone-b')} B in {pk('hidden', 'zone-c>zone-b')} packets, "
      f"zone-b>zone-c {b('hidden', 'zone-b>zone-c')} B; the sink got {recv.get(('tcp', 'c1>b1'), (0, 0))[1]:,} B")
# zone-down
down = {k: b("zone-down", k) for k in pairs}
check("zone-down: nothing to or from zone-b counted",
      all(v == 0 for k, v in down.items() if "zone-b" in k), down)
check("zone-down: zone-c>zone-a still counted exactly (50 x 828)", down["zone-c>zone-a"] == 50 * 828, f"{down['zone-c>zone-a']:,}")
check("zone-down: zone-a>zone-c 0 (nothing sent that way; UDP has no ACKs)", down["zone-a>zone-c"] == 0, f"{down['zone-a>zone-c']:,}")
d = P["zone-down"]["dropped_by_rules_ahead"]
check("zone-down: the DROP rules above the jump dropped the 200 datagrams (2 x 100 x 1,028 B) and the SYN(s)",
      d["bytes"] >= 200 * 1028 and d["packets"] >= 201 and d["bytes"] - 200 * 1028 == 60 * (d["packets"] - 200),
      f"{d['bytes']:,} B in {d['packets']} packets")
check("zone-down: zone-b's sink got none of the zone-down datagrams from a1 (300 in all = 200 udp + 100 zone-back), "
      "zone-c's none from b1 (100 = udp only)",
      recv.get(("udp", "a1>b1"), (0, 0))[0] == 300 and recv.get(("udp", "b1>c1"), (0, 0))[0] == 100,
      [recv.get(("udp", "a1>b1")), recv.get(("udp", "b1>c1"))])
# zone-back
check("zone-back: zone-a>zone-b counted again, exactly 100 x 1,028", b("zone-back", "zone-a>zone-b") == 100 * 1028,
      f"{b('zone-back', 'zone-a>zone-b'):,}")
check("zone-back: the DROP rules gone, nothing dropped", P["zone-back"]["dropped_by_rules_ahead"]["packets"] == 0,
      P["zone-back"]["dropped_by_rules_ahead"])
print("\n".join(out))
PY
echo "== checks"
while read -r st rest; do if [ "$st" = ok ]; then ok "$rest"; else bad "$rest"; fi; done <"$T/net.check"
check "every network check ran" [ "$(grep -c . "$T/net.check")" = 34 ]

# zt_setup while a zone is stopped: the jump goes below the DROP rules, never above
for rule in "-s $dead_range" "-d $dead_range"; do
  # shellcheck disable=SC2086
  nsenter --net="/run/netns/$BR" iptables -I FORWARD 1 $rule -j DROP -m comment --comment lzo-e2e-zone-down
done
zt_setup "$BR" "$ZONES"
check "zt_setup with a zone stopped: the jump right after the 2 DROP rules (FORWARD rule 3)" \
  [ "$(nsenter --net="/run/netns/$BR" iptables -S FORWARD | sed -n 4p | grep -c -- "-j $ZT_CHAIN")" = 1 ]
while rule=$(nsenter --net="/run/netns/$BR" iptables -S | grep -m1 'lzo-e2e-zone-down'); do
  eval "nsenter --net=/run/netns/\$BR iptables ${rule/-A /-D }"
done

zt_teardown "$BR"
zt_teardown "$BR"  # again: nothing left to remove, no error
check "zt_teardown: FORWARD as before zt_setup, chain gone" \
  bash -c "[ \"\$(nsenter --net=/run/netns/$BR iptables -S FORWARD)\" = '$FORWARD_BEFORE' ] && ! nsenter --net=/run/netns/$BR iptables -S $ZT_CHAIN >/dev/null 2>&1"

if [ "$FAILS" = 0 ]; then
  echo "zone-traffic-test: all checks passed"
else
  echo "zone-traffic-test: $FAILS check(s) failed"
  exit 1
fi
