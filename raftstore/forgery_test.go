package raftstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// Environment of the forging child of TestRaftForgeryFromAnotherUID.
const forgeTargetsEnv = "PODFLOW_RAFTSTORE_FORGE_TARGETS" // JSON []forgeTarget; set only in the child

// forgeTarget is one replica the child attacks: its raft address, and what
// anyone may learn of it (its term and last log index, as `podflow store
// status` prints them).
type forgeTarget struct {
	Addr      string `json:"addr"`
	Term      uint64 `json:"term"`
	LastIndex uint64 `json:"lastIndex"`
	Key       string `json:"key"`
}

// forgeResult is what the child reports per target.
type forgeResult struct {
	Addr      string `json:"addr"`
	Reachable bool   `json:"reachable"` // a TCP connection to the port opened
	Accepted  bool   `json:"accepted"`  // raft answered Success to the forged entry
	Err       string `json:"err,omitempty"`
}

// TestRaftForgeryChild is the attacker of TestRaftForgeryFromAnotherUID:
// run as another uid, it speaks hashicorp/raft's NetworkTransport in plain
// TCP to every replica: AppendEntries with a term far ahead of the
// cluster's, carrying one storev1.Command that PUTs a ClusterRoleBinding,
// committed at once (LeaderCommitIndex). The previous entry's term is
// guessed downwards from the replica's term, as an attacker would.
func TestRaftForgeryChild(t *testing.T) {
	spec := os.Getenv(forgeTargetsEnv)
	if spec == "" {
		t.Skip("the child process of TestRaftForgeryFromAnotherUID")
	}
	var targets []forgeTarget
	if err := json.Unmarshal([]byte(spec), &targets); err != nil {
		t.Fatal(err)
	}
	tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 3*time.Second, hclog.New(&hclog.LoggerOptions{Output: io.Discard}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	self := []byte(tr.LocalAddr())
	out := json.NewEncoder(os.Stdout)
	for _, tg := range targets {
		res := forgeResult{Addr: tg.Addr}
		if c, err := net.DialTimeout("tcp", tg.Addr, 3*time.Second); err == nil {
			res.Reachable = true
			c.Close()
		}
		data, err := vt.Marshal(&storev1.Command{
			IdempotencyKey: "forged-" + tg.Addr, Kind: storev1.WriteKind_WRITE_KIND_TXN,
			Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: tg.Key, Value: []byte("forged: system:masters for nobody")}},
		})
		if err != nil {
			t.Fatal(err)
		}
		term := tg.Term + 1000
		for prevTerm := tg.Term; prevTerm >= 1 && !res.Accepted; prevTerm-- {
			var resp raft.AppendEntriesResponse
			err := tr.AppendEntries("rogue", raft.ServerAddress(tg.Addr), &raft.AppendEntriesRequest{
				RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: self},
				Term:         term,
				PrevLogEntry: tg.LastIndex, PrevLogTerm: prevTerm,
				Entries:           []*raft.Log{{Index: tg.LastIndex + 1, Term: term, Type: raft.LogCommand, Data: data}},
				LeaderCommitIndex: tg.LastIndex + 1,
			}, &resp)
			if err != nil {
				res.Err = err.Error()
				break
			}
			res.Accepted = resp.Success
		}
		if err := out.Encode(res); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRaftForgeryFromAnotherUID is the attack of issue 38's first item: a
// local user who is not the store's speaks raft to a live 3-replica cluster
// on loopback and tries to append and commit a forged ClusterRoleBinding
// past the api stage, RBAC and the store's write ACL. Every replica must
// refuse it before raft decodes a byte: the key is on no replica, and the
// leader keeps its leadership and its term. The attacker reached every
// port (else the test could not fail).
func TestRaftForgeryFromAnotherUID(t *testing.T) {
	if os.Getenv(forgeTargetsEnv) != "" {
		t.Skip("in the child")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the attacker as another uid (nobody)")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to run the attacker as: %v", err)
	}
	uid, _ := strconv.ParseUint(nobody.Uid, 10, 32)
	gid, _ := strconv.ParseUint(nobody.Gid, 10, 32)

	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/registry/pods/default/p%d", i), []byte("pod")); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitForReplication(t)
	before := c.Node(c.Leader(t)).Stats()

	const forged = "/registry/clusterrolebindings/forged-admin"
	var targets []forgeTarget
	for _, i := range c.Live() {
		s := c.Node(i).Stats()
		targets = append(targets, forgeTarget{Addr: c.Node(i).RaftAddr(), Term: s.Term, LastIndex: s.LastLogIndex, Key: forged})
	}
	spec, _ := json.Marshal(targets)

	// The test binary's own directory is root's (0700): the attacker runs
	// a copy in a directory it may enter.
	dir, err := os.MkdirTemp("", "pfraft-forge-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "raftstore.test")
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestRaftForgeryChild$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), forgeTargetsEnv+"="+string(spec), "HOME="+dir, "TMPDIR="+dir, "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("attacker as uid %d: %v\nstdout:\n%s\nstderr:\n%s", uid, err, stdout.String(), stderr.String())
	}
	var results []forgeResult
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r forgeResult
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Addr != "" {
			results = append(results, r)
		}
	}
	if len(results) != len(targets) {
		t.Fatalf("attacker reported %d of %d replicas:\n%s\n%s", len(results), len(targets), stdout.String(), stderr.String())
	}
	for _, r := range results {
		t.Logf("attacker (uid %d) against %s: reachable %v, accepted %v, error %q", uid, r.Addr, r.Reachable, r.Accepted, r.Err)
		if !r.Reachable {
			t.Fatalf("the attacker could not reach %s at all: the test proves nothing", r.Addr)
		}
		if r.Accepted {
			t.Errorf("replica at %s accepted a forged AppendEntries from uid %d", r.Addr, uid)
		}
	}

	// A write after the attack reaches every replica: had the forged entry
	// been committed anywhere, it would be applied by now.
	if _, err := cl.Create(ctx, "/registry/pods/default/after", []byte("pod")); err != nil {
		t.Fatalf("write after the attack: %v", err)
	}
	c.WaitForReplication(t)
	for _, i := range c.Live() {
		if kv, _ := c.Node(i).LocalGet(forged); kv != nil {
			t.Errorf("replica %s holds the forged key %s = %q", c.Node(i).ID(), forged, kv.Value)
		}
	}
	// The forged RPCs carry a term 1,000 above the replicas': a replica
	// that decoded one would have taken that term. Elections under load may
	// raise the term by a few, never by 1,000.
	for _, i := range c.Live() {
		if after := c.Node(i).Stats(); after.Term >= before.Term+1000 {
			t.Errorf("replica %s: term %d -> %d: the forged RPCs reached raft", after.ID, before.Term, after.Term)
		}
	}
}
