package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
)

// imageInputs are what the e2e images are assembled from.
type imageInputs struct {
	agnhost string // static agnhost, built from k8s.io/kubernetes/test/images/agnhost
	nnp     string // static nnp, built from k8s.io/kubernetes/test/images/nonewprivs
	busybox string // podflow's busybox (bin/busybox, make busybox)
	k8sDir  string // k8s.io/kubernetes module directory: test/images data files
	// sampleAPIServer and etcd are the static programs of the Aggregator
	// test's images (k8s.io/sample-apiserver and etcd's server, built in
	// ops/conformance/extra); either empty leaves both images out.
	sampleAPIServer, etcd string
	// hostTools are host programs copied with their shared libraries into
	// the agnhost image, where upstream's Alpine base has them.
	hostTools []string
}

// hostTools stand in for the Alpine packages of upstream's agnhost image
// (bind-tools, curl, netcat-openbsd, iproute2, bash, and musl-utils'
// getent) and for jessie-dnsutils' dnsutils and libc-bin; a missing one
// is left out with a warning.
var hostTools = []string{"/usr/bin/curl", "/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/host", "/usr/bin/nc.openbsd", "/usr/bin/bash", "/usr/sbin/ip", "/usr/bin/getent"}

// e2eImages returns the images of the suite's image list
// (test/utils/image/manifest.go) that podflow provides, by
// "repository:tag" under the registry that stands in for each of
// upstream's (repoList maps them).
func e2eImages(ctx context.Context, in imageInputs) (map[string]v1.Image, error) {
	bb, err := busyboxEntries(ctx, in.busybox, "bin")
	if err != nil {
		return nil, err
	}
	agn, err := os.ReadFile(in.agnhost)
	if err != nil {
		return nil, fmt.Errorf("agnhost binary: %w", err)
	}
	nnp, err := os.ReadFile(in.nnp)
	if err != nil {
		return nil, fmt.Errorf("nnp binary: %w", err)
	}
	read := func(rel string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		b, err = os.ReadFile(filepath.Join(in.k8sDir, rel))
		return b
	}
	crt, key := read("test/images/agnhost/porter/localhost.crt"), read("test/images/agnhost/porter/localhost.key")
	kitten, kittenJSON := read("test/images/kitten/html/kitten.jpg"), read("test/images/kitten/html/data.json")
	nautilus, nautilusJSON := read("test/images/nautilus/html/nautilus.jpg"), read("test/images/nautilus/html/data.json")
	if err != nil {
		return nil, fmt.Errorf("test image data of k8s.io/kubernetes: %w", err)
	}

	// busybox: podflow's busybox with the C library it links, if any.
	busybox := append(base(""), bb...)
	libs, err := sharedLibraries(ctx, in.busybox)
	if err != nil {
		return nil, err
	}
	busybox = append(busybox, libs...)

	// agnhost: upstream's layout (/agnhost, /agnhost-2, /uploads, the
	// porter's certificate, a user and group defined in the image) over
	// busybox, with the host's curl, dig, nc, bash and ip.
	agnhost := append(base("user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"), bb...)
	agnhost = append(agnhost, libs...)
	agnhost = append(agnhost,
		imagebuild.File("agnhost", 0o755, agn), imagebuild.Symlink("agnhost-2", "agnhost"),
		imagebuild.Dir("uploads", 0o755), imagebuild.Dir("home/user-defined-in-image", 0o755),
		imagebuild.File("localhost.crt", 0o644, crt), imagebuild.File("localhost.key", 0o600, key),
	)
	seen := map[string]bool{}
	for _, e := range agnhost {
		seen[e.Name] = true
	}
	for _, tool := range in.hostTools {
		if _, err := os.Stat(tool); err != nil {
			fmt.Fprintf(os.Stderr, "images: %s not on this host: left out of agnhost (install it: see docs/conformance.md)\n", tool)
			continue
		}
		body, err := os.ReadFile(tool)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(tool, "/")
		agnhost = append(agnhost, imagebuild.File(name, 0o755, body))
		if tool == "/usr/bin/nc.openbsd" {
			agnhost = append(agnhost, imagebuild.Symlink("usr/bin/nc", "nc.openbsd"))
		}
		tl, err := sharedLibraries(ctx, tool)
		if err != nil {
			return nil, err
		}
		for _, l := range tl {
			if !seen[l.Name] {
				seen[l.Name] = true
				agnhost = append(agnhost, l)
			}
		}
	}
	rootfs := map[string][]imagebuild.Entry{
		"agnhost": agnhost,
		"busybox": busybox,
		"kitten": append(slices.Clone(agnhost),
			imagebuild.File("kitten.jpg", 0o644, kitten), imagebuild.File("data.json", 0o644, kittenJSON)),
		// nonewprivs: upstream's nnp, setuid root, over busybox.
		"nonewprivs": append(slices.Clone(busybox), imagebuild.File("usr/local/bin/nnp", 0o4755, nnp)),
		"nautilus": append(slices.Clone(agnhost),
			imagebuild.File("nautilus.jpg", 0o644, nautilus), imagebuild.File("data.json", 0o644, nautilusJSON)),
		// httpd: upstream's document root and default page over agnhost.
		"httpd": append(slices.Clone(agnhost), imagebuild.Dir("usr/local/apache2", 0o755),
			imagebuild.Dir(httpdDocs, 0o755), imagebuild.File(httpdDocs+"/index.html", 0o644, []byte(httpdIndex))),
	}
	type spec struct {
		rootfs     string // key of rootfs
		entrypoint []string
		cmd        []string
		user       string
	}
	// The web servers (httpd, nginx) answer GET / on port 80. nginx is
	// agnhost's netexec; httpd is busybox's httpd serving upstream's
	// document root, /usr/local/apache2/htdocs, with its index.html: the
	// StatefulSet tests make a pod unready by moving index.html out of it
	// (its readiness probe then gets 404) and ready again by moving it back.
	web := spec{rootfs: "agnhost", entrypoint: []string{"/agnhost", "netexec", "--http-port=80", "--udp-port=-1"}}
	//
	// busybox's httpd installs no SIGTERM handler, and the kernel drops a
	// signal without one sent to a PID namespace's init: as the
	// container's PID 1 it would outlive every graceful deletion until
	// the SIGKILL at the end of the grace period (30s), where upstream's
	// Apache stops at once. A shell with a trap is PID 1 instead: SIGTERM
	// ends it with 0, as it ends Apache, and the kernel then kills httpd.
	httpd := spec{rootfs: "httpd", entrypoint: []string{"/bin/sh", "-c", httpdInit}}
	bbox := spec{rootfs: "busybox", cmd: []string{"sh"}}
	specs := map[string]spec{
		"e2e-test-images/agnhost:2.56":     {rootfs: "agnhost", entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}},
		"e2e-test-images/busybox:1.37.0-1": bbox,
		"e2e-test-images/nonroot:1.4":      {rootfs: "busybox", cmd: []string{"sh"}, user: "1234"},
		"e2e-test-images/nonewprivs:1.3":   {rootfs: "nonewprivs", cmd: []string{"nnp"}},
		"e2e-test-images/httpd:2.4.38-4":   httpd,
		"e2e-test-images/httpd:2.4.39-4":   httpd,
		"e2e-test-images/nginx:1.14-4":     web,
		"e2e-test-images/nginx:1.15-4":     web,
		"e2e-test-images/kitten:1.7":       {rootfs: "kitten", entrypoint: []string{"/agnhost"}, cmd: []string{"test-webserver"}},
		// jessie-dnsutils: the DNS tests' prober runs "sh -c" with dig,
		// getent, seq and awk, all in the agnhost image.
		"e2e-test-images/jessie-dnsutils:1.7": {rootfs: "agnhost", cmd: []string{"sh"}},
		"e2e-test-images/nautilus:1.7":        {rootfs: "nautilus", entrypoint: []string{"/agnhost"}, cmd: []string{"test-webserver"}},
		// registry.k8s.io/pause, for tests that name it: agnhost's pause
		// does what /pause does.
		"pause:3.10.1": {rootfs: "agnhost", entrypoint: []string{"/agnhost", "pause"}},
		// docker.io/library names in kubectl's tests.
		"library/busybox:1.29":   bbox,
		"library/busybox:latest": bbox,
		"library/nginx:latest":   web,
	}
	// The Aggregator test's extension API server: upstream's
	// sample-apiserver image runs /sample-apiserver, and its etcd image
	// has /usr/local/bin/etcd (the test names it as the command). Both
	// are static Go programs, over busybox for a shell to debug with.
	if in.sampleAPIServer != "" && in.etcd != "" {
		sample, err := os.ReadFile(in.sampleAPIServer)
		if err != nil {
			return nil, fmt.Errorf("sample-apiserver binary: %w", err)
		}
		etcd, err := os.ReadFile(in.etcd)
		if err != nil {
			return nil, fmt.Errorf("etcd binary: %w", err)
		}
		rootfs["sample-apiserver"] = append(slices.Clone(busybox), imagebuild.File("sample-apiserver", 0o755, sample))
		rootfs["etcd"] = append(slices.Clone(busybox), imagebuild.File("usr/local/bin/etcd", 0o755, etcd),
			imagebuild.Dir("var/lib/etcd", 0o700))
		specs["e2e-test-images/sample-apiserver:1.29.2"] = spec{rootfs: "sample-apiserver", entrypoint: []string{"/sample-apiserver"}}
		specs["etcd:3.6.4-0"] = spec{rootfs: "etcd", entrypoint: []string{"/usr/local/bin/etcd"}}
	}
	layers := map[string]v1.Layer{}
	for k, entries := range rootfs {
		if layers[k], err = imagebuild.Layer(entries); err != nil {
			return nil, fmt.Errorf("rootfs %s: %w", k, err)
		}
	}
	out := map[string]v1.Image{}
	for ref, s := range specs {
		img, err := imagebuild.Image(v1.Config{
			Entrypoint: s.entrypoint, Cmd: s.cmd, User: s.user, WorkingDir: "/",
			Env: []string{imagebuild.DefaultPath},
		}, layers[s.rootfs])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", ref, err)
		}
		out[ref] = img
	}
	return out, nil
}

