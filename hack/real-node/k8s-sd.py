#!/usr/bin/env python3
"""A stand-in for Prometheus's Kubernetes service discovery, served as HTTP SD.

Debian's Prometheus (the `prometheus` package, 2.42) is built without Kubernetes
discovery: Debian removed it in 1.5.0 ("Kubernetes support has been completely
removed, due to the insane amount of dependencies in their client library",
/usr/share/doc/prometheus/NEWS.Debian.gz). The real-node check's Prometheus gets its
targets from this server instead, through `http_sd_configs` whose URL carries what the
`kubernetes_sd_configs` entry said (tests/support/scrape.rs, `via_http_sd`):

    GET /sd?role=endpoints[&namespace=NS]...   (no namespace: every namespace)
    GET /sd?role=pod[&namespace=NS]...

It lists the objects from the API server on each request (Endpoints, Services and pods,
or pods) and answers the target groups Prometheus's own discovery would build from
them, with the same `__meta_kubernetes_*` labels (discovery/kubernetes/endpoints.go and
pod.go of Prometheus 2.42, as documented for kubernetes_sd_config): for role endpoints
one target per address (ready or not) and port of each Endpoints object, with the
Endpoints', its Service's and, where the address is a pod, the pod's and the matching
container's labels, plus one target per container port of those pods that no endpoint
port names; for role pod one target per container port (or per container without
ports). The relabelings of the translated ServiceMonitors run on these unchanged.

    k8s-sd.py --listen 127.0.0.1:9091 --api https://10.88.0.1:6443 --ca CA --token-file F
"""

import argparse
import json
import re
import ssl
import sys
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

META = "__meta_kubernetes_"


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


