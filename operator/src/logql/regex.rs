//! The regular expressions and patterns Loki compiles while it parses a query: label
//! matchers (`=~`, `!~`), the `regexp` and `pattern` parsers, `label_replace`. Go's RE2
//! syntax (`regexp/syntax` with Perl flags) is checked here as Go checks it, and what a
//! stream selector needs to know: whether a matcher matches the empty string.

/// What Go would build: enough to know what matches the empty string and how repeats nest.
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
}

impl Node {
    fn matches_empty(&self) -> bool {
        match self {
            Node::Char => false,
            Node::Assert(empty) => *empty,
            Node::Cat(v) => v.iter().all(Node::matches_empty),
            Node::Alt(v) => v.iter().any(Node::matches_empty),
            Node::Rep { sub, min, .. } => *min == 0 || sub.matches_empty(),
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
            _ => true,
        }
    }
}

/// One open group: the alternatives so far and the sequence being read.
#[derive(Default)]
struct Frame {
    alts: Vec<Node>,
    seq: Vec<Node>,
}

impl Frame {
    fn close(mut self) -> Node {
        if self.alts.is_empty() {
            return Node::Cat(self.seq);
        }
        self.alts.push(Node::Cat(self.seq));
        Node::Alt(self.alts)
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
pub(super) fn parse(re: &str, flavor: Flavor) -> Result<Regex, String> {
    let s: Vec<char> = re.chars().collect();
    let mut frames = vec![Frame::default()];
    let (mut i, mut last_repeat, mut groups, mut names) = (0, false, 0, Vec::new());
    let fail = |what: &str| format!("{what} in the regex {re:?}");
    while i < s.len() {
        // Go refuses 999 nested capturing groups in a matcher (its parse tree would be
        // more than 1000 high); this refuses as many groups of any kind.
        if frames.len() > 999 {
            return Err(fail("groups nested more than 998 deep"));
        }
        let mut repeat = false;
        let top = frames.len() - 1;
        match s[i] {
            '(' if s.get(i + 1) == Some(&'?') => match perl_group(&s, i)? {
                (next, Some(name)) => {
                    groups += usize::from(name.is_some());
                    names.extend(name);
                    frames.push(Frame::default());
                    i = next;
                }
                (next, None) => i = next,
            },
            '(' => {
                groups += 1;
                frames.push(Frame::default());
                i += 1;
            }
            '|' => {
                let seq = std::mem::take(&mut frames[top].seq);
                frames[top].alts.push(Node::Cat(seq));
                i += 1;
            }
            ')' => {
                if frames.len() == 1 {
                    return Err(fail("an unexpected )"));
                }
                let node = frames.pop().map(Frame::close);
                frames[top - 1].seq.extend(node);
                i += 1;
            }
            '^' | '$' => {
                frames[top].seq.push(Node::Assert(true));
                i += 1;
            }
            '[' => {
                i = class(&s, i, flavor).map_err(|e| fail(&e))?;
                frames[top].seq.push(Node::Char);
            }
            c @ ('*' | '+' | '?' | '{') => {
                let (min, max, next) = match c {
                    '*' => (0, -1, i + 1),
                    '+' => (1, -1, i + 1),
                    '?' => (0, 1, i + 1),
                    _ => match braces(&s, i) {
                        Some(r) => r,
                        None => {
                            // Not a repeat: a literal {.
                            frames[top].seq.push(Node::Char);
                            i += 1;
                            last_repeat = false;
                            continue;
                        }
                    },
                };
                if !(0..=1000).contains(&min) || max > 1000 || (max >= 0 && min > max) {
                    return Err(fail("an invalid repeat count (at most 1000)"));
                }
                i = next + usize::from(s.get(next) == Some(&'?'));
                if last_repeat {
                    return Err(fail("a repeat of a repeat (like a**)"));
                }
                let Some(sub) = frames[top].seq.pop() else {
                    return Err(fail("a repeat with nothing before it to repeat"));
                };
                let node = Node::Rep {
                    sub: Box::new(sub),
                    min,
                    max,
                    braces: c == '{',
                };
                if c == '{' && (min >= 2 || max >= 2) && !node.repeats_fit(1000) {
                    return Err(fail("repeats nested past 1000 copies"));
                }
                frames[top].seq.push(node);
                repeat = true;
            }
            '\\' => match s.get(i + 1) {
                Some('A' | 'z' | 'B') => {
                    frames[top].seq.push(Node::Assert(true));
                    i += 2;
                }
                Some('b') => {
                    frames[top].seq.push(Node::Assert(false));
                    i += 2;
                }
                Some('Q') => {
                    i += 2;
                    while i < s.len() && !(s[i] == '\\' && s.get(i + 1) == Some(&'E')) {
                        frames[top].seq.push(Node::Char);
                        i += 1;
                    }
                    i = (i + 2).min(s.len());
                }
                _ => {
                    i = class_escape(&s, i, flavor)
                        .unwrap_or_else(|| escape(&s, i).map(|(_, n)| n))
                        .map_err(|e| fail(&e))?;
                    frames[top].seq.push(Node::Char);
                }
            },
            _ => {
                frames[top].seq.push(Node::Char);
                i += 1;
            }
        }
        last_repeat = repeat;
    }
    if frames.len() != 1 {
        return Err(fail("a ( that is never closed"));
    }
    let root = frames
        .pop()
        .map(Frame::close)
        .unwrap_or(Node::Cat(Vec::new()));
    Ok(Regex {
        matches_empty: root.matches_empty(),
        groups,
        names,
    })
}

/// `(?P<name>`, `(?<name>`, `(?flags)` or `(?flags:` at `i`: where it ends, and
/// `Some(name)` if it opens a group (`None` inside for an unnamed one) or `None` for flags
/// alone.
type Group = (usize, Option<Option<String>>);

fn perl_group(s: &[char], i: usize) -> Result<Group, String> {
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
                Ok((i + e + 1, Some(Some(n))))
            }
            _ => Err("an invalid group name (letters, digits and _ only)".into()),
        };
    }
    let (mut j, mut negated, mut saw) = (i + 2, false, false);
    while let Some(&c) = s.get(j) {
        j += 1;
        match c {
            'i' | 'm' | 's' | 'U' => saw = true,
            '-' if !negated => (negated, saw) = (true, false),
            ':' | ')' if !negated || saw => return Ok((j, (c == ':').then_some(None))),
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

/// `\d`, `\s`, `\w` (and capitals) or `\p{Name}` at `i`: where it ends, or `None` if the
/// escape is another kind.
fn class_escape(s: &[char], i: usize, flavor: Flavor) -> Option<Result<usize, String>> {
    match s.get(i + 1)? {
        'd' | 'D' | 's' | 'S' | 'w' | 'W' => Some(Ok(i + 2)),
        'p' | 'P' => Some(unicode_class(s, i, flavor)),
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

/// A bracketed class from its `[`: where it ends.
fn class(s: &[char], mut i: usize, flavor: Flavor) -> Result<usize, String> {
    i += 1;
    if s.get(i) == Some(&'^') {
        i += 1;
    }
    let (mut first, mut no_end) = (true, false);
    loop {
        match s.get(i) {
            None => return Err("a [ that is never closed".into()),
            Some(']') if !first => return Ok(i + 1),
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
                continue;
            }
        }
        if s[i] == '\\' {
            if let Some(end) = class_escape(s, i, flavor) {
                i = end?;
                continue;
            }
        }
        let char_at = |i: usize| -> Result<(u32, usize), String> {
            match s.get(i) {
                None => Err("a [ that is never closed".into()),
                Some('\\') => escape(s, i),
                Some(&c) => Ok((c as u32, i + 1)),
            }
        };
        let (lo, next) = char_at(i)?;
        i = next;
        if s.get(i) == Some(&'-') && s.get(i + 1).is_some_and(|&c| c != ']') {
            let (hi, next) = char_at(i + 1)?;
            if hi < lo {
                return Err("a class range that runs backwards".into());
            }
            i = next;
        }
    }
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
        Ok(parse(re, Flavor::Grafana)?.matches_empty)
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
