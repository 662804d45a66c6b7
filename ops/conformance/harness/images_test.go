package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestImagesRun builds the e2e images and runs their programs in a chroot
// of each image's filesystem: busybox's wget and nc, agnhost, and the
// host tools copied into agnhost's image, which must find their shared
// libraries there. Needs root (chroot) and the inputs make conformance
// builds: CONFORMANCE_AGNHOST, CONFORMANCE_BUSYBOX, CONFORMANCE_K8S_DIR.
func TestImagesRun(t *testing.T) {
	in := imageInputs{
		agnhost: os.Getenv("CONFORMANCE_AGNHOST"), busybox: os.Getenv("CONFORMANCE_BUSYBOX"), nnp: os.Getenv("CONFORMANCE_NNP"),
		k8sDir: os.Getenv("CONFORMANCE_K8S_DIR"), hostTools: hostTools,
		sampleAPIServer: os.Getenv("CONFORMANCE_SAMPLE_APISERVER"), etcd: os.Getenv("CONFORMANCE_ETCD"),
	}
	if in.agnhost == "" || in.busybox == "" || in.nnp == "" || in.k8sDir == "" {
		t.Skip("CONFORMANCE_AGNHOST, CONFORMANCE_BUSYBOX, CONFORMANCE_NNP and CONFORMANCE_K8S_DIR not set (make conformance-check sets them)")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	ctx := context.Background()
	imgs, err := e2eImages(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"e2e-test-images/agnhost:2.56", "e2e-test-images/busybox:1.37.0-1", "pause:3.10.1", "e2e-test-images/nginx:1.14-4", "e2e-test-images/jessie-dnsutils:1.7"} {
		if imgs[ref] == nil {
			t.Fatalf("no image %s", ref)
		}
	}

	// An HTTP server on loopback for wget and curl.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the host") })}
	go srv.Serve(l)
	defer srv.Close()
	url := "http://" + l.Addr().String() + "/"

	busybox := unpack(t, imgs["e2e-test-images/busybox:1.37.0-1"])
	nonewprivs := unpack(t, imgs["e2e-test-images/nonewprivs:1.3"])
	agnhost := unpack(t, imgs["e2e-test-images/agnhost:2.56"])
	httpd := unpack(t, imgs["e2e-test-images/httpd:2.4.38-4"])
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hp := port(free)
	free.Close()
	// The httpd image's web server as its entrypoint runs it, on a free
	// loopback port; the case below makes the StatefulSet tests' moves of
	// index.html: 200, 404, 200.
	srvCmd := exec.Command("/bin/httpd", "-f", "-p", "127.0.0.1:"+hp, "-h", "/usr/local/apache2/htdocs")
	srvCmd.SysProcAttr = &syscall.SysProcAttr{Chroot: httpd}
	srvCmd.Dir = "/"
	if err := srvCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvCmd.Process.Kill(); _ = srvCmd.Wait() }()
	get := "wget -q -O- http://127.0.0.1:" + hp + "/index.html"
	t.Run("httpd stops on SIGTERM as PID 1", func(t *testing.T) { httpdStops(t, imgs["e2e-test-images/httpd:2.4.38-4"], httpd) })
	httpdScript := "for i in 1 2 3 4 5 6 7 8 9 10; do " + get + " && break; sleep 0.2; done; " +
		"mv -v /usr/local/apache2/htdocs/index.html /tmp/ && { " + get + " || echo gone; }; " +
		"mv -v /tmp/index.html /usr/local/apache2/htdocs/ && " + get
	dnsutils := unpack(t, imgs["e2e-test-images/jessie-dnsutils:1.7"])
	cases := []struct {
		name, root string
		argv       []string
		want       string
	}{
		{"busybox wget", busybox, []string{"/bin/wget", "-q", "-O-", url}, "hello from the host"},
		{"busybox sh", busybox, []string{"/bin/sh", "-c", "echo $((6*7))"}, "42"},
		// A ConfigMap key as a variable name (envFrom): the shell passes it
		// on as upstream's busybox does, so `sh -c env` prints it.
		{"busybox sh -c env", busybox, []string{"/bin/env", "data-1=value-1", "p-data-1=value-1", "/bin/sh", "-c",
			"/bin/sh -c env | grep -x data-1=value-1; /bin/sh -c env | grep -x p-data-1=value-1"}, "data-1=value-1\np-data-1=value-1"},
		{"busybox nslookup of a file entry", busybox, []string{"/bin/sh", "-c", "echo '127.0.0.1 pf-test.local' > /etc/hosts; /bin/wget -q -O- http://pf-test.local:" + port(l) + "/"}, "hello from the host"},
		{"agnhost", agnhost, []string{"/agnhost", "--help"}, "netexec"},
		{"agnhost curl", agnhost, []string{"/usr/bin/curl", "-q", "-s", "--connect-timeout", "2", url}, "hello from the host"},
		{"agnhost nc", agnhost, []string{"/bin/sh", "-c", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 127.0.0.1 " + port(l)}, "hello from the host"},
		// The Services tests' probe: the shell runs the nc PATH finds
		// (netcat-openbsd, which has -t), not busybox's applet.
		{"agnhost nc -t", agnhost, []string{"/bin/sh", "-c", "command -v nc; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -v -t -w 2 127.0.0.1 " + port(l)}, "/usr/bin/nc\n"},
		{"agnhost dig", agnhost, []string{"/usr/bin/dig", "-v"}, "DiG"},
		{"agnhost bash", agnhost, []string{"/usr/bin/bash", "-c", "echo ${BASH_VERSINFO[0]}"}, ""},
		// The DNS tests' probe: dig, and getent reading the pod's /etc/hosts.
		{"jessie-dnsutils dig", dnsutils, []string{"/bin/sh", "-c", "dig -v 2>&1"}, "DiG"},
		{"jessie-dnsutils getent", dnsutils, []string{"/bin/sh", "-c", "echo '10.1.2.3 pf-test.local' > /etc/hosts; test -n \"$(getent hosts pf-test.local)\" && echo OK; for i in `seq 1 2`; do echo $i; done | awk '{s+=$1} END {print s}'"}, "OK\n3"},
		{"nonewprivs nnp", nonewprivs, []string{"/usr/local/bin/nnp"}, "Effective uid: 0"},
		{"httpd serves htdocs", httpd, []string{"/bin/sh", "-c", httpdScript},
			"It works!</h1></body></html>\n'/usr/local/apache2/htdocs/index.html' -> '/tmp/index.html'\nwget: server returned error: HTTP/1.1 404 Not Found\ngone\n'/tmp/index.html' -> '/usr/local/apache2/htdocs/index.html'\n<html><body><h1>It works!"},
		{"agnhost user", agnhost, []string{"/bin/sh", "-c", "id user-defined-in-image"}, "group-defined-in-image"},
	}
	// The Aggregator test's images, when their programs are given: the
	// entrypoint of sample-apiserver's, and the etcd command the test runs.
	if in.sampleAPIServer != "" && in.etcd != "" {
		sample := unpack(t, imgs["e2e-test-images/sample-apiserver:1.29.2"])
		etcd := unpack(t, imgs["etcd:3.6.4-0"])
		cases = append(cases,
			struct {
				name, root string
				argv       []string
				want       string
			}{"sample-apiserver", sample, []string{"/sample-apiserver", "--help"}, "--etcd-servers"},
			struct {
				name, root string
				argv       []string
				want       string
			}{"etcd", etcd, []string{"/usr/local/bin/etcd", "--version"}, "etcd Version: 3.6."})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.root}
			cmd.Dir = "/"
			cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.argv, err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("%v printed %q, want %q in it", c.argv, out, c.want)
			}
		})
	}
}

func port(l net.Listener) string { return strings.TrimPrefix(l.Addr().String(), "127.0.0.1:") }

// unpack writes img's single layer to a temporary directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := t.TempDir()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return root
}

// httpdStops runs the httpd image's entrypoint as PID 1 of a new PID and
// network namespace, as a container's init, and sends it SIGTERM, as a
// graceful deletion does: it must exit 0 (upstream's Apache stops on
// SIGTERM). busybox's httpd alone as PID 1 ignores SIGTERM and would run
// until it is killed.
func httpdStops(t *testing.T, img v1.Image, root string) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...)
	// A container has /dev/null (the shell opens it for a background
	// job's stdin; without it busybox's ash fails the job at once).
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, 1<<8|3 /* makedev(1, 3) */); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNET}
	cmd.Dir = "/"
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Signalled once the init started httpd (a child of its own), so that
	// it has had the time to set up its signal handling.
	children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(children); len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("%v after SIGTERM: %v (%s); want exit 0", argv, err, out.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("%v still running 20s after SIGTERM (%s)", argv, out.String())
	}
}
