#!/usr/bin/env python3
"""Derive a compact schema of Loki's configuration file from Loki's configuration reference.

The input is grafana/loki's generated reference, docs/sources/shared/configuration.md, at
the release of the Loki image the operator deploys. The output,
operator/src/render/testdata/loki-config-reference.json, is what config_reference_tests.rs walks
every rendered config.yaml and runtime config against: which keys each block has and
what type each leaf takes. No descriptions or defaults are kept.

Regenerate (from a clone of grafana/loki; use the tag of the image in render.rs):

    TAG=v3.7.3
    git -C ../loki show "$TAG:docs/sources/shared/configuration.md" \
      | hack/loki-config-reference.py --ref "$TAG" \
          --commit "$(git -C ../loki rev-parse "$TAG^{commit}")" - \
      > operator/src/render/testdata/loki-config-reference.json

How the reference is read:
- the yaml fence under "Supported contents and default values of `loki.yaml`" is the
  root block; the last yaml fence under each "### <name>" heading is block <name> (an
  earlier fence in a section is an example);
- `[key: <type> ...]` is a leaf, a reference to a named block, a list or a map;
  `key:` followed by deeper lines is an inline block; `[<name>]` embeds the fields of
  block <name> into the enclosing block (Go's inline structs); `[: <map of ...>]` as the
  only line of an inline block makes that block the map itself;
- `<list of Xs>` resolves X to a named block or a scalar where one exists; `<X...>` is a
  list of X as well;
- `<int>` whose default is printed with a byte unit (`4GB`, `256KB`) accepts a size
  string as well ("bytes"); `<int>` whose default is printed as a word (`auto`) accepts
  that word form ("named_int"): the reference prints defaults through the field's own
  text form, so such a field decodes text;
- a type the reference names but neither describes nor is a scalar becomes
  {"opaque": name}, and a `key:` with no lines under it {"opaque": ""}: the test
  refuses any value there, so rendering into one forces someone to describe it here
  first. SUPPLEMENTS describes the few such types we do render, from the Go struct of
  that name at the same Loki commit;
- the runtime config file has no schema in the reference, only a prose section and an
  example: its `overrides` map tenants to limits_config blocks (RUNTIME below).

Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

ROOT_HEADING = "### Supported contents and default values of `loki.yaml`"
BLOCK_HEADING = re.compile(r"^### ([A-Za-z0-9_]+)\s*$")
LEAF = re.compile(r"^\[(?P<key>[^:\]\[]*): <(?P<type>[^>]*)>(?P<rest>.*)\]$")
EMBED = re.compile(r"^\[<(?P<name>[A-Za-z0-9_]+)>\]$")
NESTED = re.compile(r"^(?P<key>[A-Za-z0-9_]+):$")
DEFAULT = re.compile(r"\|\s*default\s*=\s*(?P<value>.*)$")
BYTE_SIZE = re.compile(r"^(\d+(\.\d+)?([KMGTPE]i?)?B)+$")
PLAIN_INT = re.compile(r"^-?\d+$")

# The reference's placeholders for single values, and the leaf type the test checks.
SCALARS = {
    "string": "string",
    "secret": "string",
    "labelname": "string",
    "labelvalue": "string",
    "filename": "string",
    "host": "string",
    "Regexp": "string",
    "int": "int",
    "float": "float",
    "boolean": "boolean",
    "duration": "duration",
    "url": "url",
    "time": "time",
    "daytime": "daytime",
}

# Types the reference names without describing them, where we render values. Each is
# the yaml fields of the Go struct of that name in grafana/loki at the same commit.
SUPPLEMENTS = {
    # pkg/validation/limits.go: type StreamRetention (limits_config.retention_stream).
    "StreamRetention": {
        "fields": {
            "period": {"type": "duration"},
            "priority": {"type": "int"},
            "selector": {"type": "string"},
        }
    },
    # pkg/util/validation/blocked_queries.go: type BlockedQuery (limits_config.blocked_queries).
    # `types` is a dskit StringSliceCSV, which decodes one comma-separated string.
    "blocked_query": {
        "fields": {
            "pattern": {"type": "string"},
            "regex": {"type": "boolean"},
            "hash": {"type": "int"},
            "types": {"type": "string"},
            "query_tags": {"map": {"type": "string"}},
        }
    },
    # vendor/github.com/prometheus/prometheus/model/relabel/relabel.go: type Config
    # (ruler.alert_relabel_configs, a remote-write client's write_relabel_configs).
    "relabel_config": {
        "fields": {
            "source_labels": {"list": {"type": "string"}},
            "separator": {"type": "string"},
            "regex": {"type": "string"},
            "modulus": {"type": "int"},
            "target_label": {"type": "string"},
            "replacement": {"type": "string"},
            "action": {"type": "string"},
        }
    },
    # vendor/github.com/prometheus/prometheus/config/config.go: type RemoteWriteConfig
    # (ruler.remote_write.clients), with the inline HTTPClientConfig and ProxyConfig of
    # vendor/github.com/prometheus/common/config/http_config.go; the keys the operator
    # renders and their neighbours, not the cloud authentications.
    "RemoteWriteConfig": {
        "fields": {
            "url": {"type": "url"},
            "remote_timeout": {"type": "duration"},
            "headers": {"map": {"type": "string"}},
            "write_relabel_configs": {"list": {"ref": "relabel_config"}},
            "name": {"type": "string"},
            "send_exemplars": {"type": "boolean"},
            "send_native_histograms": {"type": "boolean"},
            "round_robin_dns": {"type": "boolean"},
            "queue_config": {
                "fields": {
                    "capacity": {"type": "int"},
                    "max_shards": {"type": "int"},
                    "min_shards": {"type": "int"},
                    "max_samples_per_send": {"type": "int"},
                    "batch_send_deadline": {"type": "duration"},
                    "min_backoff": {"type": "duration"},
                    "max_backoff": {"type": "duration"},
                    "retry_on_http_429": {"type": "boolean"},
                    "sample_age_limit": {"type": "duration"},
                }
            },
            "basic_auth": {
                "fields": {
                    "username": {"type": "string"},
                    "username_file": {"type": "string"},
                    "password": {"type": "string"},
                    "password_file": {"type": "string"},
                }
            },
            "authorization": {
                "fields": {
                    "type": {"type": "string"},
                    "credentials": {"type": "string"},
                    "credentials_file": {"type": "string"},
                }
            },
            "bearer_token": {"type": "string"},
            "bearer_token_file": {"type": "string"},
            "follow_redirects": {"type": "boolean"},
            "enable_http2": {"type": "boolean"},
            "proxy_url": {"type": "url"},
            "no_proxy": {"type": "string"},
            "proxy_from_environment": {"type": "boolean"},
        }
    },
}

# Keys the reference leaves out (`doc:"hidden"` in Loki's Go types) or names without a
# type, that the operator renders: block -> key -> node.
# - pkg/validation/limits.go: RulerAlertManagerConfig, a tenant's Alertmanager, of type
#   pkg/ruler/config/alertmanager.go AlertManagerConfig: the `ruler` block's keys of
#   those names (HIDDEN_FROM_RULER);
# - pkg/ruler/base/ruler.go: ExternalLabels, a labels.Labels: label name to value.
HIDDEN = {
    "limits_config": {"ruler_alertmanager_config": {"ref": "ruler_alertmanager_config"}},
    "ruler": {"external_labels": {"map": {"type": "string"}}},
}
HIDDEN_FROM_RULER = [
    "alertmanager_url",
    "enable_alertmanager_discovery",
    "alertmanager_refresh_interval",
    "enable_alertmanager_v2",
    "alert_relabel_configs",
    "notification_queue_capacity",
    "notification_timeout",
    "alertmanager_client",
]

# The runtime config file: Loki reloads it; `overrides` holds one limits_config block
# per tenant, `multi_kv_config` the ring store switch (not described, not rendered).
RUNTIME = {
    "fields": {
        "overrides": {"map": {"ref": "limits_config"}},
        "multi_kv_config": {"opaque": "multi_kv_config"},
    }
}


class ReferenceError(Exception):
    pass


def yaml_fences(text: str) -> dict[str, list[list[str]]]:
    """The yaml fences of each `### ` section, in order, keyed by the heading line."""
    fences: dict[str, list[list[str]]] = {}
    heading = None
    current: list[str] | None = None
    for line in text.splitlines():
        if current is not None:
            if line.strip() == "```":
                fences.setdefault(heading or "", []).append(current)
                current = None
            else:
                current.append(line)
        elif line.strip() == "```yaml":
            current = []
        elif line.startswith("## ") or line.startswith("### "):
            heading = line.rstrip()
    if current is not None:
        raise ReferenceError(f"unterminated yaml fence under {heading!r}")
    return fences


def config_lines(fence: list[str]) -> list[tuple[int, str]]:
    out = []
    for raw in fence:
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        out.append((len(raw) - len(raw.lstrip(" ")), text))
    return out


def singular(name: str, blocks: set[str]) -> str:
    if name in blocks or name in SCALARS or name in SUPPLEMENTS:
        return name
    if name.endswith("s"):
        one = name[:-1]
        if one in blocks or one in SCALARS or one in SUPPLEMENTS:
            return one
    return name


def int_type(default: str | None) -> str:
    if default is None or PLAIN_INT.match(default):
        return "int"
    if BYTE_SIZE.match(default):
        return "bytes"
    return "named_int"


def type_node(spec: str, default: str | None, blocks: set[str]) -> dict:
    spec = spec.strip()
    if spec.endswith("..."):
        # `<name...>`: the reference's way of printing a Go slice of that type.
        return {"list": type_node(spec[: -len("...")], None, blocks)}
    if spec.startswith("list of "):
        inner = singular(spec[len("list of "):].strip(), blocks)
        return {"list": type_node(inner, None, blocks)}
    if spec.startswith("map of string to"):
        inner = spec[len("map of string to"):].strip()
        if not inner:
            return {"map": {"opaque": ""}}
        return {"map": type_node(inner, None, blocks)}
    if spec == "int":
        return {"type": int_type(default)}
    if spec in SCALARS:
        return {"type": SCALARS[spec]}
    if spec in blocks or spec in SUPPLEMENTS:
        return {"ref": spec}
    return {"opaque": spec}


def parse_fields(
    lines: list[tuple[int, str]], i: int, indent: int, blocks: set[str], where: str
) -> tuple[dict, int]:
    """One block: the lines from i at exactly `indent`, with their deeper children."""
    fields: dict[str, dict] = {}
    embed: list[str] = []
    whole = None
    while i < len(lines) and lines[i][0] >= indent:
        ind, text = lines[i]
        if ind > indent:
            raise ReferenceError(f"{where}: unexpected indentation at {text!r}")
        leaf, emb, nested = LEAF.match(text), EMBED.match(text), NESTED.match(text)
        i += 1
        if leaf:
            key = leaf["key"].strip()
            d = DEFAULT.search(leaf["rest"])
            node = type_node(leaf["type"], d["value"].strip() if d else None, blocks)
            if key == "":
                whole = node
                continue
            add(fields, key, node, where)
        elif emb:
            embed.append(emb["name"])
        elif nested:
            if i >= len(lines) or lines[i][0] <= ind:
                # A key the reference lists without describing what it holds.
                add(fields, nested["key"], {"opaque": ""}, where)
                continue
            child, i = parse_fields(lines, i, lines[i][0], blocks, f"{where}.{nested['key']}")
            add(fields, nested["key"], child, where)
        else:
            raise ReferenceError(f"{where}: cannot read line {text!r}")
    if whole is not None:
        if fields or embed:
            raise ReferenceError(f"{where}: a `[: <...>]` line next to other keys")
        return whole, i
    node: dict = {"fields": fields}
    if embed:
        node["embed"] = embed
    return node, i


def add(fields: dict, key: str, node: dict, where: str) -> None:
    if key in fields and fields[key] != node:
        raise ReferenceError(f"{where}.{key}: listed twice with different types")
    fields[key] = node


def parse_block(fence: list[str], blocks: set[str], where: str) -> dict:
    lines = config_lines(fence)
    if not lines:
        raise ReferenceError(f"{where}: empty block")
    node, i = parse_fields(lines, 0, lines[0][0], blocks, where)
    if i != len(lines):
        raise ReferenceError(f"{where}: cannot read line {lines[i][1]!r}")
    return node


def refs(node: dict):
    """Every block name a node refers to or embeds."""
    if "ref" in node:
        yield node["ref"]
    yield from node.get("embed", [])
    for key in ("list", "map"):
        if key in node:
            yield from refs(node[key])
    for child in node.get("fields", {}).values():
        yield from refs(child)


def derive(text: str, source: str) -> dict:
    fences = yaml_fences(text)
    if ROOT_HEADING not in fences:
        raise ReferenceError(f"no yaml fence under {ROOT_HEADING!r}")
    named = {
        m[1]: found[-1]
        for heading, found in fences.items()
        if (m := BLOCK_HEADING.match(heading))
    }
    names = set(named)
    blocks = {name: parse_block(fence, names, name) for name, fence in sorted(named.items())}
    blocks.update(SUPPLEMENTS)
    ruler = blocks["ruler"]["fields"]
    blocks["ruler_alertmanager_config"] = {"fields": {k: ruler[k] for k in HIDDEN_FROM_RULER}}
    for block, fields in HIDDEN.items():
        blocks[block]["fields"].update(fields)
    root = parse_block(fences[ROOT_HEADING][-1], names, "<root>")
    for node in [root, RUNTIME, *blocks.values()]:
        for name in refs(node):
            if name not in blocks:
                raise ReferenceError(f"reference to undescribed block {name!r}")
    return {
        "source": source,
        "supplements": sorted([*SUPPLEMENTS, "ruler_alertmanager_config"]),
        "root": root,
        "runtime": RUNTIME,
        "blocks": blocks,
    }


def one_line(node) -> bool:
    if not isinstance(node, dict):
        return True
    if len(node) == 1 and next(iter(node)) in ("ref", "type", "opaque"):
        return True
    if len(node) == 1 and next(iter(node)) in ("list", "map"):
        return one_line(next(iter(node.values())))
    return False


def emit(node, indent: int = 0) -> str:
    """JSON with one line per leaf, so a regenerated file diffs key by key."""
    if one_line(node):
        return json.dumps(node)
    pad = " " * indent
    items = [f"{pad} {json.dumps(k)}: {emit(v, indent + 1)}" for k, v in node.items()]
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", help="configuration.md, or - for stdin")
    ap.add_argument("--commit", required=True, help="grafana/loki commit the file is from")
    ap.add_argument("--ref", default="", help="tag or branch of that commit, e.g. v3.7.3")
    args = ap.parse_args()
    if not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        ap.error("--commit takes a full 40-digit commit id")
    if args.reference == "-":
        text = sys.stdin.read()
    else:
        with open(args.reference, encoding="utf-8") as f:
            text = f.read()
    ref = f" ({args.ref})" if args.ref else ""
    source = f"grafana/loki docs/sources/shared/configuration.md @ {args.commit}{ref}"
    try:
        schema = derive(text, source)
    except ReferenceError as e:
        print(f"loki-config-reference: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(emit(schema) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
