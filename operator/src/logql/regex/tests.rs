//! Go's verdict on every regex of `regex_parity.jsonl` (written by `hack/regex-parity`
//! from Go's regexp and grafana/regexp) is ours: what Go refuses, we refuse; what Go
//! compiles, we accept, except where an entry says why our bound is stricter.

use super::*;
use serde_json::Value;

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The regex an entry describes: its parts, each repeated `n` times.
fn regex_of(entry: &Value) -> String {
    let parts = entry.get("parts").and_then(Value::as_array);
    parts
        .into_iter()
        .flatten()
        .map(|p| {
            let n = p.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
            text(p, "s").repeat(usize::try_from(n).unwrap_or(1))
        })
        .collect()
}

fn corpus() -> Vec<Value> {
    include_str!("../regex_parity.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn the_class_bounds_are_gos() {
    let bounds = &corpus()[0];
    let n = |k: &str| bounds.get(k).and_then(Value::as_u64);
    assert_eq!(n("unicode_runes_max"), Some(UNICODE_CLASS_RUNES));
    assert_eq!(n("perl_runes_max"), Some(PERL_CLASS_RUNES));
    assert_eq!(n("fold_runes"), Some(FOLD_RUNES));
}

#[test]
fn go_refuses_a_regex_only_where_we_do() {
    let (mut wrong, mut refused) = (Vec::new(), 0);
    let entries = corpus();
    for entry in &entries[1..] {
        let re = regex_of(entry);
        let stricter = text(entry, "stricter");
        let go_matcher = text(entry, "matcher") == "ok";
        let go_parser = text(entry, "parser") == "ok";
        let go_replace = text(entry, "replace") == "ok";
        let mut differs = false;
        // As Prometheus and label_replace compile it (the Go tool wraps it the same way).
        let wrapped = format!("^(?s:{re})$");
        for (flavor, go, re) in [
            (Flavor::Grafana, go_matcher, &wrapped),
            (Flavor::Go, go_parser, &re),
            (Flavor::Go, go_replace, &wrapped),
        ] {
            let ours = parse(re, flavor);
            refused += usize::from(!go);
            match (go, &ours) {
                (true, Ok(_)) | (false, Err(_)) => {}
                (true, Err(e)) if !stricter.is_empty() => {
                    differs = true;
                    assert!(e.len() < 400, "a long message: {e}");
                }
                (go, ours) => wrong.push(format!(
                    "{}: Go {}, we {:?}",
                    text(entry, "note"),
                    if go { "compiles it" } else { "refuses it" },
                    ours.as_ref()
                        .map(|_| "compile it")
                        .map_err(|e| &e[..e.len().min(200)])
                )),
            }
        }
        if !stricter.is_empty() && !differs {
            wrong.push(format!(
                "{}: marked stricter ({stricter}) but agrees with Go now",
                text(entry, "note")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        refused >= 40,
        "{refused} refusals: the corpus lost its teeth"
    );
}

#[test]
fn what_is_too_large_or_too_deep_says_so_and_quotes_the_regex_short() {
    let large = "a{1000}".repeat(3356);
    let e = parse(&large, Flavor::Grafana).err().unwrap_or_default();
    assert!(e.contains("too large") && e.contains("23492 bytes"), "{e}");
    assert!(parse(&"a{1000}".repeat(3355), Flavor::Grafana).is_ok());
    assert!(e.len() < 400, "{e}");
    let deep = format!("{}a{}", "(".repeat(600), ")+".repeat(600));
    let e = parse(&deep, Flavor::Go).err().unwrap_or_default();
    assert!(e.contains("nested too deeply"), "{e}");
}
