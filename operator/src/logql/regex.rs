//! The regular expressions and patterns Loki compiles while it parses a query: label
//! matchers (`=~`, `!~`), the `regexp` and `pattern` parsers, `label_replace`. Go's RE2
//! syntax (`regexp/syntax` with Perl flags) is checked here as Go checks it, and what a
//! stream selector needs to know: whether a matcher matches the empty string.

// Go's limits on a parsed regex (`regexp/syntax/parse.go`, the same in grafana/regexp).
/// The compiled program's instructions: 128 MiB of 40-byte instructions.
const MAX_SIZE: u64 = (128 << 20) / 40;
/// The parse tree's height.
const MAX_HEIGHT: usize = 1000;
/// Groups of any kind open at once (ours: Go has no such limit for non-capturing ones).
const MAX_GROUP_DEPTH: usize = 1100;
/// The runes of every literal and class: 128 MiB of 4-byte runes.
const MAX_RUNES: u64 = (128 << 20) / 4;
/// The most runes one `\p{..}` or `\P{..}` puts in a class, negated and case-folded
/// included; and one Perl or POSIX class (`\w`, `[:^alpha:]`); and the runes case folding
/// maps elsewhere. All three as Go computes them: `hack/regex-parity` writes them into
/// `regex_parity.jsonl`, and a test checks these against it.
const UNICODE_CLASS_RUNES: u64 = 1424;
const PERL_CLASS_RUNES: u64 = 14;
const FOLD_RUNES: u64 = 2878;

/// What Go would build: enough to know what matches the empty string, how repeats nest,
/// and the size and height Go gives its parse tree.
enum Node {
    /// A character, a class or `.`.
    Char,
    /// `^`, `$`, `\A`, `\z`, `\B` (true: they hold on the empty string) and `\b` (false).
    Assert(bool),
    Cat(Vec<Node>),
    Alt(Vec<Node>),
    /// `*`, `+`, `?` and `{min,max}` (`braces`); max -1 for none.
    Rep {
        sub: Box<Node>,
        min: i32,
        max: i32,
        braces: bool,
    },
    /// A capturing group.
    Group(Box<Node>),
}

impl Node {
    fn matches_empty(&self) -> bool {
        match self {
            Node::Char => false,
            Node::Assert(empty) => *empty,
            Node::Cat(v) => v.iter().all(Node::matches_empty),
            Node::Alt(v) => v.iter().any(Node::matches_empty),
            Node::Rep { sub, min, .. } => *min == 0 || sub.matches_empty(),
            Node::Group(sub) => sub.matches_empty(),
        }
    }

    /// Go's `repeatIsValid`: nested `{n}` repeats make at most `n` copies.
    fn repeats_fit(&self, mut n: i32) -> bool {
        match self {
            Node::Rep {
                sub,
                min,
                max,
                braces,
            } => {
                if *braces {
                    let m = if *max < 0 { *min } else { *max };
                    if *max == 0 {
                        return true;
                    }
                    if m > n {
                        return false;
                    }
                    if m > 0 {
                        n /= m;
                    }
                }
                sub.repeats_fit(n)
            }
            Node::Cat(v) | Node::Alt(v) => v.iter().all(|s| s.repeats_fit(n)),
            Node::Group(sub) => sub.repeats_fit(n),
            _ => true,
        }
    }

