#!/usr/bin/env bash
# Can this machine run the real-node end-to-end check (hack/real-node/e2e.sh)? Installs
# what it lacks (apt: containerd, runc, the CNI plugins and the tools lib.sh uses,
# skopeo, docker-registry, qemu-user-static), then checks what cannot be installed: root,
# cgroup v1, network namespaces with a bridge, kubectl with kustomize. The release it
# installs from is built by hack/release-check.sh (make test runs it just before).
#
#   hack/real-node/preflight.sh    exit 0: it can run; exit 1: why not, one line on stdout
#
# `make test` runs it before e2e.sh: where it says no, make test prints loudly that the
# real-node check did NOT run and why; where it says yes, a failure of e2e.sh fails make
# test. It only answers for the environment: a failure of the check itself is e2e.sh's.
set -uo pipefail

log() { printf '[real-node preflight] %s\n' "$*" >&2; }
no() { echo "$*"; log "cannot run: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || no "not root (it needs network and mount namespaces and cgroups; run as root or with sudo)"
[ "$(uname -m)" = x86_64 ] || no "not x86_64 ($(uname -m)): lib.sh's pause and demo images are built for it"
# cgroup v1 with the cgroupfs driver is what lib.sh drives (no systemd, no cgroup2-only).
grep -qE '^[^ ]+ /sys/fs/cgroup/memory cgroup ' /proc/self/mounts ||
  no "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory (cgroup v2-only or systemd hosts are not handled by hack/real-node/lib.sh)"

# Packages: command -> Debian package. skopeo and docker-registry: the release is pushed
# to a registry the nodes pull from; qemu-user-static: the arm64 binary is run.
need=(containerd:containerd runc:runc etcd:etcd-server ip:iproute2 iptables:iptables
  gcc:gcc openssl:openssl nsenter:util-linux unshare:util-linux ping:iputils-ping bc:bc
  curl:curl socat:socat skopeo:skopeo docker-registry:docker-registry
  qemu-aarch64-static:qemu-user-static)
missing=()
for c in "${need[@]}"; do command -v "${c%%:*}" >/dev/null 2>&1 || missing+=("${c#*:}"); done
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
  missing+=(containernetworking-plugins)
# A static libc for the pause and demo images (gcc -static).
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null 2>&1 || no "missing ${missing[*]} and no apt-get to install them"
  log "installing ${missing[*]} with apt"
  out=$(apt-get update -qq 2>&1) || no "apt-get update failed: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
  out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" 2>&1) ||
    no "apt-get install ${missing[*]} failed: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
fi

# A network namespace with a bridge, as lib.sh makes; gone when unshare exits.
out=$(unshare --net sh -c 'ip link add lzo-pf0 type bridge && ip link set lzo-pf0 up && ip link del lzo-pf0' 2>&1) ||
  no "cannot create a network namespace with a bridge: $(tr '\n' ' ' <<<"$out")"
[ -d /run/netns ] || mkdir -p /run/netns 2>/dev/null || no "cannot create /run/netns"

# kubectl with kustomize, what `make deploy` uses from the host.
command -v kubectl >/dev/null 2>&1 || no "no kubectl (with kustomize) on PATH, which make deploy uses"
kubectl kustomize --help >/dev/null 2>&1 || no "kubectl has no kustomize subcommand"
python3 -c 'import yaml' 2>/dev/null || no "python3 has no yaml module (python3-yaml)"

log "ok: root, cgroup v1, network namespaces, containerd $(containerd --version 2>/dev/null | awk '{print $3}'), runc $(runc --version 2>/dev/null | awk 'NR==1 {print $3}'), skopeo $(skopeo --version 2>/dev/null | awk '{print $3}')"
exit 0
