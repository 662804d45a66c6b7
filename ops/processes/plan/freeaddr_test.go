package plan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ports handed to child processes come from below the ephemeral range, so
// no outgoing connection can hold them by the time the child binds.
func TestFreeAddrBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	addrs, err := FreeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q", a)
		}
		port, _ := strconv.Atoi(p)
		if low-pickLow >= pickSpan && (port < pickLow || port >= low) {
			t.Errorf("port %d outside [%d, %d)", port, pickLow, low)
		}
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("the free address %s cannot be bound: %v", a, err)
		}
		l.Close()
	}
}

// TestFreeAddrNeverRepeats: 600 separate picks, each released at once as a
// picked port is until its process binds it, are all distinct. Without the
// record of ports handed out, 600 picks from the ~12,000 ports below the
// ephemeral range repeat one almost surely (about 15 pairs expected).
func TestFreeAddrNeverRepeats(t *testing.T) {
	if ephemeralLow()-pickLow < pickSpan {
		t.Skip("no room below the ephemeral port range on this machine: picks come from the kernel")
	}
	seen := map[string]bool{}
	for range 600 {
		a, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

const claimChildEnv = "PODFLOW_PLAN_CLAIM_CHILD"

// TestClaimChild is the other process of TestFreeAddrClaimsAcrossProcesses:
// it picks ports, prints them, and holds them until its stdin closes.
func TestClaimChild(t *testing.T) {
	if os.Getenv(claimChildEnv) == "" {
		t.Skip("the child process of TestFreeAddrClaimsAcrossProcesses")
	}
	addrs, err := FreeAddrs(100)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(strings.Join(addrs, " "))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestFreeAddrClaimsAcrossProcesses: a port another live process picked
// is not picked here, and is once that process is gone. Without the claim
// on the machine every one of the other's 100 ports is claimable here.
func TestFreeAddrClaimsAcrossProcesses(t *testing.T) {
	if os.Getenv(claimChildEnv) != "" {
		t.Skip("in the child")
	}
	if fi, err := os.Stat(claimDir); err == nil && fi.Mode().Perm()&0o002 == 0 && os.Geteuid() != 0 {
		t.Skipf("%s is not writable here: ports are claimed within a process only", claimDir)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClaimChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), claimChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child printed no ports: %v", err)
	}
	var ports []int
	for _, a := range strings.Fields(line) {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("child address %q", a)
		}
		n, _ := strconv.Atoi(p)
		ports = append(ports, n)
	}
	if len(ports) != 100 {
		t.Fatalf("the child printed %d ports: %q", len(ports), line)
	}
	for _, p := range ports {
		if claim(p) {
			t.Fatalf("port %d, held by the child (pid %d), was claimed here too", p, cmd.Process.Pid)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	for _, p := range ports {
		if !claim(p) {
			t.Fatalf("port %d is still claimed after the child exited", p)
		}
	}
}

// TestClaimFollowsNoPlantedLink: the claim directory is shared with every
// user, so a symbolic link planted there, as the directory or as a port's
// file, must not make a claim create or open a file where it points.
// Without O_NOFOLLOW the first case creates the link's target; without the
// directory check the second creates a file in the linked directory.
func TestClaimFollowsNoPlantedLink(t *testing.T) {
	saved := claimDir
	t.Cleanup(func() { claimDir = saved })
	root := t.TempDir()

	claimDir = filepath.Join(root, "ports")
	if err := os.Mkdir(claimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, "target")
	if err := os.Symlink(target, filepath.Join(claimDir, "10001")); err != nil {
		t.Fatal(err)
	}
	if f, _ := claimOnMachine(10001); f != nil {
		f.Close()
		t.Error("a claim opened a file through a planted link")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a claim created the planted link's target: %v", err)
	}

	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	claimDir = filepath.Join(root, "linked-ports")
	if err := os.Symlink(elsewhere, claimDir); err != nil {
		t.Fatal(err)
	}
	if f, _ := claimOnMachine(10002); f != nil {
		f.Close()
		t.Error("a claim opened a file in a linked directory")
	}
	if names, _ := os.ReadDir(elsewhere); len(names) != 0 {
		t.Errorf("a claim created %v in the directory a planted link points to", names)
	}

	// A real directory of this user's still takes claims.
	claimDir = filepath.Join(root, "ports")
	f, ok := claimOnMachine(10003)
	if f == nil || !ok {
		t.Fatalf("no claim in a directory of this user's: %v, %v", f, ok)
	}
	f.Close()
}