    /// Go's `calcSize`: the instructions the compiled program has. Go factors common
    /// prefixes out of alternations first, which only makes its size smaller: this is
    /// never below Go's.
    fn size(&self) -> u64 {
        let size = match self {
            Node::Char | Node::Assert(_) => 1,
            Node::Cat(v) => v.iter().map(Node::size).fold(0, u64::saturating_add),
            Node::Alt(v) => v
                .iter()
                .map(Node::size)
                .fold(v.len().saturating_sub(1) as u64, u64::saturating_add),
            Node::Group(sub) => sub.size().saturating_add(2),
            Node::Rep {
                sub,
                min,
                max,
                braces,
            } => {
                let (sub, min, max) = (sub.size(), u64::from(min.unsigned_abs()), *max);
                match (braces, max) {
                    (false, -1) if min == 0 => sub.saturating_add(2),
                    (false, _) => sub.saturating_add(1),
                    (true, -1) if min == 0 => sub.saturating_add(2),
                    (true, -1) => sub.saturating_mul(min).saturating_add(1),
                    (true, max) => {
                        let max = u64::from(max.unsigned_abs());
                        sub.saturating_mul(max).saturating_add(max - min)
                    }
                }
            }
        };
        size.max(1)
    }

    /// Go's `calcHeight`, where its parser merges literals and flattens a concatenation
    /// in a concatenation. Where Go factors an alternation whose branches start alike,
    /// each character of the shared start can add up to two levels: counted here.
    fn height(&self) -> usize {
        match self {
            Node::Char | Node::Assert(_) => 1,
            Node::Cat(v) if v.iter().all(|n| matches!(n, Node::Char)) => 1,
            Node::Cat(v) | Node::Alt(v) if v.len() == 1 => v[0].height(),
            Node::Cat(v) => 1 + v.iter().map(Node::height_in_cat).max().unwrap_or(0),
            Node::Alt(v) => {
                let leads: Vec<usize> = v.iter().map(Node::leading_chars).collect();
                let factored = match leads.iter().filter(|&&n| n > 0).count() {
                    0 | 1 => 0,
                    _ => 2 * leads.iter().max().copied().unwrap_or(0),
                };
                1 + factored + v.iter().map(Node::height).max().unwrap_or(0)
            }
            Node::Rep { sub, .. } | Node::Group(sub) => 1 + sub.height(),
        }
    }

    /// The height of a part of a concatenation: a concatenation in it is flattened.
    fn height_in_cat(&self) -> usize {
        match self {
            Node::Cat(v) if v.len() > 1 => v.iter().map(Node::height_in_cat).max().unwrap_or(0),
            _ => self.height(),
        }
    }

    /// How many characters (or repeated characters) a branch starts with.
    fn leading_chars(&self) -> usize {
        match self {
            Node::Char => 1,
            Node::Rep { sub, .. } if matches!(**sub, Node::Char) => 1,
            Node::Cat(v) => {
                let mut n = 0;
                for part in v {
                    match part.leading_chars() {
                        0 => break,
                        k => n += k,
                    }
                }
                n
            }
            _ => 0,
        }
    }
}

/// One open group: the alternatives so far and the sequence being read, whether it
/// captures, and whether case folding (`(?i)`) is on in it.
#[derive(Default)]
struct Frame {
    alts: Vec<Node>,
    seq: Vec<Node>,
    capture: bool,
    fold: bool,
}

impl Frame {
    fn close(mut self) -> Node {
        let node = if self.alts.is_empty() {
            Node::Cat(self.seq)
        } else {
            self.alts.push(Node::Cat(self.seq));
            Node::Alt(self.alts)
        };
        match self.capture {
            true => Node::Group(Box::new(node)),
            false => node,
        }
    }
}

/// A regex Go compiles.
pub(super) struct Regex {
    pub matches_empty: bool,
    /// Capturing groups, and the names of the named ones.
    pub groups: usize,
    pub names: Vec<String>,
}

/// Which regexp package compiles it: they differ in the Unicode class names they know.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    /// `github.com/grafana/regexp/syntax`, which Prometheus parses label matchers with:
    /// exact names only.
    Grafana,
    /// Go's own `regexp/syntax` (the `regexp` parser, `label_replace`): names in any case,
    /// `_`, `-` and spaces ignored, and the long aliases (`\p{Letter}`).
    Go,
}

