#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (an OCI image layout in a tar, what
`ctr images import` reads) holding static binaries, without any registry or daemon.

  oci-archive.py [OPTIONS] OUT.tar IMAGE-NAME ENTRYPOINT FILE[=PATH-IN-IMAGE]...

Options (all repeatable where it makes sense):
  --user UID[:GID]          the image's user (default: none, i.e. root)
  --cmd ARG                 one element of the image's Cmd
  --env NAME=VALUE          one element of Env (default PATH=/)
  --dir PATH[=UID:GID]      an empty directory (0755) owned by UID:GID (default 0:0)
  --data SRC=PATH[:MODE]    a file copied as data, mode in octal (default 0644)
  --port N                  an exposed TCP port (ExposedPorts)

FILE[=PATH-IN-IMAGE] are executables (0755; default path /basename). /etc and /tmp
(1777) always exist. The image is linux/amd64, its layer uncompressed; IMAGE-NAME
(e.g. registry.invalid/lzo/pause:1) goes in the index as io.containerd.image.name, so the
import keeps it as is. Same inputs, same bytes: every timestamp is 0."""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def tar_bytes(entries):
    """entries: (name, bytes or None for a directory, mode, uid, gid), parents first"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode, uid, gid in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.uid, info.gid = uid, gid
            info.uname = info.gname = ""
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def owner(spec):
    uid, _, gid = spec.partition(":")
    return int(uid), int(gid or uid)


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("--user")
    p.add_argument("--cmd", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--data", action="append", default=[])
    p.add_argument("--port", action="append", default=[])
    p.add_argument("out")
    p.add_argument("name")
    p.add_argument("entrypoint")
    p.add_argument("files", nargs="+")
    a = p.parse_args()

    items = {"etc": (None, 0o755, 0, 0), "tmp": (None, 0o1777, 0, 0)}

    def parents(path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            items.setdefault("/".join(parts[:i]), (None, 0o755, 0, 0))

    for f in a.files:
        src, _, dst = f.partition("=")
        dst = (dst or "/" + os.path.basename(src)).lstrip("/")
        parents(dst)
        with open(src, "rb") as fh:
            items[dst] = (fh.read(), 0o755, 0, 0)
    for d in a.dir:
        path, _, own = d.partition("=")
        path = path.strip("/")
        parents(path)
        items[path] = (None, 0o755, *owner(own or "0:0"))
    for d in a.data:
        src, _, rest = d.partition("=")
        dst, _, mode = rest.partition(":")
        dst = dst.lstrip("/")
        parents(dst)
        with open(src, "rb") as fh:
            items[dst] = (fh.read(), int(mode or "644", 8), 0, 0)
    # Sorted paths put every directory before what it holds.
    layer = tar_bytes([(n, *items[n]) for n in sorted(items)])
    cfg = {
        "Entrypoint": [a.entrypoint],
        "Env": a.env or ["PATH=/"],
        "WorkingDir": "/",
    }
    if a.user:
        cfg["User"] = a.user
    if a.cmd:
        cfg["Cmd"] = a.cmd
    if a.port:
        cfg["ExposedPorts"] = {f"{n}/tcp": {} for n in a.port}
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
        "history": [{"created_by": "hack/real-node/images/oci-archive.py"}],
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": a.name,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    outer = [("blobs", None, 0o755, 0, 0), ("blobs/sha256", None, 0o755, 0, 0)]
    outer += [("blobs/sha256/" + digest(b)[7:], b, 0o644, 0, 0) for b in (layer, config, manifest)]
    outer += [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644, 0, 0),
              ("index.json", index, 0o644, 0, 0)]
    with open(a.out, "wb") as fh:
        fh.write(tar_bytes(outer))
    print(f"{a.out}: {a.name} {digest(manifest)}")


if __name__ == "__main__":
    sys.exit(main())
