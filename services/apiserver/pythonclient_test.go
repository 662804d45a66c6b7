package apiserver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// debianPython is Debian's interpreter, which python3-kubernetes (make
// deps-os) is installed for.
const debianPython = "/usr/bin/python3"

// TestPythonClient drives the HTTPS API with the Python Kubernetes client
// (Debian's python3-kubernetes): create without apiVersion/kind, list
// with limit/_continue, watch.Watch().stream() seeing ADDED, MODIFIED,
// DELETED (it sends watch=True) — testdata/python_client.py.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	if err := exec.Command(debianPython, "-c", "import kubernetes").Run(); err != nil {
		t.Skipf("needs %s with python3-kubernetes (make deps-os): %v", debianPython, err)
	}
	s := startSystem(t, options{})
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, s.ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(debianPython, "testdata/python_client.py")
	cmd.Env = append(os.Environ(), "PODFLOW_URL="+s.url, "PODFLOW_CA="+ca, "PODFLOW_TOKEN="+adminToken)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
		t.Fatalf("python_client.py: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
