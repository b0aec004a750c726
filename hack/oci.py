#!/usr/bin/env python3
"""Writes OCI image archives (an OCI image layout in a tar) without a daemon or registry,
byte for byte the same for the same inputs.

  oci.py image  --out A.tar --name REF --created EPOCH --rootfs OS/ARCH=DIR [...]
                [--user U] [--entrypoint P] [--cmd ARG]... [--env K=V]... [--label K=V]...
                [--owner PATH=UID:GID]...
  oci.py bundle --out A.tar --name REF --created EPOCH --dir DIR --label K=V...

`image` with one --rootfs writes one image manifest, with Docker's manifest.json beside
it (docker load, podman load, ctr import, kind load, skopeo copy). With several it writes
an image index over one manifest per platform, as registries serve multi-platform images
(skopeo copy --all, ctr import --all-platforms, podman, Docker 25+); `index.json` then
names the index, whose digest is the one to pin. `bundle` writes an OLM bundle image:
one layer holding DIR's contents (manifests/, metadata/), the bundle labels in its
config, linux/amd64 as OLM's tooling expects of a `FROM scratch` bundle.

Every timestamp is EPOCH, tar entries are sorted with fixed owners (root's, but for
--owner paths), gzip records no name or time. Prints a JSON summary on stdout: the
digest of what index.json names, and per platform the manifest digest and the layer's
size compressed and unpacked.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def entry(name, mode, epoch, size=0, kind=tarfile.REGTYPE, uid=0, gid=0):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.mtime = kind, mode, size, epoch
    ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
    return ti


def layer(root, epoch, owners):
    """Every file and directory under root, sorted, as (tar, tar.gz)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames + filenames:
                paths.append(os.path.relpath(os.path.join(dirpath, n), root))
        for rel in sorted(paths):
            st = os.lstat(os.path.join(root, rel))
            uid, gid = owners.get(rel, (0, 0))
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                tar.addfile(entry(rel + "/", mode, epoch, kind=tarfile.DIRTYPE, uid=uid, gid=gid))
            elif stat.S_ISREG(st.st_mode):
                with open(os.path.join(root, rel), "rb") as f:
                    tar.addfile(entry(rel, mode, epoch, st.st_size, uid=uid, gid=gid), f)
            else:
                sys.exit(f"unexpected file type in the image: {rel}")
    plain = buf.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=gz, mtime=0) as z:
        z.write(plain)
    return plain, gz.getvalue()


def normalized(ref):
    """The name containerd and the kubelet use for REF (docker.io/library/... when REF
    names no registry), for containerd's name annotation."""
    first, _, rest = ref.partition("/")
    if not rest:
        return "docker.io/library/" + ref
    if "." in first or ":" in first or first == "localhost":
        return ref
    return "docker.io/" + ref


def tagged(ref):
    if "@" in ref:
        sys.exit(f"--name {ref}: give a name and tag, not a digest")
    return ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"


class Blobs:
    def __init__(self):
        self.files = {}

    def add(self, b):
        self.files["blobs/sha256/" + digest(b)[7:]] = b
        return {"digest": digest(b), "size": len(b)}


def one_image(blobs, root, platform, epoch, runtime, labels, owners):
    """Adds one platform's layer, config and manifest; returns (manifest descriptor,
    summary)."""
    os_, _, arch = platform.partition("/")
    plain, gz = layer(root, epoch, owners)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    config = dict(runtime)
    if labels:
        config["Labels"] = labels
    config_blob = canonical({
        "created": created,
        "architecture": arch,
        "os": os_,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [digest(plain)]},
        "history": [{"created": created, "created_by": "hack/oci.py"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, **blobs.add(config_blob)},
        "layers": [{"mediaType": OCI_LAYER_GZ, **blobs.add(gz)}],
    })
    desc = {"mediaType": OCI_MANIFEST, **blobs.add(manifest),
            "platform": {"architecture": arch, "os": os_}}
    summary = {"manifest": desc["digest"], "layer": len(gz), "unpacked": len(plain),
               "config": digest(config_blob), "layer_digest": digest(gz)}
    return desc, summary


