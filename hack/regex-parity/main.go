// Go's verdict on the regexes of the operator's parity corpus, and the two numbers the
// operator's bound on a regex's character classes is built from. Loki compiles label
// matchers with github.com/grafana/regexp (through Prometheus) and its `regexp` parser
// and label_replace with Go's regexp; both wrap the user's regex in ^(?s:...)$ except
// the `regexp` parser. The operator (operator/src/logql/regex.rs) must refuse every
// regex these refuse, with the field named, so that a rule Loki's ruler would refuse
// (and with it every rule of its tenant) never reaches it.
//
// Usage: go run . <corpus.jsonl>   rewrites the verdicts in the file in place.
//
//	go run . -check <corpus.jsonl>   fails if a verdict in the file is not Go's.
//
// Every module here is BSD licensed (Go's own and grafana/regexp).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	gosyntax "regexp/syntax"
	"sort"
	"strings"
	"unicode"

	goregexp "regexp"

	grafana "github.com/grafana/regexp"
	grafanasyntax "github.com/grafana/regexp/syntax"
)

// A piece of a regex, N times (once if N is 0).
type part struct {
	S string `json:"s"`
	N int    `json:"n,omitempty"`
}

// One regex, its parts one after the other, and Go's verdicts ("ok" or Go's error code).
type entry struct {
	Note    string `json:"note,omitempty"`
	Parts   []part `json:"parts"`
	Matcher string `json:"matcher"`
	Parser  string `json:"parser"`
	Replace string `json:"replace"`
	// Set by hand: the operator refuses this one although Go compiles it (its bound
	// is conservative there); the test checks that it still does.
	Stricter string `json:"stricter,omitempty"`
}

// The bound's inputs, on the first line of the corpus.
type bounds struct {
	UnicodeRunesMax int `json:"unicode_runes_max"`
	PerlRunesMax    int `json:"perl_runes_max"`
	FoldRunes       int `json:"fold_runes"`
}

func code(err error) string {
	if err == nil {
		return "ok"
	}
	var e *gosyntax.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	var g *grafanasyntax.Error
	if errors.As(err, &g) {
		return string(g.Code)
	}
	return err.Error()
}

func verdicts(e *entry) {
	var b strings.Builder
	for _, p := range e.Parts {
		b.WriteString(strings.Repeat(p.S, max(p.N, 1)))
	}
	re := b.String()
	_, err := grafana.Compile("^(?s:" + re + ")$")
	e.Matcher = code(err)
	_, err = goregexp.Compile(re)
	e.Parser = code(err)
	_, err = goregexp.Compile("^(?s:" + re + ")$")
	e.Replace = code(err)
}

// The Unicode classes (\p{Name}) Go knows.
func unicodeClasses() []string {
	var names []string
	for _, tables := range []map[string]*unicode.RangeTable{unicode.Categories, unicode.Scripts} {
		for n := range tables {
			names = append(names, `\p{`+n+`}`)
		}
	}
	for n := range unicode.CategoryAliases {
		names = append(names, `\p{`+n+`}`)
	}
	return append(names, `\p{Any}`)
}

// The Perl and POSIX classes, and `.`.
func perlClasses() []string {
	names := []string{`\d`, `\s`, `\w`, `.`}
	for _, p := range []string{"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper", "word", "xdigit"} {
		names = append(names, "[:"+p+":]")
	}
	return names
}

// The most runes one of these class items (in a bracket or not, negated or not,
// case-folded or not) puts in a parsed regex.
func classRunesMax(names []string) int {
	sort.Strings(names)
	most := 0
	for _, n := range names {
		negated := strings.Replace(strings.Replace(n, `\p`, `\P`, 1), "[:", "[:^", 1)
		for _, item := range []string{n, negated} {
			for _, form := range []string{"[%s]", "[^%s]", "%s"} {
				if strings.HasPrefix(item, "[:") && form == "%s" {
					continue
				}
				for _, flags := range []string{"", "(?i)", "(?s)"} {
					re, err := gosyntax.Parse(flags+fmt.Sprintf(form, item), gosyntax.Perl)
					if err != nil {
						// A name this Go does not know: refused, no runes.
						continue
					}
					most = max(most, len(re.Rune))
				}
			}
		}
	}
	return most
}

// Runes that case folding maps to another rune.
func foldRunes() int {
	n := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.SimpleFold(r) != r {
			n++
		}
	}
	return n
}

func main() {
	check := len(os.Args) == 3 && os.Args[1] == "-check"
	path := os.Args[len(os.Args)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	var out bytes.Buffer
	b := bounds{
		UnicodeRunesMax: classRunesMax(unicodeClasses()),
		PerlRunesMax:    classRunesMax(perlClasses()),
		FoldRunes:       foldRunes(),
	}
	line, _ := json.Marshal(b)
	out.Write(append(line, '\n'))
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(nil, 1<<24)
	for first := true; scanner.Scan(); first = false {
		if first {
			continue
		}
		var e entry
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			panic(fmt.Sprintf("%s: %v", scanner.Text(), err))
		}
		verdicts(&e)
		line, _ := json.Marshal(e)
		out.Write(append(line, '\n'))
	}
	if check {
		if !bytes.Equal(out.Bytes(), data) {
			fmt.Fprintf(os.Stderr, "%s is not Go's verdict: run make regex-parity\n", path)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
