//! Every Loki pod the operator renders, held to the rules of the restricted platforms it
//! runs on: the Pod Security Standards' `restricted` profile (what Pod Security
//! Admission enforces on a namespace labelled `pod-security.kubernetes.io/enforce:
//! restricted`; the e2e suite also starts a stack under it), and OpenShift's
//! `restricted-v2` SecurityContextConstraints, which assign each namespace's user and
//! group ranges themselves and refuse a pod that fixes its own (issue 52, part 3). The
//! rules are written out from the two documents (Kubernetes' "Pod Security Standards",
//! OpenShift's `restricted-v2` SCC), not read from a running OpenShift.

use k8s_openapi::api::core::v1::{Capabilities, PodSpec, SecurityContext};

use super::render_tests::{all_variants, pod_templates};
use crate::model::defaults::effective;
use crate::render::{render, FsGroup, RenderInput, Settings, LOKI_FS_GROUP};

#[derive(Clone, Copy, Debug)]
enum Profile {
    /// Pod Security Standards, `restricted` (latest).
    PsaRestricted,
    /// OpenShift's `restricted-v2` SecurityContextConstraints.
    OpenShiftRestrictedV2,
}

/// Volume types both profiles allow.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// What `profile` refuses in `spec`, one line per rule broken.
fn violations(spec: &PodSpec, profile: Profile) -> Vec<String> {
    let mut out = Vec::new();
    for (what, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            out.push(format!("{what}: true"));
        }
    }
    for v in spec.volumes.iter().flatten() {
        let json = serde_json::to_value(v).unwrap_or_default();
        let types: Vec<&String> = json
            .as_object()
            .map(|o| o.keys().filter(|k| *k != "name").collect())
            .unwrap_or_default();
        for t in types {
            if !ALLOWED_VOLUMES.contains(&t.as_str()) {
                out.push(format!("volume {}: type {t}", v.name));
            }
        }
    }
    let pod = spec.security_context.clone().unwrap_or_default();
    let seccomp = |c: Option<&SecurityContext>| {
        c.and_then(|c| c.seccomp_profile.as_ref())
            .or(pod.seccomp_profile.as_ref())
            .map(|p| p.type_.clone())
    };
    match profile {
        Profile::PsaRestricted => {
            if pod.run_as_user == Some(0) {
                out.push("pod runAsUser: 0".into());
            }
        }
        Profile::OpenShiftRestrictedV2 => {
            // MustRunAsRange / MustRunAs: the namespace's ranges, which a pod cannot
            // know; anything it fixes itself is refused unless it happens to fall in.
            if let Some(g) = pod.fs_group {
                out.push(format!(
                    "pod fsGroup: {g} (restricted-v2 assigns the namespace's)"
                ));
            }
            if let Some(u) = pod.run_as_user {
                out.push(format!("pod runAsUser: {u}"));
            }
            if pod.se_linux_options.is_some() {
                out.push("pod seLinuxOptions set".into());
            }
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        let sc = c.security_context.as_ref();
        let name = &c.name;
        if sc.and_then(|s| s.privileged) == Some(true) {
            out.push(format!("{name}: privileged"));
        }
        if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
            out.push(format!("{name}: allowPrivilegeEscalation not false"));
        }
        let caps = sc
            .and_then(|s| s.capabilities.clone())
            .unwrap_or(Capabilities::default());
        if !caps.drop.unwrap_or_default().iter().any(|d| d == "ALL") {
            out.push(format!("{name}: capabilities do not drop ALL"));
        }
        for add in caps.add.unwrap_or_default() {
            if add != "NET_BIND_SERVICE" {
                out.push(format!("{name}: adds capability {add}"));
            }
        }
        for p in c.ports.iter().flatten() {
            if p.host_port.is_some_and(|h| h != 0) {
                out.push(format!("{name}: hostPort {:?}", p.host_port));
            }
        }
        let seccomp = seccomp(sc);
        match profile {
            Profile::PsaRestricted => {
                let non_root = sc.and_then(|s| s.run_as_non_root).or(pod.run_as_non_root);
                if non_root != Some(true) {
                    out.push(format!("{name}: runAsNonRoot not true"));
                }
                if sc.and_then(|s| s.run_as_user) == Some(0) {
                    out.push(format!("{name}: runAsUser 0"));
                }
                if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
                    out.push(format!("{name}: seccompProfile {seccomp:?}"));
                }
            }
            Profile::OpenShiftRestrictedV2 => {
                if let Some(u) = sc.and_then(|s| s.run_as_user) {
                    out.push(format!("{name}: runAsUser {u}"));
                }
                // seccompProfiles: [runtime/default]; unset, the SCC sets it.
                if !matches!(seccomp.as_deref(), None | Some("RuntimeDefault")) {
                    out.push(format!("{name}: seccompProfile {seccomp:?}"));
                }
            }
        }
    }
    out
}

