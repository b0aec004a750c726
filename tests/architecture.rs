//! The shape of `operator/src`, read from its own imports: every module lives in a room
//! (a top-level folder), rooms are ordered from the bottom (shared vocabulary) to the top
//! (the process), and a module may import only from its own room or a room below. No two
//! modules may reach each other through imports (no cycle, of any length), and no room
//! may grow past [`MAX_ROOM_LINES`].
//!
//! An import is any path through `crate::`, `super::` or `self::`, or through a child
//! module a file declares (`mod x;` then `x::...`), in `use` lines and inline alike.
//! Test code (`#[cfg(test)]` modules and the test-only files they declare) is left out:
//! tests may reach anywhere. `docs/architecture.md` draws the same map.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use loki_zone_operator_tests::repo_root;

/// The rooms, bottom first. A room may import only from itself and the rooms before it.
const ROOMS: &[&str] = &[
    // The LokiStack API, names, conditions and defaults: what everything else speaks.
    "model",
    // Pure checks of what the cluster offers: zones, storage, volumes, a pod's zone.
    "checks",
    // LogQL as Loki parses it, and Prometheus durations: a parser, pure.
    "logql",
    // The ruler's API (AlertingRule, RecordingRule, RulerConfig) and, pure, its checks,
    // which rules a stack picks, and a RulerConfig as Loki settings.
    "ruler",
    // The Loki objects, rendered from the templates and parsed into typed objects.
    "render",
    // Metrics and the health/metrics HTTP server.
    "telemetry",
    // When each node's kubelet last renewed its Lease, and the clock that notices.
    "heartbeats",
    // What the caches are made of, pure: what each cached object is reduced to, and
    // each store's index by stack.
    "stores",
    // The one set of reflector caches of the process, and what their changes trigger.
    "caches",
    // A snapshot of one stack's world, read from the caches.
    "observe",
    // What one reconcile will do (the Intent the plan decides) and what came of it.
    "intent",
    // Pure decisions: what to apply, the zone stages, rollouts, scale-downs, recovery.
    "plan",
    // Pure: the status a stack should show.
    "status",
    // Writes: server-side apply, take-over, deletes, Events and the status write.
    "act",
    // The admission webhooks (served by every replica) and their registration.
    "webhook",
    // One reconcile, and the controller that runs it.
    "reconcile",
    // The pod zone annotator.
    "annotator",
    // Leader election, and the term that owns everything only the leader does.
    "lead",
    // The command line.
    "cli",
];

/// Imports that are downward and still not allowed: (room, room it may not import, why).
const SEPARATED: &[(&str, &str, &str)] = &[(
    "act",
    "plan",
    "the executor carries out an Intent and decides nothing: what it needs is in intent/",
)];

/// No room (folder of `operator/src`) has more lines of code than this, its unit tests
/// (`#[cfg(test)]` items and the test-only files they declare) not counted.
const MAX_ROOM_LINES: usize = 3000;