/// Parses `re` as Go's `regexp.Compile` does; the error says what Go would refuse.
/// Prometheus's matchers and Loki's `label_replace` wrap the user's regex in `^(?s:` ... `)$`
/// as text before they compile it: `parse` is given that text.
pub(super) fn parse(re: &str, flavor: Flavor) -> Result<Regex, String> {
    let mut p = Parser {
        s: re.chars().collect(),
        flavor,
        frames: vec![Frame::default()],
        i: 0,
        last_repeat: false,
        groups: 0,
        names: Vec::new(),
        runes: 0,
    };
    let fail = |what: &str| format!("{what} in the regex {}", quoted(re));
    let root = p.run().map_err(|e| fail(&e))?;
    if root.size() > MAX_SIZE || p.runes > MAX_RUNES {
        return Err(fail(
            "an expression too large for Go's regexp (its compiled program would pass 128 MiB; fewer or smaller repeats and classes)",
        ));
    }
    if root.height() > MAX_HEIGHT {
        return Err(fail(&format!(
            "an expression nested too deeply for Go's regexp (more than {MAX_HEIGHT} levels of groups, repeats and alternations)"
        )));
    }
    Ok(Regex {
        matches_empty: root.matches_empty(),
        groups: p.groups,
        names: p.names,
    })
}

/// A regex in a message: its first 100 characters when it is longer.
fn quoted(re: &str) -> String {
    match re.char_indices().nth(100) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &re[..cut], re.len()),
        None => format!("{re:?}"),
    }
}

/// Go's parser, as far as what it refuses: one pass over the characters with a stack of
/// open groups.
struct Parser {
    s: Vec<char>,
    flavor: Flavor,
    frames: Vec<Frame>,
    i: usize,
    last_repeat: bool,
    groups: usize,
    names: Vec<String>,
    /// At least the runes Go's parser counts (`numRunes`).
    runes: u64,
}

impl Parser {
    fn top(&mut self) -> &mut Frame {
        let top = self.frames.len() - 1;
        &mut self.frames[top]
    }

    fn push(&mut self, node: Node, runes: u64) {
        self.runes = self.runes.saturating_add(runes);
        self.top().seq.push(node);
    }

    fn run(&mut self) -> Result<Node, String> {
        while self.i < self.s.len() {
            // Go's height limit refuses about 1,000 nested capturing groups; this bound
            // on groups of any kind keeps the tree's recursion bounded.
            if self.frames.len() > MAX_GROUP_DEPTH {
                return Err(format!("groups nested more than {MAX_GROUP_DEPTH} deep"));
            }
            self.last_repeat = self.step()?;
        }
        if self.frames.len() != 1 {
            return Err("a ( that is never closed".into());
        }
        Ok(self
            .frames
            .pop()
            .map(Frame::close)
            .unwrap_or(Node::Cat(Vec::new())))
    }

    /// Reads one item at `i`; true if it was a repeat.
    fn step(&mut self) -> Result<bool, String> {
        match self.s[self.i] {
            '(' => self.open()?,
            '|' => {
                let top = self.top();
                let seq = std::mem::take(&mut top.seq);
                top.alts.push(Node::Cat(seq));
                self.i += 1;
            }
            ')' => {
                if self.frames.len() == 1 {
                    return Err("an unexpected )".into());
                }
                let node = self.frames.pop().map(Frame::close);
                self.top().seq.extend(node);
                self.i += 1;
            }
            '^' | '$' => {
                self.push(Node::Assert(true), 0);
                self.i += 1;
            }
            '[' => {
                let fold = self.top().fold;
                let (end, runes) = class(&self.s, self.i, self.flavor, fold)?;
                self.i = end;
                self.push(Node::Char, runes);
            }
            '.' => {
                self.push(Node::Char, 0);
                self.i += 1;
            }
            '*' | '+' | '?' | '{' => return self.repeat(),
            '\\' => self.backslash()?,
            _ => {
                self.push(Node::Char, 1);
                self.i += 1;
            }
        }
        Ok(false)
    }