// httpdInit is the httpd images' entrypoint script (see e2eImages),
// httpdDocs their document root (upstream's), and httpdIndex its
// index.html (upstream's default page).
const (
	httpdInit  = "trap 'exit 0' TERM; /bin/httpd -f -p 80 -h /" + httpdDocs + " & wait $!"
	httpdDocs  = "usr/local/apache2/htdocs"
	httpdIndex = "<html><body><h1>It works!</h1></body></html>\n"
)

// base is the directories a runtime mounts over, and a passwd and group
// with root, nobody and extra (a passwd line).
func base(extraUser string) []imagebuild.Entry {
	groups := "root:x:0:\nnogroup:x:65534:\n"
	if extraUser != "" {
		groups += "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
	}
	return []imagebuild.Entry{
		imagebuild.Dir("bin", 0o755), imagebuild.Dir("dev", 0o755), imagebuild.Dir("etc", 0o755),
		imagebuild.Dir("proc", 0o555), imagebuild.Dir("sys", 0o555), imagebuild.Dir("tmp", 0o1777),
		imagebuild.Dir("root", 0o700), imagebuild.Dir("var", 0o755), imagebuild.Dir("usr", 0o755),
		imagebuild.Dir("usr/bin", 0o755), imagebuild.Dir("usr/sbin", 0o755),
		imagebuild.Dir("usr/local", 0o755), imagebuild.Dir("usr/local/bin", 0o755),
		imagebuild.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"+extraUser)),
		imagebuild.File("etc/group", 0o644, []byte(groups)),
		imagebuild.File("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
	}
}

// busyboxEntries are bin (a busybox binary) under dir as dir/busybox with
// a symlink per applet it lists.
func busyboxEntries(ctx context.Context, bin, dir string) ([]imagebuild.Entry, error) {
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("busybox binary: %w", err)
	}
	out, err := exec.CommandContext(ctx, bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bin, err)
	}
	applets := strings.Fields(string(out))
	sort.Strings(applets)
	entries := []imagebuild.Entry{imagebuild.File(dir+"/busybox", 0o755, body)}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		entries = append(entries, imagebuild.Symlink(dir+"/"+a, "busybox"))
	}
	return entries, nil
}

