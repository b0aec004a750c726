//! The zone init container of zone-aware Loki pods. Loki reads its ring zone once, at
//! start, from an environment variable the kubelet fills from the pod's metadata, so Loki
//! must not start before that metadata holds the zone: this waits until the downward-API
//! file that mirrors the same field is non-empty, prints the zone and exits 0.
//!
//! It is its own crate and its own image, apart from the operator, so that an operator
//! release that does not change this code leaves every Loki pod template as it was (the
//! image is named by digest in the pods). Hence no dependencies and nothing the operator
//! decides: the operator passes the file, the field and the timeout as arguments.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// This crate's image by the tag of its version, as the committed manifests and the
/// operator's default name it (released installs name it by digest).
pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/loki-zone-operator/loki-zone-wait:v",
    env!("CARGO_PKG_VERSION")
);

/// Why the wait failed.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The file stayed empty for the whole timeout.
    Timeout {
        waited: Duration,
        file: String,
        /// The pod field the file mirrors (`metadata.annotations['...']`), when known.
        field: Option<String>,
    },
    /// The file exists but cannot be read.
    Read { file: String, message: String },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Timeout {
                waited,
                file,
                field,
            } => {
                let field = field.as_deref().unwrap_or("zone field");
                write!(
                    f,
                    "timed out after {waited:?} waiting for the pod's zone: {file}, the \
                     downward-API copy of the pod's {field}, is still empty. The \
                     loki-zone-operator writes it once the pod is scheduled (for the \
                     label topology.kubernetes.io/zone, Kubernetes 1.35 copies it from the \
                     node at binding): check that the operator is running and that the \
                     pod's node carries the stack's topology labels"
                )
            }
            WaitError::Read { file, message } => write!(f, "cannot read {file}: {message}"),
        }
    }
}

impl std::error::Error for WaitError {}

/// A duration as the operator's flags and this binary's `--timeout` take it: a whole
/// number with one unit of `ms`, `s` (or none), `m` or `h` (e.g. `30s`, `10m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 30s, 10m or 1h"))?;
    let scale = match unit {
        "" | "s" => 1000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    n.checked_mul(scale)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {s:?}: too long"))
}

/// What to wait for.
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub file: PathBuf,
    pub field: Option<String>,
    pub timeout: Duration,
    pub interval: Duration,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Run(Args),
    Help,
    Version,
}

/// The command line (without the program name). Parsed by hand: the crate has no
/// dependencies. The operator's render tests hold its init container's arguments to it.
pub fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut file = None;
    let mut field = None;
    let mut timeout = Duration::from_secs(600);
    let mut interval = Duration::from_secs(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--file" => file = Some(PathBuf::from(value()?)),
            "--field" => field = Some(value()?),
            "--timeout" => timeout = parse_duration(&value()?)?,
            "--interval" => interval = parse_duration(&value()?)?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let file = file.ok_or("--file is required")?;
    Ok(Parsed::Run(Args {
        file,
        field,
        timeout,
        interval,
    }))
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

/// Polls `file` every `interval` until it holds a zone, or `timeout` passes. `field`
/// names what the file mirrors, for the timeout's message.
pub fn wait_for_zone(
    file: &Path,
    field: Option<&str>,
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
                waited: timeout,
                file: file.display().to_string(),
                field: field.map(str::to_string),
            });
        }
        std::thread::sleep(interval.min(timeout - elapsed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("9999999999999999h").is_err());
    }

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
        let zone = wait_for_zone(
            &file,
            None,
            Duration::from_secs(10),
            Duration::from_millis(20),
        );
        writer.join().expect("writer");
        assert_eq!(zone, Ok("zone-b".to_string()));
    }

    #[test]
    fn missing_file_is_waited_for_like_an_empty_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_zone(&dir.path().join("absent")), Ok(None));
    }

    #[test]
    fn times_out_naming_the_file_and_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("az");
        std::fs::write(&file, "  \n").expect("write");
        let field = "metadata.annotations['loki.grafana.com/availability-zone']";
        let err = wait_for_zone(
            &file,
            Some(field),
            Duration::from_millis(100),
            Duration::from_millis(20),
        )
        .unwrap_err();
        assert!(matches!(err, WaitError::Timeout { .. }));
        let msg = err.to_string();
        assert!(msg.contains(field), "{msg}");
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains("100ms"), "{msg}");
    }

    #[test]
    fn a_directory_is_an_error_not_a_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read_zone(dir.path()).unwrap_err();
        assert!(matches!(err, WaitError::Read { .. }), "{err:?}");
    }

    fn p(args: &[&str]) -> Result<Parsed, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        assert_eq!(
            p(&["--file", "/z/az", "--field=f", "--timeout", "30s"]),
            Ok(Parsed::Run(Args {
                file: "/z/az".into(),
                field: Some("f".into()),
                timeout: Duration::from_secs(30),
                interval: Duration::from_secs(1),
            }))
        );
        assert_eq!(p(&["--help"]), Ok(Parsed::Help));
        assert_eq!(p(&["--version"]), Ok(Parsed::Version));
        assert!(p(&[]).unwrap_err().contains("--file"));
        assert!(p(&["--file"]).unwrap_err().contains("needs a value"));
        assert!(p(&["--file", "f", "--timeout", "5d"]).is_err());
        assert!(p(&["wait-for-zone"]).unwrap_err().contains("unknown"));
    }
}
