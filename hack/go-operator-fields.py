#!/usr/bin/env python3
"""List every field of the Go Loki Operator's LokiStack `spec` (loki.grafana.com/v1) with
its OpenAPI type, from that operator's CRD.

The output, operator/src/model/testdata/go-operator-lokistack-fields.json, is what
go_compat.rs checks our CRD against: every path must be declared by ours with the same
type, or sit under a node that keeps unknown fields. Then replacing the Go operator's
CRD with ours prunes nothing from stored stacks. No descriptions or validations are
kept: only paths and types.

Regenerate (from a clone of grafana/loki; use the operator release users migrate from):

    REF=main
    git -C ../loki show "$REF:operator/config/crd/bases/loki.grafana.com_lokistacks.yaml" \
      | hack/go-operator-fields.py --ref "$REF" \
          --commit "$(git -C ../loki rev-parse "$REF^{commit}")" - \
      > operator/src/model/testdata/go-operator-lokistack-fields.json

Paths: `spec.a.b`; `*` is the value of a map (additionalProperties), `[]` an item of a
list.
"""
import argparse
import json
import sys

import yaml


def walk(node, path, out):
    ty = node.get("type")
    if ty:
        out[path] = ty
    for key, child in (node.get("properties") or {}).items():
        walk(child, f"{path}.{key}", out)
    if isinstance(node.get("items"), dict):
        walk(node["items"], f"{path}.[]", out)
    if isinstance(node.get("additionalProperties"), dict):
        walk(node["additionalProperties"], f"{path}.*", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("crd", help="the CRD YAML, or - for stdin")
    args = ap.parse_args()
    src = sys.stdin if args.crd == "-" else open(args.crd)
    crd = yaml.safe_load(src)
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    out = {}
    walk(v1["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec", out)
    doc = {
        "source": f"grafana/loki {args.ref} ({args.commit}), "
        "operator/config/crd/bases/loki.grafana.com_lokistacks.yaml, version v1",
        "fields": dict(sorted(out.items())),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
