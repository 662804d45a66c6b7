package linux

import (
	"errors"
	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/container"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func ptr[T any](v T) *T { return &v }

func testPod(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) (*corev1.Pod, *corev1.Container) {
	c := &corev1.Container{Name: "app", SecurityContext: sc}
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1"},
		Spec:     &corev1.PodSpec{SecurityContext: psc, Containers: []*corev1.Container{c}},
	}, c
}

func TestContainerSecurity(t *testing.T) {
	def := container.DefaultSecurity()
	for _, tc := range []struct {
		name      string
		psc       *corev1.PodSecurityContext
		sc        *corev1.SecurityContext
		imageUser string
		opts      seccompOptions
		check     func(t *testing.T, s *container.Security)
	}{
		{name: "nothing set: the defaults, unconfined (kubelet without --seccomp-default)", check: func(t *testing.T, s *container.Security) {
			if !slices.Equal(s.Capabilities, container.DefaultCapabilities) || !slices.Equal(s.MaskedPaths, def.MaskedPaths) ||
				!slices.Equal(s.ReadonlyPaths, def.ReadonlyPaths) || s.Seccomp != nil || s.NoNewPrivileges || s.User != "" || s.Privileged {
				t.Errorf("security = %+v, want the defaults", s)
			}
		}},
		{name: "image USER when runAsUser is unset", imageUser: "nginx:www", check: func(t *testing.T, s *container.Security) {
			if s.User != "nginx:www" || s.GID != nil {
				t.Errorf("user %q gid %v", s.User, s.GID)
			}
		}},
		{name: "container runAsUser over pod's over image's; runAsGroup; fsGroup then supplementalGroups",
			psc:       &corev1.PodSecurityContext{RunAsUser: ptr[int64](1), RunAsGroup: ptr[int64](2), FsGroup: ptr[int64](3), SupplementalGroups: []int64{4, 3}},
			sc:        &corev1.SecurityContext{RunAsUser: ptr[int64](1000)},
			imageUser: "nginx",
			check: func(t *testing.T, s *container.Security) {
				if s.User != "1000" || s.GID == nil || *s.GID != 2 || !slices.Equal(s.AdditionalGids, []uint32{3, 4}) {
					t.Errorf("user %q gid %v groups %v", s.User, s.GID, s.AdditionalGids)
				}
			}},
		{name: "drop ALL, add NET_BIND_SERVICE",
			sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}, Add: []string{"NET_BIND_SERVICE"}}},
			check: func(t *testing.T, s *container.Security) {
				if !slices.Equal(s.Capabilities, []string{"CAP_NET_BIND_SERVICE"}) {
					t.Errorf("caps = %v", s.Capabilities)
				}
			}},
		{name: "add ALL, drop CHOWN",
			sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []string{"ALL"}, Drop: []string{"CHOWN"}}},
			check: func(t *testing.T, s *container.Security) {
				if slices.Contains(s.Capabilities, "CAP_CHOWN") || !slices.Contains(s.Capabilities, "CAP_SYS_ADMIN") && slices.Contains(container.AllCapabilities(), "CAP_SYS_ADMIN") {
					t.Errorf("caps = %v", s.Capabilities)
				}
			}},
		{name: "add SYS_TIME, drop NET_RAW",
			sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []string{"SYS_TIME"}, Drop: []string{"NET_RAW"}}},
			check: func(t *testing.T, s *container.Security) {
				want := slices.DeleteFunc(append(slices.Clone(container.DefaultCapabilities), "CAP_SYS_TIME"), func(c string) bool { return c == "CAP_NET_RAW" })
				if !slices.Equal(s.Capabilities, want) {
					t.Errorf("caps = %v, want %v", s.Capabilities, want)
				}
			}},
		{name: "privileged: all capabilities, devices, nothing masked, no seccomp even with --seccomp-default",
			sc: &corev1.SecurityContext{Privileged: ptr(true)}, opts: seccompOptions{defaultRuntime: true},
			check: func(t *testing.T, s *container.Security) {
				if !s.Privileged || !slices.Equal(s.Capabilities, container.AllCapabilities()) || s.MaskedPaths != nil || s.ReadonlyPaths != nil || s.Seccomp != nil {
					t.Errorf("security = %+v", s)
				}
			}},
		{name: "allowPrivilegeEscalation false sets no_new_privs", sc: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)},
			check: func(t *testing.T, s *container.Security) {
				if !s.NoNewPrivileges {
					t.Error("no_new_privs unset")
				}
			}},
		{name: "allowPrivilegeEscalation true or unset: no no_new_privs (kubelet's AddNoNewPrivileges)", sc: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(true)},
			check: func(t *testing.T, s *container.Security) {
				if s.NoNewPrivileges {
					t.Error("no_new_privs set")
				}
			}},
		{name: "readOnlyRootFilesystem", sc: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr(true)},
			check: func(t *testing.T, s *container.Security) {
				if !s.ReadonlyRootfs {
					t.Error("root writable")
				}
			}},
		{name: "procMount Unmasked", sc: &corev1.SecurityContext{ProcMount: "Unmasked"},
			check: func(t *testing.T, s *container.Security) {
				if s.MaskedPaths != nil || s.ReadonlyPaths != nil {
					t.Errorf("masked %v readonly %v", s.MaskedPaths, s.ReadonlyPaths)
				}
			}},
		{name: "pod RuntimeDefault", psc: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}},
			check: func(t *testing.T, s *container.Security) {
				if len(s.Seccomp) < 100 {
					t.Errorf("filter of %d instructions", len(s.Seccomp))
				}
			}},
		{name: "--seccomp-default, container Unconfined", sc: &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: "Unconfined"}},
			opts: seccompOptions{defaultRuntime: true},
			check: func(t *testing.T, s *container.Security) {
				if s.Seccomp != nil {
					t.Error("filtered")
				}
			}},
		{name: "--seccomp-default, nothing set", opts: seccompOptions{defaultRuntime: true},
			check: func(t *testing.T, s *container.Security) {
				if s.Seccomp == nil {
					t.Error("unfiltered")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd, c := testPod(tc.psc, tc.sc)
			s, err := containerSecurity(pd, c, tc.imageUser, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestSeccompLocalhost(t *testing.T) {
	root := t.TempDir()
	prof := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["keyctl","unshare"],"action":"SCMP_ACT_ERRNO"}]}`
	if err := os.WriteFile(filepath.Join(root, "deny.json"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, profile string
		ok            bool
	}{
		{"a profile under the root", "deny.json", true},
		{"missing", "nope.json", false},
		{"escaping the root", "../deny.json", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd, c := testPod(nil, &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: "Localhost", LocalhostProfile: tc.profile}})
			s, err := containerSecurity(pd, c, "", seccompOptions{root: root})
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, nodeagent.ErrCreateContainer) {
				t.Errorf("err = %v, want CreateContainerError", err)
			}
			if tc.ok && len(s.Seccomp) == 0 {
				t.Error("no filter")
			}
		})
	}
}

// kubelet's verifyRunAsNonRoot messages, word for word.
func TestRunAsNonRoot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		psc       *corev1.PodSecurityContext
		sc        *corev1.SecurityContext
		imageUser string
		want      string // "" = allowed
	}{
		{name: "root image", psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)},
			want: `CreateContainerConfigError: container has runAsNonRoot and image will run as root (pod: "web_default(u1)", container: app)`},
		{name: "image USER 0:0", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true)}, imageUser: "0:0",
			want: `CreateContainerConfigError: container has runAsNonRoot and image will run as root (pod: "web_default(u1)", container: app)`},
		{name: "non-numeric image user", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true)}, imageUser: "nginx",
			want: `CreateContainerConfigError: container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: "web_default(u1)", container: app)`},
		{name: "runAsUser 0", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](0)},
			want: `CreateContainerConfigError: container's runAsUser breaks non-root policy (pod: "web_default(u1)", container: app)`},
		{name: "runAsUser 1000 over a root image", psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](1000)}},
		{name: "numeric image user", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true)}, imageUser: "65534"},
		{name: "container false over pod true", psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}, sc: &corev1.SecurityContext{RunAsNonRoot: ptr(false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd, c := testPod(tc.psc, tc.sc)
			_, err := containerSecurity(pd, c, tc.imageUser, seccompOptions{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			case tc.want != "" && !errors.Is(err, nodeagent.ErrCreateContainerConfig):
				t.Fatalf("err = %v is not CreateContainerConfigError", err)
			}
		})
	}
}

