//! The NetworkPolicies of a stack with `spec.networkPolicies.ruleSet:
//! RestrictIngressEgress`: deny everything to and from its pods, then allow what Loki
//! needs. The Go Loki Operator's rule set, without its gateway: clients reach the
//! distributors, query frontends and rulers directly, so those take HTTP from anywhere,
//! and the operator's own pods reach the ingesters (a scale-down asks each leaving
//! ingester to leave the ring first).
//!
//! NetworkPolicies add up: what one allows, another cannot take away. A user who needs
//! more (Prometheus scraping every pod, say) adds a policy of their own beside these.

use serde_json::{json, Value};

use super::input::RenderInput;
use crate::model::api::{LokiStack, NetworkPolicyRuleSet, ObjectStorageSecretType};
use crate::model::defaults::{Component, EffectiveStack};
use crate::model::names;
use crate::ruler::settings::url_port;

/// The label the operator's own pods carry (`manifests/operator`).
pub const OPERATOR_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "loki-zone-operator");
const DNS_PORT: i32 = 53;

/// One NetworkPolicy: its name and the template's context for the rest.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    pub pod_selector: Value,
    pub policy_types: Vec<&'static str>,
    pub ingress: Option<Value>,
    pub egress: Option<Value>,
}

fn restricted(stack: &LokiStack) -> bool {
    stack
        .spec
        .network_policies
        .as_ref()
        .is_some_and(|n| n.rule_set == NetworkPolicyRuleSet::RestrictIngressEgress)
}

/// The stack's pods: every component, or those named.
fn pods(stack: &str, components: &[Component]) -> Value {
    let mut labels = json!({
        (names::LABEL_NAME): names::LABEL_NAME_VALUE,
        (names::LABEL_INSTANCE): stack,
    });
    if components.is_empty() {
        return json!({"matchLabels": labels});
    }
    let values: Vec<&str> = components.iter().map(|c| c.name()).collect();
    json!({
        "matchLabels": labels.take(),
        "matchExpressions": [{"key": names::LABEL_COMPONENT, "operator": "In", "values": values}],
    })
}

fn tcp(ports: &[i32]) -> Value {
    ports
        .iter()
        .map(|p| json!({"protocol": "TCP", "port": p}))
        .collect()
}

/// The object store's ports: the S3 endpoint's when the Secret names one (a MinIO on
/// `:9000`), else HTTPS.
fn object_store_ports(stack: &LokiStack, eff: &EffectiveStack) -> Vec<i32> {
    match (&eff.store.s3, stack.spec.storage.secret.type_) {
        (Some(s3), ObjectStorageSecretType::S3) => {
            let scheme = if s3.insecure { "http" } else { "https" };
            vec![url_port(&format!("{scheme}://{}", s3.host))]
        }
        _ => vec![443],
    }
}

impl Policy {
    fn ingress(name: String, pod_selector: Value, rules: Value) -> Policy {
        Policy {
            name,
            pod_selector,
            policy_types: vec!["Ingress"],
            ingress: Some(rules),
            egress: None,
        }
    }

    fn egress(name: String, pod_selector: Value, rules: Value) -> Policy {
        Policy {
            name,
            pod_selector,
            policy_types: vec!["Egress"],
            ingress: None,
            egress: Some(rules),
        }
    }
}

/// Nothing in or out of the stack's pods, but what the other policies allow.
fn default_deny(name: &str) -> Policy {
    Policy {
        name: format!("{name}-default-deny"),
        pod_selector: pods(name, &[]),
        policy_types: vec!["Ingress", "Egress"],
        ingress: None,
        egress: None,
    }
}

