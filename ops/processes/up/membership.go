package up

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/podflow/podflow/bus"
)

// MaxVoters is the largest number of store voters: etcd's and Nomad's
// advice is three or five; more voters only slow writes down.
const MaxVoters = 5

// WantVoters is how many of servers store replicas vote: the largest odd
// number not above servers and MaxVoters (an even number tolerates no
// more failures than the odd number below it, and needs one more vote).
// The others are non-voters (etcd's learners): a second server, a
// fourth, a sixth and beyond five.
func WantVoters(servers int) int {
	n := min(servers, MaxVoters)
	if n > 0 && n%2 == 0 {
		n--
	}
	return n
}

// Membership is one step of the first server's membership reconciliation:
// what to change, given the store's configuration (id → suffrage) and the
// servers whose replicas answer (in the order they joined).
type Membership struct {
	AddNonvoters []string // servers to add as non-voters
	Promote      []string // non-voters to make voters
}

// PlanMembership computes the changes that bring the store to
// WantVoters of the servers answering: each new server joins as a
// non-voter; non-voters are promoted, in joining order, while voters are
// fewer than WantVoters.
func PlanMembership(config map[string]string, answering []string) Membership {
	var m Membership
	voters := 0
	for _, s := range config {
		if s == "Voter" {
			voters++
		}
	}
	servers := 0
	for _, name := range answering {
		if _, ok := config[name]; !ok {
			m.AddNonvoters = append(m.AddNonvoters, name)
		}
		servers++
	}
	want := WantVoters(max(servers, voters))
	for _, name := range answering {
		if voters >= want {
			break
		}
		if s, ok := config[name]; ok && s != "Voter" {
			m.Promote = append(m.Promote, name)
			voters++
		}
	}
	return m
}

// reconcileMembership runs on the first server until ctx ends: every two
// seconds, servers whose store replica answers join the store as
// non-voters and are promoted to keep WantVoters voters; once three
// servers answer, the seed NATS server is retired and the streams become
// R3.
func (r *hostRun) reconcileMembership(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.membershipPass(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(r.out, "up: membership: %v\n", err)
		}
	}
}

func (r *hostRun) membershipPass(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hosts, err := r.hosts(ctx)
	if err != nil {
		return err
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	sts, err := r.kv.Status(sctx, time.Second)
	scancel()
	if err != nil {
		return err
	}
	config := map[string]string{}
	up := map[string]bool{}
	for _, s := range sts {
		up[s.ID] = true
		if s.State == "Leader" {
			for _, srv := range s.Servers {
				config[srv.ID] = srv.Suffrage
			}
		}
	}
	if len(config) == 0 {
		return nil // no leader this time
	}
	slices.SortFunc(hosts, func(a, b HostRecord) int { return a.Joined.Compare(b.Joined) })
	var answering []string
	raftAddr := map[string]string{}
	for _, h := range hosts {
		if !h.Agent && h.Ready && up[h.Name] {
			answering = append(answering, h.Name)
			raftAddr[h.Name] = h.Raft
		}
	}
	m := PlanMembership(config, answering)
	// One change at a time, each bounded: a change that does not commit
	// in time is tried again at the next pass, from the configuration
	// then.
	change := func(f func(context.Context, string, string) error, name string) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return f(cctx, name, raftAddr[name])
	}
	for _, name := range m.AddNonvoters {
		if err := change(r.kv.AddNonvoter, name); err != nil {
			return fmt.Errorf("add %s to the store as a non-voter: %w", name, err)
		}
		fmt.Fprintf(r.out, "up: store: %s added as a non-voter\n", name)
	}
	for _, name := range m.Promote {
		if err := change(r.kv.AddVoter, name); err != nil {
			return fmt.Errorf("promote %s to a store voter: %w", name, err)
		}
		fmt.Fprintf(r.out, "up: store: %s is a voter\n", name)
	}
	if len(answering) >= 3 && !r.h.SeedRetired {
		if err := r.retireSeed(ctx, answering); err != nil {
			return err
		}
	}
	if r.h.SeedRetired && !r.streamsR3 {
		return r.makeStreamsR3(ctx)
	}
	return nil
}

