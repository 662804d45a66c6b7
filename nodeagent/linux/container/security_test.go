package container_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// status is the part of /proc/self/status a container reports.
const status = `grep -E '^(Uid|Gid|Groups|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t ' ' '; `

// runSecured runs script with sec and returns its output, and whether it
// exited 0.
func runSecured(t *testing.T, sec *container.Security, script string) (string, bool) {
	t.Helper()
	spec := newSpec(t, "sh", "-c", script)
	spec.Security = sec
	c := start(t, spec)
	st, err := c.Wait(ctx20(t))
	if err != nil {
		t.Fatal(err)
	}
	return logText(t, spec.LogPath), st.ExitCode == 0
}

// field returns the value of a /proc/self/status line in out.
func field(out, name string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "<missing>"
}

func secWith(f func(*container.Security)) *container.Security {
	s := container.DefaultSecurity()
	f(&s)
	return &s
}

func privileged(s *container.Security) {
	s.Privileged, s.Capabilities, s.MaskedPaths, s.ReadonlyPaths = true, container.AllCapabilities(), nil, nil
}

// containerd's 14 default capabilities as a /proc mask.
const defaultCaps = "00000000a80425fb"

func TestSecurityIdentityAndCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  *container.Security
		want map[string]string
	}{
		{"default: root with containerd's capabilities", nil, map[string]string{
			"Uid": "0 0 0 0", "Gid": "0 0 0 0", "CapEff": defaultCaps, "CapBnd": defaultCaps, "NoNewPrivs": "0", "Seccomp": "0"}},
		{"runAsUser, runAsGroup, groups: no effective capability", secWith(func(s *container.Security) {
			gid := uint32(2000)
			s.User, s.GID, s.AdditionalGids = "1000", &gid, []uint32{3000, 2000}
		}), map[string]string{"Uid": "1000 1000 1000 1000", "Gid": "2000 2000 2000 2000", "Groups": "2000 3000", "CapEff": "0000000000000000", "CapBnd": defaultCaps}},
		{"drop ALL", secWith(func(s *container.Security) { s.Capabilities = nil }), map[string]string{
			"Uid": "0 0 0 0", "CapEff": "0000000000000000", "CapBnd": "0000000000000000"}},
		{"allowPrivilegeEscalation false", secWith(func(s *container.Security) { s.NoNewPrivileges = true }), map[string]string{"NoNewPrivs": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := runSecured(t, tc.sec, status)
			if !ok {
				t.Fatalf("container failed:\n%s", out)
			}
			for k, v := range tc.want {
				if got := field(out, k); got != v {
					t.Errorf("%s = %q, want %q\n%s", k, got, v, out)
				}
			}
		})
	}
}

// Each attack fails under the default and succeeds where the rule is off.
func TestSecurityAttacks(t *testing.T) {
	devMajMin := firstBlockDevice(t)
	userns := func(t *testing.T) *container.Security {
		prof, err := container.RuntimeDefaultSeccomp(container.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		bpf, err := container.CompileSeccomp(prof)
		if err != nil {
			t.Fatal(err)
		}
		return secWith(func(s *container.Security) { s.Seccomp = bpf })
	}
	for _, tc := range []struct {
		name         string
		attack       string
		guarded, off func(t *testing.T) *container.Security
		status       map[string]string // of the guarded container
	}{
		{
			name:    "open a block device made with mknod (device cgroup)",
			attack:  "mknod /dev/pfdisk b " + devMajMin + " && dd if=/dev/pfdisk of=/dev/null bs=512 count=1",
			guarded: func(*testing.T) *container.Security { return nil },
			off:     func(*testing.T) *container.Security { return secWith(privileged) },
		},
		{
			name:    "open a block device made on the rootfs (nodev)",
			attack:  "mknod /tmp/pfdisk b " + devMajMin + " && dd if=/tmp/pfdisk of=/dev/null bs=512 count=1",
			guarded: func(*testing.T) *container.Security { return nil },
			off:     func(*testing.T) *container.Security { return secWith(privileged) },
		},
		{
			name:    "write /proc/sysrq-trigger (read-only path)",
			attack:  "echo h > /proc/sysrq-trigger",
			guarded: func(*testing.T) *container.Security { return nil },
			off:     func(*testing.T) *container.Security { return secWith(privileged) },
		},
		{
			name:    "write /proc/sys/kernel/hostname (read-only /proc/sys)",
			attack:  "echo pfhacked > /proc/sys/kernel/hostname",
			guarded: func(*testing.T) *container.Security { return nil },
			off:     func(*testing.T) *container.Security { return secWith(privileged) },
		},
		{
			name:    "read /proc/timer_list (masked)",
			attack:  `test -n "$(head -c 10 /proc/timer_list)"`,
			guarded: func(*testing.T) *container.Security { return nil },
			off:     func(*testing.T) *container.Security { return secWith(privileged) },
		},
		{
			name:   "write the read-only root",
			attack: "touch /pfwritten",
			guarded: func(*testing.T) *container.Security {
				return secWith(func(s *container.Security) { s.ReadonlyRootfs = true })
			},
			off: func(*testing.T) *container.Security { return nil },
		},
		{
			name:    "unshare a user namespace (RuntimeDefault seccomp)",
			attack:  "unshare -U true",
			guarded: userns,
			off:     func(*testing.T) *container.Security { return nil }, // Unconfined
			status:  map[string]string{"Seccomp": "2"},
		},
		{
			name:   "run as non-root under no_new_privs and RuntimeDefault (no attack: it must start)",
			attack: "test $(id -u) = 1000",
			guarded: func(t *testing.T) *container.Security {
				s := userns(t)
				s.User, s.NoNewPrivileges = "1000", true
				return s
			},
			off:    func(*testing.T) *container.Security { return nil },
			status: map[string]string{"Seccomp": "2", "NoNewPrivs": "1", "Uid": "1000 1000 1000 1000"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.attack, "sysrq") {
				if _, err := os.Stat("/proc/sysrq-trigger"); err != nil {
					t.Skip("this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ)")
				}
			}
			out, ok := runSecured(t, tc.guarded(t), status+tc.attack)
			wantOK := strings.HasPrefix(tc.name, "run as non-root") // that one must start and report
			if ok != wantOK {
				t.Errorf("guarded: attack %q succeeded=%v:\n%s", tc.attack, ok, out)
			}
			for k, v := range tc.status {
				if got := field(out, k); got != v {
					t.Errorf("guarded %s = %q, want %q", k, got, v)
				}
			}
			if wantOK {
				return
			}
			if out, ok := runSecured(t, tc.off(t), tc.attack); !ok {
				t.Errorf("rule off: attack %q failed, so the test cannot tell:\n%s", tc.attack, out)
			}
		})
	}
}

