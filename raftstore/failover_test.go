package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/linearize"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// waitAcks waits until counter reaches n.
func waitAcks(t *testing.T, counter *atomic.Int64, n int64) {
	t.Helper()
	raftstoretest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d acknowledged writes", n), func() bool { return counter.Load() >= n })
}

// killLeader kills the current leader, waits for another replica to lead,
// and restarts the old leader.
func killLeader(t *testing.T, c *raftstoretest.Cluster) {
	t.Helper()
	old := c.Leader(t)
	c.Kill(t, old)
	if l := c.Leader(t); l == old {
		t.Fatalf("killed leader %d leads again", old)
	}
	c.Restart(t, old)
}

// TestKillLeaderDuringWrites: after leader failures during a stream of
// writes, a new leader serves, every acknowledged write is present on every
// replica with its acknowledged revision, and no revision was given to two
// writes.
func TestKillLeaderDuringWrites(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	ctx := testCtx(t)
	type ack struct {
		key string
		rev int64
	}
	var (
		mu        sync.Mutex
		acked     []ack
		unknown   []string
		ackCount  atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		ambiguous atomic.Int64
	)
	for w := range 4 {
		cl := c.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("/k/w%d/%05d", w, i)
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				rev, err := cl.Create(octx, key, []byte(key))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, ack{key, rev})
					ackCount.Add(1)
				case errors.Is(err, raftstore.ErrIndeterminate):
					unknown = append(unknown, key)
					ambiguous.Add(1)
				case errors.Is(err, raftstore.ErrUnavailable):
				default:
					t.Errorf("create %s: %v", key, err)
				}
				mu.Unlock()
			}
		}()
	}
	waitAcks(t, &ackCount, 50)
	killLeader(t, c)
	waitAcks(t, &ackCount, ackCount.Load()+50)
	killLeader(t, c)
	waitAcks(t, &ackCount, ackCount.Load()+50)
	close(stop)
	wg.Wait()
	c.WaitForReplication(t)

	revs := map[int64]string{}
	for _, a := range acked {
		if other, dup := revs[a.rev]; dup {
			t.Fatalf("revision %d acknowledged for %s and %s", a.rev, other, a.key)
		}
		revs[a.rev] = a.key
	}
	for _, i := range c.Live() {
		n := c.Node(i)
		for _, a := range acked {
			kv, _ := n.LocalGet(a.key)
			if kv == nil || kv.ModRevision != a.rev || string(kv.Value) != a.key {
				t.Fatalf("replica %s: acknowledged %s@%d is %+v", n.ID(), a.key, a.rev, kv)
			}
		}
		all, _ := n.LocalList("/k/")
		seen := map[int64]bool{}
		for _, kv := range all {
			if seen[kv.ModRevision] {
				t.Fatalf("replica %s: revision %d used twice", n.ID(), kv.ModRevision)
			}
			seen[kv.ModRevision] = true
		}
	}
	t.Logf("%d acknowledged writes, %d indeterminate, leader now %d", len(acked), len(unknown), c.Leader(t))
}

// kvState is the porcupine model's state of one key; rev -1 means "exists
// with a revision not yet observed" (after a write of unknown outcome).
type kvState struct {
	exists bool
	value  string
	rev    int64
}

type opKind int

const (
	opGet opKind = iota
	opCreate
	opUpdate
)

type kvInput struct {
	op     opKind
	key    string
	value  string
	expect int64
}

type kvOutput struct {
	unknown  bool  // write outcome unknown (Indeterminate)
	code     error // nil, ErrNotFound, ErrAlreadyExists, ErrConflict
	value    string
	rev      int64
	observed bool
}

