//! LogQL's tokens, cut as Loki cuts them: its lexer (`pkg/logql/syntax/lex.go`) over Go's
//! `text/scanner`. The quirks are Loki's and are kept, because a rule is loaded only if
//! Loki reads it: a function name is a keyword only when `(` (or `by (`/`without (`)
//! follows, so `rate` can name a label; `5m` after a number is a duration, `5KB` a byte
//! size; `-0` is a duration; a character Loki does not know is a label name.

use super::duration::parse_prometheus_duration;

use super::error::{error_at, LogqlError};

/// The range aggregations: `rate({app="x"}[5m])`.
pub(super) const RANGE_OPS: &str = "count_over_time rate rate_counter bytes_over_time bytes_rate \
    avg_over_time sum_over_time min_over_time max_over_time stdvar_over_time stddev_over_time \
    quantile_over_time first_over_time last_over_time absent_over_time";

/// The vector aggregations: `sum by (x) (...)`.
pub(super) const VECTOR_OPS: &str =
    "sum avg count max min stddev stdvar bottomk topk sort sort_desc approx_topk";

/// Names that are keywords only when called (the rest of Loki's function tokens).
const CALLED: &str = "vector label_replace bytes duration duration_seconds ip";

/// Names that are always keywords, whatever follows.
const KEYWORDS: &str = "by without bool offset on ignoring group_left group_right or and \
    unless json regexp logfmt unpack pattern label_format line_format decolorize drop keep \
    variants of unwrap";

const OPS2: &str = "!= =~ !~ !> |= |~ |> == >= <=";
const OPS1: &str = ", . { } = | ( ) ] + - * / % ^ > <";

