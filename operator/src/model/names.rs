//! Every name, label, annotation key and port the operator writes or reads.
//!
//! They match the Go Loki Operator so that dashboards, alerts and
//! runbooks written for it keep working after a stack moves to this operator.

pub const GROUP: &str = "loki.grafana.com";
pub const VERSION: &str = "v1";
pub const KIND: &str = "LokiStack";
pub const CRD_NAME: &str = "lokistacks.loki.grafana.com";

/// The longest LokiStack name whose every child has a valid name. The tightest is the
/// index gateway's StatefulSet: its pods carry `controller-revision-hash:
/// <stack>-index-gateway-<hash of up to 10 characters>`, and a label value has at most 63.
pub const MAX_STACK_NAME_LEN: usize = 38;

/// The one field manager for every server-side apply the operator sends.
pub const FIELD_MANAGER: &str = "loki-zone-operator";
/// The field manager of what the Go Loki Operator writes: controller-runtime does not set
/// one, so the API server takes the client's user agent, which starts with the binary's
/// name, `manager`. Children with this manager's fields are taken over on the first apply
/// (see `act/takeover.rs`).
pub const GO_OPERATOR_FIELD_MANAGER: &str = "manager";
/// The reporting controller of Events and the holder prefix of the leader Lease.
pub const CONTROLLER_NAME: &str = "loki-zone-operator";

/// The API group of OpenShift's SecurityContextConstraints: a server that serves it
/// assigns pods their groups (`render::FsGroup::Auto`).
pub const OPENSHIFT_SECURITY_API_GROUP: &str = "security.openshift.io";

pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_NAME_VALUE: &str = "lokistack";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_CREATED_BY: &str = "app.kubernetes.io/created-by";
pub const LABEL_CONTROLLER_VALUE: &str = "lokistack-controller";
/// Taints the node lifecycle controller (or an admin, for out-of-service) puts on a node
/// that is down.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The node label every kubelet sets to the node's name: the soft spread of replicas of
/// one component over the nodes of a zone.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The pod label the StatefulSet controller sets to the revision a pod was created from;
/// a pod whose value differs from the StatefulSet's `status.updateRevision` is outdated.
pub const LABEL_REVISION: &str = "controller-revision-hash";
/// The StatefulSet update strategy of a zone-aware stack: the operator deletes the
/// outdated pods itself, zone by zone.
pub const UPDATE_STRATEGY_ON_DELETE: &str = "OnDelete";

pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_GOSSIP: &str = "loki.grafana.com/gossip";

/// Pods of a zone-aware stack carry this label (value [`LABEL_ZONE_AWARE_VALUE`]); the pod
/// annotator watches only pods with it, so its memory does not grow with unrelated pods.
pub const LABEL_ZONE_AWARE: &str = "loki.grafana.com/zone-aware";
pub const LABEL_ZONE_AWARE_VALUE: &str = "enabled";
/// The topology keys of a zone-aware pod, joined with [`ZONE_KEYS_SEPARATOR`].
pub const ANNOTATION_ZONE_LABELS: &str = "loki.grafana.com/availability-zone-labels";
pub const ZONE_KEYS_SEPARATOR: &str = ",";
/// The pod's zone: its node's topology label values, in `zones` order, joined with
/// [`ZONE_VALUES_SEPARATOR`]. Written once by the pod annotator, never rewritten.
pub const ANNOTATION_ZONE: &str = "loki.grafana.com/availability-zone";
pub const ZONE_VALUES_SEPARATOR: &str = "_";
/// The node label Kubernetes itself copies onto a pod when it binds it, from 1.35 on by
/// default (KEP-4742, the `PodTopologyLabels` admission plugin; `topology.kubernetes.io/region`
/// too). A stack whose only topology key it is reads its pods' zone from it.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// On a zone-aware pod whose Loki reads its zone from [`LABEL_TOPOLOGY_ZONE`] on the pod
/// (value [`ZONE_SOURCE_POD_LABEL`]); absent: from [`ANNOTATION_ZONE`]. The annotator
/// writes the zone where the pod reads it, when nothing else did.
pub const ANNOTATION_ZONE_SOURCE: &str = "loki.grafana.com/zone-source";
pub const ZONE_SOURCE_POD_LABEL: &str = "pod-label";
/// On a LokiStack whose only topology key is [`LABEL_TOPOLOGY_ZONE`], `"false"` keeps its
/// pods reading the zone from [`ANNOTATION_ZONE`] (the zone-at-bind webhook and the
/// annotator write it) on a server that copies the label itself; default on.
pub const ANNOTATION_ZONE_FROM_POD_LABEL: &str = "loki.grafana.com/zone-from-pod-label";
/// Hash of the rendered ConfigMap: a config change rolls the pods.
/// On a LokiStack, `"true"` rolls ring members (StatefulSets) in the available zones
/// while another zone is unavailable, which the operator otherwise holds off: restarting
/// an ingester then leaves its streams one copy short of what the outage already took.
pub const ANNOTATION_ROLL_DURING_OUTAGE: &str = "loki.grafana.com/roll-during-zone-outage";
pub const ANNOTATION_CONFIG_HASH: &str = "loki.grafana.com/config-hash";
/// On every child, the hash of what this operator last applied: a new leader, which
/// remembers nothing, sends again only what differs from it (or what someone else
/// edited), so a failover writes nothing when nothing changed.
pub const ANNOTATION_APPLIED_HASH: &str = "loki.grafana.com/applied-hash";
/// On a LokiStack, how long queriers and rulers wait, once the write path runs
/// zone-aware, before they turn zone-aware too (a duration: `90s`, `10m`, `3h`). The
/// default is Loki's `querier.query_ingesters_within`; shorter lets a query miss a stream
/// written before the switch.
pub const ANNOTATION_ZONE_READ_PATH_DELAY: &str = "loki.grafana.com/zone-read-path-delay";
/// On a LokiStack, `"false"` turns zone-aware evictions off for it at once: the
/// zone-disruption webhook lets each of its ingesters go and only its
/// PodDisruptionBudget limits a drain. The escape for a drain the webhook holds, e.g.
/// behind an ingester that never gets Ready again in another zone.
pub const ANNOTATION_ZONE_AWARE_EVICTIONS: &str = "loki.grafana.com/zone-aware-evictions";
/// On a zone-aware LokiStack, `"false"` stops asking Kubernetes to keep the traffic of
/// its entry Services (distributor and query-frontend HTTP) in the client's zone.
pub const ANNOTATION_ZONE_LOCAL_SERVICES: &str = "loki.grafana.com/zone-local-services";
/// On a zone-aware LokiStack, `"false"` turns the fast failover off: the operator no
/// longer takes the pods of a zone whose node Leases all stopped out of their Services
/// (`checks/silence.rs`); Kubernetes' node lifecycle controller does, later.
pub const ANNOTATION_ZONE_FAST_FAILOVER: &str = "loki.grafana.com/zone-fast-failover";
/// On a zone-aware LokiStack, how many renewals (0 to 3) each node of a zone may miss,
/// past the one it is due for, before the fast failover counts it late; default 1, and
/// one more in a zone of one node (`checks/silence.rs`).
pub const ANNOTATION_ZONE_FAST_FAILOVER_MISSED_RENEWALS: &str =
    "loki.grafana.com/zone-fast-failover-missed-renewals";