func TestApplyFSGroup(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	gid := int64(os.Getgid()) // a group this user may chown to without root
	if os.Geteuid() == 0 {
		gid = 4242 // another than the files': the change must show
	}
	if err := applyFSGroup(dir, &gid, "", false); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"sub": os.ModeDir | os.ModeSetgid | 0o770, "sub/f": 0o660} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", p, fi.Mode(), want)
		}
		if g := fi.Sys().(*syscall.Stat_t).Gid; int64(g) != gid {
			t.Errorf("%s group = %d, want %d", p, g, gid)
		}
	}
	if err := applyFSGroup(dir, nil, "", false); err != nil {
		t.Errorf("no fsGroup: %v", err)
	}
}

// TestApplyFSGroupStaysInTheVolume: a link in the volume (a container may
// make one, or swap an entry for one while the volume is walked) never
// carries the group or the mode change to a file outside it.
func TestApplyFSGroupStaysInTheVolume(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	gid := int64(os.Getgid())
	if err := applyFSGroup(dir, &gid, "", false); err != nil {
		t.Fatal(err)
	}
	// The walk skips links; the change itself opens beneath the root and
	// through no link, which a swap between the walk and the change meets.
	root, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := setGroupBeneath(root, "link", int(gid), 0o660); err != nil {
		t.Fatal(err)
	}
	if err := setGroupBeneath(root, "../"+filepath.Base(dir)+"/link", int(gid), 0o660); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("the file outside the volume: %v, %v; want mode 0600 untouched", fi.Mode(), err)
	}
}

