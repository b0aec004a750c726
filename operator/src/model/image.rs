//! Container image references, as far as pinning them goes.
//!
//! The zone init container of every zone-aware Loki pod runs the operator's own image.
//! A tag may be moved, or may not exist in the registry a node pulls from (a mirror that
//! took only digests); a digest names exactly the bytes the operator itself runs. So the
//! operator renders its image by digest: the configured reference when it already is
//! one, else the digest the kubelet reports for the operator's own container
//! ([`pinned_by_status`]).

/// A reference of the form `[registry/]repository[:tag][@sha256:hex]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Everything before the tag and the digest: `ghcr.io/org/name`, `registry:5000/name`.
    pub repository: &'a str,
    pub tag: Option<&'a str>,
    /// `sha256:<64 hex>`.
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// `None` for what no container runtime takes: empty, or a digest that is not a
    /// SHA-256 of 64 lower-case hex digits.
    pub fn parse(s: &'a str) -> Option<ImageRef<'a>> {
        let (name, digest) = match s.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (s, None),
        };
        if let Some(d) = digest {
            let hex = d.strip_prefix("sha256:")?;
            if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return None;
            }
        }
        // A tag follows the last ':' of the last path segment: `registry:5000/name` has a
        // port, not a tag.
        let last = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last..].rfind(':') {
            Some(i) => (&name[..last + i], Some(&name[last + i + 1..])),
            None => (name, None),
        };
        if repository.is_empty() || tag.is_some_and(str::is_empty) {
            return None;
        }
        Some(ImageRef {
            repository,
            tag,
            digest,
        })
    }

    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }
}

/// Whether `image` names its content by digest.
pub fn is_pinned(image: &str) -> bool {
    ImageRef::parse(image).is_some_and(|r| r.is_pinned())
}

/// `spec_image` pinned to the digest of `image_id`, the `imageID` the kubelet reports for
/// a container that runs it (`docker.io/org/name@sha256:...`, or, from some runtimes,
/// `docker-pullable://...@sha256:...`). Keeps the repository and tag as configured (a
/// mirror's name stays the mirror's; the digest is the same in every registry that holds
/// the image) and adds the digest: `repo:tag@sha256:...`, which runtimes pull by digest.
/// `None` when `image_id` carries no digest (an image a runtime knows only by its local
/// ID, such as one imported from an archive).
pub fn pinned_by_status(spec_image: &str, image_id: &str) -> Option<String> {
    let spec = ImageRef::parse(spec_image)?;
    if spec.is_pinned() {
        return Some(spec_image.to_string());
    }
    let id = image_id.rsplit("://").next().unwrap_or(image_id);
    let digest = ImageRef::parse(id)?.digest?;
    Some(match spec.tag {
        Some(tag) => format!("{}:{tag}@{digest}", spec.repository),
        None => format!("{}@{digest}", spec.repository),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_split_into_repository_tag_and_digest() {
        let r = ImageRef::parse("ghcr.io/org/op:v1.2.3").unwrap();
        assert_eq!(
            (r.repository, r.tag, r.digest),
            ("ghcr.io/org/op", Some("v1.2.3"), None)
        );
        let with_port = format!("registry:5000/op@{D}");
        let r = ImageRef::parse(&with_port).unwrap();
        assert_eq!(
            (r.repository, r.tag, r.digest),
            ("registry:5000/op", None, Some(D))
        );
        let both = format!("op:v1@{D}");
        let r = ImageRef::parse(&both).unwrap();
        assert_eq!((r.repository, r.tag), ("op", Some("v1")));
        assert!(r.is_pinned());
        assert_eq!(ImageRef::parse("registry:5000/op").unwrap().tag, None);
        for bad in ["", "op@sha256:abc", "op@md5:0123", "op:", ":v1"] {
            assert_eq!(ImageRef::parse(bad), None, "{bad}");
        }
        assert!(!is_pinned("op:v1"));
        assert!(is_pinned(&both));
    }

    #[test]
    fn a_tag_is_pinned_to_the_digest_the_kubelet_reports() {
        let id = format!("ghcr.io/org/op@{D}");
        assert_eq!(
            pinned_by_status("ghcr.io/org/op:v1", &id).as_deref(),
            Some(format!("ghcr.io/org/op:v1@{D}").as_str())
        );
        // A mirror keeps its own name: the digest is the content's, in any registry.
        assert_eq!(
            pinned_by_status("mirror.example/team/op:v1", &id).as_deref(),
            Some(format!("mirror.example/team/op:v1@{D}").as_str())
        );
        assert_eq!(
            pinned_by_status("op", &format!("docker-pullable://op@{D}")).as_deref(),
            Some(format!("op@{D}").as_str())
        );
        // Already pinned: as configured.
        let pinned = format!("op:v1@{D}");
        assert_eq!(
            pinned_by_status(&pinned, "sha256:ffff").as_deref(),
            Some(pinned.as_str())
        );
        // A runtime that knows the image only by its local ID gives nothing to pin to.
        assert_eq!(pinned_by_status("op:v1", &D[7..]), None);
        assert_eq!(pinned_by_status("op:v1", D), None);
        assert_eq!(pinned_by_status("op:v1", ""), None);
    }
}
