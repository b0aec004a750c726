//! A rule's expression, parsed as Loki parses it; and Prometheus durations (`duration`),
//! which LogQL ranges and the ruler's intervals share. A room of its own, below `ruler`:
//! a parser is a concern apart from the ruler's API and what the operator makes of it.
//!
//! Loki's ruler loads a tenant's rule files with `syntax.ParseExpr`, and its local rule
//! store stops syncing every tenant's groups at the first file it cannot parse: one bad
//! expression in any selected namespace leaves restarted rulers with no rules at all. So
//! an expression reaches a ConfigMap only if it is one Loki accepts, and a metric query
//! (what a rule evaluates, as the Go operator requires).
//!
//! No LogQL parser exists for Rust under a licence this project can take (Loki's is AGPL
//! Go; the one Rust crate was last released in 2022, before much of today's LogQL). This
//! one is our own, written after Loki's grammar (`pkg/logql/syntax/syntax.y`, v3.7.3, the
//! version the operator deploys) and the checks Loki makes while it builds an expression:
//! - `lex`: tokens as Loki's lexer cuts them (durations, byte sizes, keywords that are
//!   keywords only when called, Go's strings, numbers and comments);
//! - `parse`: the grammar (selectors, pipelines, unwrap, range and vector aggregations,
//!   binary operators with their precedence and modifiers, `label_replace`, `vector`,
//!   `variants`) and Loki's semantic checks (an unwrap where the aggregation needs one, a
//!   parameter where it takes one, grouping where it is allowed, a selector that does not
//!   match every stream, no number beside `and`/`or`/`unless`);
//! - `regex`: Go's regex syntax for what Loki compiles while parsing (matchers, the
//!   `regexp` and `pattern` parsers, `label_replace`).
//!
//! The corpus test runs it on every query of Loki's own parser tests, with Loki's verdict
//! (`loki_parser_corpus.txt` says where they come from). Where it knowingly differs, it
//! refuses what Loki would take: brackets or operators nested more than 128 deep (a
//! recursive parser needs a bound), regex groups of any kind nested more than 1,100 deep,
//! and a regex at the edge of Go's limits on size, height and class runes, which `regex`
//! estimates never below Go's (`regex_parity.jsonl` has Go's verdicts, and says where
//! ours is stricter).

pub mod duration;
mod error;
mod lex;
mod parse;
mod regex;

use error::error_at;
pub use error::LogqlError;

use parse::Kind;

