//! What can be told of a LogQL expression without a LogQL parser.
//!
//! No maintained LogQL parser exists for Rust under a licence this project can take (the
//! one that is maintained is AGPL; the other was last released in 2022, before much of
//! today's LogQL). So this checks what is certain from the tokens alone, and nothing
//! that a newer Loki could accept:
//! - every string and bracket is closed, and brackets nest;
//! - a stream selector `{...}` holds `label op "value"` matchers (op `=`, `!=`, `=~`,
//!   `!~`), at least one;
//! - a range `[...]` holds a Prometheus duration (with an optional `:step`);
//! - the expression is a metric query (what a rule needs, as the Go operator checks): no
//!   stream selector stands outside every function call (that is a log query), and it
//!   has a stream selector inside one, or is made of numbers and `vector()`.
//!
//! Function names, pipeline stages and operators are not checked: Loki's ruler refuses
//! what slips through when it loads the file, and its log says why.

use crate::ruler::duration::parse_prometheus_duration;

/// Where the expression is wrong, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogqlError {
    /// 1-based, in characters, on the line the expression is written (lines counted
    /// into it for a multi-line expression).
    pub column: usize,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for LogqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 1 {
            write!(
                f,
                "at line {}, column {}: {}",
                self.line, self.column, self.message
            )
        } else {
            write!(f, "at column {}: {}", self.column, self.message)
        }
    }
}

impl std::error::Error for LogqlError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Str,
    Ident(String),
    /// Numbers and durations (`5`, `0.5`, `5m`, `10MB`).
    Number,
    Open(char),
    Close(char),
    /// Any operator or punctuation.
    Op(String),
}

struct Lexed {
    tok: Tok,
    /// Character offset of the token's start.
    at: usize,
}

fn position(text: &str, at: usize) -> (usize, usize) {
    let (mut line, mut column) = (1, 1);
    for c in text.chars().take(at) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

fn error(text: &str, at: usize, message: impl Into<String>) -> LogqlError {
    let (line, column) = position(text, at);
    LogqlError {
        column,
        line,
        message: message.into(),
    }
}

/// The end of a run of characters that `keep` takes, from `i`.
fn run_end(chars: &[char], mut i: usize, keep: impl Fn(char) -> bool) -> usize {
    while i < chars.len() && keep(chars[i]) {
        i += 1;
    }
    i
}

/// The end of the string whose quote is at `start` (`"` with `\` escapes, or a raw
/// `` ` `` string).
fn string_end(text: &str, chars: &[char], start: usize) -> Result<usize, LogqlError> {
    let quote = chars[start];
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(error(
                    text,
                    start,
                    format!("the string opened here is never closed with {quote}"),
                ))
            }
            Some('\\') if quote == '"' => i += 2,
            Some(&d) if d == quote => return Ok(i + 1),
            Some(_) => i += 1,
        }
    }
}

/// An operator at `i`: two characters where they make one (`|=`, `!~`, `>=`, ...).
fn operator(chars: &[char], i: usize) -> String {
    let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
    if ["|=", "!=", "|~", "!~", "=~", "==", "<=", ">=", "|>", "!>"].contains(&two.as_str()) {
        two
    } else {
        chars[i].to_string()
    }
}

fn lex(text: &str) -> Result<Vec<Lexed>, LogqlError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (c, start) = (chars[i], i);
        let tok = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            // A comment runs to the end of the line.
            '#' => {
                i = run_end(&chars, i, |c| c != '\n');
                continue;
            }
            '"' | '`' => {
                i = string_end(text, &chars, i)?;
                Tok::Str
            }
            '(' | '{' | '[' => {
                i += 1;
                Tok::Open(c)
            }
            ')' | '}' | ']' => {
                i += 1;
                Tok::Close(c)
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                i = run_end(&chars, i, |c| c.is_ascii_alphanumeric() || c == '.');
                Tok::Number
            }
            c if c.is_alphabetic() || c == '_' => {
                i = run_end(&chars, i, |c| c.is_alphanumeric() || c == '_' || c == '.');
                Tok::Ident(chars[start..i].iter().collect())
            }
            _ => {
                let op = operator(&chars, i);
                i += op.chars().count();
                Tok::Op(op)
            }
        };
        out.push(Lexed { tok, at: start });
    }
    Ok(out)
}

/// Checks `expr` as a rule's expression (see the module comment).
pub fn check_metric_expr(expr: &str) -> Result<(), LogqlError> {
    if expr.trim().is_empty() {
        return Err(error(expr, 0, "the expression is empty"));
    }
    let toks = lex(expr)?;
    brackets(expr, &toks)?;
    let mut inner_selector = false;
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match &t.tok {
            Tok::Open('(') => depth += 1,
            Tok::Close(')') => depth = depth.saturating_sub(1),
            Tok::Open('{') => {
                selector(expr, &toks[i + 1..], t.at)?;
                if depth == 0 {
                    return Err(error(
                        expr,
                        t.at,
                        "this is a log query; a rule needs a metric query, e.g. sum by (level) (count_over_time({app=\"x\"} |= \"error\" [5m])) > 0",
                    ));
                }
                inner_selector = true;
            }
            Tok::Open('[') => range(expr, &toks[i + 1..], t.at)?,
            _ => {}
        }
    }
    let only_numbers = toks.iter().all(|t| match &t.tok {
        Tok::Ident(w) => w == "vector",
        Tok::Str => false,
        _ => true,
    });
    if !inner_selector && !only_numbers {
        return Err(error(
            expr,
            0,
            "no stream selector: a metric query reads streams, e.g. count_over_time({app=\"x\"}[5m])",
        ));
    }
    Ok(())
}