class Api:
    def __init__(self, server, ca, token_file):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.token_file = token_file

    def list(self, path):
        with open(self.token_file) as f:
            token = f.read().strip()
        req = urllib.request.Request(self.server + path, headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
            return json.load(r)["items"]

    def in_namespaces(self, resource, namespaces):
        if not namespaces:
            return self.list(f"/api/v1/{resource}")
        items = []
        for ns in namespaces:
            items += self.list(f"/api/v1/namespaces/{urllib.parse.quote(ns)}/{resource}")
        return items


def object_meta(prefix, meta, out):
    """The labels and annotations of an object, with their *present companions."""
    for kind, key in (("label", "labels"), ("annotation", "annotations")):
        for k, v in (meta.get(key) or {}).items():
            out[f"{META}{prefix}_{kind}_{sanitize(k)}"] = v
            out[f"{META}{prefix}_{kind}present_{sanitize(k)}"] = "true"


def pod_labels(pod):
    m, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    out = {
        META + "namespace": m["namespace"],
        META + "pod_name": m["name"],
        META + "pod_ip": status.get("podIP", ""),
        META + "pod_node_name": spec.get("nodeName", ""),
        META + "pod_host_ip": status.get("hostIP", ""),
        META + "pod_uid": m.get("uid", ""),
        META + "pod_phase": status.get("phase", ""),
    }
    ready = [c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"]
    out[META + "pod_ready"] = ready[0].lower() if ready else "unknown"
    owners = [o for o in m.get("ownerReferences", []) if o.get("controller")]
    if owners:
        out[META + "pod_controller_kind"] = owners[0]["kind"]
        out[META + "pod_controller_name"] = owners[0]["name"]
    object_meta("pod", m, out)
    return out


def container_labels(container, port, init=False):
    out = {
        META + "pod_container_name": container["name"],
        META + "pod_container_image": container.get("image", ""),
        META + "pod_container_init": "true" if init else "false",
    }
    if port is not None:
        out[META + "pod_container_port_name"] = port.get("name", "")
        out[META + "pod_container_port_number"] = str(port["containerPort"])
        out[META + "pod_container_port_protocol"] = port.get("protocol", "TCP")
    return out


def pod_targets(pods):
    groups = []
    for pod in pods:
        ip = pod.get("status", {}).get("podIP")
        if not ip:
            continue
        base = pod_labels(pod)
        targets = []
        for init, key in ((False, "containers"), (True, "initContainers")):
            for c in pod["spec"].get(key) or []:
                ports = c.get("ports") or [None]
                for p in ports:
                    addr = ip if p is None else f"{ip}:{p['containerPort']}"
                    targets.append((addr, container_labels(c, p, init)))
        for addr, labels in targets:
            groups.append({"targets": [addr], "labels": {**base, **labels}})
    return groups


def endpoints_targets(endpoints, services, pods):
    svc = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    by_pod = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    groups = []
    for ep in endpoints:
        m = ep["metadata"]
        ns = m["namespace"]
        base = {META + "namespace": ns, META + "endpoints_name": m["name"]}
        object_meta("endpoints", m, base)
        s = svc.get((ns, m["name"]))
        if s is not None:
            base[META + "service_name"] = s["metadata"]["name"]
            object_meta("service", s["metadata"], base)
        seen_ports = {}  # pod -> set of container ports an endpoint named
        for subset in ep.get("subsets") or []:
            for ready, key in (("true", "addresses"), ("false", "notReadyAddresses")):
                for a in subset.get(key) or []:
                    for port in subset.get("ports") or []:
                        labels = dict(base)
                        labels.update({
                            META + "endpoint_ready": ready,
                            META + "endpoint_port_name": port.get("name", ""),
                            META + "endpoint_port_protocol": port.get("protocol", "TCP"),
                        })
                        if a.get("hostname"):
                            labels[META + "endpoint_hostname"] = a["hostname"]
                        if a.get("nodeName"):
                            labels[META + "endpoint_node_name"] = a["nodeName"]
                        ref = a.get("targetRef") or {}
                        if ref:
                            labels[META + "endpoint_address_target_kind"] = ref.get("kind", "")
                            labels[META + "endpoint_address_target_name"] = ref.get("name", "")
                        pod = by_pod.get((ns, ref.get("name"))) if ref.get("kind") == "Pod" else None
                        if pod is not None:
                            labels.update(pod_labels(pod))
                            for c in pod["spec"].get("containers") or []:
                                for p in c.get("ports") or []:
                                    if p["containerPort"] == port["port"] and \
                                            p.get("protocol", "TCP") == port.get("protocol", "TCP"):
                                        labels.update(container_labels(c, p))
                                        seen_ports.setdefault(ref["name"], set()).add(p["containerPort"])
                        groups.append({"targets": [f"{a['ip']}:{port['port']}"], "labels": labels})
        # The container ports of those pods that no endpoint port names.
        for name, ports in seen_ports.items():
            pod = by_pod[(ns, name)]
            ip = pod.get("status", {}).get("podIP")
            for c in pod["spec"].get("containers") or []:
                for p in c.get("ports") or []:
                    if p["containerPort"] in ports or not ip:
                        continue
                    labels = dict(base)
                    labels.update(pod_labels(pod))
                    labels.update(container_labels(c, p))
                    groups.append({"targets": [f"{ip}:{p['containerPort']}"], "labels": labels})
    return groups


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--api", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token-file", required=True)
    args = ap.parse_args()
    api = Api(args.api, args.ca, args.token_file)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            q = urllib.parse.parse_qs(url.query)
            role = (q.get("role") or [""])[0]
            namespaces = q.get("namespace") or []
            try:
                if url.path != "/sd":
                    raise LookupError(url.path)
                if role == "endpoints":
                    groups = endpoints_targets(api.in_namespaces("endpoints", namespaces),
                                               api.in_namespaces("services", namespaces),
                                               api.in_namespaces("pods", namespaces))
                elif role == "pod":
                    groups = pod_targets(api.in_namespaces("pods", namespaces))
                else:
                    raise LookupError(f"role {role!r}")
            except LookupError as e:
                self.send_error(404, str(e))
                return
            except Exception as e:  # the API server: Prometheus keeps its last targets
                print(f"k8s-sd: {self.path}: {e}", file=sys.stderr, flush=True)
                self.send_error(503, str(e))
                return
            body = json.dumps(groups).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    host, port = args.listen.rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
