package pipeline_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs more tests at once than there are CPUs unless
// -test.parallel says otherwise: the package's tests mostly wait for what
// the bus must refuse (a publish, a request, a subscription), up to a
// second each, and use little CPU (a few seconds in all under -race).
// TestStageRoles alone is twenty subtests of seven seconds of such waits.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}