/// `word` as it is spelled in the space-separated `list`, if it is there.
pub(super) fn find_word(list: &'static str, word: &str) -> Option<&'static str> {
    list.split_whitespace().find(|w| *w == word)
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// A name: a label, or a function name that is not called.
    Ident(String),
    /// A keyword or an operator, in lower case.
    Sym(&'static str),
    /// A string's value (bytes: `"\xff"` is not UTF-8).
    Str(Vec<u8>),
    /// A number, as written (`5`, `0.5`, `1e3`).
    Number(String),
    /// `5m`, `-1h30m`, `250ms`: only label filters and `offset` take one.
    Duration,
    /// `5KB`, `1MiB`: only label filters take one.
    Bytes,
    /// `[5m]`, checked.
    Range,
    /// `--strict`, `--keep-empty`.
    Flag,
    Eof,
}

#[derive(Clone, Debug)]
pub(super) struct Token {
    pub tok: Tok,
    /// The character offset where it starts.
    pub at: usize,
}

/// Cuts `text` into tokens; the last is `Eof`.
pub(super) fn lex(text: &str) -> Result<Vec<Token>, LogqlError> {
    let c: Vec<char> = text.chars().collect();
    // Go's scanner skips a byte-order mark at the start.
    let i = usize::from(c.first() == Some(&'\u{FEFF}'));
    let mut l = Lexer {
        text,
        c,
        i,
        glued: i,
    };
    if let Some(at) = l.c.iter().position(|&c| c == '\0') {
        return Err(error_at(
            text,
            at,
            "a NUL character cannot be in an expression",
        ));
    }
    let mut out = Vec::new();
    loop {
        l.glued = l.i;
        l.skip_space()?;
        let at = l.i;
        let tok = l.token()?;
        let eof = tok == Tok::Eof;
        out.push(Token { tok, at });
        if eof {
            return Ok(out);
        }
    }
}

struct Lexer<'a> {
    text: &'a str,
    c: Vec<char>,
    i: usize,
    /// Where the last token ended: a number that starts there, with no blank between,
    /// may be binary (`0b1`); after a blank Go's scanner reads `0b` as a decimal 0 with no
    /// digits (it peeks at a stale character).
    glued: usize,
}

impl Lexer<'_> {
    fn get(&self, i: usize) -> Option<char> {
        self.c.get(i).copied()
    }

    fn err(&self, at: usize, message: impl Into<String>) -> LogqlError {
        error_at(self.text, at, message)
    }

    /// Blanks (Go's four) and the comments: `# ...`, `// ...`, `/* ... */`.
    fn skip_space(&mut self) -> Result<(), LogqlError> {
        loop {
            match (self.get(self.i), self.get(self.i + 1)) {
                (Some(' ' | '\t' | '\n' | '\r'), _) => self.i += 1,
                (Some('#'), _) | (Some('/'), Some('/')) => {
                    while self.get(self.i).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                (Some('/'), Some('*')) => {
                    let start = self.i;
                    self.i += 2;
                    loop {
                        match (self.get(self.i), self.get(self.i + 1)) {
                            (None, _) => {
                                return Err(
                                    self.err(start, "this /* comment is never closed with */")
                                )
                            }
                            (Some('*'), Some('/')) => break,
                            _ => self.i += 1,
                        }
                    }
                    self.i += 2;
                }
                _ => return Ok(()),
            }
        }
    }

    fn token(&mut self) -> Result<Tok, LogqlError> {
        let start = self.i;
        let Some(c) = self.get(start) else {
            return Ok(Tok::Eof);
        };
        let digit_next = self.get(start + 1).is_some_and(|d| d.is_ascii_digit());
        Ok(match c {
            c if c == '_' || c.is_alphabetic() => {
                self.i += 1;
                while self
                    .get(self.i)
                    .is_some_and(|c| c == '_' || c.is_alphanumeric())
                {
                    self.i += 1;
                }
                self.word(start)
            }
            c if c.is_ascii_digit() || (c == '.' && digit_next) => self.number(start)?,
            '"' => Tok::Str(self.string()?),
            '`' => {
                self.i += 1;
                while self.get(self.i).is_some_and(|c| c != '`') {
                    self.i += 1;
                }
                if self.get(self.i).is_none() {
                    return Err(self.err(start, "the string opened here is never closed with `"));
                }
                self.i += 1;
                let s: String = self.c[start + 1..self.i - 1].iter().collect();
                Tok::Str(s.into_bytes())
            }
            // Go reads 'x' as a character; Loki then takes it for a name.
            '\'' => {
                if self.quoted('\'')? != 1 {
                    return Err(self.err(
                        start,
                        "use double quotes for a string: 'x' is one character",
                    ));
                }
                Tok::Ident(self.c[start..self.i].iter().collect())
            }
            '-' => self.minus(start),
            '[' => {
                let close = (start..self.c.len()).find(|&i| self.c[i] == ']');
                let Some(close) = close else {
                    return Err(self.err(start, "this [ is never closed with ]"));
                };
                let inside: String = self.c[start + 1..close].iter().collect();
                parse_prometheus_duration(&inside)
                    .map_err(|e| self.err(start, format!("the range [{inside}]: {e}")))?;
                self.i = close + 1;
                Tok::Range
            }
            _ => {
                let two: String = self.c[start..(start + 2).min(self.c.len())]
                    .iter()
                    .collect();
                if let Some(op) = find_word(OPS2, &two) {
                    self.i += 2;
                    Tok::Sym(op)
                } else {
                    self.i += 1;
                    match find_word(OPS1, &c.to_string()) {
                        Some(op) => Tok::Sym(op),
                        None => Tok::Ident(c.to_string()),
                    }
                }
            }
        })
    }

    /// A name, a keyword, or a function name that is called.
    fn word(&self, start: usize) -> Tok {
        let text: String = self.c[start..self.i].iter().collect();
        let lower = text.to_lowercase();
        let called = |names| find_word(names, &lower);
        if let Some(f) = called(RANGE_OPS)
            .or_else(|| called(VECTOR_OPS))
            .or_else(|| called(CALLED))
        {
            return if self.is_call() {
                Tok::Sym(f)
            } else {
                Tok::Ident(text)
            };
        }
        match called(KEYWORDS) {
            Some(k) => Tok::Sym(k),
            None => Tok::Ident(text),
        }
    }

    /// Whether `(`, or `by (`/`without (`, follows (blanks between).
    fn is_call(&self) -> bool {
        let blank = |mut i: usize| {
            while self.get(i).is_some_and(char::is_whitespace) {
                i += 1;
            }
            i
        };
        let i = blank(self.i);
        let lower = |n: usize| -> String {
            self.c[i..(i + n).min(self.c.len())]
                .iter()
                .flat_map(|c| c.to_lowercase())
                .collect()
        };
        if self.get(i) == Some('(') {
            return true;
        }
        let after = if lower(2) == "by" {
            i + 2
        } else if lower(7) == "without" {
            i + 7
        } else {
            return false;
        };
        self.get(blank(after)) == Some('(')
    }

    /// A number, as Go's scanner reads it, then a duration or byte size if one goes on.
    fn number(&mut self, start: usize) -> Result<Tok, LogqlError> {
        self.go_number(start)?;
        let text: String = self.c[start..self.i].iter().collect();
        if self.unit_after(&text, is_duration_char, parse_go_duration) {
            return Ok(Tok::Duration);
        }
        if self.unit_after(&text, is_bytes_char, |s| parse_bytes(s).is_some()) {
            return Ok(Tok::Bytes);
        }
        Ok(Tok::Number(text))
    }

    /// Takes the characters after `head` that `part` accepts (up to a blank) if `head`
    /// with them makes what `valid` accepts.
    fn unit_after(
        &mut self,
        head: &str,
        part: fn(char) -> bool,
        valid: impl Fn(&str) -> bool,
    ) -> bool {
        let mut end = self.i;
        while self
            .get(end)
            .is_some_and(|c| !c.is_whitespace() && (c.is_numeric() || c == '.' || part(c)))
        {
            end += 1;
            // Loki would try longer runs, each number again (quadratic); no duration or
            // size a rule writes is this long.
            if end - self.i > 64 {
                return false;
            }
        }
        let whole: String = head
            .chars()
            .chain(self.c[self.i..end].iter().copied())
            .collect();
        if end == self.i || !valid(&whole) {
            return false;
        }
        self.i = end;
        true
    }

    /// Go's `scanNumber`: decimal, `0x`, `0o`, `0b` and old octal, `_` between digits,
    /// fraction and exponent; the same mistakes refused.
    fn go_number(&mut self, start: usize) -> Result<(), LogqlError> {
        let fail = |s: &Self, what: &str| {
            Err(s.err(start, format!("this number is not one Loki reads: {what}")))
        };
        let lower = |c: Option<char>| c.map(|c| c.to_ascii_lowercase());
        let (mut base, mut prefix, mut digits, mut bad) = (10, ' ', false, None);
        let mut float = false;
        if self.get(self.i) == Some('0') {
            self.i += 1;
            match lower(self.get(self.i)) {
                Some('x') => (base, prefix) = (16, 'x'),
                Some('o') => (base, prefix) = (8, 'o'),
                Some('b') if start == self.glued => (base, prefix) = (2, 'b'),
                Some('b') => {}
                _ => (base, prefix, digits) = (8, '0', true),
            }
            if prefix != '0' && prefix != ' ' {
                self.i += 1;
            }
        }
        let run = |s: &mut Self, base: u32, bad: &mut Option<char>| {
            let mut any = false;
            while let Some(c) = s.get(s.i).filter(|&c| c == '_' || c.is_digit(base.max(10))) {
                if c != '_' {
                    any = true;
                    if !c.is_digit(base) && bad.is_none() {
                        *bad = Some(c);
                    }
                }
                s.i += 1;
            }
            any
        };
        digits |= run(self, base, &mut bad);
        if self.get(self.i) == Some('.') {
            self.i += 1;
            float = true;
            if prefix == 'o' || prefix == 'b' {
                return fail(self, "a radix point in a binary or octal literal");
            }
            digits |= run(self, base, &mut bad);
        }
        if !digits {
            return fail(self, "it has no digits");
        }
        if let Some(e @ ('e' | 'p')) = lower(self.get(self.i)) {
            if (e == 'e' && prefix != ' ' && prefix != '0') || (e == 'p' && prefix != 'x') {
                return fail(
                    self,
                    "an exponent its base does not take (a byte size is written 5PiB, not 5PB)",
                );
            }
            self.i += 1;
            float = true;
            if matches!(self.get(self.i), Some('+' | '-')) {
                self.i += 1;
            }
            if !run(self, 10, &mut None) {
                return fail(self, "the exponent has no digits");
            }
        } else if prefix == 'x' && float {
            return fail(self, "a hexadecimal fraction needs a p exponent");
        }
        if let Some(c) = bad.filter(|_| !float) {
            return fail(self, &format!("the digit {c} in an octal literal"));
        }
        let text: Vec<char> = self.c[start..self.i].to_vec();
        let after_prefix = if matches!(prefix, 'x' | 'o' | 'b') {
            2
        } else {
            0
        };
        let sep_ok = text.iter().enumerate().all(|(k, &c)| {
            c != '_' || {
                let radix = if prefix == 'x' { 16 } else { 10 };
                let digit = |c: Option<&char>| c.is_some_and(|c| c.is_digit(radix));
                (k == after_prefix || digit(text.get(k.wrapping_sub(1)))) && digit(text.get(k + 1))
            }
        });
        if !sep_ok {
            return fail(self, "_ must separate digits");
        }
        Ok(())
    }

    /// After `-`: a parser flag (`--strict`), a negative duration, or minus.
    fn minus(&mut self, start: usize) -> Tok {
        self.i += 1;
        if self.get(self.i) == Some('-') {
            let mut end = self.i;
            while self.get(end).is_some_and(|c| c.is_alphabetic() || c == '-') {
                end += 1;
            }
            let flag: String = self.c[start..end].iter().collect();
            if flag == "--strict" || flag == "--keep-empty" {
                self.i = end;
                return Tok::Flag;
            }
        }
        if self.unit_after("-", is_duration_char, parse_go_duration) {
            return Tok::Duration;
        }
        Tok::Sym("-")
    }

    /// Moves past a string quoted with `q` (Go's escapes checked), from its opening quote;
    /// how many characters it holds.
    fn quoted(&mut self, q: char) -> Result<usize, LogqlError> {
        let start = self.i;
        self.i += 1;
        let mut n = 0;
        loop {
            n += 1;
            match self.get(self.i) {
                None | Some('\n') => {
                    return Err(self.err(start, format!("the string opened here is never closed with {q} (a string in double quotes cannot hold a line break; use \\n or `...`)")))
                }
                Some(c) if c == q => {
                    self.i += 1;
                    return Ok(n - 1);
                }
                Some('\\') => {
                    let at = self.i;
                    let c = self.get(at + 1);
                    let hex = |n: usize| (at + 2..at + 2 + n).all(|k| self.get(k).is_some_and(|c| c.is_ascii_hexdigit()));
                    let (len, value) = match c {
                        Some('a' | 'b' | 'f' | 'n' | 'r' | 't' | 'v' | '\\') => (2, 0),
                        Some(c) if c == q => (2, 0),
                        Some('0'..='7') if (at + 1..at + 4).all(|k| matches!(self.get(k), Some('0'..='7'))) => {
                            (4, u32::from_str_radix(&self.c[at + 1..at + 4].iter().collect::<String>(), 8).unwrap_or(0))
                        }
                        Some('x') if hex(2) => (4, 0),
                        Some('u') if hex(4) => (6, self.hex_value(at + 2, 4)),
                        Some('U') if hex(8) => (10, self.hex_value(at + 2, 8)),
                        _ => return Err(self.err(at, "this escape is not one Loki reads: use \\\\ for a backslash (a regex's \\d is written \"\\\\d\" or `\\d`)")),
                    };
                    if q == '"' && ((matches!(c, Some('0'..='7')) && value > 255) || value > 0x10FFFF) {
                        return Err(self.err(at, "this escape is out of range"));
                    }
                    self.i += len;
                }
                Some(_) => self.i += 1,
            }
        }
    }

    fn hex_value(&self, from: usize, n: usize) -> u32 {
        let s: String = self.c[from..from + n].iter().collect();
        u32::from_str_radix(&s, 16).unwrap_or(u32::MAX)
    }

    /// A double-quoted string's value.
    fn string(&mut self) -> Result<Vec<u8>, LogqlError> {
        let start = self.i;
        self.quoted('"')?;
        let body = &self.c[start + 1..self.i - 1];
        let mut out = Vec::new();
        let mut k = 0;
        while k < body.len() {
            let c = body[k];
            if c != '\\' {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                k += 1;
                continue;
            }
            let digits = |from: usize, n: usize, radix: u32| {
                let s: String = body[from..from + n].iter().collect();
                u32::from_str_radix(&s, radix).unwrap_or(0)
            };
            let (byte, len) = match body[k + 1] {
                'a' => (Some(7), 2),
                'b' => (Some(8), 2),
                'f' => (Some(12), 2),
                'n' => (Some(10), 2),
                'r' => (Some(13), 2),
                't' => (Some(9), 2),
                'v' => (Some(11), 2),
                'x' => (Some(digits(k + 2, 2, 16)), 4),
                '0'..='7' => (Some(digits(k + 1, 3, 8)), 4),
                'u' => (None, 6),
                'U' => (None, 10),
                other => (Some(other as u32), 2),
            };
            match byte {
                Some(b) => out.push(b as u8),
                None => {
                    let c = char::from_u32(digits(k + 2, len - 2, 16)).unwrap_or('\u{FFFD}');
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
            k += len;
        }
        Ok(out)
    }
}

fn is_duration_char(c: char) -> bool {
    "nuµmshdwy".contains(c)
}

fn is_bytes_char(c: char) -> bool {
    "BikKMGTP".contains(c)
}

/// What Loki takes for a duration after a number: Prometheus's form (`1h30m`, `2d`), or
/// Go's `time.ParseDuration` (`1.5h`, `-5m`, `300us`).
pub(super) fn parse_go_duration(s: &str) -> bool {
    if parse_prometheus_duration(s).is_ok() {
        return true;
    }
    const MAX: u128 = 1 << 63;
    let b = s.as_bytes();
    let (neg, mut i) = match b.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    if &s[i..] == "0" {
        return true;
    }
    if i == b.len() {
        return false;
    }
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let mut total: u128 = 0;
    while i < b.len() {
        let (mut v, mut f, mut scale, start) = (0u128, 0u128, 1f64, i);
        while digit(i) {
            v = v * 10 + u128::from(b[i] - b'0');
            if v > MAX {
                return false;
            }
            i += 1;
        }
        let pre = i > start;
        let mut post = false;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while digit(i) {
                if f < MAX / 10 {
                    f = f * 10 + u128::from(b[i] - b'0');
                    scale *= 10.0;
                }
                i += 1;
            }
            post = i > start;
        }
        if !pre && !post {
            return false;
        }
        let start = i;
        while i < b.len() && !(digit(i) || b[i] == b'.') {
            i += 1;
        }
        let unit: u128 = match &s[start..i] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return false,
        };
        if v > MAX / unit {
            return false;
        }
        v = v * unit + (f as f64 * (unit as f64 / scale)) as u128;
        total += v;
        if v > MAX || total > MAX {
            return false;
        }
    }
    neg || total < MAX
}

/// A byte size as Loki reads one (go-humanize's `ParseBytes`): `5KB`, `1.5MiB`, `10B`.
fn parse_bytes(s: &str) -> Option<u64> {
    let num_end = s
        .find(|c: char| !(c.is_numeric() || c == '.' || c == ','))
        .unwrap_or(s.len());
    let value = go_float(&s[..num_end].replace(',', ""))?;
    // "", "b"; or k, m, g, t, p, e, then "", "b" (powers of 1000) or "i", "ib" (of 1024).
    let unit = s[num_end..].trim().to_lowercase();
    let (power, rest) = match unit.as_str() {
        "" | "b" => (0, "b"),
        _ => ("kmgtpe".find(unit.chars().next()?)? + 1, &unit[1..]),
    };
    let base: f64 = match rest {
        "" | "b" => 1000.0,
        "i" | "ib" => 1024.0,
        _ => return None,
    };
    let size = value * base.powi(power as i32);
    (size < 18_446_744_073_709_551_616.0).then_some(size as u64)
}

/// A number as Go's `strconv.ParseFloat` reads it; `None` where Go refuses it (out of
/// range included).
pub(super) fn go_float(s: &str) -> Option<f64> {
    let s = s.replace('_', "");
    let lower = s.to_ascii_lowercase();
    let value = if let Some(hex) = lower.strip_prefix("0x") {
        let (mantissa, exp) = hex.split_once('p')?;
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let mut v = 0f64;
        for c in int.chars().chain(frac.chars()) {
            v = v * 16.0 + f64::from(c.to_digit(16)?);
        }
        let exp: i32 = exp.parse().ok()?;
        v * 2f64.powi(exp - 4 * frac.len() as i32)
    } else if lower.starts_with("0o") || lower.starts_with("0b") || lower.starts_with('+') {
        return None;
    } else {
        lower.parse::<f64>().ok()?
    };
    value.is_finite().then_some(value)
}

/// A count as Go's `strconv.Atoi` reads it.
pub(super) fn go_int(s: &str) -> Option<i64> {
    s.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| s.parse().ok())?
}
