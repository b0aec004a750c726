//! `wait-for-zone`: the init container of zone-aware pods. Loki reads its zone once, at
//! start, so it must not start before the zone is known.
//!
//! It waits until the downward-API file that mirrors the pod's zone annotation is
//! non-empty, prints the zone and exits 0, so Loki starts only once its ring zone is known.
//! It needs no shell, so it runs in the operator's own minimal image.

use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::model::names;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WaitError {
    #[error(
        "timed out after {waited} waiting for the pod's zone (file {file} is still empty). \
         The loki-zone-operator writes it once the pod is scheduled, as the pod annotation \
         {annotation} (or, on pods annotated {marker}, as their {label} label, which Kubernetes \
         1.35 copies from the node at binding): check \
         that the operator is running and that the pod's node carries the stack's topology labels"
    )]
    Timeout {
        waited: String,
        annotation: &'static str,
        /// The pod annotation and value of pods that read the label instead.
        marker: String,
        label: &'static str,
        file: String,
    },
    #[error("cannot read {file}: {message}")]
    Read { file: String, message: String },
}

/// Reads the zone once: `Ok(None)` while the file is missing or empty.
pub fn read_zone(file: &Path) -> Result<Option<String>, WaitError> {
    match std::fs::read_to_string(file) {
        Ok(s) if s.trim().is_empty() => Ok(None),
        Ok(s) => Ok(Some(s.trim().to_string())),
        // The kubelet may not have projected the volume yet.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WaitError::Read {
            file: file.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// Polls `file` every `interval` until it holds a zone, or `timeout` passes.
pub fn wait_for_zone(
    file: &Path,
    timeout: Duration,
    interval: Duration,
) -> Result<String, WaitError> {
    let start = Instant::now();
    loop {
        if let Some(zone) = read_zone(file)? {
            return Ok(zone);
        }
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            return Err(WaitError::Timeout {
                waited: format!("{:?}", timeout),
                annotation: names::ANNOTATION_ZONE,
                marker: format!(
                    "{}={}",
                    names::ANNOTATION_ZONE_SOURCE,
                    names::ZONE_SOURCE_POD_LABEL
                ),
                label: names::LABEL_TOPOLOGY_ZONE,
                file: file.display().to_string(),
            });
        }
        std::thread::sleep(interval.min(timeout - elapsed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_zone_once_the_file_is_written_later() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("az");
        std::fs::write(&file, "").expect("write");
        let writer = {
            let file = file.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                std::fs::write(&file, "zone-b\n").expect("write");
            })
        };
        let zone = wait_for_zone(&file, Duration::from_secs(10), Duration::from_millis(20));
        writer.join().expect("writer");
        assert_eq!(zone, Ok("zone-b".to_string()));
    }

    #[test]
    fn missing_file_is_waited_for_like_an_empty_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_zone(&dir.path().join("absent")), Ok(None));
    }

    #[test]
    fn times_out_naming_the_annotation_when_the_file_stays_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("az");
        std::fs::write(&file, "  \n").expect("write");
        let err = wait_for_zone(&file, Duration::from_millis(100), Duration::from_millis(20))
            .unwrap_err();
        assert!(matches!(err, WaitError::Timeout { .. }));
        let msg = err.to_string();
        assert!(msg.contains("loki.grafana.com/availability-zone"), "{msg}");
        assert!(msg.contains(&file.display().to_string()), "{msg}");
    }
}