// sharedLibraries returns the shared libraries bin loads (ldd), the
// dynamic loader included, as files at the paths ldd names.
func sharedLibraries(ctx context.Context, bin string) ([]imagebuild.Entry, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && bytes.Contains(ee.Stderr, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var entries []imagebuild.Entry
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var path string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			path = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			path = f[0]
		default:
			continue // linux-vdso
		}
		body, err := os.ReadFile(path) // through symlinks
		if err != nil {
			return nil, fmt.Errorf("library of %s: %w", bin, err)
		}
		entries = append(entries, imagebuild.File(strings.TrimPrefix(path, "/"), 0o755, body))
	}
	return entries, nil
}

// repoList is the KUBE_TEST_REPO_LIST file that maps upstream's registries
// to podflow's registry at addr. The invalid and authenticated registries
// keep their upstream names: tests expect pulls from them to fail.
func repoList(addr string) string {
	return fmt.Sprintf(`promoterE2eRegistry: %[1]s/e2e-test-images
gcRegistry: %[1]s
gcEtcdRegistry: %[1]s
buildImageRegistry: %[1]s/build-image
sigStorageRegistry: %[1]s/sig-storage
dockerLibraryRegistry: %[1]s/library
`, addr)
}

func runImages(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var in imageInputs
	registry := fs.String("registry", "", "registry address (127.0.0.1:PORT)")
	registryFile := fs.String("registry-file", "", "read the registry address from this file (DATA/registry.addr of podflow up)")
	fs.StringVar(&in.agnhost, "agnhost", "", "static agnhost binary (required)")
	fs.StringVar(&in.busybox, "busybox", "", "podflow's busybox binary (make busybox; required)")
	fs.StringVar(&in.nnp, "nnp", "", "static nnp binary of test/images/nonewprivs (required)")
	fs.StringVar(&in.k8sDir, "k8s-dir", "", "k8s.io/kubernetes module directory (required)")
	fs.StringVar(&in.sampleAPIServer, "sample-apiserver", "", "static sample-apiserver binary (k8s.io/sample-apiserver; with --etcd, the Aggregator test's images)")
	fs.StringVar(&in.etcd, "etcd", "", "static etcd binary (go.etcd.io/etcd/server/v3)")
	repoListOut := fs.String("repo-list", "", "also write the KUBE_TEST_REPO_LIST file for this registry here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	in.hostTools = hostTools
	if in.agnhost == "" || in.busybox == "" || in.nnp == "" || in.k8sDir == "" {
		return errors.New("images: --agnhost, --busybox, --nnp and --k8s-dir are required")
	}
	addr := *registry
	if *registryFile != "" {
		b, err := os.ReadFile(*registryFile)
		if err != nil {
			return err
		}
		addr = strings.TrimSpace(string(b))
	}
	if addr == "" {
		return errors.New("images: --registry or --registry-file is required")
	}
	return pushImages(ctx, addr, in, *repoListOut)
}

func pushImages(ctx context.Context, addr string, in imageInputs, repoListOut string) error {
	imgs, err := e2eImages(ctx, in)
	if err != nil {
		return err
	}
	if err := imagebuild.Push(ctx, addr, imgs); err != nil {
		return err
	}
	if repoListOut != "" {
		if err := os.WriteFile(repoListOut, []byte(repoList(addr)), 0o644); err != nil {
			return err
		}
	}
	return nil
}
