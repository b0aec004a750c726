//! The commit `loki-zone-operator --version` prints, as `LZO_GIT_COMMIT` at compile time.
//!
//! `make release` (and the Dockerfile, which has no `.git`) pass it in the environment;
//! otherwise it is read from the checkout with `git`, and the build script runs again when
//! HEAD moves. Without either it is `unknown`: a build from a source tarball.

use std::path::{Path, PathBuf};
use std::process::Command;

const VAR: &str = "LZO_GIT_COMMIT";

fn main() {
    println!("cargo:rerun-if-env-changed={VAR}");
    let commit = match std::env::var(VAR) {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => from_git().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env={VAR}={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// HEAD's commit, with the files whose change means HEAD moved: HEAD itself (a checkout),
/// the branch's ref (a commit) and packed-refs. Only existing files are named: cargo
/// reruns a build script on every build for a path that does not exist.
fn from_git() -> Option<String> {
    let commit = git(&["rev-parse", "HEAD"])?;
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch])?);
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"])?);
    for path in watched {
        let path = dir.join(Path::new(&path));
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(commit)
}