/// The pod condition the fast failover writes on a zone-aware stack's pods: `False`
/// while their zone is taken out of service (their Ready condition set False with it),
/// `True` once the zone's Leases are renewed again. Only pods it took out carry it.
pub const POD_CONDITION_ZONE_AVAILABLE: &str = "loki.grafana.com/zone-available";
/// The condition Kubernetes sets on a pod it is about to delete (a taint eviction, a
/// preemption, the pod garbage collector).
pub const POD_CONDITION_DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The reason of both conditions the fast failover sets False on a pod.
pub const POD_REASON_ZONE_UNAVAILABLE: &str = "ZoneUnavailable";
/// The reason of the zone-available condition once the zone is back.
pub const POD_REASON_ZONE_RENEWING: &str = "ZoneLeasesRenewed";
/// The reason of the zone-available condition set True because the failover no longer
/// looks at the pod: switched off, the stack's zones turned off, the stack Unmanaged or
/// being deleted.
pub const POD_REASON_ZONE_RELEASED: &str = "ZoneFailoverReleased";
/// On a zone-aware LokiStack, `"false"` turns Loki's zone-aware gossip off: memberlist
/// then gossips with members of every zone.
pub const ANNOTATION_ZONE_AWARE_GOSSIP: &str = "loki.grafana.com/zone-aware-gossip";
/// The longest zone name Loki's memberlist zone-aware routing takes (dskit's
/// `MaxZoneNameLength`); Loki refuses to start with a longer one.
pub const MAX_GOSSIP_ZONE_BYTES: usize = 16;
/// The Loki flag that makes a ring member a bridge of the zone-aware gossip.
pub const FLAG_GOSSIP_BRIDGE: &str = "-memberlist.zone-aware-routing.role=bridge";
/// Where kubelets keep their node's Lease, named after the node.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The environment variable Loki expands into `common.ring.instance_availability_zone`.
pub const ENV_ZONE: &str = "INSTANCE_AVAILABILITY_ZONE";
pub const INIT_CONTAINER_ZONE: &str = "az-annotation-check";
pub const VOLUME_ZONE: &str = "az-annotation";
pub const ZONE_MOUNT_DIR: &str = "/etc/az-annotation";
pub const ZONE_FILE_NAME: &str = "az";

pub const PORT_HTTP: i32 = 3100;
/// Loki's endpoint that prepares an ingester to leave the ring on its next shutdown.
pub const PREPARE_SHUTDOWN_PATH: &str = "/ingester/prepare_shutdown";
/// Loki's readiness endpoint, the readiness probe of every component but the query
/// frontend.
pub const PATH_READY: &str = "/ready";
/// Loki's build information: the liveness probe of every component, and the query
/// frontend's readiness probe. The frontend's `/ready` fails until a querier has
/// connected to it, and queriers find it through its headless gRPC Service, which lists
/// only Ready pods: with `/ready` neither would ever start serving (the Go Loki Operator
/// probes the same path for the same reason).
pub const PATH_BUILD_INFO: &str = "/loki/api/v1/status/buildinfo";
pub const PORT_GRPC: i32 = 9095;
pub const PORT_GOSSIP: i32 = 7946;
pub const PORT_NAME_HTTP: &str = "metrics";
pub const PORT_NAME_GRPC: &str = "grpclb";
pub const PORT_NAME_GOSSIP: &str = "gossip-ring";

