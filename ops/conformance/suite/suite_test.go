// Package suite is the upstream Kubernetes e2e suite (k8s.io/kubernetes
// test/e2e at the version go.mod requires), built as podflow's own test
// binary with the groups that hold [Conformance] tests. It is
// test/e2e/e2e_test.go of that release, less the groups without a
// Conformance test (autoscaling, cloud, dra, lifecycle, windows, the CSI
// mock and external-driver storage suites) and the progress reporter, an
// unexported variable of package e2e that only posts to a URL.
package suite

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"

	"k8s.io/component-base/version"
	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"

	// test sources: every group with a [Conformance] test
	_ "k8s.io/kubernetes/test/e2e/apimachinery"
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/architecture"
	_ "k8s.io/kubernetes/test/e2e/auth"
	_ "k8s.io/kubernetes/test/e2e/common"
	_ "k8s.io/kubernetes/test/e2e/instrumentation"
	_ "k8s.io/kubernetes/test/e2e/kubectl"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/node"
	_ "k8s.io/kubernetes/test/e2e/scheduling"
	_ "k8s.io/kubernetes/test/e2e/storage"

	// reconfigure framework
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

// junitRan is --podflow.junit-ran: a JUnit report of the specs that ran
// only. podflow's harness runs one spec per process; ginkgo's own
// --junit-report would list every other spec of the suite as skipped.
var junitRan = flag.String("podflow.junit-ran", "", "write a JUnit report of the specs that ran (not those the focus filtered out) to this file")

var _ = ginkgo.ReportAfterSuite("podflow JUnit report of the specs that ran", func(report ginkgo.Report) {
	if *junitRan == "" {
		return
	}
	ran := report.SpecReports[:0:0]
	for _, s := range report.SpecReports {
		// A spec the focus filtered out is skipped without a message;
		// one that skipped itself (e2eskipper) says why.
		if s.State == types.SpecStateSkipped && s.Failure.Message == "" {
			continue
		}
		if s.LeafNodeType != types.NodeTypeIt && s.State.Is(types.SpecStatePassed) {
			continue
		}
		ran = append(ran, s)
	}
	report.SpecReports = ran
	if err := reporters.GenerateJUnitReportWithConfig(report, *junitRan, reporters.JunitReportConfig{
		OmitTimelinesForSpecState: types.SpecStatePassed | types.SpecStateSkipped,
		OmitSpecLabels:            true, // the labels are in the spec texts too
	}); err != nil {
		fmt.Fprintf(os.Stderr, "podflow.junit-ran: %v\n", err)
	}
})

func TestMain(m *testing.M) {
	versionFlag := flag.CommandLine.Bool("version", false, "Displays version information.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