/// (workload, what `profile` refuses) for every pod template of every stack variant
/// rendered with `settings`, the ones with nothing refused left out.
fn refused(settings: &Settings, profile: Profile) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (variant, s) in all_variants() {
        let children = render(&RenderInput::new(&s, effective(&s.spec)), settings).expect("render");
        for (name, t) in pod_templates(&children) {
            let v = violations(t.spec.as_ref().expect("pod spec"), profile);
            if !v.is_empty() {
                out.push((format!("{variant} {name}"), v));
            }
        }
    }
    out
}

#[test]
fn every_pod_passes_the_restricted_pod_security_standard() {
    for fs_group in [Some(LOKI_FS_GROUP), None] {
        let settings = Settings {
            pod_fs_group: fs_group,
            ..Settings::default()
        };
        assert_eq!(
            refused(&settings, Profile::PsaRestricted),
            vec![],
            "{fs_group:?}"
        );
    }
}

#[test]
fn without_a_fixed_group_every_pod_passes_openshift_restricted_v2() {
    let settings = Settings {
        pod_fs_group: FsGroup::Auto.resolve(true),
        ..Settings::default()
    };
    assert_eq!(settings.pod_fs_group, None);
    assert_eq!(refused(&settings, Profile::OpenShiftRestrictedV2), vec![]);
}

/// The default, elsewhere, fixes Loki's group so that volumes nothing else gives a group
/// are writable by Loki: exactly what restricted-v2 refuses, and nothing else is.
#[test]
fn the_default_group_is_the_one_thing_restricted_v2_refuses() {
    let refused = refused(&Settings::default(), Profile::OpenShiftRestrictedV2);
    assert!(!refused.is_empty());
    for (workload, v) in refused {
        assert_eq!(
            v,
            vec![format!(
                "pod fsGroup: {LOKI_FS_GROUP} (restricted-v2 assigns the namespace's)"
            )],
            "{workload}"
        );
    }
}

#[test]
fn fs_group_settings() {
    assert_eq!("auto".parse(), Ok(FsGroup::Auto));
    assert_eq!("none".parse(), Ok(FsGroup::None));
    assert_eq!("1000".parse(), Ok(FsGroup::Fixed(1000)));
    assert!("-1".parse::<FsGroup>().is_err());
    assert!("root"
        .parse::<FsGroup>()
        .unwrap_err()
        .contains("auto, none or a group ID"));
    assert_eq!(FsGroup::Auto.resolve(false), Some(LOKI_FS_GROUP));
    assert_eq!(FsGroup::Auto.resolve(true), None);
    assert_eq!(FsGroup::None.resolve(false), None);
    assert_eq!(FsGroup::Fixed(0).resolve(true), Some(0));
}

/// A fixed group of 0 is rendered (a falsy value the template must not drop).
#[test]
fn group_zero_is_rendered() {
    let (_, s) = all_variants().remove(0);
    let settings = Settings {
        pod_fs_group: Some(0),
        ..Settings::default()
    };
    let children = render(&RenderInput::new(&s, effective(&s.spec)), &settings).expect("render");
    for (name, t) in pod_templates(&children) {
        let sc = t.spec.and_then(|s| s.security_context);
        assert_eq!(sc.and_then(|s| s.fs_group), Some(0), "{name}");
    }
}
