# Cross-zone traffic accounting (issue 41, part 1): bytes between pods of different
# zones, per ordered zone pair, counted by iptables in the real-node network namespace.
# Sourced (by loki.sh); needs nsenter, iptables, iptables-save, python3; root.
#
#   zt_setup NS "zone-a=10.88.1.0/24 zone-b=10.88.2.0/24,10.88.4.0/24 ..."
#       a chain (ZT_CHAIN, default LZO-ZONE-ACCT) jumped to from the top of FORWARD
#       (below a zone stop's DROP rules if there are any; why: in zt_setup), with
#       one counting rule per ordered pair of different zones and CIDRs (-s A -d B -j
#       RETURN, comment "lzo-zt A>B"), one per zone for traffic inside it ("lzo-zt A=A",
#       context only; ZT_SAME_ZONE=0 leaves them out). A zone may list several CIDRs,
#       comma-separated (one per node of the zone). Again on a set-up namespace: the
#       chain is rebuilt, the counters start from zero.
#   zt_snapshot NS LABEL FILE
#       appends the counters, a timestamp and LABEL to FILE (one JSON line)
#   zt_table FILE [--pushed-bytes PHASE=N]... [--queries PHASE=N]... [--rf R] [--idle LABEL]...
#       the table: one phase per consecutive pair of snapshots, named by the later one's
#       label (a label seen again is LABEL#2), bytes per ordered zone pair, cross-zone
#       bytes, per second, minus the idle rate (phases labelled idle) times the phase's
#       length, per byte pushed beside the floor R-1, per query; then one JSON line
#       {"zone_traffic": ...}. R defaults to the number of zones.
#   zt_teardown NS
#       the jump and the chain removed (nothing else touched)
#   zt_sent_bytes SENT.jsonl PHASE...
#       bytes of the log lines loki-client.py logged as accepted in those phases: the
#       volume pushed, for --pushed-bytes
#
# What is counted: IPv4 packets the namespace forwards from a pod address of one zone to
# a pod address of another, IP and TCP/UDP headers included (iptables counts the IP
# packet; the Ethernet header, ARP and IPv6 are not counted). Pods on the one bridge cni0
# reach each other by bridging, not routing: such frames pass iptables FORWARD only
# because bridge-nf-call-iptables is 1 in the namespace (br_netfilter; per network
# namespace since Linux 5.3, 1 by default where br_netfilter is loaded, which lib.sh
# relies on). zt_setup refuses to start otherwise: nothing would be counted. Traffic
# between a pod and the namespace itself (10.88.0.1: the S3 server, the test's clients,
# Prometheus, the API server; hostNetwork pods) goes through INPUT/OUTPUT, belongs to no
# zone and is not counted. A Service VIP is DNATed to a pod in nat PREROUTING, and
# br_netfilter then bridges the frame to that pod's port ("bridged DNAT"; it needs
# net.ipv4.ip_forward 1, which the CNI bridge plugin with isGateway sets in lib.sh's
# namespace at the first pod): it passes FORWARD with the two pods' addresses, replies
# too. Packet counts are per socket buffer: with TSO/GSO on the veths one counted
# "packet" carries up to 64 KB, so bytes are payload plus one IP+TCP header per buffer,
# a little under what real wires would carry (a header per 1,448 B, plus Ethernet).

ZT_CHAIN=${ZT_CHAIN:-LZO-ZONE-ACCT}
ZT_TAG=lzo-zt
_zt_py=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/zone-traffic.py

