#!/usr/bin/env python3
"""The SBOM of the release: every crate compiled into the loki-zone-operator binary, as
CycloneDX 1.5 JSON on stdout, from Cargo.lock and `cargo metadata`.

  sbom.py --version 0.1.0 --commit SHA --created EPOCH --target T [--target T]...

The crates are the binary's normal dependencies, transitively, for the given targets
(the released platforms), with the features cargo resolves when it builds the binary:
not build dependencies, dev dependencies, or procedural macros, whose code runs at build
time and is not shipped. Each carries its version, its
purl (pkg:cargo/NAME@VERSION), its licence expression as its Cargo.toml declares it, and
the SHA-256 of its .crate file as Cargo.lock records it. The dependency graph between
them is in `dependencies`. The same lock file gives the same document: the serial
number derives from the content and the timestamp is the commit's.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
import uuid

ROOT = "loki-zone-operator"


def cargo(*args):
    return subprocess.run(["cargo", *args], check=True, capture_output=True, text=True).stdout


def shipped(target):
    """The binary's crates for `target` and the edges between them, as cargo resolves
    them when it builds the binary alone (`cargo tree -p`, whose features are the
    binary's: `cargo metadata` unifies them over the whole workspace, tests included).
    Lines are `DEPTH NAME vVERSION [(source)]`; a crate seen before is marked (*) and
    not expanded again, but its edge is listed."""
    out = cargo("tree", "--locked", "-p", ROOT, "--target", target,
                "-e", "normal,no-proc-macro", "--prefix", "depth", "--format", "{p}")
    graph, stack = {}, []
    for line in out.splitlines():
        depth = len(line) - len(line.lstrip("0123456789"))
        level, rest = int(line[:depth]), line[depth:].split()
        node = (rest[0], rest[1].lstrip("v"))
        graph.setdefault(node, set())
        del stack[level:]
        if stack:
            graph[stack[-1]].add(node)
        stack.append(node)
    return graph


def purl(p):
    return f"pkg:cargo/{p['name']}@{p['version']}"


def main():
    a = argparse.ArgumentParser(description=__doc__)
    a.add_argument("--version", required=True)
    a.add_argument("--commit", required=True)
    a.add_argument("--created", type=int, required=True)
    a.add_argument("--target", action="append", required=True)
    args = a.parse_args()

    lock = tomllib.load(open("Cargo.lock", "rb"))
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
    packages, graph = {}, {}
    for t in args.target:
        meta = cargo("metadata", "--format-version", "1", "--locked",
                     "--filter-platform", t)
        packages.update({(p["name"], p["version"]): p for p in json.loads(meta)["packages"]})
        for node, deps in shipped(t).items():
            graph.setdefault(node, set()).update(deps)
    root = next(n for n in graph if n[0] == ROOT)

    def ref(node):
        return f"pkg:cargo/{node[0]}@{args.version if node == root else node[1]}"

    components = []
    for node in sorted(graph):
        if node == root:
            continue
        p = packages[node]
        c = {"type": "library", "bom-ref": ref(node), "name": p["name"], "version": p["version"],
             "purl": purl(p)}
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        if p.get("description"):
            c["description"] = " ".join(p["description"].split())
        digest = checksums.get(node)
        if digest:
            c["hashes"] = [{"alg": "SHA-256", "content": digest}]
        if p.get("repository"):
            c["externalReferences"] = [{"type": "vcs", "url": p["repository"]}]
        components.append(c)
    rustc = subprocess.run(["rustc", "-V"], check=True, capture_output=True, text=True).stdout.strip()
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.created)),
            "component": {
                "type": "application", "bom-ref": ref(root), "name": ROOT,
                "version": args.version, "purl": f"pkg:cargo/{ROOT}@{args.version}",
                "licenses": [{"expression": "Apache-2.0"}],
                "properties": [{"name": "git:commit", "value": args.commit}],
            },
            "properties": [{"name": "rustc", "value": rustc}]
            + [{"name": "target", "value": t} for t in args.target],
        },
        "components": components,
        "dependencies": [
            {"ref": ref(node), "dependsOn": sorted(ref(d) for d in graph[node])}
            for node in sorted(graph)
        ],
    }
    body = json.dumps(bom, sort_keys=True).encode()
    # A name-based (version 5) UUID of the content: the same inputs, the same number.
    bom["serialNumber"] = uuid.uuid5(uuid.NAMESPACE_URL, "sha256:" + hashlib.sha256(body).hexdigest()).urn
    json.dump(bom, sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