struct Module {
    /// `["plan", "staging"]` for `plan/staging.rs`; empty for `lib.rs`.
    path: Vec<String>,
    file: PathBuf,
    /// The code with comments, strings and test modules blanked out.
    code: String,
    lines: usize,
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read operator/src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Blanks comments, string and char literals (keeping line breaks), so that only code
/// is searched for paths.
fn blank_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && peek(&c, i + 1) == Some('/') {
            let start = i;
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            // A doc comment's intra-doc links are references too: rustdoc resolves
            // them, and a reader follows them. They are kept as paths.
            let comment: String = c[start..i].iter().collect();
            if comment.starts_with("///") || comment.starts_with("//!") {
                for path in doc_link_paths(&comment) {
                    out.push_str(&format!(" {path} ;"));
                }
            }
        } else if c[i] == '/' && peek(&c, i + 1) == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && peek(&c, i + 1) == Some('*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && peek(&c, i + 1) == Some('/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (peek(&c, i + 1) == Some('"') || peek(&c, i + 1) == Some('#'))
            && (i == 0 || !is_ident(c[i - 1]))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if peek(&c, i + 1) == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'')
            } else if peek(&c, i + 2) == Some('\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The `crate::`, `super::` and `self::` paths a doc comment links to: [`path`] and
/// [text](path).
fn doc_link_paths(comment: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("[`", "`]"), ("](", ")")] {
        let mut rest = comment;
        while let Some(at) = rest.find(open) {
            rest = &rest[at + open.len()..];
            let Some(end) = rest.find(close) else {
                break;
            };
            let target = rest[..end].trim_end_matches("()");
            if ["crate::", "super::", "self::"]
                .iter()
                .any(|p| target.starts_with(p))
                && target.chars().all(|c| is_ident(c) || c == ':')
            {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

fn peek(c: &[char], i: usize) -> Option<char> {
    c.get(i).copied()
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Removes every item under `#[cfg(test)]`; returns the code, the names of the
/// test-only module files it declares (`#[cfg(test)] mod x;`) and how many lines the
/// removed items spanned.
fn drop_test_items(code: &str) -> (String, Vec<String>, usize) {
    let mut out = code.to_string();
    let mut test_files = Vec::new();
    let mut test_lines = 0;
    while let Some(at) = out.find("#[cfg(test)]") {
        let after = at + "#[cfg(test)]".len();
        let (semi, brace) = (out[after..].find(';'), out[after..].find('{'));
        let end = match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => {
                let item = out[after..after + s].trim();
                if let Some(name) = item.rsplit(' ').next().filter(|_| item.contains("mod ")) {
                    test_files.push(name.to_string());
                }
                after + s + 1
            }
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = out.len();
                for (k, ch) in out[after + b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = after + b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => out.len(),
        };
        let blanked: String = out[at..end]
            .chars()
            .map(|ch| if ch == '\n' { '\n' } else { ' ' })
            .collect();
        test_lines += blanked.matches('\n').count() + 1;
        out.replace_range(at..end, &blanked);
    }
    (out, test_files, test_lines)
}

/// The child modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_children(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_suffix(';')?;
            let name = rest.rsplit_once("mod ")?.1.trim();
            let prefix = rest.rsplit_once("mod ")?.0.trim();
            (prefix.is_empty() || prefix.starts_with("pub")).then(|| name.to_string())
        })
        .collect()
}

/// Every path a file names from `start` (the offsets just after `crate`, `super`, ...):
/// a use tree (`a::b::{c, d::e}`) is expanded into its leaves.
fn paths_at(code: &[char], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let skip_ws = |mut i: usize| {
        while i < code.len() && code[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut path = prefix;
    loop {
        i = skip_ws(i);
        if i + 1 < code.len() && code[i] == ':' && code[i + 1] == ':' {
            i = skip_ws(i + 2);
        } else {
            out.push(path);
            return i;
        }
        if i < code.len() && code[i] == '{' {
            i += 1;
            loop {
                i = skip_ws(i);
                if i >= code.len() {
                    return i;
                }
                if code[i] == '}' {
                    return i + 1;
                }
                if code[i] == ',' {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < code.len() && is_ident(code[i]) {
                    i += 1;
                }
                if i == start {
                    // `*` or something this reader does not know: the group itself.
                    out.push(path.clone());
                    i += 1;
                    continue;
                }
                let word: String = code[start..i].iter().collect();
                let mut sub = path.clone();
                if word != "self" {
                    sub.push(word);
                }
                i = paths_at(code, i, sub, out);
            }
        }
        let start = i;
        while i < code.len() && is_ident(code[i]) {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        path.push(code[start..i].iter().collect());
    }
}

/// The paths a module names, each made absolute (from the crate root).
fn imports(m: &Module, children: &[String]) -> Vec<Vec<String>> {
    let code: Vec<char> = m.code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if !is_ident(code[i]) || (i > 0 && (is_ident(code[i - 1]) || code[i - 1] == '$')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < code.len() && is_ident(code[i]) {
            i += 1;
        }
        let word: String = code[start..i].iter().collect();
        let follows_path = code.get(i) == Some(&':') && code.get(i + 1) == Some(&':');
        // A path segment after `::` was read with the path it belongs to.
        let preceded = start >= 2 && code[start - 1] == ':' && code[start - 2] == ':';
        if !follows_path || preceded {
            continue;
        }
        let base: Option<Vec<String>> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(m.path.clone()),
            "super" => {
                let mut p = m.path.clone();
                p.pop();
                // `super::super::x`
                let mut j = i;
                while code[j..].starts_with(&[':', ':', 's', 'u', 'p', 'e', 'r']) {
                    p.pop();
                    j += 7;
                }
                i = j;
                Some(p)
            }
            w if children.iter().any(|c| c == w) => {
                let mut p = m.path.clone();
                p.push(w.to_string());
                Some(p)
            }
            _ => None,
        };
        if let Some(base) = base {
            let mut leaves = Vec::new();
            i = paths_at(&code, i, base, &mut leaves);
            found.extend(leaves);
        }
    }
    found
}

struct Crate {
    modules: Vec<Module>,
    /// (importer, imported) module paths, each once.
    edges: BTreeSet<(Vec<String>, Vec<String>)>,
}

fn read_crate(src: &Path) -> Crate {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut modules = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut children: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for file in files {
        // The binary is the top of everything; it imports the library by name.
        if file.file_name().is_some_and(|f| f == "main.rs") && file.parent() == Some(src) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        let (code, tests, test_lines) = drop_test_items(&blank_literals(&text));
        let path = module_path(src, &file);
        for t in tests {
            let mut p = path.clone();
            p.push(t);
            test_only.insert(p);
        }
        children.insert(path.clone(), declared_children(&code));
        modules.push(Module {
            path,
            file,
            code,
            // The room cap is about the code a maintainer reads to change it: a file's
            // own unit tests do not count against it.
            lines: text.lines().count().saturating_sub(test_lines),
        });
    }
    // A module under a test-only module is test code too.
    modules.retain(|m| !test_only.iter().any(|t| m.path.starts_with(t)));
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let mut edges = BTreeSet::new();
    for m in &modules {
        let own = children.get(&m.path).cloned().unwrap_or_default();
        for path in imports(m, &own) {
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| known.contains(p))
                .unwrap_or_default();
            // The crate root only declares the rooms; an import of a test-only module
            // cannot occur outside test code.
            if target != m.path && !target.is_empty() {
                edges.insert((m.path.clone(), target));
            }
        }
    }
    Crate { modules, edges }
}

fn room(path: &[String]) -> Option<usize> {
    ROOMS
        .iter()
        .position(|r| path.first().map(String::as_str) == Some(*r))
}

fn show(path: &[String]) -> String {
    path.join("::")
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeSet<(Vec<String>, Vec<String>)>) -> Vec<Vec<Vec<String>>> {
    let mut graph: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        next: usize,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(
        v: &'a Vec<String>,
        graph: &BTreeMap<&'a Vec<String>, Vec<&'a Vec<String>>>,
        s: &mut State<'a>,
    ) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &graph[v] {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, &graph, &mut s);
        }
    }
    s.found
}

/// What is wrong with a crate's shape, one line each.
fn violations(krate: &Crate, src: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    for m in &krate.modules {
        if !m.path.is_empty() && room(&m.path).is_none() {
            wrong.push(format!(
                "{}: not in a room; put it in one of {ROOMS:?} (or add a room to ROOMS in tests/architecture.rs, in its place in the order)",
                m.file.strip_prefix(src).unwrap_or(&m.file).display()
            ));
        }
    }
    for (from, to) in &krate.edges {
        if let (Some(a), Some(b)) = (room(from), room(to)) {
            if b > a {
                wrong.push(format!(
                    "upward import: {} (room {}) imports {} (room {}, above it)",
                    show(from),
                    ROOMS[a],
                    show(to),
                    ROOMS[b]
                ));
            }
        }
    }
    for (from, to) in &krate.edges {
        if let (Some(a), Some(b)) = (room(from), room(to)) {
            for (room_from, room_to, why) in SEPARATED {
                if ROOMS[a] == *room_from && ROOMS[b] == *room_to {
                    wrong.push(format!(
                        "{} (room {room_from}) imports {} (room {room_to}): {why}",
                        show(from),
                        show(to)
                    ));
                }
            }
        }
    }
    for cycle in cycles(&krate.edges) {
        let names: Vec<String> = cycle.iter().map(|p| show(p)).collect();
        wrong.push(format!("import cycle among: {}", names.join(", ")));
    }
    let mut lines: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &krate.modules {
        if let Some(r) = room(&m.path) {
            *lines.entry(ROOMS[r]).or_default() += m.lines;
        }
    }
    for (r, n) in lines {
        if n > MAX_ROOM_LINES {
            wrong.push(format!(
                "room {r} has {n} lines (at most {MAX_ROOM_LINES}): split it"
            ));
        }
    }
    wrong
}

#[test]
fn rooms_import_downward_only_and_never_in_a_circle() {
    // LZO_ARCHITECTURE_SRC reads another tree (an older checkout, say) the same way.
    let src = std::env::var_os("LZO_ARCHITECTURE_SRC")
        .map_or_else(|| repo_root().join("operator/src"), PathBuf::from);
    let krate = read_crate(&src);
    assert!(
        krate.modules.len() > 20 && krate.edges.len() > 50,
        "the reader found {} modules and {} imports: it no longer reads the crate",
        krate.modules.len(),
        krate.edges.len()
    );
    let wrong = violations(&krate, &src);
    assert!(
        wrong.is_empty(),
        "operator/src breaks its architecture:\n  {}",
        wrong.join("\n  ")
    );
}

/// Each object is cached once per process: only the `caches` room opens watches, and
/// the process starts the caches once (`e2e/caches.rs` counts the watches on a live API
/// server).
#[test]
fn only_the_caches_open_watches_and_they_start_once() {
    let src = repo_root().join("operator/src");
    let krate = read_crate(&src);
    let opens = [
        "watcher(",
        "metadata_watcher(",
        "watch_object(",
        "reflector(",
        "reflect(",
        "spawn_typed(",
        "Controller::new(",
        ".watch(",
    ];
    let mut wrong = Vec::new();
    let mut starts = Vec::new();
    for m in &krate.modules {
        let code: String = m.code.split_whitespace().collect::<Vec<_>>().join(" ");
        if room(&m.path) != Some(ROOMS.iter().position(|r| *r == "caches").expect("room")) {
            for o in opens {
                if code.contains(o) {
                    wrong.push(format!("{} opens a watch ({o}...)", show(&m.path)));
                }
            }
        }
        if code.contains("reflectors::start(") {
            starts.push(show(&m.path));
        }
    }
    assert!(wrong.is_empty(), "watches outside caches/: {wrong:#?}");
    assert_eq!(
        starts,
        ["lead"],
        "the caches must be started once per process, by lead::run"
    );
}

/// One Event publisher, and every reason typed: only `act/report.rs` builds a Kubernetes
/// Event (`Notifier`), whose reason is an `EventReason` (a condition's `Reason` or a
/// `Happening`), so no reason can be a string literal spelled at a call site.
#[test]
fn events_are_published_in_one_place_with_typed_reasons() {
    let src = repo_root().join("operator/src");
    let krate = read_crate(&src);
    let mut publishers = Vec::new();
    for m in &krate.modules {
        let code: String = m.code.split_whitespace().collect::<Vec<_>>().join(" ");
        if code.contains("KubeEvent {")
            || code.contains("events::Event {")
            || code.contains(".publish(&")
        {
            publishers.push(show(&m.path));
        }
    }
    assert_eq!(
        publishers,
        ["act::report"],
        "Events built outside the Notifier"
    );
    let notifier = std::fs::read_to_string(src.join("act/report.rs")).expect("report.rs");
    assert!(
        notifier.contains("reason: impl Into<EventReason>"),
        "Notifier's reasons must be typed"
    );
}

/// The checker itself: each kind of mistake is caught.
#[test]
fn the_checker_catches_upward_imports_cycles_and_strays() {
    let dir = std::env::temp_dir().join(format!("lzo-architecture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |path: &str, text: &str| {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write(
        "lib.rs",
        "pub mod model;\npub mod plan;\npub mod act;\npub mod stray;\n",
    );
    // Downward, but the executor may not reach the decider.
    write("act/mod.rs", "use crate::plan::g;\npub fn run() { g() }\n");
    write(
        "model/mod.rs",
        "//! See [`crate::plan::g`] and [the plan](crate::plan).\npub mod api;\npub mod names;\n",
    );
    // An upward import, inline and without `use`.
    write("model/api.rs", "pub fn f() { crate::plan::g(); }\n");
    // A cycle inside one room, through a group import and `super`.
    write(
        "model/names.rs",
        "use crate::model::{self, api::{f}};\npub fn n() { super::api::f() }\n",
    );
    write(
        "plan/mod.rs",
        "mod inner;\n#[cfg(test)]\nmod tests { use crate::stray::X; }\n// crate::stray::Y in a comment\npub fn g() { let _ = \"crate::stray::Z\"; inner::h(); }\n",
    );
    write("plan/inner.rs", "use super::g;\npub fn h() {}\n");
    write("stray.rs", "pub struct X;\n");
    let krate = read_crate(&dir);
    let wrong = violations(&krate, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let has = |needle: &str| wrong.iter().any(|w| w.contains(needle));
    assert!(
        has("upward import: model::api (room model) imports plan"),
        "{wrong:#?}"
    );
    assert!(has("stray.rs: not in a room"), "{wrong:#?}");
    assert!(has("act (room act) imports plan (room plan)"), "{wrong:#?}");
    assert!(has("import cycle among: plan, plan::inner"), "{wrong:#?}");
    // Test modules, comments and strings are not imports.
    assert!(
        !wrong.iter().any(|w| w.contains("imports stray")),
        "{wrong:#?}"
    );
    // names imports api (a group with `self` and a nested group), api does not import
    // names: no cycle between them.
    assert!(
        krate.edges.contains(&(
            vec!["model".into(), "names".into()],
            vec!["model".into(), "api".into()]
        )),
        "{:?}",
        krate.edges
    );
    assert!(!has("model::api, model::names"), "{wrong:#?}");
    // The room cap counts code, not the file's own unit tests: plan/mod.rs has 5 lines,
    // 2 of them its test module.
    let plan = krate
        .modules
        .iter()
        .find(|m| m.path == vec!["plan".to_string()])
        .expect("plan");
    assert_eq!(plan.lines, 3);
}
