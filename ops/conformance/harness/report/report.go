// Package report reads the JUnit reports of the upstream e2e suite and
// turns them into podflow's conformance table: one row per test with its
// result and first failure line, totals per SIG, and the failures grouped
// by cause.
//
// The reports are ginkgo v2's JUnit XML (github.com/onsi/ginkgo/v2
// reporters): a <testcase> per spec named "[It] <full text>", with a
// status attribute (passed, failed, skipped, timedout, interrupted,
// panicked, aborted) and a <failure>, <error> or <skipped> child.
package report

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ErrNoTests is returned when a report holds no test case.
var ErrNoTests = errors.New("report: no test case in the JUnit report")

// States of a Result besides ginkgo's.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
	// NoReport is a test whose process ended without writing a report
	// (killed at the hard limit, crashed before the suite ran).
	NoReport = "no-report"
)

// Result is one test's outcome.
type Result struct {
	Name     string        // the spec's full text, as ginkgo --focus matches it
	SIG      string        // "api-machinery", from the "[sig-…]" tag; "" without one
	State    string        // ginkgo's spec state, or NoReport
	Duration time.Duration // the spec's run time
	Reason   string        // the first failure line, one line; "" when passed
	Detail   string        // the failure's full text and timeline (junit body), for the log
}

// Failed reports whether r counts as a failure: anything but passed and
// skipped.
func (r Result) Failed() bool { return r.State != Passed && r.State != Skipped }

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name  string      `xml:"name,attr"`
	Cases []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Status    string        `xml:"status,attr"`
	Time      float64       `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped"`
	Error     *junitMessage `xml:"error"`
	Failure   *junitMessage `xml:"failure"`
	SystemOut string        `xml:"system-out,omitempty"`
	SystemErr string        `xml:"system-err,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

// ParseJUnit reads a ginkgo JUnit report. Suite nodes that passed
// ([SynchronizedBeforeSuite], [ReportAfterSuite] …) are dropped; one that
// failed is kept under its node name, since it failed the tests after it.
func ParseJUnit(r io.Reader) ([]Result, error) {
	var s junitSuites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("report: parse JUnit XML: %w", err)
	}
	var out []Result
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			name, it := strings.CutPrefix(c.Name, "[It] ")
			state := c.Status
			if state == "" { // an older writer: infer
				switch {
				case c.Failure != nil:
					state = Failed
				case c.Error != nil:
					state = "interrupted"
				case c.Skipped != nil:
					state = Skipped
				default:
					state = Passed
				}
			}
			if !it && state == Passed {
				continue
			}
			res := Result{Name: name, SIG: SIGOf(name), State: state, Duration: time.Duration(c.Time * float64(time.Second))}
			switch m := firstNonNil(c.Failure, c.Error, c.Skipped); {
			case state == Passed:
			case m != nil:
				res.Reason = reason(state, m, c.SystemErr)
				res.Detail = strings.TrimSpace(m.Body)
				if c.SystemErr != "" {
					res.Detail += "\n" + c.SystemErr
				}
			default:
				res.Reason = state
			}
			out = append(out, res)
		}
	}
	if len(out) == 0 {
		return nil, ErrNoTests
	}
	return out, nil
}

func firstNonNil(ms ...*junitMessage) *junitMessage {
	for _, m := range ms {
		if m != nil {
			return m
		}
	}
	return nil
}

var (
	sigRE   = regexp.MustCompile(`\[sig-([a-z0-9-]+)\]`)
	spaceRE = regexp.MustCompile(`\s+`)
	// stepRE finds the steps ginkgo's timeline records: "STEP: Creating a
	// pod … @ 12/06/26 01:50:12.123".
	// recordedRE is the failure a timed-out or interrupted node recorded
	// before it exited, as ginkgo reports it.
	recordedRE = regexp.MustCompile(`the following failure was recorded in the \w+ node before it exited:\s*\n\s*(.+)`)
	// stepAtRE and frameRE read ginkgo's progress report: the step the
	// spec was in and the first highlighted (">") frame of its goroutine.
	stepAtRE = regexp.MustCompile(`At \[By Step\] (.+?) \(Step Runtime`)
	frameRE  = regexp.MustCompile(`(?m)^\s*> ([\w./-]+?)\(`)
	// additionalRE is the last failed assertion of a polling wait, which
	// ginkgo's progress report carries.
	additionalRE = regexp.MustCompile(`(?s)Begin Additional Progress Reports >>\s*\n(.*?)<< End Additional Progress Reports`)
	// tagRE is the state tag ginkgo puts before a failure's text.
	tagRE  = regexp.MustCompile(`^\[(FAILED|TIMEDOUT|INTERRUPTED|PANICKED|ABORTED)\] `)
	stepRE = regexp.MustCompile(`STEP: (.*?)(?: - \S+:\d+)?(?: @ \d\d/\d\d/\d\d [0-9:.]+)?\s*$`)
)

// SIGOf returns the SIG of a spec's full text: "node" for
// "[sig-node] Pods …".
func SIGOf(name string) string {
	if m := sigRE.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}

// MaxReason bounds a reason's length in runes.
const MaxReason = 400

// reason is the failure's first line: the failure message collapsed onto
// one line ("Expected <int>: 0 to equal <int>: 1"), or for a spec that
// ran out of time the step it was in.
func reason(state string, m *junitMessage, systemErr string) string {
	msg := m.Message
	if msg == "" { // OmitFailureMessageAttr: the body's first paragraph
		msg, _, _ = strings.Cut(strings.TrimSpace(m.Body), "\n\n")
	}
	msg = OneLine(tagRE.ReplaceAllString(strings.TrimSpace(msg), ""))
	switch state {
	case "timedout", "interrupted":
		msg = outOfTime(state, msg, m.Body, systemErr)
	}
	return truncate(msg, MaxReason)
}

// outOfTime says where a test was when it ran out of time: the failure
// it recorded on its way out, unless that only says its context ended;
// else the step of ginkgo's progress report, with the last failed
// assertion the report carries (a pod's state when it was a pod's) or the
// innermost test frame; else the last step it logged.
func outOfTime(state, msg, body, systemErr string) string {
	if mm := recordedRE.FindStringSubmatch(body); mm != nil {
		rec := OneLine(mm[1])
		if !strings.Contains(rec, "context canceled") && !strings.Contains(rec, "Context was cancelled") {
			return state + ": " + rec
		}
	}
	step := stepAtRE.FindStringSubmatch(body)
	if step == nil {
		before, _, _ := strings.Cut(systemErr, "["+strings.ToUpper(state)+"]")
		if s := lastStep(before); s != "" {
			return state + " in step: " + s
		}
		if msg != "" {
			return state + ": " + msg
		}
		return state
	}
	msg = state + " in step: " + OneLine(step[1])
	if add := additionalRE.FindStringSubmatch(body); add != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(add[1]), "\n")
		if ps := podState(add[1]); ps != "" {
			return msg + ": " + OneLine(first) + " " + ps
		}
		return msg + ": " + truncate(OneLine(add[1]), 120)
	}
	if frame := frameRE.FindStringSubmatch(body); frame != nil {
		msg += " (in " + frame[1] + ")"
	}
	return msg
}

// podState reads a pod dumped as YAML (gomega's format of a *v1.Pod): its
// phase and the first container state that is waiting, or terminated
// other than Completed, with reason and message.
func podState(dump string) string {
	lines := strings.Split(dump, "\n")
	st := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "status:" {
			st = i
		}
	}
	if st < 0 {
		return ""
	}
	phase, state := "", ""
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	for i := st + 1; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if v, ok := strings.CutPrefix(t, "phase: "); ok && indent(lines[i]) == indent(lines[st])+2 {
			phase = v
		}
		if state != "" || (t != "waiting:" && t != "terminated:") {
			continue
		}
		var reason, message []string
		var cur *[]string
		for j := i + 1; j < len(lines) && indent(lines[j]) > indent(lines[i]); j++ {
			u := strings.TrimSpace(lines[j])
			switch {
			case strings.HasPrefix(u, "reason: "):
				reason, cur = []string{strings.TrimPrefix(u, "reason: ")}, &reason
			case strings.HasPrefix(u, "message: "):
				message, cur = []string{strings.TrimPrefix(u, "message: ")}, &message
			case indent(lines[j]) > indent(lines[i])+2 && cur != nil:
				*cur = append(*cur, u) // a folded value's next line
			default:
				cur = nil
			}
		}
		r := strings.Join(reason, " ")
		if t == "terminated:" && r == "Completed" {
			continue
		}
		state = strings.TrimSuffix(t, ":") + " " + r
		if len(message) > 0 {
			state += ": " + unquote(strings.Join(message, " "))
		}
	}
	out := ""
	if phase != "" {
		out = "(pod " + phase + ")"
	}
	if state != "" {
		out += " container " + state
	}
	return strings.TrimSpace(out)
}

// unquote removes the quotes of a YAML-quoted scalar.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// lastStep returns the text of the last "STEP:" line of a timeline.
func lastStep(timeline string) string {
	lines := strings.Split(timeline, "\n")
	for _, l := range slices.Backward(lines) {
		if m := stepRE.FindStringSubmatch(l); m != nil {
			return OneLine(m[1])
		}
	}
	return ""
}

// OneLine collapses s's whitespace, line breaks included, to single spaces.
func OneLine(s string) string { return strings.TrimSpace(spaceRE.ReplaceAllString(s, " ")) }

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