    /// `(`, `(?P<name>`, `(?flags)` or `(?flags:` at `i`.
    fn open(&mut self) -> Result<(), String> {
        let fold = self.top().fold;
        if self.s.get(self.i + 1) != Some(&'?') {
            self.groups += 1;
            self.frames.push(Frame {
                capture: true,
                fold,
                ..Frame::default()
            });
            self.i += 1;
            return Ok(());
        }
        let group = perl_group(&self.s, self.i)?;
        self.i = group.end;
        let fold = group.fold.unwrap_or(fold);
        match group.opens {
            Some(name) => {
                self.groups += usize::from(name.is_some());
                self.names.extend(name.clone());
                self.frames.push(Frame {
                    capture: name.is_some(),
                    fold,
                    ..Frame::default()
                });
            }
            None => self.top().fold = fold,
        }
        Ok(())
    }

    /// `*`, `+`, `?` or `{n,m}` at `i` (a `{` that is not a repeat is a literal).
    fn repeat(&mut self) -> Result<bool, String> {
        let c = self.s[self.i];
        let (min, max, next) = match c {
            '*' => (0, -1, self.i + 1),
            '+' => (1, -1, self.i + 1),
            '?' => (0, 1, self.i + 1),
            _ => match braces(&self.s, self.i) {
                Some(r) => r,
                None => {
                    self.push(Node::Char, 1);
                    self.i += 1;
                    return Ok(false);
                }
            },
        };
        if !(0..=1000).contains(&min) || max > 1000 || (max >= 0 && min > max) {
            return Err("an invalid repeat count (at most 1000)".into());
        }
        self.i = next + usize::from(self.s.get(next) == Some(&'?'));
        if self.last_repeat {
            return Err("a repeat of a repeat (like a**)".into());
        }
        let Some(sub) = self.top().seq.pop() else {
            return Err("a repeat with nothing before it to repeat".into());
        };
        let node = Node::Rep {
            sub: Box::new(sub),
            min,
            max,
            braces: c == '{',
        };
        if c == '{' && (min >= 2 || max >= 2) && !node.repeats_fit(1000) {
            return Err("repeats nested past 1000 copies".into());
        }
        self.push(node, 0);
        Ok(true)
    }

    /// An escape at `i`: an assertion, `\Q...\E`, a class or one character.
    fn backslash(&mut self) -> Result<(), String> {
        let (s, i) = (&self.s, self.i);
        match s.get(i + 1) {
            Some('A' | 'z' | 'B') => {
                self.push(Node::Assert(true), 0);
                self.i += 2;
            }
            Some('b') => {
                self.push(Node::Assert(false), 0);
                self.i += 2;
            }
            Some('Q') => {
                let mut j = i + 2;
                while j < s.len() && !(s[j] == '\\' && s.get(j + 1) == Some(&'E')) {
                    j += 1;
                }
                for _ in i + 2..j {
                    self.push(Node::Char, 1);
                }
                self.i = (j + 2).min(self.s.len());
            }
            _ => {
                let (end, runes) = match class_escape(s, i, self.flavor) {
                    Some(class) => class?,
                    None => (escape(s, i)?.1, 1),
                };
                self.i = end;
                self.push(Node::Char, runes);
            }
        }
        Ok(())
    }
}

/// `(?P<name>`, `(?<name>`, `(?flags)` or `(?flags:` from its `(`.
struct PerlGroup {
    /// Where it ends.
    end: usize,
    /// `Some(name)` if it opens a group (`None` inside for an unnamed one); `None` for
    /// flags alone.
    opens: Option<Option<String>>,
    /// What it sets case folding to, if it names `i`.
    fold: Option<bool>,
}