_zt_python() { # ARGS...: zone-traffic.py, by the interpreter itself (a pyenv shim costs ~0.3 s a call)
  [ -n "${ZT_PYTHON:-}" ] || ZT_PYTHON=$(python3 -c 'import sys; print(sys.executable)') || return 1
  "$ZT_PYTHON" "$_zt_py" "$@"
}
_zt_nsenter() { # NS CMD...: CMD in the network namespace NS (a name under /run/netns, or a path)
  local ns=$1 path
  shift
  case $ns in */*) path=$ns ;; *) path=/run/netns/$ns ;; esac
  nsenter --net="$path" "$@"
}
_zt_ipt() { local ns=$1; shift; _zt_nsenter "$ns" iptables -w 10 "$@"; }

_zt_unjump() { # NS: every jump to the chain out of FORWARD
  local ns=$1 rule
  while rule=$(_zt_ipt "$ns" -S FORWARD 2>/dev/null | grep -m1 -e "-j $ZT_CHAIN\$" -e "-j $ZT_CHAIN "); do
    eval "_zt_ipt \"\$ns\" ${rule/-A /-D }" || return 1
  done
}

zt_setup() { # NS "ZONE=CIDR[,CIDR...] ..."
  local ns=$1 spec=$2 lines nf
  [ -n "${ZT_PYTHON:-}" ] || ZT_PYTHON=$(python3 -c 'import sys; print(sys.executable)') || return 1
  lines=$(_zt_python zones "$spec") || return 1
  nf=$(_zt_nsenter "$ns" cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo missing)
  if [ "$nf" != 1 ]; then
    echo "zt_setup: net.bridge.bridge-nf-call-iptables is '$nf' in $ns: bridged pod-to-pod traffic would bypass iptables FORWARD and nothing would be counted (br_netfilter loaded? the sysctl set in the namespace?)" >&2
    return 1
  fi
  # Rebuild from scratch: no jump while the chain is filled, so no half-built counts.
  _zt_unjump "$ns" || return 1
  if _zt_ipt "$ns" -S "$ZT_CHAIN" >/dev/null 2>&1; then
    _zt_ipt "$ns" -F "$ZT_CHAIN" || return 1
  else
    _zt_ipt "$ns" -N "$ZT_CHAIN" || return 1
  fi
  local -a zn=() zc=()
  local z c i j a b
  while read -r z c; do zn+=("$z"); zc+=("$c"); done <<<"$lines"
  for i in "${!zn[@]}"; do
    for j in "${!zn[@]}"; do
      [ "$i" = "$j" ] && [ "${ZT_SAME_ZONE:-1}" != 1 ] && continue
      for a in ${zc[$i]//,/ }; do
        for b in ${zc[$j]//,/ }; do
          if [ "$i" = "$j" ]; then
            _zt_ipt "$ns" -A "$ZT_CHAIN" -s "$a" -d "$b" -m comment --comment "$ZT_TAG ${zn[$i]}=${zn[$i]}" -j RETURN || return 1
          else
            _zt_ipt "$ns" -A "$ZT_CHAIN" -s "$a" -d "$b" -m comment --comment "$ZT_TAG ${zn[$i]}>${zn[$j]}" -j RETURN || return 1
          fi
        done
      done
    done
  done
  # Where the jump goes, and why there.
  # - filter FORWARD is where forwarded packets get their verdict, and kube-proxy's
  #   Service DNAT (nat PREROUTING) has already happened, while the reverse translation
  #   of replies (nat POSTROUTING) has not: both directions of a connection through a
  #   Service VIP show the two pods' real addresses, so each lands on its zone pair.
  # - At the top, inserted once the nodes (and kube-proxy) are up: ahead of kube-proxy's
  #   jumps. Its KUBE-FORWARD, as lib.sh's kube-proxy (no --cluster-cidr) writes it,
  #   ACCEPTs every RELATED,ESTABLISHED packet whatever its addresses: below it, only
  #   the first packet of each connection would be counted (the test shows it: 60 B of
  #   a 100 kB stream). kube-proxy prepends its jumps only when they are missing (it
  #   checks with -C first), so once below ours they stay below. The counting rules
  #   only RETURN, so they never change a verdict; the chain needs no final rule.
  # - But behind DROP rules: loki.sh stops a zone by inserting DROP rules (comment
  #   lzo-e2e-zone-down) at FORWARD position 1, later, so they land above this jump and
  #   a packet they drop never reaches the count. That is what we want: the count is of
  #   bytes actually forwarded from one zone to another, and a dropped packet crosses
  #   nothing (counting in raw/mangle PREROUTING or mangle FORWARD would count it, as
  #   would a jump above the DROPs). For the same reason, if zt_setup runs while such
  #   rules are in place, the jump goes right after the leading run of DROP rules, not
  #   above them. zt_snapshot records what the DROP rules above the jump dropped, for
  #   context, and warns if anything other than a DROP sits above it (kube-proxy
  #   restarted and prepended its jumps again, say): an ACCEPT there hides packets from
  #   the count. Should that become a problem, counting in mangle POSTROUTING (after
  #   every filter verdict, before nat POSTROUTING, so still real addresses) would not
  #   depend on FORWARD's order at all.
  local pos=1
  while _zt_ipt "$ns" -S FORWARD | grep -v '^-P' | sed -n "${pos}p" | grep -q -e ' -j DROP$' -e ' -j DROP '; do
    pos=$((pos + 1))
  done
  _zt_ipt "$ns" -I FORWARD "$pos" -m comment --comment "$ZT_TAG jump" -j "$ZT_CHAIN" || return 1
}

zt_snapshot() { # NS LABEL FILE
  _zt_python snapshot --ns "$1" --label "$2" --file "$3" --chain "$ZT_CHAIN"
}

zt_table() { # FILE [--pushed-bytes PHASE=N]... [--queries PHASE=N]... [--rf R] [--idle LABEL]...
  _zt_python table "$@"
}

zt_sent_bytes() { # SENT.jsonl PHASE...
  _zt_python sent-bytes "$@"
}

zt_teardown() { # NS
  local ns=$1
  _zt_unjump "$ns" || true
  if _zt_ipt "$ns" -S "$ZT_CHAIN" >/dev/null 2>&1; then
    _zt_ipt "$ns" -F "$ZT_CHAIN" && _zt_ipt "$ns" -X "$ZT_CHAIN"
  fi
}
