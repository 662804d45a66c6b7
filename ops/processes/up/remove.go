package up

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// PeerRemovalSubject is where the first server's up takes the removal of
// a NATS server from the JetStream meta group (only the admin may publish
// there): it holds the system account's user.
const PeerRemovalSubject = "podflow.up.nats-peer-remove"

// serveNATSPeerRemovals answers removal requests (a server's name) until
// ctx ends.
func (r *hostRun) serveNATSPeerRemovals(ctx context.Context) error {
	sub, err := r.conn.NATS().Subscribe(PeerRemovalSubject, func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp := "ok"
		sys, err := r.systemConn(rctx)
		if err == nil {
			err = removeNATSPeer(rctx, sys, string(m.Data), r.out)
			sys.Close()
		}
		if err != nil {
			resp = err.Error()
		}
		_ = m.Respond([]byte(resp))
	})
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe() }()
	return nil
}

// RemoveHost removes host name from the cluster (podflow node remove, up
// --leave): its store replica from the raft configuration, its NATS server
// from the JetStream meta group (through the first server), its Nodes,
// their Leases and its host record. The host's processes should be
// stopped: a NATS server still running would join again.
func RemoveHost(ctx context.Context, conn *bus.Conn, kv *raftstore.Client, name string, out io.Writer) error {
	b, err := kv.Get(ctx, HostPrefix+name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("no host %q in the cluster", name)
	}
	if err != nil {
		return err
	}
	var h HostRecord
	if err := json.Unmarshal(b.Value, &h); err != nil {
		return err
	}
	if !h.Agent {
		if err := kv.RemoveServer(ctx, name); err != nil {
			return fmt.Errorf("remove store replica %s: %w", name, err)
		}
		fmt.Fprintf(out, "store replica %s removed\n", name)
		rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		msg, err := conn.Request(rctx, PeerRemovalSubject, []byte(name))
		cancel()
		if err != nil {
			return fmt.Errorf("remove NATS server %s: the first server did not answer: %w", name, err)
		}
		if string(msg.Data) != "ok" {
			return fmt.Errorf("remove NATS server %s: %s", name, msg.Data)
		}
		fmt.Fprintf(out, "NATS server %s removed from the JetStream meta group\n", name)
	}
	nodes, _, err := kv.List(ctx, objects.Nodes.Prefix(""))
	if err != nil {
		return err
	}
	for _, n := range nodes {
		node := strings.TrimPrefix(n.Key, objects.Nodes.Prefix(""))
		if node != name && !strings.HasPrefix(node, name+"-sim-") {
			continue
		}
		if _, err := kv.Delete(ctx, n.Key, 0); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
		_, _ = kv.Delete(ctx, objects.Leases.Key(pipeline.NodeLeaseNamespace, node), 0)
		fmt.Fprintf(out, "node/%s deleted\n", node)
	}
	if _, err := kv.Delete(ctx, b.Key, b.ModRevision); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return err
	}
	fmt.Fprintf(out, "host %s removed\n", name)
	return nil
}

// leave is up --leave: this host, stopped, removes itself from its
// cluster through the other servers.
func leave(ctx context.Context, o *Options, out io.Writer) error {
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	l := plan.Layout{Dir: dir}
	unlock, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("%w: stop this host's podflow up before it leaves", err)
	}
	defer unlock()
	h, found, err := readHostFile(l)
	if err != nil || !found {
		return fmt.Errorf("%s holds no host of a cluster of several (%v)", dir, err)
	}
	if h.First {
		return errors.New("the first server holds the cluster's CA and serves its joins: it does not leave")
	}
	cfgPath := l.ClientConfig()
	if h.Agent {
		return errors.New("a worker holds no admin identity: run podflow node remove " + h.Name + " on a server")
	}
	cc, err := client.LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	bc, err := bus.ReadClientConfig(cc.NATS)
	if err != nil {
		return err
	}
	bc.URLs, bc.Name = without(h.ServerURLs, plan.HostOptions{Advertise: h.Advertise, NATSPort: plan.DefaultHostNATSPort}.NATSURL()), "podflow-up-leave-"+h.Name
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(cctx, bc)
	if err != nil {
		return err
	}
	defer conn.Close()
	kv, err := raftstore.NewClient(conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		return err
	}
	if err := RemoveHost(ctx, conn, kv, h.Name, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "up: %s left the cluster; remove %s to forget it here\n", h.Name, dir)
	return nil
}