fn perl_group(s: &[char], i: usize) -> Result<PerlGroup, String> {
    let rest = &s[i..];
    let named = if rest.len() > 4 && rest[2] == 'P' && rest[3] == '<' {
        Some(4)
    } else if rest.len() > 3 && rest[2] == '<' {
        Some(3)
    } else {
        None
    };
    if let Some(from) = named {
        let end = rest.iter().position(|&c| c == '>');
        let name: Option<String> = end.map(|e| rest[from..e].iter().collect());
        return match (end, name) {
            (Some(e), Some(n))
                if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                Ok(PerlGroup {
                    end: i + e + 1,
                    opens: Some(Some(n)),
                    fold: None,
                })
            }
            _ => Err("an invalid group name (letters, digits and _ only)".into()),
        };
    }
    let (mut j, mut negated, mut saw, mut fold) = (i + 2, false, false, None);
    while let Some(&c) = s.get(j) {
        j += 1;
        match c {
            'i' | 'm' | 's' | 'U' => {
                saw = true;
                if c == 'i' {
                    fold = Some(!negated);
                }
            }
            '-' if !negated => (negated, saw) = (true, false),
            ':' | ')' if !negated || saw => {
                return Ok(PerlGroup {
                    end: j,
                    opens: (c == ':').then_some(None),
                    fold,
                })
            }
            _ => break,
        }
    }
    Err("syntax Go's regexp does not support (lookaround and backreferences are not RE2)".into())
}

/// `{n}`, `{n,}`, `{n,m}` at `i`: min, max (-1: none) and where it ends; `None` if it is
/// not one (then `{` is a literal). A number too large is -1.
fn braces(s: &[char], i: usize) -> Option<(i32, i32, usize)> {
    let int = |mut j: usize| -> Option<(i32, usize)> {
        let start = j;
        while s.get(j).is_some_and(char::is_ascii_digit) {
            j += 1;
        }
        if j == start || (j - start > 1 && s[start] == '0') {
            return None;
        }
        let text: String = s[start..j].iter().collect();
        Some((
            text.parse().ok().filter(|&n| n < 100_000_000).unwrap_or(-1),
            j,
        ))
    };
    let (min, j) = int(i + 1)?;
    let (mut min, max, j) = match s.get(j)? {
        ',' if s.get(j + 1)? == &'}' => (min, -1, j + 1),
        ',' => {
            let (max, j) = int(j + 1)?;
            (min, max, j)
        }
        _ => (min, min, j),
    };
    if max == -1 && s.get(j - 1) != Some(&',') {
        min = -1;
    }
    (s.get(j)? == &'}').then_some((min, max, j + 1))
}

/// `\d`, `\s`, `\w` (and capitals) or `\p{Name}` at `i`: where it ends and the most
/// runes it adds, or `None` if the escape is another kind.
fn class_escape(s: &[char], i: usize, flavor: Flavor) -> Option<Result<(usize, u64), String>> {
    match s.get(i + 1)? {
        'd' | 'D' | 's' | 'S' | 'w' | 'W' => Some(Ok((i + 2, PERL_CLASS_RUNES))),
        'p' | 'P' => Some(unicode_class(s, i, flavor).map(|end| (end, UNICODE_CLASS_RUNES))),
        _ => None,
    }
}

fn unicode_class(s: &[char], i: usize, flavor: Flavor) -> Result<usize, String> {
    let (name, end): (String, usize) = match s.get(i + 2) {
        Some('{') => {
            let close = s[i..]
                .iter()
                .position(|&c| c == '}')
                .ok_or("a \\p{ that is never closed")?;
            (s[i + 3..i + close].iter().collect(), i + close + 1)
        }
        Some(&c) => (c.to_string(), i + 3),
        None => (String::new(), i + 2),
    };
    let bare = name.strip_prefix('^').unwrap_or(&name);
    let known = match flavor {
        Flavor::Grafana => ["Any", UNICODE_CATEGORIES, UNICODE_SCRIPTS]
            .iter()
            .any(|l| l.split(' ').any(|n| n == bare)),
        Flavor::Go => [
            "Any Assigned Ascii",
            UNICODE_CATEGORIES,
            UNICODE_SCRIPTS,
            UNICODE_ALIASES,
        ]
        .iter()
        .any(|l| l.split(' ').any(|n| canonical(n).eq(canonical(bare)))),
    };
    if known {
        Ok(end)
    } else {
        Err(format!("an unknown Unicode class \\p{{{name}}}"))
    }
}