// firstBlockDevice is "major minor" of a block device of this machine
// that this process can open (a loop device will do).
func firstBlockDevice(t *testing.T) string {
	b, err := os.ReadFile("/proc/partitions")
	if err != nil {
		t.Skip("needs /proc/partitions")
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		if dev, err := os.Open("/dev/" + f[3]); err == nil {
			dev.Close()
			return f[0] + " " + f[1]
		}
	}
	for _, p := range []string{"/dev/loop0", "/dev/loop1"} {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		if dev, err := os.Open(p); err == nil {
			dev.Close()
			return fmt.Sprintf("%d %d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	t.Skip("needs a block device this process can open")
	return ""
}

// Nothing of the agent leaks in: only stdio is open, the environment is
// the spec's (and HOME), RLIMIT_NOFILE is containerd's 1024.
func TestSecurityNoLeaks(t *testing.T) {
	t.Setenv("PODFLOW_AGENT_SECRET", "leaked")
	leak, err := os.Open("/proc/self/status") // an fd without close-on-exec? os.Open sets it; the init must not depend on that
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	out, ok := runSecured(t, nil, `ls /proc/self/fd | tr '\n' ' '; echo; env | sort | tr '\n' ' '; echo; ulimit -n; ls /dev | tr '\n' ' '`)
	if !ok {
		t.Fatalf("container failed:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 4 {
		t.Fatalf("output = %q", out)
	}
	if lines[0] != "0 1 2 3 " { // 3: ls's own directory
		t.Errorf("open fds = %q, want stdio only", lines[0])
	}
	if lines[1] != "GREETING=hello HOME=/ PATH=/bin PWD=/ SHLVL=1 " {
		t.Errorf("env = %q", lines[1])
	}
	if lines[2] != "1024" {
		t.Errorf("ulimit -n = %q, want 1024", lines[2])
	}
	if lines[3] != "core fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero " {
		t.Errorf("/dev = %q", lines[3])
	}
}

// Exec runs with the container's privileges and in all its namespaces, as
// runc exec: the exec'd shell is who the container is, sees the
// container's root, and is not the agent.
func TestExecWithContainerSecurity(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  *container.Security
		want map[string]string
	}{
		{"runAsUser 1000, drop ALL, no_new_privs, seccomp", secWith(func(s *container.Security) {
			prof, err := container.RuntimeDefaultSeccomp(nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Seccomp, err = container.CompileSeccomp(prof); err != nil {
				t.Fatal(err)
			}
			gid := uint32(2000)
			s.User, s.GID, s.AdditionalGids, s.Capabilities, s.NoNewPrivileges = "1000", &gid, []uint32{3000}, nil, true
		}), map[string]string{"Uid": "1000 1000 1000 1000", "Gid": "2000 2000 2000 2000", "Groups": "2000 3000",
			"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}},
		{"default", nil, map[string]string{"Uid": "0 0 0 0", "CapEff": defaultCaps, "CapBnd": defaultCaps, "NoNewPrivs": "0", "Seccomp": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(t, "sleep", "1000")
			spec.Security = tc.sec
			if err := os.WriteFile(filepath.Join(spec.Rootfs, "marker"), []byte("in the container\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c := start(t, spec)
			res, err := c.Exec(ctx20(t), []string{"sh", "-c", status + "cat /marker; cat /proc/1/cmdline; echo; readlink /proc/self/ns/mnt"}, []string{"PATH=/bin"}, "")
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %+v %v", res, err)
			}
			out := string(res.Output)
			for k, v := range tc.want {
				if got := field(out, k); got != v {
					t.Errorf("%s = %q, want %q\n%s", k, got, v, out)
				}
			}
			initMnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.State().PID))
			for _, want := range []string{"in the container", "sleep\x001000", initMnt} {
				if !strings.Contains(out, want) {
					t.Errorf("exec output lacks %q:\n%q", want, out)
				}
			}
		})
	}
}
