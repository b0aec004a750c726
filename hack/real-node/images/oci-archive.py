#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (an OCI image layout in a tar, what
`ctr images import` reads) holding static binaries, without any registry or daemon.

  oci-archive.py OUT.tar IMAGE-NAME ENTRYPOINT FILE[=PATH-IN-IMAGE]...

The image is linux/amd64, its layer uncompressed; IMAGE-NAME (e.g.
registry.invalid/lzo/pause:1) goes in the index as io.containerd.image.name, so the
import keeps it as is. Same inputs, same bytes: every timestamp is 0."""
import hashlib
import io
import json
import os
import sys
import tarfile


def tar_bytes(entries):
    """entries: (name, bytes or None for a directory, mode)"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
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


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out, name, entrypoint, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    entries = [("etc", None, 0o755), ("tmp", None, 0o1777)]
    for f in files:
        src, _, dst = f.partition("=")
        dst = (dst or "/" + os.path.basename(src)).lstrip("/")
        with open(src, "rb") as fh:
            entries.append((dst, fh.read(), 0o755))
    layer = tar_bytes(entries)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": [entrypoint],
            "Env": ["PATH=/"],
            "WorkingDir": "/",
        },
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
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    outer = [("blobs", None, 0o755), ("blobs/sha256", None, 0o755)]
    outer += [("blobs/sha256/" + digest(b)[7:], b, 0o644) for b in (layer, config, manifest)]
    outer += [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644),
              ("index.json", index, 0o644)]
    with open(out, "wb") as fh:
        fh.write(tar_bytes(outer))
    print(f"{out}: {name} {digest(manifest)}")


if __name__ == "__main__":
    main()
