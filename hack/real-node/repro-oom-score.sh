#!/usr/bin/env bash
# Shows the root cause of "runc create failed: unable to start container process:
# can't get final child's PID from pipe: EOF" on this machine, with runc alone: the
# same tiny container is created with oomScoreAdj 0 (works) and -998 (what CRI asks
# for every pod sandbox; fails). runc's debug log names the cause.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
b=$(mktemp -d /tmp/lzo-runc-oom.XXXXXX)
trap 'runc --root "$b/state" delete -f lzo-oom-zero >/dev/null 2>&1; runc --root "$b/state" delete -f lzo-oom-neg >/dev/null 2>&1; rm -rf "$b"' EXIT
echo "this shell: $(grep -E '^Cap(Bnd|Eff)' /proc/self/status | tr '\n' ' ')"
echo "CAP_SYS_RESOURCE (bit 24) in the bounding set: $(( ($(printf '%d' 0x$(awk '/^CapBnd/ {print $2}' /proc/self/status)) >> 24) & 1 ))"
echo "oom_score_adj of this shell: $(cat /proc/self/oom_score_adj)"
mkdir -p "$b/rootfs"
gcc -static -Os -s -o "$b/rootfs/pause" "$here/images/pause.c"
(cd "$b" && runc spec)
for adj in 0 -998; do
  name=lzo-oom-$([ "$adj" = 0 ] && echo zero || echo neg)
  python3 - "$b/config.json" "$adj" <<'PY'
import json, sys
p, adj = sys.argv[1], int(sys.argv[2])
s = json.load(open(p))
s["process"].update(args=["/pause"], terminal=False, oomScoreAdj=adj)
json.dump(s, open(p, "w"))
PY
  if runc --root "$b/state" --debug --log "$b/runc-$name.log" --log-format json create --bundle "$b" "$name" 2>/dev/null; then
    echo "oomScoreAdj $adj: created"
  else
    echo "oomScoreAdj $adj: FAILED; runc's log says:"
    grep -E 'oom_score_adj|final child' "$b/runc-$name.log" | sed 's/^/  /'
  fi
done
