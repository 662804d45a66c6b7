package up

import (
	"context"
	"encoding/json"
	"fmt"
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
		if err := r.retireSeed(ctx); err != nil {
			return err
		}
	}
	if r.h.SeedRetired && !r.streamsR3 {
		return r.makeStreamsR3(ctx)
	}
	return nil
}

// makeStreamsR3 makes every stream (and with it its consumers) R3 on the
// three servers, placed anywhere.
func (r *hostRun) makeStreamsR3(ctx context.Context) error {
	streams := r.plan.Streams
	streams.Replicas, streams.PlacementTags = 3, nil
	if err := provisionRetry(ctx, r.conn, streams, 20*time.Second); err != nil {
		return fmt.Errorf("make the streams R3: %w", err)
	}
	r.plan.Streams, r.streamsR3 = streams, true
	fmt.Fprintln(r.out, "up: three servers: the streams are R3, the seed NATS server is retired")
	return nil
}

// retireSeed stops the first server's seed NATS server, removes its
// JetStream peer, and makes the streams R3 on the three servers.
func (r *hostRun) retireSeed(ctx context.Context) error {
	if err := r.sup.Stop("nats-seed"); err != nil && !strings.Contains(err.Error(), "no such child") {
		return fmt.Errorf("stop the seed NATS server: %w", err)
	}
	if err := r.removeNATSPeer(ctx, r.plan.Host.SeedName()); err != nil {
		return err
	}
	_ = os.RemoveAll(r.layout.Sub("nats-seed"))
	r.h.SeedRetired = true
	return writeHostFile(r.layout, r.h)
}

// removeNATSPeer removes a gone server from the JetStream meta group, as
// the system account's $JS.API.SERVER.REMOVE (nats server raft peer-remove).
func (r *hostRun) removeNATSPeer(ctx context.Context, name string) error {
	bc, err := bus.ReadClientConfig(r.layout.NATSClientConfig())
	if err != nil {
		return err
	}
	bc.URLs = []string{r.plan.Host.NATSURL()}
	bc.User, bc.Password, bc.Name = bus.SystemUser, r.sysPassword, "podflow-up-system"
	sys, err := bus.Connect(ctx, bc)
	if err != nil {
		return fmt.Errorf("connect to the system account: %w", err)
	}
	defer sys.Close()
	req, _ := json.Marshal(map[string]string{"peer": name})
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := sys.NATS().RequestWithContext(actx, "$JS.API.SERVER.REMOVE", req)
		cancel()
		if err == nil {
			var resp struct {
				Success bool `json:"success"`
				Error   *struct {
					Code        int    `json:"code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if err = json.Unmarshal(msg.Data, &resp); err == nil {
				if resp.Success {
					return nil
				}
				err = fmt.Errorf("%s", msg.Data)
				if resp.Error != nil && resp.Error.Code == 400 {
					return nil // not a peer (any more)
				}
			}
		}
		if last == nil || err.Error() != last.Error() {
			fmt.Fprintf(r.out, "up: remove the JetStream peer %s: %v; trying again\n", name, err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove the JetStream peer %s: %w", name, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