// makeStreamsR3 makes every stream (and with it its consumers) R3 on the
// three servers, placed anywhere, and says so once every new replica is
// current with its leader: until then a replica that never heard from
// its leader does not stand for election, so losing the server of a
// stream's or a consumer's leader would leave it without one (its stage
// stuck) until that server came back (bus.ReplicasBehind). Until then it
// returns nil and the next pass checks again.
func (r *hostRun) makeStreamsR3(ctx context.Context) error {
	streams := r.plan.Streams
	streams.Replicas, streams.PlacementTags = 3, nil
	if err := provisionRetry(ctx, r.conn, streams, 20*time.Second); err != nil {
		return fmt.Errorf("make the streams R3: %w", err)
	}
	r.plan.Streams = streams
	var names []string
	for _, s := range bus.DefaultStreams(streams) {
		names = append(names, s.Name)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	behind, err := bus.ReplicasBehind(cctx, r.conn.JetStream(), names...)
	cancel()
	if err != nil {
		return fmt.Errorf("make the streams R3: %w", err)
	}
	if len(behind) > 0 {
		if !r.r3CatchingUp {
			r.r3CatchingUp = true
			fmt.Fprintf(r.out, "up: three servers: the streams' new replicas are catching up (%d behind: %s)\n", len(behind), behind[0])
		}
		return nil
	}
	r.streamsR3 = true
	fmt.Fprintln(r.out, "up: three servers: the streams are R3, the seed NATS server is retired")
	return nil
}

// retireSeed stops the first server's seed NATS server and removes its
// JetStream peer, once the meta group has a quorum without it: until the
// seed is removed the group counts it, so every one of servers must be
// current with the meta leader before the seed stops (else a group of
// four with one gone and one behind has no quorum, and nothing removes
// the seed). Until then it returns an error and the next pass checks
// again.
func (r *hostRun) retireSeed(ctx context.Context, servers []string) error {
	sys, err := r.systemConn(ctx)
	if err != nil {
		return err
	}
	defer sys.Close()
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	mg, err := metaGroupOf(mctx, sys)
	cancel()
	if err != nil {
		return fmt.Errorf("retire the seed NATS server: the JetStream meta group: %w", err)
	}
	if behind := mg.notCurrent(servers); len(behind) > 0 {
		return fmt.Errorf("retire the seed NATS server: waiting for %s to be current in the JetStream meta group (leader %s)", strings.Join(behind, ", "), mg.Leader)
	}
	if err := r.sup.Stop("nats-seed"); err != nil && !strings.Contains(err.Error(), "no such child") {
		return fmt.Errorf("stop the seed NATS server: %w", err)
	}
	if err := removeNATSPeer(ctx, sys, r.plan.Host.SeedName(), r.out); err != nil {
		return err
	}
	_ = os.RemoveAll(r.layout.Sub("nats-seed"))
	r.h.SeedRetired = true
	return writeHostFile(r.layout, r.h)
}

// systemConn connects to this server's NATS as the system account's user.
func (r *hostRun) systemConn(ctx context.Context) (*bus.Conn, error) {
	bc, err := bus.ReadClientConfig(r.layout.NATSClientConfig())
	if err != nil {
		return nil, err
	}
	bc.URLs = []string{r.plan.Host.NATSURL()}
	bc.User, bc.Password, bc.Name = bus.SystemUser, r.sysPassword, "podflow-up-system"
	sys, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, fmt.Errorf("connect to the system account: %w", err)
	}
	return sys, nil
}

// metaGroup is the JetStream meta group as its leader reports it
// (nats-server's MetaClusterInfo).
type metaGroup struct {
	Leader   string `json:"leader"`
	Replicas []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Offline bool   `json:"offline"`
	} `json:"replicas"`
}

// notCurrent are the servers neither leading the group nor current with
// its leader.
func (m metaGroup) notCurrent(servers []string) []string {
	var out []string
	for _, name := range servers {
		ok := name == m.Leader
		for _, p := range m.Replicas {
			if p.Name == name && p.Current && !p.Offline {
				ok = true
			}
		}
		if !ok {
			out = append(out, name)
		}
	}
	return out
}

// metaGroupOf asks the meta leader for the meta group ($SYS JSZ, leader
// only).
func metaGroupOf(ctx context.Context, sys *bus.Conn) (metaGroup, error) {
	msg, err := sys.NATS().RequestWithContext(ctx, "$SYS.REQ.SERVER.PING.JSZ", []byte(`{"leader_only":true}`))
	if err != nil {
		return metaGroup{}, err
	}
	var resp struct {
		Data struct {
			Meta *metaGroup `json:"meta_cluster"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	switch err := json.Unmarshal(msg.Data, &resp); {
	case err != nil:
		return metaGroup{}, err
	case resp.Error != nil:
		return metaGroup{}, errors.New(resp.Error.Description)
	case resp.Data.Meta == nil:
		return metaGroup{}, errors.New("no meta group in the answer")
	}
	return *resp.Data.Meta, nil
}

// errNotMember is nats-server's JSClusterServerNotMemberErr: the peer
// to remove is no member of the meta group.
const errNotMember = 10044

// removeNATSPeer removes a gone server from the JetStream meta group, as
// the system account's $JS.API.SERVER.REMOVE (nats server raft
// peer-remove), by its peer ID: the meta leader need not have heard of
// it. Only "no member" ends it early; any other refusal (a membership
// change in flight, no meta leader) is tried again until ctx ends.
func removeNATSPeer(ctx context.Context, sys *bus.Conn, name string, out io.Writer) error {
	req, _ := json.Marshal(map[string]string{"peer": name, "peer_id": bus.JetStreamPeerID(name)})
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := sys.NATS().RequestWithContext(actx, "$JS.API.SERVER.REMOVE", req)
		cancel()
		if err == nil {
			var resp struct {
				Success bool `json:"success"`
				Error   *struct {
					ErrCode     int    `json:"err_code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if err = json.Unmarshal(msg.Data, &resp); err == nil {
				if resp.Success {
					return nil
				}
				err = fmt.Errorf("%s", msg.Data)
				if resp.Error != nil && resp.Error.ErrCode == errNotMember {
					return nil // not a peer (any more)
				}
			}
		}
		if last == nil || err.Error() != last.Error() {
			fmt.Fprintf(out, "up: remove the JetStream peer %s: %v; trying again\n", name, err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove the JetStream peer %s: %w", name, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
