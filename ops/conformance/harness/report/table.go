package report

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Sort orders results by SIG, then name.
func Sort(rs []Result) {
	slices.SortStableFunc(rs, func(a, b Result) int {
		return cmp.Or(cmp.Compare(a.SIG, b.SIG), cmp.Compare(a.Name, b.Name))
	})
}

// Total is one SIG's counts ("" for the overall line).
type Total struct {
	SIG                     string
	Passed, Failed, Skipped int
}

// Ran is the number of tests that ran: passed or failed.
func (t Total) Ran() int { return t.Passed + t.Failed }

func (t *Total) add(r Result) {
	switch {
	case r.State == Passed:
		t.Passed++
	case r.State == Skipped:
		t.Skipped++
	default:
		t.Failed++
	}
}

// Totals returns the counts per SIG, sorted by SIG, and overall.
func Totals(rs []Result) (perSIG []Total, all Total) {
	m := map[string]*Total{}
	for _, r := range rs {
		t := m[r.SIG]
		if t == nil {
			t = &Total{SIG: r.SIG}
			m[r.SIG] = t
		}
		t.add(r)
		all.add(r)
	}
	for _, t := range m {
		perSIG = append(perSIG, *t)
	}
	slices.SortFunc(perSIG, func(a, b Total) int { return cmp.Compare(a.SIG, b.SIG) })
	return perSIG, all
}

// WriteTable writes one line per result — result, time, test, first
// failure line — then the totals.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tTIME\tTEST\tFIRST FAILURE LINE")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.State, r.Duration.Round(time.Second), r.Name, r.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return WriteTotals(w, rs)
}

// WriteTotals writes passed/ran per SIG and overall.
func WriteTotals(w io.Writer, rs []Result) error {
	perSIG, all := Totals(rs)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SIG\tPASSED\tFAILED\tSKIPPED\tPASSED/RAN\t")
	line := func(t Total, name string) {
		pct := 0.0
		if t.Ran() > 0 {
			pct = 100 * float64(t.Passed) / float64(t.Ran())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d/%d (%.0f %%)\t\n", name, t.Passed, t.Failed, t.Skipped, t.Passed, t.Ran(), pct)
	}
	for _, t := range perSIG {
		name := "sig-" + t.SIG
		if t.SIG == "" {
			name = "(no sig)"
		}
		line(t, name)
	}
	line(all, "total")
	return tw.Flush()
}

// Cause is a group of failures with the same normalised first line.
type Cause struct {
	Pattern string   // the normalised reason
	Tests   []string // the failed tests' names
}

var normalisers = []struct {
	re  *regexp.Regexp
	new string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "UUID"},
	{regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`), "IP"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d[ T][0-9:.]+( [+-]\d{4} \w+)?( m=[+-][0-9.]+)?`), "TIME"},
	// generated names: "pod-xyz12", "e2e-test-configmap-abcde"
	{regexp.MustCompile(`-[a-z0-9]{5}\b`), "-X"},
	{regexp.MustCompile(`/namespaces/[a-z0-9.-]+/`), "/namespaces/NS/"},
	{regexp.MustCompile(`\b0x[0-9a-f]+\b`), "0xX"},
	// durations and numbers standing alone: not the 1 of v1 or the 8 of k8s
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m|h)\b`), "D"},
	{regexp.MustCompile(`\b\d+\b`), "N"},
}

// Normalise returns the part of a reason that is the same across tests:
// generated names, numbers, addresses and times replaced by placeholders.
func Normalise(reason string) string {
	for _, n := range normalisers {
		reason = n.re.ReplaceAllString(reason, n.new)
	}
	return reason
}

// Causes groups the failures by normalised reason, largest group first.
func Causes(rs []Result) []Cause {
	m := map[string]*Cause{}
	for _, r := range rs {
		if !r.Failed() {
			continue
		}
		p := Normalise(r.Reason)
		c := m[p]
		if c == nil {
			c = &Cause{Pattern: p}
			m[p] = c
		}
		c.Tests = append(c.Tests, r.Name)
	}
	out := make([]Cause, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Cause) int {
		return cmp.Or(cmp.Compare(len(b.Tests), len(a.Tests)), cmp.Compare(a.Pattern, b.Pattern))
	})
	return out
}

// WriteCauses writes each cause with its count and SIGs.
func WriteCauses(w io.Writer, cs []Cause) error {
	for _, c := range cs {
		sigs := map[string]int{}
		for _, t := range c.Tests {
			sigs[SIGOf(t)]++
		}
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(sigs)) {
			parts = append(parts, fmt.Sprintf("%s %d", s, sigs[s]))
		}
		if _, err := fmt.Fprintf(w, "%4d  %s  (%s)\n", len(c.Tests), c.Pattern, strings.Join(parts, ", ")); err != nil {
			return err
		}
	}
	return nil
}

// WriteJUnit writes rs as one JUnit report (one suite), as ginkgo names
// and states them.
func WriteJUnit(w io.Writer, suite string, rs []Result) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Body    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Status    string   `xml:"status,attr"`
		Time      float64  `xml:"time,attr"`
		Skipped   *skipped `xml:"skipped,omitempty"`
		Failure   *failure `xml:"failure,omitempty"`
	}
	type testsuite struct {
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     float64    `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	type testsuites struct {
		XMLName  xml.Name    `xml:"testsuites"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Time     float64     `xml:"time,attr"`
		Suites   []testsuite `xml:"testsuite"`
	}
	s := testsuite{Name: suite}
	for _, r := range rs {
		c := testcase{Name: "[It] " + r.Name, Classname: suite, Status: r.State, Time: r.Duration.Seconds()}
		switch {
		case r.State == Skipped:
			c.Skipped = &skipped{Message: r.Reason}
			s.Skipped++
		case r.Failed():
			c.Failure = &failure{Message: r.Reason, Type: r.State, Body: r.Detail}
			s.Failures++
		}
		s.Tests++
		s.Time += c.Time
		s.Cases = append(s.Cases, c)
	}
	out := testsuites{Tests: s.Tests, Failures: s.Failures, Time: s.Time, Suites: []testsuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