/// Go's canonical spelling of a class name: no `_`, `-` or space, the first letter upper
/// case and the rest lower.
fn canonical(name: &str) -> impl Iterator<Item = char> + '_ {
    let kept = name.chars().filter(|c| !"_- ".contains(*c));
    kept.enumerate().map(|(k, c)| match k {
        0 => c.to_ascii_uppercase(),
        _ => c.to_ascii_lowercase(),
    })
}

/// A single-character escape at `i` (the backslash): its value and where it ends.
fn escape(s: &[char], i: usize) -> Result<(u32, usize), String> {
    let c = *s.get(i + 1).ok_or("a \\ at the end")?;
    let octal = |j: usize| s.get(j).is_some_and(|c| ('0'..='7').contains(c));
    let bad = || Err(format!("the escape \\{c}, which Go's regexp does not know"));
    match c {
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok((c as u32, i + 2)),
        '1'..='7' if !octal(i + 2) => bad(),
        '0'..='7' => {
            let mut j = i + 2;
            let mut v = c as u32 - '0' as u32;
            while j < i + 4 && octal(j) {
                v = v * 8 + (s[j] as u32 - '0' as u32);
                j += 1;
            }
            Ok((v, j))
        }
        'x' if s.get(i + 2) == Some(&'{') => {
            let close = s[i + 3..].iter().position(|&c| c == '}');
            let digits: Option<String> = close.map(|e| s[i + 3..i + 3 + e].iter().collect());
            match digits.as_deref().map(|d| u32::from_str_radix(d, 16)) {
                Some(Ok(v)) if v <= 0x10FFFF && !digits.unwrap_or_default().starts_with('+') => {
                    Ok((v, i + 4 + close.unwrap_or(0)))
                }
                _ => bad(),
            }
        }
        'x' => {
            let hex = |j: usize| s.get(j).and_then(|c| c.to_digit(16));
            match (hex(i + 2), hex(i + 3)) {
                (Some(a), Some(b)) => Ok((a * 16 + b, i + 4)),
                _ => bad(),
            }
        }
        'a' => Ok((7, i + 2)),
        'f' => Ok((12, i + 2)),
        'n' => Ok((10, i + 2)),
        'r' => Ok((13, i + 2)),
        't' => Ok((9, i + 2)),
        'v' => Ok((11, i + 2)),
        _ => bad(),
    }
}