pub const CONFIG_MOUNT_DIR: &str = "/etc/loki/config";
pub const CONFIG_FILE: &str = "config.yaml";
/// The read path's (queriers', rulers') config while zones are being turned on or off:
/// `config.yaml` with the ring's zone awareness off (see `plan/staging.rs`).
pub const CONFIG_READ_FILE: &str = "config-read.yaml";
pub const RUNTIME_CONFIG_FILE: &str = "runtime-config.yaml";
pub const VOLUME_CONFIG: &str = "config";
pub const VOLUME_STORAGE_SECRET: &str = "storage";
pub const STORAGE_SECRET_MOUNT_DIR: &str = "/etc/storage/secrets";
pub const VOLUME_STORAGE_CA: &str = "storage-ca";
pub const STORAGE_CA_MOUNT_DIR: &str = "/var/run/tls/storage/ca";
pub const DATA_DIR: &str = "/tmp/loki";
pub const WAL_DIR: &str = "/tmp/wal";
/// Where the ingesters of a zone-aware stack keep their ring tokens across restarts: on
/// their storage volume (mounted at [`DATA_DIR`]).
pub const RING_TOKENS_FILE: &str = "/tmp/loki/ring-tokens";
pub const PVC_STORAGE: &str = "storage";
pub const PVC_WAL: &str = "wal";

pub fn config_map_name(stack: &str) -> String {
    format!("{stack}-config")
}

pub fn gossip_service_name(stack: &str) -> String {
    format!("{stack}-gossip-ring")
}

/// Loki pods run as ServiceAccount `<stack>`.
pub fn service_account_name(stack: &str) -> String {
    // Kubernetes creates a ServiceAccount `default` in every namespace; a stack of that
    // name must not claim it.
    if stack == "default" {
        format!("{stack}-{LABEL_NAME_VALUE}")
    } else {
        stack.to_string()
    }
}

/// The path of the downward-API file the init container waits on.
pub fn zone_file_path() -> String {
    format!("{ZONE_MOUNT_DIR}/{ZONE_FILE_NAME}")
}

/// The pods/binding webhook: the configuration the operator keeps current (with
/// `make deploy`; with OLM the bundle declares it), the one webhook in it, and the path.
pub const WEBHOOK_CONFIGURATION: &str = "loki-zone-operator-zone-at-bind";
/// The install's ClusterRole for the two webhook configurations, which owns them.
pub const WEBHOOK_CONFIGURATION_CLUSTER_ROLE: &str = "loki-zone-operator-webhook-configuration";
pub const WEBHOOK_ZONE_AT_BIND: &str = "zone-at-bind.loki.grafana.com";
pub const WEBHOOK_PATH_ZONE_AT_BIND: &str = "/zone-at-bind";
/// The pods/eviction webhook (zone-aware disruptions): its configuration, kept by the
/// operator with `make deploy` only, the one webhook in it, and the path.
pub const WEBHOOK_DISRUPTION_CONFIGURATION: &str = "loki-zone-operator-zone-disruptions";
pub const WEBHOOK_ZONE_DISRUPTIONS: &str = "zone-disruptions.loki.grafana.com";
pub const WEBHOOK_PATH_ZONE_DISRUPTIONS: &str = "/zone-disruptions";
/// The Service in front of the webhook port, in the operator's namespace.
pub const WEBHOOK_SERVICE: &str = "loki-zone-operator-webhook";
pub const WEBHOOK_SERVICE_PORT: i32 = 443;
/// The Secret with the webhook's self-managed CA and serving certificate.
pub const WEBHOOK_CERT_SECRET: &str = "loki-zone-operator-webhook-cert";
/// When the CA, the previous CA and the serving certificate expire (Unix seconds), and
/// the host names the serving certificate is for: written beside the PEM so the
/// operator decides rotations without parsing X.509.
pub const ANNOTATION_WEBHOOK_CA_NOT_AFTER: &str = "loki.grafana.com/webhook-ca-not-after";
pub const ANNOTATION_WEBHOOK_PREVIOUS_CA_NOT_AFTER: &str =
    "loki.grafana.com/webhook-previous-ca-not-after";
pub const ANNOTATION_WEBHOOK_CERT_NOT_AFTER: &str = "loki.grafana.com/webhook-cert-not-after";
pub const ANNOTATION_WEBHOOK_CERT_HOSTS: &str = "loki.grafana.com/webhook-cert-hosts";
/// The label Kubernetes sets on every namespace to its name: the webhook's
/// namespace selector lists the namespaces of zone-aware stacks with it.
pub const LABEL_NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