var kvModel = porcupine.NondeterministicModel{
	Partition: linearize.ByKey(func(in kvInput) string { return in.key }),
	Init:      func() []any { return []any{kvState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(kvState), in.(kvInput), out.(kvOutput)
		revMatches := func(want int64) bool { return s.rev == want || s.rev == -1 }
		switch i.op {
		case opGet:
			if errors.Is(o.code, raftstore.ErrNotFound) {
				if !s.exists {
					return []any{s}
				}
				return nil
			}
			if s.exists && s.value == o.value && revMatches(o.rev) {
				return []any{kvState{true, o.value, o.rev}}
			}
			return nil
		case opCreate:
			switch {
			case o.unknown:
				if !s.exists {
					return []any{s, kvState{true, i.value, -1}}
				}
				return []any{s}
			case o.code == nil:
				if !s.exists {
					return []any{kvState{true, i.value, o.rev}}
				}
			case errors.Is(o.code, raftstore.ErrAlreadyExists):
				if s.exists {
					return []any{s}
				}
			}
			return nil
		case opUpdate:
			switch {
			case o.unknown:
				if s.exists && revMatches(i.expect) {
					return []any{s, kvState{true, i.value, -1}}
				}
				return []any{s}
			case o.code == nil:
				if s.exists && revMatches(i.expect) && o.rev > i.expect {
					return []any{kvState{true, i.value, o.rev}}
				}
			case errors.Is(o.code, raftstore.ErrConflict):
				if s.exists && s.rev != i.expect {
					return []any{s}
				}
			case errors.Is(o.code, raftstore.ErrNotFound):
				if !s.exists {
					return []any{s}
				}
			}
			return nil
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(kvInput), out.(kvOutput)
		return fmt.Sprintf("%v(%s, %q, %d) -> %q@%d err=%v unknown=%v", i.op, i.key, i.value, i.expect, o.value, o.rev, o.code, o.unknown)
	},
}

// TestLinearizable records a few seconds of concurrent linearizable Gets,
// Creates and compare-and-swap Updates on a handful of keys while leaders
// are killed, and checks the history with porcupine.
func TestLinearizable(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	ctx := testCtx(t)
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		done    atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		extraID atomic.Int64
	)
	extraID.Store(1000)
	record := func(client int, in kvInput, out kvOutput, call int64) {
		ret := now()
		if out.unknown {
			// The write may take effect any time after its call.
			ret = math.MaxInt64 / 2
			client = int(extraID.Add(1))
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
		mu.Unlock()
		done.Add(1)
	}
	for client := range 6 {
		cl := c.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(client), 7))
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				octx, cancel := context.WithTimeout(ctx, 4*time.Second)
				call := now()
				kv, err := cl.Get(octx, key)
				switch {
				case err == nil:
					record(client, kvInput{op: opGet, key: key}, kvOutput{value: string(kv.Value), rev: kv.ModRevision}, call)
				case errors.Is(err, raftstore.ErrNotFound):
					record(client, kvInput{op: opGet, key: key}, kvOutput{code: raftstore.ErrNotFound}, call)
				default:
					cancel()
					continue // a failed read has no effect: leave it out
				}
				if rng.IntN(2) == 0 {
					cancel()
					continue
				}
				in := kvInput{op: opCreate, key: key, value: fmt.Sprintf("c%d-%d", client, seq)}
				if kv != nil {
					in = kvInput{op: opUpdate, key: key, value: in.value, expect: kv.ModRevision}
				}
				call = now()
				var rev int64
				if in.op == opCreate {
					rev, err = cl.Create(octx, key, []byte(in.value))
				} else {
					rev, err = cl.Update(octx, key, []byte(in.value), in.expect)
				}
				cancel()
				switch {
				case err == nil:
					record(client, in, kvOutput{rev: rev}, call)
				case errors.Is(err, raftstore.ErrIndeterminate):
					record(client, in, kvOutput{unknown: true}, call)
				case errors.Is(err, raftstore.ErrAlreadyExists), errors.Is(err, raftstore.ErrConflict), errors.Is(err, raftstore.ErrNotFound):
					var se *raftstore.Error
					errors.As(err, &se)
					record(client, in, kvOutput{code: se}, call)
				case errors.Is(err, raftstore.ErrUnavailable):
					// Never reached a leader: no effect.
				default:
					t.Errorf("write: %v", err)
				}
			}
		}()
	}
	var ops atomic.Int64
	waitOps := func(n int64) {
		raftstoretest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d operations", n), func() bool { return done.Load() >= n })
		ops.Store(done.Load())
	}
	waitOps(100)
	killLeader(t, c)
	waitOps(ops.Load() + 100)
	killLeader(t, c)
	waitOps(ops.Load() + 100)
	close(stop)
	wg.Wait()

	res, info := porcupine.CheckOperationsVerbose(kvModel.ToModel(), history, 30*time.Second)
	switch res {
	case porcupine.Illegal:
		_ = info
		for _, op := range history {
			t.Log(kvModel.DescribeOperation(op.Input, op.Output), op.Call, op.Return)
		}
		t.Fatalf("history of %d operations is not linearizable", len(history))
	case porcupine.Unknown:
		t.Fatalf("linearizability check of %d operations timed out", len(history))
	}
	t.Logf("%d operations linearizable", len(history))
}