const POSIX: [&str; 14] = [
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// The most runes a range `lo-hi` puts in a class: with case folding on, Go adds every
/// rune each of its runes folds to (at most three more), never more than the runes
/// folding reaches, and the range itself in at most three pieces.
fn range_runes(lo: u32, hi: u32, fold: bool) -> u64 {
    if !fold {
        return 2;
    }
    let folded = u64::from(hi - lo + 1).saturating_mul(3);
    2 * (3 + FOLD_RUNES).min(1 + folded)
}

/// A bracketed class from its `[`: where it ends, and the most runes Go's class has
/// (what its items add, merged or not, and two for a negation).
fn class(s: &[char], mut i: usize, flavor: Flavor, fold: bool) -> Result<(usize, u64), String> {
    i += 1;
    if s.get(i) == Some(&'^') {
        i += 1;
    }
    let (mut first, mut no_end, mut runes) = (true, false, 2u64);
    loop {
        match s.get(i) {
            None => return Err("a [ that is never closed".into()),
            Some(']') if !first => return Ok((i + 1, runes)),
            _ => first = false,
        }
        if s.get(i) == Some(&'[') && s.get(i + 1) == Some(&':') && i + 2 < s.len() && !no_end {
            let end = (i + 2..s.len() - 1).find(|&j| s[j] == ':' && s[j + 1] == ']');
            // None now is none later: looking once keeps a long class linear.
            no_end = end.is_none();
            if let Some(end) = end {
                let name: String = s[i + 2..end].iter().collect();
                if !POSIX.contains(&name.strip_prefix('^').unwrap_or(&name)) {
                    return Err(format!("an unknown class [:{name}:]"));
                }
                i = end + 2;
                runes = runes.saturating_add(PERL_CLASS_RUNES);
                continue;
            }
        }
        if s[i] == '\\' {
            if let Some(end) = class_escape(s, i, flavor) {
                let (end, more) = end?;
                (i, runes) = (end, runes.saturating_add(more));
                continue;
            }
        }
        let (lo, hi, next) = class_range(s, i)?;
        (i, runes) = (next, runes.saturating_add(range_runes(lo, hi, fold)));
    }
}

/// One character or range of a class at `i`: its bounds and where it ends.
fn class_range(s: &[char], i: usize) -> Result<(u32, u32, usize), String> {
    let char_at = |i: usize| -> Result<(u32, usize), String> {
        match s.get(i) {
            None => Err("a [ that is never closed".into()),
            Some('\\') => escape(s, i),
            Some(&c) => Ok((c as u32, i + 1)),
        }
    };
    let (lo, next) = char_at(i)?;
    if s.get(next) == Some(&'-') && s.get(next + 1).is_some_and(|&c| c != ']') {
        let (hi, end) = char_at(next + 1)?;
        if hi < lo {
            return Err("a class range that runs backwards".into());
        }
        return Ok((lo, hi, end));
    }
    Ok((lo, lo, next))
}

/// A label matcher's value matches the empty string: `Ok(true)` if so; an error if its
/// regex does not compile. (Prometheus reads `a|b|c` of plain words without the regex
/// parser.)
pub(super) fn matcher_matches_empty(op: &str, value: &[u8]) -> Result<bool, String> {
    let regex_empty = || -> Result<bool, String> {
        let plain = |part: &[u8]| !part.iter().any(|b| br"\.+*?()|[]{}^$".contains(b));
        if value.split(|&b| b == b'|').all(plain) {
            return Ok(value.split(|&b| b == b'|').any(<[u8]>::is_empty));
        }
        let re = std::str::from_utf8(value).map_err(|_| "the regex is not UTF-8".to_string())?;
        // As Prometheus compiles it (`NewFastRegexMatcher`).
        Ok(parse(&format!("^(?s:{re})$"), Flavor::Grafana)?.matches_empty)
    };
    Ok(match op {
        "=" => value.is_empty(),
        "!=" => !value.is_empty(),
        "=~" => regex_empty()?,
        _ => !regex_empty()?,
    })
}

/// Loki's `pattern` parser: `<name>` captures and literal text, at least one named capture,
/// no two captures side by side, no name twice.
pub(super) fn check_pattern(p: &str) -> Result<(), String> {
    let s: Vec<char> = p.chars().collect();
    let (mut i, mut names, mut last_capture, mut any) = (0, Vec::new(), false, false);
    while i < s.len() {
        let name_end = (s[i] == '<'
            && s.get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == '_'))
        .then(|| (i + 1..s.len()).find(|&j| !(s[j].is_ascii_alphanumeric() || s[j] == '_')))
        .flatten()
        .filter(|&j| s[j] == '>');
        any = true;
        let Some(end) = name_end else {
            i += 1;
            last_capture = false;
            continue;
        };
        let name: String = s[i + 1..end].iter().collect();
        if last_capture {
            return Err(format!(
                "two captures side by side before <{name}>: put literal text between them"
            ));
        }
        if name != "_" {
            if names.contains(&name) {
                return Err(format!("the capture <{name}> appears twice"));
            }
            names.push(name);
        }
        last_capture = true;
        i = end + 1;
    }
    if !any || names.is_empty() {
        return Err(
            "a pattern needs at least one named capture, e.g. \"<ip> - <_> <status>\"".into(),
        );
    }
    Ok(())
}

