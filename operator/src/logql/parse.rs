//! A recursive-descent parser for LogQL, written after Loki's grammar
//! (`pkg/logql/syntax/syntax.y`) and the checks Loki makes while it builds and validates
//! an expression (`ast.go`, `parser.go`): it accepts what `syntax.ParseExpr` accepts.
//!
//! Loki finds some mistakes at once (syntax, a regex that does not compile) and others
//! only when it validates the built expression (a range aggregation without the `unwrap`
//! it needs, a selector that matches every stream). The second kind is collected in
//! `later`, because Loki never validates the expressions inside `variants(...)`.

use super::error::{error_at, position, LogqlError};
use super::lex::{find_word, go_float, go_int, lex, Tok, Token, RANGE_OPS, VECTOR_OPS};
use super::regex;

/// What an expression is, as far as a rule is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A number, or numbers combined: `1`, `(2 * 3)`.
    Literal,
    /// A sample expression: what a rule evaluates.
    Metric,
    /// A log query: `{app="x"} |= "error"`.
    Log,
    /// `variants(...) of (...)`: a sample expression no aggregation may take.
    Variants,
}

/// Loki's longest query (`maxInputSize`).
const MAX_BYTES: usize = 131_072;

/// How deep brackets and operators may nest. Loki has no such limit, but a parser that
/// recurses needs one (no rule comes near it); past it the expression is refused.
const MAX_DEPTH: usize = 128;

/// Parses `text` as Loki's `syntax.ParseExpr` does.
pub(super) fn parse(text: &str) -> Result<Kind, LogqlError> {
    if text.len() >= MAX_BYTES {
        return Err(error_at(
            text,
            0,
            format!("the expression is longer than Loki takes ({MAX_BYTES} bytes)"),
        ));
    }
    let toks = lex(text)?;
    brackets(text, &toks)?;
    let mut p = Parser {
        text,
        toks,
        pos: 0,
        later: Vec::new(),
        in_variants: 0,
        depth: 0,
    };
    let kind = p.expr(0)?;
    if p.tok() != &Tok::Eof {
        return Err(p.unexpected("an operator (+, >, and, ...) or the end of the expression"));
    }
    match p.later.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(kind),
    }
}

/// Brackets that do not pair, said plainly before the grammar says it less plainly.
fn brackets(text: &str, toks: &[Token]) -> Result<(), LogqlError> {
    let mut open: Vec<(&str, usize)> = Vec::new();
    for t in toks {
        let Tok::Sym(c @ ("(" | "{" | ")" | "}" | "]")) = t.tok else {
            continue;
        };
        if c == "(" || c == "{" {
            open.push((c, t.at));
            if open.len() > MAX_DEPTH {
                return Err(error_at(
                    text,
                    t.at,
                    format!("brackets nest deeper than {MAX_DEPTH}"),
                ));
            }
            continue;
        }
        let want = match c {
            ")" => "(",
            "}" => "{",
            _ => "[",
        };
        match open.pop() {
            Some((o, _)) if o == want => {}
            Some((o, at)) => {
                let column = position(text, at).1;
                return Err(error_at(
                    text,
                    t.at,
                    format!("{c} closes the {o} at column {column}"),
                ));
            }
            None => return Err(error_at(text, t.at, format!("{c} closes nothing"))),
        }
    }
    match open.pop() {
        Some((o, at)) => Err(error_at(text, at, format!("this {o} is never closed"))),
        None => Ok(()),
    }
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<Token>,
    pos: usize,
    later: Vec<LogqlError>,
    in_variants: usize,
    depth: usize,
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("{s:?}"),
        Tok::Sym(s) => format!("{s:?}"),
        Tok::Str(_) => "a string".into(),
        Tok::Number(n) => format!("the number {n}"),
        Tok::Duration => "a duration".into(),
        Tok::Bytes => "a byte size".into(),
        Tok::Range => "a range [...]".into(),
        Tok::Flag => "a parser flag".into(),
        Tok::Eof => "the end of the expression".into(),
    }
}