fn brackets(text: &str, toks: &[Lexed]) -> Result<(), LogqlError> {
    let mut stack: Vec<(char, usize)> = Vec::new();
    for t in toks {
        match t.tok {
            Tok::Open(c) => stack.push((c, t.at)),
            Tok::Close(c) => {
                let want = match c {
                    ')' => '(',
                    '}' => '{',
                    _ => '[',
                };
                match stack.pop() {
                    Some((open, _)) if open == want => {}
                    Some((open, at)) => {
                        return Err(error(
                            text,
                            t.at,
                            format!("{c} closes the {open} at column {}", position(text, at).1),
                        ))
                    }
                    None => return Err(error(text, t.at, format!("{c} closes nothing"))),
                }
            }
            _ => {}
        }
    }
    match stack.pop() {
        Some((open, at)) => Err(error(text, at, format!("this {open} is never closed"))),
        None => Ok(()),
    }
}

/// The matchers of a stream selector, from the token after `{` to its `}`.
fn selector(text: &str, toks: &[Lexed], open_at: usize) -> Result<(), LogqlError> {
    let mut i = 0;
    let mut matchers = 0;
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Close('}')) if matchers > 0 => return Ok(()),
            Some(Tok::Close('}')) | None => {
                return Err(error(
                    text,
                    open_at,
                    "a stream selector needs at least one matcher, e.g. {app=\"x\"}",
                ))
            }
            Some(Tok::Ident(_)) => {}
            Some(_) => {
                return Err(error(
                    text,
                    toks[i].at,
                    "expected a label name in the stream selector",
                ))
            }
        }
        match toks.get(i + 1).map(|t| &t.tok) {
            Some(Tok::Op(op)) if ["=", "!=", "=~", "!~"].contains(&op.as_str()) => {}
            _ => {
                let at = toks.get(i + 1).map_or(open_at, |t| t.at);
                return Err(error(
                    text,
                    at,
                    "expected =, !=, =~ or !~ after the label name",
                ));
            }
        }
        match toks.get(i + 2).map(|t| &t.tok) {
            Some(Tok::Str) => {}
            _ => {
                let at = toks.get(i + 2).map_or(open_at, |t| t.at);
                return Err(error(
                    text,
                    at,
                    "expected a quoted value in the stream selector",
                ));
            }
        }
        matchers += 1;
        i += 3;
        if let Some(Tok::Op(op)) = toks.get(i).map(|t| &t.tok) {
            if op == "," {
                i += 1;
            }
        }
    }
}

/// A range `[5m]` or `[5m:1m]`: the text between the brackets.
fn range(text: &str, toks: &[Lexed], open_at: usize) -> Result<(), LogqlError> {
    let close = toks
        .iter()
        .position(|t| t.tok == Tok::Close(']'))
        .unwrap_or(toks.len());
    let chars: Vec<char> = text.chars().collect();
    let end = toks.get(close).map_or(chars.len(), |t| t.at);
    let inside: String = chars[open_at + 1..end].iter().collect();
    for part in inside.split(':') {
        let part = part.trim();
        if part.is_empty() && inside.contains(':') {
            continue;
        }
        parse_prometheus_duration(part)
            .map_err(|e| error(text, open_at, format!("the range [{}]: {e}", inside.trim())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_queries_pass() {
        for ok in [
            r#"sum(rate({app="foo"} |= "error" [5m])) by (job) > 0"#,
            r#"count_over_time({namespace="a", level=~"err|crit"}[1m]) > 10"#,
            r#"sum by (namespace) (rate({app!="x"} | json | level="error" [5m])) / sum by (namespace) (rate({app!="x"}[5m])) > 0.05"#,
            r#"quantile_over_time(0.99, {app="api"} | logfmt | unwrap duration(latency) | __error__="" [10m]) by (route)"#,
            r#"rate({app="a"} | line_format "{{.msg}}" [5m])"#,
            "absent_over_time({job=`x`}[1h])",
            "sum(count_over_time({a=\"b\"}[5m:1m]))",
            "vector(1)",
            "1 > 0",
            "sum(rate({app=\"foo\"}[5m])) # a comment\n  > 1",
            r#"rate({app="a"} |~ "\"quoted\" (x|y)" [1m])"#,
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
        assert!(m.contains(") closes the ["), "{m}");
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
}