/// Go's Unicode tables (Go 1.27's): `unicode.Categories`, `unicode.Scripts` and
/// `unicode.CategoryAliases`, as Go spells them.
const UNICODE_CATEGORIES: &str = "C Cc Cf Cn Co Cs L LC Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps S Sc Sk Sm So Z Zl Zp Zs";
const UNICODE_SCRIPTS: &str = "Adlam Ahom Anatolian_Hieroglyphs Arabic Armenian Avestan Balinese Bamum Bassa_Vah Batak Bengali Beria_Erfe Bhaiksuki Bopomofo Brahmi Braille Buginese Buhid Canadian_Aboriginal Carian Caucasian_Albanian Chakma Cham Cherokee Chorasmian Common Coptic Cuneiform Cypriot Cypro_Minoan Cyrillic Deseret Devanagari Dives_Akuru Dogra Duployan Egyptian_Hieroglyphs Elbasan Elymaic Ethiopic Garay Georgian Glagolitic Gothic Grantha Greek Gujarati Gunjala_Gondi Gurmukhi Gurung_Khema Han Hangul Hanifi_Rohingya Hanunoo Hatran Hebrew Hiragana Imperial_Aramaic Inherited Inscriptional_Pahlavi Inscriptional_Parthian Javanese Kaithi Kannada Katakana Kawi Kayah_Li Kharoshthi Khitan_Small_Script Khmer Khojki Khudawadi Kirat_Rai Lao Latin Lepcha Limbu Linear_A Linear_B Lisu Lycian Lydian Mahajani Makasar Malayalam Mandaic Manichaean Marchen Masaram_Gondi Medefaidrin Meetei_Mayek Mende_Kikakui Meroitic_Cursive Meroitic_Hieroglyphs Miao Modi Mongolian Mro Multani Myanmar Nabataean Nag_Mundari Nandinagari New_Tai_Lue Newa Nko Nushu Nyiakeng_Puachue_Hmong Ogham Ol_Chiki Ol_Onal Old_Hungarian Old_Italic Old_North_Arabian Old_Permic Old_Persian Old_Sogdian Old_South_Arabian Old_Turkic Old_Uyghur Oriya Osage Osmanya Pahawh_Hmong Palmyrene Pau_Cin_Hau Phags_Pa Phoenician Psalter_Pahlavi Rejang Runic Samaritan Saurashtra Sharada Shavian Siddham Sidetic SignWriting Sinhala Sogdian Sora_Sompeng Soyombo Sundanese Sunuwar Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le Tai_Tham Tai_Viet Tai_Yo Takri Tamil Tangsa Tangut Telugu Thaana Thai Tibetan Tifinagh Tirhuta Todhri Tolong_Siki Toto Tulu_Tigalari Ugaritic Vai Vithkuqi Wancho Warang_Citi Yezidi Yi Zanabazar_Square";
const UNICODE_ALIASES: &str = "Cased_Letter Close_Punctuation Combining_Mark Connector_Punctuation Control Currency_Symbol Dash_Punctuation Decimal_Number Enclosing_Mark Final_Punctuation Format Initial_Punctuation Letter Letter_Number Line_Separator Lowercase_Letter Mark Math_Symbol Modifier_Letter Modifier_Symbol Nonspacing_Mark Number Open_Punctuation Other Other_Letter Other_Number Other_Punctuation Other_Symbol Paragraph_Separator Private_Use Punctuation Separator Space_Separator Spacing_Mark Surrogate Symbol Titlecase_Letter Unassigned Uppercase_Letter cntrl digit punct";

#[cfg(test)]
mod tests;