def write(out, blobs, top, name, docker_manifest=None):
    """The archive: oci-layout, index.json naming `top`, the blobs (and Docker's
    manifest.json). Written to a temporary file first: a reader never sees half."""
    top = dict(top)
    # ref.name: the name skopeo, podman and `ctr import` give the image; containerd (and
    # so kind) prefers its own annotation, which must be the normalized name.
    top["annotations"] = {"org.opencontainers.image.ref.name": name,
                          "io.containerd.image.name": normalized(name)}
    files = dict(blobs.files)
    files["oci-layout"] = canonical({"imageLayoutVersion": "1.0.0"})
    files["index.json"] = canonical({"schemaVersion": 2, "mediaType": OCI_INDEX,
                                     "manifests": [top]})
    if docker_manifest is not None:
        files["manifest.json"] = canonical(docker_manifest)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(entry("blobs/", 0o755, 0, kind=tarfile.DIRTYPE))
        tar.addfile(entry("blobs/sha256/", 0o755, 0, kind=tarfile.DIRTYPE))
        for n in sorted(files):
            tar.addfile(entry(n, 0o644, 0, len(files[n])), io.BytesIO(files[n]))
    os.replace(tmp, out)


def pairs(items, what):
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            sys.exit(f"{what} {item!r}: expected KEY=VALUE")
        out[k] = v
    return out


def cmd_image(a):
    name = tagged(a.name)
    platforms = pairs(a.rootfs, "--rootfs")
    owners = {p: tuple(int(x) for x in o.split(":")) for p, o in pairs(a.owner, "--owner").items()}
    runtime = {"Env": a.env, "WorkingDir": "/"}
    if a.user:
        runtime["User"] = a.user
    if a.entrypoint:
        runtime["Entrypoint"] = [a.entrypoint]
    if a.cmd:
        runtime["Cmd"] = a.cmd
    labels = pairs(a.label, "--label")
    blobs = Blobs()
    descs, summary = [], {}
    for platform in sorted(platforms):
        desc, s = one_image(blobs, platforms[platform], platform, a.created, runtime, labels, owners)
        descs.append(desc)
        summary[platform] = s
    if len(descs) == 1:
        top = descs[0]
        only = next(iter(summary.values()))
        docker = [{"Config": "blobs/sha256/" + only["config"][7:], "RepoTags": [name],
                   "Layers": ["blobs/sha256/" + only["layer_digest"][7:]]}]
    else:
        index = canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descs})
        top = {"mediaType": OCI_INDEX, **blobs.add(index)}
        docker = None
    write(a.out, blobs, top, name, docker)
    json.dump({"name": name, "digest": top["digest"], "platforms": summary}, sys.stdout, indent=2)
    print()


def cmd_bundle(a):
    name = tagged(a.name)
    blobs = Blobs()
    desc, s = one_image(blobs, a.dir, "linux/amd64", a.created, {}, pairs(a.label, "--label"), {})
    write(a.out, blobs, desc, name)
    json.dump({"name": name, "digest": desc["digest"], "platforms": {"linux/amd64": s}},
              sys.stdout, indent=2)
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for n in ("image", "bundle"):
        s = sub.add_parser(n)
        s.add_argument("--out", required=True)
        s.add_argument("--name", required=True)
        s.add_argument("--created", type=int, required=True, help="SOURCE_DATE_EPOCH")
        s.add_argument("--label", action="append", default=[])
    img = sub.choices["image"]
    img.add_argument("--rootfs", action="append", required=True)
    img.add_argument("--user")
    img.add_argument("--entrypoint")
    img.add_argument("--cmd", action="append", default=[])
    img.add_argument("--env", action="append", default=[])
    img.add_argument("--owner", action="append", default=[])
    sub.choices["bundle"].add_argument("--dir", required=True)
    a = p.parse_args()
    {"image": cmd_image, "bundle": cmd_bundle}[a.command](a)


if __name__ == "__main__":
    main()
