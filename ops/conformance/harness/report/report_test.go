package report_test

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/conformance/harness/report"
)

// sample is shaped as ginkgo v2.21's JUnit reporter writes a report: a
// passed suite node, then specs in each state.
const sample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="0" errors="1" failures="2" time="321.5">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="5" disabled="0" skipped="1" errors="1" failures="2" time="321.5" timestamp="2026-12-06T01:00:00">
    <properties><property name="SuiteSucceeded" value="false"></property></properties>
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.5"></testcase>
    <testcase name="[It] [sig-api-machinery] ResourceQuota should create a ResourceQuota [Conformance]" classname="Kubernetes e2e suite" status="failed" time="0.8">
      <failure message="failed to create resource quota&#xA;  the server could not find the requested resource" type="failed">[FAILED] failed to create resource quota
In [It] at: quota.go:100</failure>
      <system-err>STEP: Creating a ResourceQuota @ 12/06/26 01:00:02.000</system-err>
    </testcase>
    <testcase name="[It] [sig-storage] Projected secret should be consumable [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="interrupted" time="300.0">
      <error message="Interrupted by Timeout" type="interrupted">[INTERRUPTED] Interrupted by Timeout</error>
      <system-err>STEP: Creating a pod to test consume secrets @ 12/06/26 01:00:03.000&#xA;I1206 waiting&#xA;STEP: Waiting for pod pod-projected-secrets-ab12c to be running @ 12/06/26 01:00:04.100&#xA;</system-err>
    </testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for pods for Subdomain [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Requires at least 2 nodes"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Job should run a job to completion [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="15.0">
      <failure message="" type="timedout">[TIMEDOUT] A node timeout occurred

In [It] at: job.go:10</failure>
    </testcase>
  </testsuite>
</testsuites>`

func TestParseJUnit(t *testing.T) {
	rs, err := report.ParseJUnit(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []report.Result{
		{Name: "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", SIG: "node", State: "passed", Duration: 4500 * time.Millisecond},
		{Name: "[sig-api-machinery] ResourceQuota should create a ResourceQuota [Conformance]", SIG: "api-machinery", State: "failed", Duration: 800 * time.Millisecond,
			Reason: "failed to create resource quota the server could not find the requested resource"},
		{Name: "[sig-storage] Projected secret should be consumable [NodeConformance] [Conformance]", SIG: "storage", State: "interrupted", Duration: 300 * time.Second,
			Reason: "interrupted in step: Waiting for pod pod-projected-secrets-ab12c to be running"},
		{Name: "[sig-network] DNS should provide DNS for pods for Subdomain [Conformance]", SIG: "network", State: "skipped", Duration: 100 * time.Millisecond,
			Reason: "skipped - Requires at least 2 nodes"},
		{Name: "[sig-apps] Job should run a job to completion [Conformance]", SIG: "apps", State: "timedout", Duration: 15 * time.Second,
			Reason: "timedout: A node timeout occurred"},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d results, want %d: %+v", len(rs), len(want), rs)
	}
	for i, w := range want {
		g := rs[i]
		g.Detail = ""
		if g != w {
			t.Errorf("result %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if !strings.Contains(rs[1].Detail, "In [It] at: quota.go:100") {
		t.Errorf("failure detail lost the failure body: %q", rs[1].Detail)
	}
}

func TestParseJUnitFailedSuiteNodeKept(t *testing.T) {
	x := `<testsuites><testsuite name="s">
<testcase name="[SynchronizedBeforeSuite]" status="failed" time="1"><failure message="no nodes are schedulable" type="failed">x</failure></testcase>
</testsuite></testsuites>`
	rs, err := report.ParseJUnit(strings.NewReader(x))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Name != "[SynchronizedBeforeSuite]" || rs[0].Reason != "no nodes are schedulable" || !rs[0].Failed() {
		t.Fatalf("got %+v", rs)
	}
}

func TestParseJUnitErrors(t *testing.T) {
	if _, err := report.ParseJUnit(strings.NewReader(`<testsuites><testsuite name="s"></testsuite></testsuites>`)); !errors.Is(err, report.ErrNoTests) {
		t.Errorf("empty report: %v, want ErrNoTests", err)
	}
	if _, err := report.ParseJUnit(strings.NewReader(`<testsuites><testsuite`)); err == nil || errors.Is(err, report.ErrNoTests) {
		t.Errorf("truncated report: %v, want a parse error", err)
	}
}

func TestTotalsAndTable(t *testing.T) {
	rs, err := report.ParseJUnit(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	perSIG, all := report.Totals(rs)
	if all != (report.Total{Passed: 1, Failed: 3, Skipped: 1}) {
		t.Errorf("overall %+v", all)
	}
	if len(perSIG) != 5 || perSIG[0].SIG != "api-machinery" || perSIG[0].Failed != 1 {
		t.Errorf("per SIG %+v", perSIG)
	}
	var b bytes.Buffer
	if err := report.WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^failed +1s +\[sig-api-machinery\] ResourceQuota should create a ResourceQuota \[Conformance\] +failed to create resource quota`,
		`(?m)^ +sig-node +1 +0 +0 +1/1 \(100 %\)`,
		`(?m)^ +total +1 +3 +1 +1/4 \(25 %\)`,
	} {
		if !regexp.MustCompile(want).MatchString(b.String()) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCausesGroupNormalisedReasons(t *testing.T) {
	rs := []report.Result{
		{Name: "[sig-node] a", State: "failed", Reason: `pods "pod-ab1cd" is forbidden: seLinuxOptions not supported`},
		{Name: "[sig-node] b", State: "failed", Reason: `pods "pod-xy9zq" is forbidden: seLinuxOptions not supported`},
		{Name: "[sig-apps] c", State: "failed", Reason: `timed out after 300s waiting for 10.0.0.3:80`},
		{Name: "[sig-apps] f", State: "failed", Reason: `the server could not find the requested resource (/apis/apps/v1/namespaces/job-42/jobs.k8s.io) at 0x1f2e`},
		{Name: "[sig-apps] d", State: "passed"},
		{Name: "[sig-apps] e", State: "skipped", Reason: "skipped - needs 2 nodes"},
	}
	cs := report.Causes(rs)
	if len(cs) != 3 {
		t.Fatalf("got %d causes, want 3: %+v", len(cs), cs)
	}
	if cs[0].Pattern != `pods "pod-X" is forbidden: seLinuxOptions not supported` || len(cs[0].Tests) != 2 {
		t.Errorf("first cause %+v", cs[0])
	}
	if cs[1].Pattern != `the server could not find the requested resource (/apis/apps/v1/namespaces/NS/jobs.k8s.io) at 0xX` {
		t.Errorf("second cause %+v", cs[1])
	}
	if cs[2].Pattern != `timed out after D waiting for IP` {
		t.Errorf("third cause %+v", cs[2])
	}
	var b bytes.Buffer
	if err := report.WriteCauses(&b, cs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "   2  pods \"pod-X\" is forbidden: seLinuxOptions not supported  (node 2)") {
		t.Errorf("causes:\n%s", b.String())
	}
}

func TestWriteJUnitRoundTrip(t *testing.T) {
	rs, err := report.ParseJUnit(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.WriteJUnit(&b, "podflow", rs); err != nil {
		t.Fatal(err)
	}
	back, err := report.ParseJUnit(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(rs) {
		t.Fatalf("round trip: %d results, want %d", len(back), len(rs))
	}
	for i := range rs {
		if back[i].Name != rs[i].Name || back[i].State != rs[i].State || back[i].Failed() != rs[i].Failed() {
			t.Errorf("round trip %d: got %+v want %+v", i, back[i], rs[i])
		}
	}
}

// timedOut is the failure body ginkgo writes when --ginkgo.timeout ends a
// spec (shortened from a real run): the progress report, then the failure
// the node recorded on its way out.
const timedOut = `<testsuites><testsuite name="s">
<testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" status="timedout" time="90">
<failure message="A suite timeout occurred" type="timedout">[TIMEDOUT] A suite timeout occurred
In [BeforeEach] at: set up framework | framework.go:200 @ 12/06/26 02:16:17.649

This is the Progress Report generated when the suite timeout occurred:
  [sig-node] Pods should get a host IP [NodeConformance] [Conformance] (Spec Runtime: 1m29.641s)
    In [BeforeEach] (Node Runtime: 1m29.641s)
      At [By Step] Building a namespace api object, basename pods (Step Runtime: 1m29.641s)

      Spec Goroutine
      goroutine 127 [select]
        k8s.io/client-go/tools/watch.UntilWithoutRetry({0x51b0e90, 0x22cb3496ee70})
      > k8s.io/kubernetes/test/e2e/framework.waitForServiceAccountInNamespace({0x7f2da2e261d8, 0x22cb382300c0}, 0x1bf08eb000)
      > k8s.io/kubernetes/test/e2e/framework.CreateTestingNS({0x7f2da2e261d8, 0x22cb382300c0})
%s</failure>
<system-err>STEP: Building a namespace api object, basename pods @ 12/06/26 02:14:48.008
[TIMEDOUT] in [BeforeEach] - set up framework | framework.go:200 @ 12/06/26 02:16:17.649
STEP: Destroying namespace "pods-7521" for this suite. - /x/framework.go:360 @ 12/06/26 02:16:17.667
</system-err>
</testcase></testsuite></testsuites>`

func TestTimedOutReason(t *testing.T) {
	recorded := `
[FAILED] A suite timeout occurred and then the following failure was recorded in the timedout node before it exited:
wait for service account "default" in namespace "pods-7521": timed out waiting for the condition
In [BeforeEach] at: framework.go:263`
	for _, c := range []struct{ name, tail, want string }{
		{"failure recorded on the way out", recorded, `timedout: wait for service account "default" in namespace "pods-7521": timed out waiting for the condition`},
		{"progress report only", "", `timedout in step: Building a namespace api object, basename pods (in k8s.io/kubernetes/test/e2e/framework.waitForServiceAccountInNamespace)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs, err := report.ParseJUnit(strings.NewReader(strings.Replace(timedOut, "%s", c.tail, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if rs[0].Reason != c.want {
				t.Errorf("reason\n got %q\nwant %q", rs[0].Reason, c.want)
			}
		})
	}
}

// podDump is the progress report of a test whose pod never started
// (shortened from a real run).
const podDump = `<testsuites><testsuite name="s">
<testcase name="[It] [sig-node] ConfigMap should be consumable via the environment [NodeConformance] [Conformance]" status="timedout" time="300">
<failure message="A suite timeout occurred" type="timedout">[TIMEDOUT] A suite timeout occurred
      At [By Step] Creating a pod to test consume configMaps (Step Runtime: 4m58.534s)

      Begin Additional Progress Reports &gt;&gt;
        expected pod to be Succeeded or Failed, got instead:
            &lt;*v1.Pod | 0x18711c4f1b08&gt;:
                metadata:
                  name: pod-configmaps-4588c2f8
                status:
                  containerStatuses:
                  - image: 127.0.0.1:23231/e2e-test-images/busybox:1.37.0-1
                    lastState: {}
                    name: env-test
                    state:
                      waiting:
                        message: 'get configmap configmap-3533/configmap-test-e8912c55:
                          raftstore: reader "node-linux-node-1" may not read "/registry/configmaps/configmap-3533/configmap-test-e8912c55"'
                        reason: CreateContainerConfigError
                  hostIP: 127.0.0.1
                  phase: Pending
      &lt;&lt; End Additional Progress Reports

[FAILED] A suite timeout occurred and then the following failure was recorded in the timedout node before it exited:
Failed to delete pod "pod-configmaps-4588c2f8": client rate limiter Wait returned an error: context canceled
In [It] at: pod_client.go:235
</failure>
</testcase></testsuite></testsuites>`

func TestTimedOutPodState(t *testing.T) {
	rs, err := report.ParseJUnit(strings.NewReader(podDump))
	if err != nil {
		t.Fatal(err)
	}
	want := `timedout in step: Creating a pod to test consume configMaps: expected pod to be Succeeded or Failed, got instead: (pod Pending) container waiting CreateContainerConfigError: get configmap configmap-3533/configmap-test-e8912c55: raftstore: reader "node-linux-node-1" may not read "/registry/configmaps/configmap-3533/configmap-test-e8912c55"`
	if rs[0].Reason != want {
		t.Errorf("reason\n got %q\nwant %q", rs[0].Reason, want)
	}
}