/// The components talk to each other (gRPC, HTTP, memberlist), and resolve each other's
/// Services. DNS goes to any address on port 53: cluster DNS may be a node-local cache,
/// which no pod selector matches.
fn loki_allow(name: &str) -> Policy {
    let all = pods(name, &[]);
    let loki_ports = tcp(&[names::PORT_HTTP, names::PORT_GRPC, names::PORT_GOSSIP]);
    Policy {
        name: format!("{name}-loki-allow"),
        pod_selector: all.clone(),
        policy_types: vec!["Ingress", "Egress"],
        ingress: Some(json!([{"from": [{"podSelector": all}], "ports": loki_ports}])),
        egress: Some(json!([
            {"to": [{"podSelector": all}], "ports": loki_ports},
            {"ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}]},
        ])),
    }
}

/// The policies of a stack; none unless it asks for them. `operator_namespace`: where
/// the operator's own pods run (`Settings`).
pub fn policies(input: &RenderInput, operator_namespace: &str) -> Vec<Policy> {
    let (stack, eff) = (input.stack, &input.eff);
    use Component::*;
    let Some(name) = stack.metadata.name.as_deref().filter(|_| restricted(stack)) else {
        return Vec::new();
    };
    let http = tcp(&[names::PORT_HTTP]);
    let mut out = vec![
        default_deny(name),
        loki_allow(name),
        Policy::egress(
            format!("{name}-loki-allow-bucket-egress"),
            pods(name, &[Ingester, Querier, IndexGateway, Compactor, Ruler]),
            json!([{"ports": tcp(&object_store_ports(stack, eff))}]),
        ),
        // No gateway: clients push to the distributors and query the query frontends
        // (and the rulers' API) directly, from anywhere in the cluster.
        Policy::ingress(
            format!("{name}-loki-allow-clients"),
            pods(name, &[Distributor, QueryFrontend, Ruler]),
            json!([{"ports": http}]),
        ),
        Policy::ingress(
            format!("{name}-loki-allow-operator"),
            pods(name, &[Ingester]),
            json!([{
                "from": [{
                    "namespaceSelector": {"matchLabels": {(names::LABEL_NAMESPACE_NAME): operator_namespace}},
                    "podSelector": {"matchLabels": {(OPERATOR_POD_LABEL.0): OPERATOR_POD_LABEL.1}},
                }],
                "ports": http,
            }]),
        ),
    ];
    let alert_ports = &eff.ruler.egress_ports;
    if eff.component(Ruler).is_some() && !alert_ports.is_empty() {
        out.push(Policy::egress(
            format!("{name}-ruler-allow-alert-egress"),
            pods(name, &[Ruler]),
            json!([{"ports": tcp(alert_ports)}]),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::render::{render, Child, Settings};
    use crate::testing::{stack, stack_spec};
    use k8s_openapi::api::networking::v1::NetworkPolicy;

    fn restricted_stack(ruler: bool) -> LokiStack {
        let mut spec = stack_spec(LokiStackSize::Demo);
        spec.network_policies = Some(
            serde_json::from_value(json!({"ruleSet": "RestrictIngressEgress"})).expect("spec"),
        );
        if ruler {
            spec.rules = Some(serde_json::from_value(json!({"enabled": true})).expect("rules"));
        }
        stack("s", spec)
    }

    fn rendered(s: &LokiStack, eff: &EffectiveStack) -> Vec<NetworkPolicy> {
        render(&RenderInput::new(s, eff.clone()), &Settings::default())
            .expect("render")
            .into_iter()
            .filter_map(|c| match c {
                Child::NetworkPolicy(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn named<'a>(ps: &'a [NetworkPolicy], name: &str) -> &'a NetworkPolicy {
        ps.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {name}"))
    }

    fn ports(rules: &[serde_json::Value]) -> Vec<i64> {
        rules
            .iter()
            .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["port"].as_i64())
            .collect()
    }

    #[test]
    fn none_unless_asked_and_none_for_rule_set_none() {
        let mut s = restricted_stack(false);
        s.spec.network_policies = None;
        assert!(rendered(&s, &effective(&s.spec)).is_empty());
        s.spec.network_policies =
            Some(serde_json::from_value(json!({"ruleSet": "None"})).expect("spec"));
        assert!(rendered(&s, &effective(&s.spec)).is_empty());
    }

    /// A render test per component: what each may receive and send.
    #[test]
    fn each_component_gets_what_loki_needs_and_nothing_else() {
        let s = restricted_stack(true);
        let mut eff = effective(&s.spec);
        eff.store.s3 = Some(
            crate::model::storage::parse_s3_endpoint("http://minio.storage.svc:9000", None, None)
                .expect("endpoint"),
        );
        eff.ruler = crate::ruler::settings::input(None, Some(&serde_json::from_value(json!({
            "alertmanager": {"endpoints": ["http://am.monitoring.svc", "https://am2.example.com:8443/x"]},
            "remoteWrite": {"enabled": true, "client": {"name": "m", "url": "https://mimir.example.com/api/v1/push", "authorization": "bearer", "authorizationSecretName": "rw"}}
        })).expect("ruler config")));
        let ps = rendered(&s, &eff);
        let names: Vec<_> = ps.iter().filter_map(|p| p.metadata.name.clone()).collect();
        assert_eq!(
            names,
            [
                "s-default-deny",
                "s-loki-allow",
                "s-loki-allow-bucket-egress",
                "s-loki-allow-clients",
                "s-loki-allow-operator",
                "s-ruler-allow-alert-egress",
            ]
        );
        let json = |p: &NetworkPolicy| serde_json::to_value(p).expect("json");
        // What a component may do is the union of the policies that select it.
        let selects = |p: &NetworkPolicy, comp: Component| {
            let v = json(p);
            let sel = &v["spec"]["podSelector"];
            sel["matchLabels"]["app.kubernetes.io/instance"] == "s"
                && sel["matchExpressions"].as_array().is_none_or(|e| {
                    e.iter().all(|x| {
                        x["values"]
                            .as_array()
                            .is_some_and(|vals| vals.iter().any(|v| v == comp.name()))
                    })
                })
        };
        for comp in Component::ALL {
            let mine: Vec<_> = ps.iter().filter(|p| selects(p, comp)).collect();
            let ingress: Vec<serde_json::Value> = mine
                .iter()
                .flat_map(|p| {
                    json(p)["spec"]["ingress"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            let egress: Vec<serde_json::Value> = mine
                .iter()
                .flat_map(|p| {
                    json(p)["spec"]["egress"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            // Every component: from and to the stack's own pods on Loki's ports; DNS.
            assert!(
                ingress
                    .iter()
                    .any(|r| r["from"][0]["podSelector"]["matchLabels"]
                        ["app.kubernetes.io/instance"]
                        == "s"),
                "{comp:?}"
            );
            assert!(ports(&egress).contains(&53), "{comp:?}: DNS");
            let from_anywhere = ingress.iter().any(|r| r.get("from").is_none());
            let clients = matches!(
                comp,
                Component::Distributor | Component::QueryFrontend | Component::Ruler
            );
            assert_eq!(from_anywhere, clients, "{comp:?}: clients");
            let bucket = egress
                .iter()
                .any(|r| r.get("to").is_none() && ports(std::slice::from_ref(r)) == [9000]);
            let stores = matches!(
                comp,
                Component::Ingester
                    | Component::Querier
                    | Component::IndexGateway
                    | Component::Compactor
                    | Component::Ruler
            );
            assert_eq!(bucket, stores, "{comp:?}: object store at :9000");
            let operator = ingress.iter().any(|r| {
                r["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    == DEFAULT_NS
            });
            assert_eq!(
                operator,
                comp == Component::Ingester,
                "{comp:?}: the operator"
            );
            let alerts = egress
                .iter()
                .any(|r| ports(std::slice::from_ref(r)) == [80, 443, 8443]);
            assert_eq!(
                alerts,
                comp == Component::Ruler,
                "{comp:?}: Alertmanager and remote write"
            );
        }
        let deny = json(named(&ps, "s-default-deny"));
        assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert!(deny["spec"].get("ingress").is_none() && deny["spec"].get("egress").is_none());
    }

    const DEFAULT_NS: &str = crate::render::DEFAULT_OPERATOR_NAMESPACE;
}
