#!/usr/bin/env bash
# promtool, for the rule checks of tests/monitoring.rs (promtool check rules, promtool
# test rules on tests/promtool, the Go Loki Operator's alerts on our series): Debian's
# prometheus package (2.42 on bookworm). Installs it with apt when it is missing and
# this is root with apt-get, as hack/real-node/preflight.sh installs what it lacks.
#
#   hack/promtool.sh    exit 0: promtool is on PATH; exit 1: why not, one line on stdout
#
# `make unit` (and so `make test`) runs it first: where it says no, the tests are told
# why (LZO_PROMTOOL_UNAVAILABLE) and say loudly that they did NOT run, and make test's
# last lines say so too; where it says yes, a failing rule test fails make.
set -uo pipefail

log() { printf '[promtool] %s\n' "$*" >&2; }
no() { echo "$*"; log "cannot run: $*"; exit 1; }

if ! command -v promtool >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] ||
    no "no promtool on PATH, and not root to install Debian's prometheus package (sudo apt-get install prometheus)"
  command -v apt-get >/dev/null 2>&1 ||
    no "no promtool on PATH, and no apt-get to install Debian's prometheus package"
  log "installing Debian's prometheus package (promtool) with apt"
  out=$(apt-get update -qq 2>&1) || no "apt-get update failed: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
  out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus 2>&1) ||
    no "apt-get install prometheus failed: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
  command -v promtool >/dev/null 2>&1 || no "apt-get installed prometheus, but there is no promtool on PATH"
fi
log "$(promtool --version 2>&1 | head -n 1)"
exit 0
