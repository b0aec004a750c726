#!/usr/bin/env python3
"""The first version of each pod with spec.nodeName, from a `kubectl get --watch -o json`
stream: what the pod carried in the event that bound it. One line per pod (by UID):

  UID NAME ZONE-ANNOTATION ZONE-LABEL RESOURCE-VERSION

("-" where it had none). The annotation is loki.grafana.com/availability-zone (the
operator's zone-at-bind webhook), the label topology.kubernetes.io/zone (Kubernetes'
own copy at binding, 1.35).

  first-bound.py WATCH-FILE
"""
import json
import sys


def main():
    text = open(sys.argv[1]).read()
    dec, i, seen = json.JSONDecoder(), 0, {}
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            break
        for p in obj.get("items", [obj]) if obj.get("kind") == "List" else [obj]:
            m = p["metadata"]
            if m["uid"] in seen or not p.get("spec", {}).get("nodeName"):
                continue
            seen[m["uid"]] = (
                m["name"],
                m.get("annotations", {}).get("loki.grafana.com/availability-zone") or "-",
                m.get("labels", {}).get("topology.kubernetes.io/zone") or "-",
                m["resourceVersion"],
            )
    for uid, fields in sorted(seen.items()):
        print(uid, *fields)


if __name__ == "__main__":
    main()