/// Checks `expr` as a rule's expression: one Loki parses, and a metric query.
pub fn check_metric_expr(expr: &str) -> Result<(), LogqlError> {
    if expr.trim().is_empty() {
        return Err(error_at(expr, 0, "the expression is empty"));
    }
    match parse::parse(expr)? {
        Kind::Log => Err(error_at(
            expr,
            0,
            "this is a log query; a rule needs a metric query, e.g. sum by (level) (count_over_time({app=\"x\"} |= \"error\" [5m])) > 0",
        )),
        Kind::Metric | Kind::Literal | Kind::Variants => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_queries_pass() {
        for ok in [
            r#"sum(rate({app="foo"} |= "error" [5m])) by (job) > 0"#,
            r#"count_over_time({namespace="a", level=~"err|crit"}[1m]) > 10"#,
            r#"sum by (namespace) (rate({app="x"} | json | level="error" [5m])) / sum by (namespace) (rate({app="x", level!="debug"}[5m])) > 0.05"#,
            r#"quantile_over_time(0.99, {app="api"} | logfmt | unwrap duration(latency) | __error__="" [10m]) by (route)"#,
            r#"rate({app="a"} | line_format "{{.msg}}" [5m])"#,
            "absent_over_time({job=`x`}[1h])",
            "sum(count_over_time({a=\"b\"}[5m] offset 1h))",
            "vector(1)",
            "1 > 0",
            "sum(rate({app=\"foo\"}[5m])) # a comment\n  > 1",
            r#"rate({app="a"} |~ "\"quoted\" (x|y)" [1m])"#,
            r#"sum by (rate) (rate({app="a"}[5m])) > on (rate) group_left sum by (rate) (rate({app="b"}[5m]))"#,
            r#"topk(5, sum by (pod) (bytes_rate({app="a"} | pattern "<ip> <_> <status>" | status >= 500 [5m])))"#,
        ] {
            assert_eq!(check_metric_expr(ok), Ok(()), "{ok}");
        }
    }

    fn message(expr: &str) -> String {
        check_metric_expr(expr).expect_err(expr).to_string()
    }

    #[test]
    fn what_is_certainly_wrong_is_named_with_its_column() {
        let m = message(r#"{app="foo"} |= "error""#);
        assert!(m.starts_with("at column 1: this is a log query"), "{m}");
        assert!(message("").contains("empty"));
        let m = message(r#"sum(rate({app="foo"}[5m])"#);
        assert!(m.contains("at column 4: this ( is never closed"), "{m}");
        let m = message(r#"rate({app="foo"}[5m)]"#);
        assert!(m.contains("at column 17: the range [5m)]"), "{m}");
        let m = message(r#"rate({app="foo}[5m])"#);
        assert!(m.contains("never closed with \""), "{m}");
        let m = message(r#"rate({app="foo"}[5 minutes])"#);
        assert!(
            m.contains("the range [5 minutes]") && m.contains("not a Prometheus duration"),
            "{m}"
        );
        let m = message("rate({}[5m])");
        assert!(m.contains("at least one matcher"), "{m}");
        let m = message(r#"rate({app=foo}[5m])"#);
        assert!(m.contains("at column 11: expected a quoted value"), "{m}");
        let m = message(r#"rate({app:"foo"}[5m])"#);
        assert!(m.contains("expected =, !=, =~ or !~"), "{m}");
        assert!(message("sum(up) > 1").contains("no stream selector"));
        let m = message("sum(rate({a=\"b\"}[5m]))\n  > ))");
        assert!(
            m.contains("at line 2, column 5") && m.contains("closes nothing"),
            "{m}"
        );
    }

    /// What Loki refuses, and so would leave every tenant's restarted rulers without rules,
    /// that the lexical check let through.
    #[test]
    fn what_loki_refuses_is_refused_with_what_to_change() {
        for (expr, says) in [
            (
                r#"sum(nope({a="b"}[5m])) > 0"#,
                "at column 5: LogQL has no function nope",
            ),
            (
                r#"sum(rate({a!="b"}[5m]))"#,
                "at column 10: a stream selector needs at least one matcher",
            ),
            (
                r#"sum(count_over_time({a="b"}[5m:1m]))"#,
                "the range [5m:1m]",
            ),
            (r#"sum_over_time({a="b"}[5m])"#, "add | unwrap <label>"),
            (
                r#"count_over_time({a="b"} | unwrap x [5m])"#,
                "takes no | unwrap",
            ),
            (r#"rate({a="b"}[5m]) by (x)"#, "rate takes no by or without"),
            (r#"topk(sum(rate({a="b"}[5m])))"#, "topk needs how many"),
            (r#"sum(rate({a="b"}[5m])) and 1"#, "write vector(1)"),
            (
                r#"rate({a=~"(x"}[5m])"#,
                "a ( that is never closed in the regex",
            ),
            (
                r#"rate({a="b"} | regexp "(\\d+)" [5m])"#,
                "needs its groups named",
            ),
            (r#"rate({a="b"} | pattern "<a><b>" [5m])"#, "side by side"),
            (r#"sum by (x) (rate({a="b"}[5m])) by (y)"#, "found \"by\""),
            (r#"rate({a="\q"}[5m])"#, "this escape is not one Loki reads"),
            (r#"rate({a="b"}[5m]) > 5m"#, "found a duration"),
            (r#"rate({a="b"}[5m] offset 5)"#, "a duration after offset"),
        ] {
            let m = message(expr);
            assert!(m.contains(says), "{expr}: {m}");
        }
        // rate with unwrap is Loki's rate of a counter's values: accepted.
        assert_eq!(
            check_metric_expr(r#"rate({a="b"} | unwrap y [5m])"#),
            Ok(())
        );
    }

    /// Nesting is bounded, so a deep expression is refused, never a stack overflow.
    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let nested =
            |n: usize| format!("{}rate({{a=\"b\"}}[5m]){}", "sum(".repeat(n), ")".repeat(n));
        assert_eq!(check_metric_expr(&nested(100)), Ok(()));
        let groups = format!(
            "rate({{a=~\"{}a{}\"}}[5m])",
            "(".repeat(998),
            ")".repeat(998)
        );
        assert_eq!(check_metric_expr(&groups), Ok(()));
        for deep in [
            nested(20_000),
            format!("{}1", "1 ^ ".repeat(20_000)),
            format!(
                "rate({{a=\"b\"}} | {}a=\"b\"{} [5m])",
                "(".repeat(20_000),
                ")".repeat(20_000)
            ),
            format!("rate({{a=~\"{}\"}}[5m])", "(".repeat(20_000)),
            format!(
                "rate({{a=~\"{}a{}\"}}[5m])",
                "(".repeat(999),
                ")".repeat(999)
            ),
        ] {
            assert!(message(&deep).contains("nest"), "{}", message(&deep));
        }
    }

    /// A matcher or label_replace regex that Go's regexp refuses as too large is refused
    /// with what to change; one just inside Go's limit is not.
    #[test]
    fn a_regex_too_large_for_go_is_refused() {
        let matcher = |n: usize| format!("rate({{a=~\"{}\"}}[5m])", "a{1000}".repeat(n));
        assert_eq!(check_metric_expr(&matcher(3355)), Ok(()));
        let m = message(&matcher(3356));
        assert!(m.contains("too large for Go's regexp"), "{m}");
        let replace = |n: usize| {
            format!(
                "label_replace(rate({{a=\"b\"}}[5m]), \"d\", \"$1\", \"s\", \"{}\")",
                "a{1000}".repeat(n)
            )
        };
        assert_eq!(check_metric_expr(&replace(3355)), Ok(()));
        let m = message(&replace(3356));
        assert!(
            m.contains("label_replace's regex") && m.contains("too large"),
            "{m}"
        );
    }

    fn verdict(expr: &str) -> &'static str {
        match parse::parse(expr) {
            Ok(Kind::Log) => "ok-log",
            Ok(_) => "ok-metric",
            Err(_) => "err",
        }
    }

    /// Every query of Loki's parser tests (and a few of ours) gets Loki's verdict.
    #[test]
    fn lokis_own_test_queries_get_lokis_verdict() {
        let corpus = include_str!("loki_parser_corpus.txt");
        let corpus = corpus.strip_suffix('\n').unwrap_or(corpus);
        let (mut wrong, mut cases, mut refused) = (Vec::new(), 0, 0);
        for record in corpus.split("\n=== ").skip(1) {
            let (head, expr) = record.split_once('\n').unwrap_or((record, ""));
            let (head, unsupported) = match head.split_once(" | unsupported: ") {
                Some((head, why)) => (head, Some(why)),
                None => (head, None),
            };
            let (want, source) = head.split_once(' ').unwrap_or((head, ""));
            assert!(["ok-metric", "ok-log", "err"].contains(&want), "{head}");
            let got = verdict(expr);
            cases += 1;
            refused += usize::from(want == "err");
            match unsupported {
                // A known difference must stay one, or its note goes.
                Some(why) => assert_ne!(got, want, "{source} ({why}) now agrees with Loki"),
                None if got != want => wrong.push(format!(
                    "{source}: Loki says {want}, we say {got} ({:?}):\n{expr}",
                    parse::parse(expr)
                )),
                None => {}
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {cases}:\n{}",
            wrong.len(),
            wrong.join("\n\n")
        );
        assert!(
            cases >= 1400 && refused >= 200,
            "{cases} cases, {refused} refused"
        );
    }
}