/// Binary operators, by precedence (Loki's, as Prometheus's).
fn precedence(t: &Tok) -> Option<(u8, &'static str)> {
    let Tok::Sym(op) = t else { return None };
    let p = match *op {
        "or" => 1,
        "and" | "unless" => 2,
        "==" | "!=" | ">" | ">=" | "<" | "<=" => 3,
        "+" | "-" => 4,
        "*" | "/" | "%" => 5,
        "^" => 6,
        _ => return None,
    };
    Some((p, op))
}

impl Parser<'_> {
    fn tok(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn at(&self) -> usize {
        self.toks[self.pos].at
    }

    fn bump(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        self.pos = (self.pos + 1).min(self.toks.len() - 1);
        t
    }

    fn is(&self, s: &str) -> bool {
        matches!(self.tok(), Tok::Sym(t) if *t == s)
    }

    fn eat(&mut self, s: &str) -> bool {
        let yes = self.is(s);
        if yes {
            self.bump();
        }
        yes
    }

    fn expect(&mut self, s: &str, why: &str) -> Result<(), LogqlError> {
        if self.eat(s) {
            return Ok(());
        }
        Err(self.unexpected(&format!("{s:?} {why}")))
    }

    fn unexpected(&self, wanted: &str) -> LogqlError {
        let found = describe(self.tok());
        error_at(
            self.text,
            self.at(),
            format!("expected {wanted}, found {found}"),
        )
    }

    fn fail(&self, at: usize, message: impl Into<String>) -> LogqlError {
        error_at(self.text, at, message)
    }

    /// A mistake Loki finds when it validates the expression.
    fn later(&mut self, at: usize, message: impl Into<String>) {
        if self.in_variants == 0 {
            self.later.push(error_at(self.text, at, message));
        }
    }

    fn ident(&mut self, what: &str) -> Result<String, LogqlError> {
        match self.tok().clone() {
            Tok::Ident(s) => {
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn string(&mut self, what: &str) -> Result<Vec<u8>, LogqlError> {
        match self.tok().clone() {
            Tok::Str(s) => {
                self.bump();
                Ok(s)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn expr(&mut self, min: u8) -> Result<Kind, LogqlError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.fail(
                self.at(),
                format!("the expression nests deeper than {MAX_DEPTH}"),
            ));
        }
        let kind = self.expr_at_depth(min);
        self.depth -= 1;
        kind
    }

    fn expr_at_depth(&mut self, min: u8) -> Result<Kind, LogqlError> {
        let start = self.at();
        let mut left = self.operand()?;
        while let Some((prec, op)) = precedence(self.tok()).filter(|(p, _)| *p >= min) {
            self.bump();
            self.modifiers()?;
            let right = self.expr(if op == "^" { prec } else { prec + 1 })?;
            left = self.combine(start, op, left, right);
        }
        Ok(left)
    }

    fn combine(&mut self, at: usize, op: &str, left: Kind, right: Kind) -> Kind {
        if left == Kind::Log || right == Kind::Log {
            self.later(at, format!("{op} joins metric queries, and one side is a log query: count or rate its lines first, e.g. sum(rate({{app=\"x\"}}[5m]))"));
        } else if ["and", "or", "unless"].contains(&op)
            && (left == Kind::Literal || right == Kind::Literal)
        {
            self.later(at, format!("{op} needs a vector on both sides, not a number: write vector(1) for a constant"));
        } else if left == Kind::Literal && right == Kind::Literal {
            return Kind::Literal;
        }
        Kind::Metric
    }

    /// `bool`, `on (...)`/`ignoring (...)`, `group_left (...)`/`group_right (...)`.
    fn modifiers(&mut self) -> Result<(), LogqlError> {
        self.eat("bool");
        if self.eat("on") || self.eat("ignoring") {
            self.expect("(", "and the labels to match on")?;
            self.labels()?;
            if (self.eat("group_left") || self.eat("group_right")) && self.eat("(") {
                self.labels()?;
            }
        }
        Ok(())
    }

    /// Label names up to `)`, which it takes.
    fn labels(&mut self) -> Result<(), LogqlError> {
        if self.eat(")") {
            return Ok(());
        }
        loop {
            self.ident("a label name")?;
            if !self.eat(",") {
                return self.expect(")", "after the label names");
            }
        }
    }

    /// `by (...)` or `without (...)`: `Some(true)` if it names labels.
    fn grouping(&mut self) -> Result<Option<bool>, LogqlError> {
        if !(self.eat("by") || self.eat("without")) {
            return Ok(None);
        }
        self.expect("(", "after by or without")?;
        let named = !self.is(")");
        self.labels()?;
        Ok(Some(named))
    }

    fn operand(&mut self) -> Result<Kind, LogqlError> {
        let at = self.at();
        match self.tok().clone() {
            Tok::Sym("{") => {
                self.selector()?;
                self.pipeline()?;
                Ok(Kind::Log)
            }
            Tok::Sym("(") => {
                self.bump();
                let kind = self.expr(0)?;
                if kind == Kind::Variants {
                    return Err(self.fail(at, "variants(...) of (...) cannot stand in parentheses"));
                }
                self.expect(")", "to close the ( opened before")?;
                Ok(kind)
            }
            Tok::Number(n) => {
                self.bump();
                self.number(at, &n);
                Ok(Kind::Literal)
            }
            Tok::Sym("+" | "-") if matches!(self.peek(1), Tok::Number(_)) => {
                self.bump();
                if let Tok::Number(n) = self.bump() {
                    self.number(at, &n);
                }
                Ok(Kind::Literal)
            }
            Tok::Sym("vector") => {
                self.bump();
                self.expect("(", "after vector")?;
                let Tok::Number(n) = self.bump() else {
                    return Err(self.fail(at, "vector() takes a plain number, e.g. vector(0)"));
                };
                self.number(at, &n);
                self.expect(")", "after vector's number")?;
                Ok(Kind::Metric)
            }
            Tok::Sym("label_replace") => self.label_replace(),
            Tok::Sym("variants") => self.variants(),
            Tok::Sym(op) if find_word(VECTOR_OPS, op).is_some() => self.vector_aggregation(op),
            Tok::Sym(op) if find_word(RANGE_OPS, op).is_some() => self.range_aggregation(op),
            Tok::Ident(name) if self.peek(1) == &Tok::Sym("(") => Err(self.fail(
                at,
                format!("LogQL has no function {name}: use a range aggregation (rate, count_over_time, bytes_over_time, sum_over_time, ...) or a vector aggregation (sum, avg, max, min, count, topk, ...)"),
            )),
            Tok::Ident(name) => Err(self.fail(
                at,
                format!("{name} is not a LogQL query: there is no stream selector to read, and LogQL has no metric names; e.g. count_over_time({{app=\"x\"}}[5m])"),
            )),
            _ => Err(self.unexpected("a query: a function such as rate(...) or sum(...), a stream selector {...}, or a number")),
        }
    }

    fn number(&mut self, at: usize, text: &str) {
        if go_float(text).is_none() {
            self.later(
                at,
                format!("{text} is not a number Loki reads (decimal, e.g. 0.5 or 1e3)"),
            );
        }
    }

    /// An expression where Loki's grammar wants a metric query.
    fn metric(&mut self, inside: &str) -> Result<Kind, LogqlError> {
        let at = self.at();
        match self.expr(0)? {
            Kind::Log => Err(self.fail(at, format!("{inside} takes a metric query, not a log query: count its lines first, e.g. count_over_time({{app=\"x\"}}[5m])"))),
            Kind::Variants => Err(self.fail(at, format!("{inside} cannot take variants(...)"))),
            kind => Ok(kind),
        }
    }

    fn label_replace(&mut self) -> Result<Kind, LogqlError> {
        self.bump();
        self.expect("(", "after label_replace")?;
        self.metric("label_replace")?;
        for what in ["destination label", "replacement", "source label", "regex"] {
            self.expect(
                ",",
                &format!("before the {what} (label_replace(v, dst, replacement, src, regex))"),
            )?;
            let at = self.at();
            let value = self.string(&format!("the {what} as a string"))?;
            if what == "regex" {
                let wrapped = std::str::from_utf8(&value).map(|r| format!("^(?:{r})$"));
                if let Err(e) = wrapped
                    .map_err(|e| e.to_string())
                    .and_then(|r| regex::parse(&r, regex::Flavor::Go))
                {
                    self.later(at, format!("label_replace's regex does not compile: {e}"));
                }
            }
        }
        self.expect(")", "after label_replace's five arguments")?;
        Ok(Kind::Metric)
    }

    fn variants(&mut self) -> Result<Kind, LogqlError> {
        self.bump();
        self.expect("(", "after variants")?;
        self.in_variants += 1;
        loop {
            self.metric("variants")?;
            if !self.eat(",") {
                break;
            }
        }
        self.in_variants -= 1;
        self.expect(")", "after the variants")?;
        self.expect("of", "after variants(...)")?;
        self.expect("(", "after of")?;
        self.log_range()?;
        self.expect(")", "after the log range")?;
        Ok(Kind::Variants)
    }

    /// `sum by (x) (...)`, `topk(5, ...)`.
    fn vector_aggregation(&mut self, op: &str) -> Result<Kind, LogqlError> {
        let at = self.at();
        self.bump();
        let mut grouping = self.grouping()?;
        self.expect("(", &format!("after {op}"))?;
        let mut param = None;
        if let (Tok::Number(n), Tok::Sym(",")) = (self.tok().clone(), self.peek(1)) {
            param = Some(n);
            self.bump();
            self.bump();
        }
        self.metric(op)?;
        self.expect(")", &format!("to close {op}("))?;
        if grouping.is_none() {
            grouping = self.grouping()?;
        }
        let problem = match (op, param) {
            ("topk" | "bottomk" | "approx_topk", None) => Some(format!(
                "{op} needs how many series to keep, e.g. {op}(5, ...)"
            )),
            ("topk" | "bottomk" | "approx_topk", Some(n)) => match go_int(&n) {
                None => Some(format!("{op}'s parameter must be a whole number, not {n}")),
                Some(k) if k <= 0 => Some(format!("{op}'s parameter must be greater than 0")),
                _ if op == "approx_topk" && grouping.is_some() => {
                    Some("approx_topk takes no by or without".into())
                }
                _ => None,
            },
            (_, Some(n)) => Some(format!("{op} takes no parameter ({n})")),
            ("sort" | "sort_desc", None) if grouping == Some(true) => {
                Some(format!("{op} takes no by or without"))
            }
            _ => None,
        };
        if let Some(p) = problem {
            self.later(at, p);
        }
        Ok(Kind::Metric)
    }

    /// `rate({...}[5m])`, `quantile_over_time(0.99, {...} | unwrap x [5m]) by (y)`.
    fn range_aggregation(&mut self, op: &str) -> Result<Kind, LogqlError> {
        let at = self.at();
        self.bump();
        self.expect("(", &format!("after {op}"))?;
        let mut param = None;
        if let (Tok::Number(n), Tok::Sym(",")) = (self.tok().clone(), self.peek(1)) {
            param = Some(n);
            self.bump();
            self.bump();
        }
        let unwrap = self.log_range()?;
        self.expect(")", &format!("to close {op}("))?;
        let grouping = self.grouping()?;
        let quantile = op == "quantile_over_time";
        let grouping_ok = [
            "avg_over_time",
            "stddev_over_time",
            "stdvar_over_time",
            "quantile_over_time",
            "max_over_time",
            "min_over_time",
            "first_over_time",
            "last_over_time",
        ];
        let unwrap_ok = [
            "avg_over_time",
            "sum_over_time",
            "max_over_time",
            "min_over_time",
            "stddev_over_time",
            "stdvar_over_time",
            "quantile_over_time",
            "rate",
            "rate_counter",
            "absent_over_time",
            "first_over_time",
            "last_over_time",
        ];
        let plain_ok = [
            "bytes_over_time",
            "bytes_rate",
            "count_over_time",
            "rate",
            "absent_over_time",
        ];
        let problem = match param {
            Some(n) if !quantile => Some(format!("{op} takes no parameter ({n})")),
            Some(n) if go_float(&n).is_none() => Some(format!("{n} is not a number Loki reads")),
            None if quantile => Some("quantile_over_time needs the quantile first, e.g. quantile_over_time(0.99, {app=\"x\"} | unwrap latency [5m])".into()),
            _ if grouping.is_some() && !grouping_ok.contains(&op) => Some(format!("{op} takes no by or without: group around it, e.g. sum by (x) ({op}(...))")),
            _ if unwrap && !unwrap_ok.contains(&op) => Some(format!("{op} counts lines and takes no | unwrap; use sum_over_time, avg_over_time, ... to add up a label's values")),
            _ if !unwrap && !plain_ok.contains(&op) => Some(format!("{op} needs the label whose values it takes: add | unwrap <label> before the range, e.g. {op}({{app=\"x\"}} | logfmt | unwrap latency [5m])")),
            _ => None,
        };
        if let Some(p) = problem {
            self.later(at, p);
        }
        Ok(Kind::Metric)
    }

    /// A log range: `{...} | stages [5m] offset 1h`, the stages before or after the range,
    /// in parentheses or not, as Loki's grammar lists them. Whether it unwraps.
    fn log_range(&mut self) -> Result<bool, LogqlError> {
        if self.eat("(") {
            if !self.is("{") {
                let unwrap = self.log_range()?;
                self.expect(")", "to close the ( around the log range")?;
                return Ok(unwrap);
            }
            self.selector()?;
            let stages = self.pipeline()?;
            let unwrap = self.unwrap()?;
            if self.eat(")") {
                self.range()?;
                // (selector) [range] may take an unwrap after it, and nothing else.
                let after = !stages && !unwrap && self.unwrap()?;
                return Ok(unwrap || after);
            }
            let unwrap = self.after_selector(stages, unwrap)?;
            self.expect(")", "to close the ( around the log range")?;
            return Ok(unwrap);
        }
        if !self.is("{") {
            return Err(self.unexpected("a log range, e.g. {app=\"x\"}[5m]"));
        }
        self.selector()?;
        let stages = self.pipeline()?;
        let unwrap = self.unwrap()?;
        self.after_selector(stages, unwrap)
    }

    /// The range and what may follow it: an offset, then stages and an unwrap if none came
    /// before the range.
    fn after_selector(&mut self, stages: bool, unwrap: bool) -> Result<bool, LogqlError> {
        self.range()?;
        if stages || unwrap {
            return Ok(unwrap);
        }
        self.pipeline()?;
        self.unwrap()
    }

    fn range(&mut self) -> Result<(), LogqlError> {
        if self.tok() != &Tok::Range {
            return Err(
                self.unexpected("a range such as [5m]: a metric query counts over a time range")
            );
        }
        self.bump();
        if self.eat("offset") {
            if self.tok() != &Tok::Duration {
                return Err(self.unexpected("a duration after offset, e.g. offset 1h"));
            }
            self.bump();
        }
        Ok(())
    }

    /// `{label="value", ...}`.
    fn selector(&mut self) -> Result<(), LogqlError> {
        let at = self.at();
        self.expect("{", "")?;
        let mut selects = false;
        if !self.eat("}") {
            loop {
                let name = self.ident("a label name in the stream selector")?;
                selects |= !self.matcher(&name, true)?;
                if !self.eat(",") {
                    self.expect("}", "or a comma after the matcher")?;
                    break;
                }
            }
        }
        if !selects {
            self.later(at, "a stream selector needs at least one matcher that does not match the empty string, e.g. {app=\"x\"} or {app=~\".+\"}: {app=~\".*\"} or {app!=\"x\"} alone would read every stream");
        }
        Ok(())
    }

    /// The operator and quoted value after a label name; whether it matches the empty string.
    fn matcher(&mut self, name: &str, required: bool) -> Result<bool, LogqlError> {
        let op = match self.tok() {
            Tok::Sym(op @ ("=" | "!=" | "=~" | "!~")) => *op,
            _ if required => return Err(self.unexpected("=, !=, =~ or !~ after the label name")),
            _ => return Ok(true),
        };
        self.bump();
        let at = self.at();
        let value = self.string(&format!("a quoted value after {name}{op}"))?;
        regex::matcher_matches_empty(op, &value)
            .map_err(|e| self.fail(at, format!("{name}{op}: {e}")))
    }

    /// Stages after a selector: line filters and `| ...`, up to `| unwrap`. Whether any.
    fn pipeline(&mut self) -> Result<bool, LogqlError> {
        let mut any = false;
        loop {
            match self.tok() {
                Tok::Sym("|=" | "!=" | "|~" | "!~" | "|>" | "!>") => {
                    self.bump();
                    loop {
                        self.line_filter_value()?;
                        if !self.eat("or") {
                            break;
                        }
                    }
                }
                Tok::Sym("|") if self.peek(1) != &Tok::Sym("unwrap") => {
                    self.bump();
                    self.stage()?;
                }
                _ => return Ok(any),
            }
            any = true;
        }
    }

    fn line_filter_value(&mut self) -> Result<(), LogqlError> {
        if self.eat("ip") {
            self.expect("(", "after ip")?;
            self.string("an address or range as a string, e.g. ip(\"10.0.0.0/8\")")?;
            return self.expect(")", "after ip's argument");
        }
        self.string("a quoted string to filter lines with")?;
        Ok(())
    }

    fn stage(&mut self) -> Result<(), LogqlError> {
        let at = self.at();
        match self.bump() {
            Tok::Sym("json") => self.extractions(),
            Tok::Sym("logfmt") => {
                while self.tok() == &Tok::Flag {
                    self.bump();
                }
                self.extractions()
            }
            Tok::Sym("unpack" | "decolorize") => Ok(()),
            Tok::Sym("line_format") => self.string("a template string after line_format").map(drop),
            Tok::Sym(p @ ("regexp" | "pattern")) => {
                let at = self.at();
                let value = self.string(&format!("a quoted {p} after {p}"))?;
                let value = std::str::from_utf8(&value).map_err(|_| self.fail(at, "not UTF-8"))?;
                let checked = if p == "pattern" {
                    regex::check_pattern(value)
                } else {
                    regex::parse(value, regex::Flavor::Go).and_then(|re| match re.groups {
                        0 => Err("the regexp parser needs a named group, e.g. (?P<status>\\d+)".into()),
                        _ if re.names.is_empty() => Err("the regexp parser needs its groups named, e.g. (?P<status>\\d+)".into()),
                        _ => match re.names.iter().enumerate().find(|(i, n)| re.names[..*i].contains(n)) {
                            Some((_, n)) => Err(format!("the group name {n} appears twice")),
                            None => Ok(()),
                        },
                    })
                };
                checked.map_err(|e| self.fail(at, format!("| {p}: {e}")))
            }
            Tok::Sym("label_format") => loop {
                self.ident("a label name after label_format")?;
                self.expect("=", "after the label name (label_format new=old or new=\"{{.template}}\")")?;
                if !matches!(self.tok(), Tok::Ident(_) | Tok::Str(_)) {
                    return Err(self.unexpected("a label name or a template string"));
                }
                self.bump();
                if !self.eat(",") {
                    return Ok(());
                }
            },
            Tok::Sym("drop" | "keep") => loop {
                let name = self.ident("a label name")?;
                self.matcher(&name, false)?;
                if !self.eat(",") {
                    return Ok(());
                }
            },
            Tok::Ident(_) | Tok::Sym("(") => {
                self.pos -= 1;
                self.label_filter()
            }
            other => Err(self.fail(at, format!("expected a stage after |: a parser (json, logfmt, regexp, pattern, unpack), a label filter (level=\"error\"), line_format, label_format, drop, keep or decolorize; found {}", describe(&other)))),
        }
    }

    /// `| json a, b="c.d"`: the labels to extract, if any.
    fn extractions(&mut self) -> Result<(), LogqlError> {
        if !matches!(self.tok(), Tok::Ident(_)) {
            return Ok(());
        }
        loop {
            self.ident("a label name to extract")?;
            if self.eat("=") {
                self.string("the expression to extract, as a string")?;
            }
            if !self.eat(",") {
                return Ok(());
            }
        }
    }

    /// Label filters joined by `and`, `or`, `,` or nothing.
    fn label_filter(&mut self) -> Result<(), LogqlError> {
        loop {
            self.label_filter_one()?;
            let joined = self.eat("and") || self.eat("or") || self.eat(",");
            if !joined && !matches!(self.tok(), Tok::Ident(_) | Tok::Sym("(")) {
                return Ok(());
            }
        }
    }

    fn label_filter_one(&mut self) -> Result<(), LogqlError> {
        if self.eat("(") {
            self.label_filter()?;
            return self.expect(")", "to close the ( in the label filter");
        }
        let name = self.ident("a label filter, e.g. level=\"error\" or status >= 500")?;
        let op = match self.tok() {
            Tok::Sym(op @ ("=" | "!=" | "=~" | "!~" | ">" | ">=" | "<" | "<=" | "==")) => *op,
            _ => {
                return Err(self.unexpected(&format!(
                    "a comparison after {name}, e.g. {name}=\"x\" or {name} > 10"
                )))
            }
        };
        let regex = op == "=~" || op == "!~";
        match (self.peek(1).clone(), self.peek(2)) {
            (Tok::Str(_), _) if ["=", "!=", "=~", "!~"].contains(&op) => {
                self.matcher(&name, true)?;
            }
            (Tok::Sym("ip"), _) if op == "=" || op == "!=" => {
                self.bump();
                self.bump();
                self.expect("(", "after ip")?;
                self.string("an address or range as a string")?;
                self.expect(")", "after ip's argument")?;
            }
            (Tok::Duration | Tok::Bytes | Tok::Number(_), _) if !regex => {
                self.bump();
                self.bump();
            }
            (Tok::Sym("+" | "-"), Tok::Number(_)) if !regex => {
                self.bump();
                self.bump();
                self.bump();
            }
            _ => {
                self.bump();
                return Err(self.unexpected(&format!("a value after {name} {op}: a quoted string, a number, a duration (5s) or a size (10MB)")));
            }
        }
        Ok(())
    }

    /// `| unwrap label` or `| unwrap duration(label)`, then label filters. Whether there is one.
    fn unwrap(&mut self) -> Result<bool, LogqlError> {
        if !(self.is("|") && self.peek(1) == &Tok::Sym("unwrap")) {
            return Ok(false);
        }
        self.bump();
        self.bump();
        match self.tok() {
            Tok::Ident(_) => {
                self.bump();
            }
            Tok::Sym("bytes" | "duration" | "duration_seconds") => {
                self.bump();
                self.expect("(", "after the conversion")?;
                self.ident("the label to convert")?;
                self.expect(")", "after the label")?;
            }
            _ => {
                return Err(self.unexpected(
                    "the label to unwrap, e.g. | unwrap latency or | unwrap duration(latency)",
                ))
            }
        }
        while self.eat("|") {
            self.label_filter()?;
        }
        Ok(true)
    }
}