// TestFSGroupChangePolicy: OnRootMismatch skips the walk when the volume's
// root already has the group, its permissions and setgid (kubelet's
// requiresPermissionChange); Always, or a root that differs, walks.
func TestFSGroupChangePolicy(t *testing.T) {
	gid := int64(os.Getgid())
	for _, tc := range []struct {
		name     string
		policy   string
		rootMode os.FileMode // the root's mode before (its group is gid)
		readOnly bool
		walked   bool
	}{
		{"Always walks an owned root", "Always", os.ModeSetgid | 0o770, false, true},
		{"unset walks an owned root", "", os.ModeSetgid | 0o770, false, true},
		{"OnRootMismatch skips an owned root", "OnRootMismatch", os.ModeSetgid | 0o775, false, false},
		{"OnRootMismatch walks a root without setgid", "OnRootMismatch", 0o770, false, true},
		{"OnRootMismatch walks a root without group write", "OnRootMismatch", os.ModeSetgid | 0o750, false, true},
		{"OnRootMismatch read-only needs only group read", "OnRootMismatch", os.ModeSetgid | 0o750, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, "f")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.rootMode); err != nil {
				t.Fatal(err)
			}
			if err := applyFSGroup(dir, &gid, tc.policy, tc.readOnly); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if walked := fi.Mode().Perm() != 0o600; walked != tc.walked {
				t.Errorf("file mode %v: walked = %v, want %v", fi.Mode(), walked, tc.walked)
			}
		})
	}
}

// TestIdentityOutOfRange: ids outside 0..2^31-1 are refused, never wrapped
// into another user (-1 would be uid 4294967295).
func TestIdentityOutOfRange(t *testing.T) {
	neg, big := int64(-1), int64(1<<31)
	for _, tc := range []struct {
		name string
		psc  *corev1.PodSecurityContext
		sc   *corev1.SecurityContext
		want string
	}{
		{"runAsUser -1", nil, &corev1.SecurityContext{RunAsUser: &neg}, "runAsUser -1 is out of range"},
		{"runAsGroup 2^31", &corev1.PodSecurityContext{RunAsGroup: &big}, nil, "runAsGroup 2147483648 is out of range"},
		{"a supplemental group -5", &corev1.PodSecurityContext{SupplementalGroups: []int64{-5}}, nil, "group -5 is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sec container.Security
			err := withIdentity(&sec, tc.psc, tc.sc, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("withIdentity: %v, want %q", err, tc.want)
			}
		})
	}
}
