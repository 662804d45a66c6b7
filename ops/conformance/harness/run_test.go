package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNoReportReason(t *testing.T) {
	panicked := "  I1206 02:20:58.570 21418 chunking.go:66] Got an error creating template 0: the server could not find the requested resource (/api/v1/namespaces/chunking-9549/podtemplates)\n" +
		"  E1206 02:20:58.571758   21418 core_dsl.go:427] \"Observed a panic\" panic=<\n\t\x1b[1mYour Test Panicked\x1b[0m\n"
	got := noReportReason(panicked, errors.New("exit status 2"))
	want := "panicked outside ginkgo (exit status 2) after: Got an error creating template 0: the server could not find the requested resource (/api/v1/namespaces/chunking-9549/podtemplates)"
	if got != want {
		t.Errorf("panic:\n got %q\nwant %q", got, want)
	}
	got = noReportReason("starting\nkilled: out of memory\n\n", errors.New("signal: killed"))
	if !strings.HasPrefix(got, "no report (signal: killed): killed: out of memory") {
		t.Errorf("no panic: %q", got)
	}
}

func TestFocusAnchorsOneSpec(t *testing.T) {
	// fileName must keep two different tests apart and stay short.
	a := fileName("[sig-node] Pods should get a host IP [NodeConformance] [Conformance]")
	b := fileName("[sig-node] Pods should get a host IP v6 [NodeConformance] [Conformance]")
	if a == b || strings.ContainsAny(a, "[] /") {
		t.Errorf("file names %q and %q", a, b)
	}
	long1, long2 := fileName(strings.Repeat("x", 400)+"1"), fileName(strings.Repeat("x", 400)+"2")
	if len(long1) > 150 || long1 == long2 {
		t.Errorf("long names %q and %q", long1, long2)
	}
}

func TestLongestFirst(t *testing.T) {
	names := []string{"a", "b [Slow]", "c", "d", "e"}
	prev := map[string]time.Duration{"a": time.Second, "c": time.Minute, "d": time.Second}
	longestFirst(names, prev)
	want := []string{"b [Slow]", "e", "c", "a", "d"}
	if !slices.Equal(names, want) {
		t.Errorf("got %q, want %q", names, want)
	}
}

// TestTestTimeout: [Slow] tests and the long ones the suite does not tag
// get the slow timeout, every other test the default one.
func TestTestTimeout(t *testing.T) {
	const timeout, slow = 5 * time.Minute, 15 * time.Minute
	for name, want := range map[string]time.Duration{
		"[sig-apps] CronJob should not schedule jobs when suspended [Slow] [Conformance]": slow,
		waitsOutPodStart[0]: slow,
		"[sig-node] Probing container should have monotonically increasing restart count [NodeConformance] [Conformance]":            slow,
		"[sig-scheduling] SchedulerPredicates [Serial] validates that NodeSelector is respected if matching [Conformance]":           timeout,
		"[sig-node] Probing container should *not* be restarted with a /healthz http liveness probe [NodeConformance] [Conformance]": timeout,
	} {
		if got := testTimeout(name, timeout, slow); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
