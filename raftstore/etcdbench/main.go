// Command etcdbench measures raftstore and etcd side by side, in one
// invocation and on the same disk: writes/s and p50/p99 write latency with 1,
// 16 and 64 concurrent clients against 3 replicas with fsync on, and prints
// the ratios. Each client writes 256-byte values to its own keys: a
// raftstore Txn with one put (no compare) and an etcd Put.
//
//	cd raftstore/etcdbench && GOWORK=off go run . -duration 5s -runs 3
//
// It is a separate module (not in go.work) so that etcd's dependencies stay
// out of podflow's build. etcd is go.etcd.io/etcd/server/v3/embed v3.7.3
// with 3 members, as raftstore has 3 replicas.
//
// It prints the load average at the start and the end: the machine is
// shared, so compare ratios of runs taken together, not absolutes.
//
// Figures of one run (2 vCPUs shared with other builds; medians of 3
// runs of 5 s), raft-wal log (one fsync per append batch):
//
//	load 2.96 at start, 2.74 at end
//	clients  raftstore w/s  p50     p99     etcd w/s  p50     p99     ratio  p50 ratio
//	1        1519           630µs   1.09ms  1170      780µs   1.86ms  1.30x  0.80x
//	16       5871           2.27ms  9.93ms  3177      4.40ms  20.6ms  1.85x  0.52x
//	64       11190          4.75ms  21.4ms  4985      11.2ms  45.0ms  2.24x  0.42x
//
// and right after it, the same harness on the bolt log (raft-boltdb/v2)
// that raft-wal replaced (load 2.52 at start, 4.40 at end):
//
//	1        935            940µs   4.08ms  1274      730µs   1.70ms  0.73x  1.29x
//	16       4078           3.20ms  15.4ms  1400      7.42ms  62.5ms  2.91x  0.43x
//	64       5508           7.84ms  63.6ms  2454      18.5ms  101ms   2.24x  0.42x
//
// hashicorp/raft still persists on the leader before it replicates, so a
// write waits for two fsyncs in series (leader, then a follower) where etcd
// waits for one on each in parallel; bbolt made it about four (two per
// commit), raft-wal's single fsync per batch is what put raftstore ahead at
// one client.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

type target interface {
	name() string
	put(ctx context.Context, client int, key string, val []byte) error
	close()
}

type result struct {
	writesPerSec float64
	p50, p99     time.Duration
	errors       int64
}

func main() {
	dur := flag.Duration("duration", 5*time.Second, "measurement time per point")
	warm := flag.Duration("warmup", time.Second, "warm-up time per point")
	runs := flag.Int("runs", 3, "runs per point; medians are reported")
	conc := flag.String("clients", "1,16,64", "concurrent clients per point")
	dir := flag.String("dir", "", "data directory (default: a temporary directory on the working directory's disk)")
	noSync := flag.Bool("unsafe-no-fsync", false, "disable fsync on both stores (to see what fsync costs; never for the reported figures)")
	flag.Parse()
	var clients []int
	for _, s := range strings.Split(*conc, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			log.Fatalf("bad -clients %q", *conc)
		}
		clients = append(clients, n)
	}
	base := *dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp(".", "bench-data-"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(base)
	}
	ctx := context.Background()
	rs, err := startRaftstore(ctx, filepath.Join(base, "raftstore"), *noSync)
	if err != nil {
		log.Fatalf("raftstore: %v", err)
	}
	defer rs.close()
	et, err := startEtcd(filepath.Join(base, "etcd"), *noSync)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	defer et.close()

	loadStart := loadAvg()
	targets := []target{rs, et}
	all := map[string]map[int][]result{}
	for _, t := range targets {
		all[t.name()] = map[int][]result{}
	}
	for r := range *runs {
		for _, n := range clients {
			for _, t := range targets {
				res := measure(t, n, *warm, *dur, fmt.Sprintf("r%d", r))
				all[t.name()][n] = append(all[t.name()][n], res)
				fmt.Fprintf(os.Stderr, "run %d  %-9s %2d clients: %8.0f writes/s  p50 %-9s p99 %-9s errors %d\n", r+1, t.name(), n, res.writesPerSec, res.p50, res.p99, res.errors)
			}
		}
	}
	sync := "fsync on"
	if *noSync {
		sync = "FSYNC OFF"
	}
	fmt.Printf("\n3 replicas each, %s, loopback; medians of %d runs of %s (after %s warm-up)\n", sync, *runs, *dur, *warm)
	fmt.Printf("load average (1, 5, 15 min) at start %s, at end %s\n", loadStart, loadAvg())
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\traftstore w/s\tp50\tp99\tetcd w/s\tp50\tp99\tthroughput ratio\tp50 ratio\t")
	for _, n := range clients {
		a, b := median(all[rs.name()][n]), median(all[et.name()][n])
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%.2fx\t%.2fx\t\n", n,
			a.writesPerSec, round(a.p50), round(a.p99), b.writesPerSec, round(b.p50), round(b.p99),
			a.writesPerSec/b.writesPerSec, float64(a.p50)/float64(b.p50))
	}
	tw.Flush()
	fmt.Println("throughput ratio = raftstore/etcd (higher is better for raftstore); p50 ratio = raftstore/etcd (lower is better)")
}

// loadAvg is the machine's load average from /proc/loadavg: the figures
// are only comparable between runs taken together at a similar load.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		writesPerSec: pick(func(r result) float64 { return r.writesPerSec }),
		p50:          time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99:          time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
	}
}

// measure runs n clients writing as fast as they can; latencies are
// recorded after the warm-up only.
func measure(t target, n int, warm, dur time.Duration, tag string) result {
	ctx := context.Background()
	val := make([]byte, 256)
	var (
		wg        sync.WaitGroup
		recording atomic.Bool
		stop      atomic.Bool
		errs      atomic.Int64
		lats      = make([][]time.Duration, n)
	)
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("/bench/%s/%d/c%d/%d", tag, n, c, i%1000)
				start := time.Now()
				octx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := t.put(octx, c, key, val)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				if recording.Load() {
					lats[c] = append(lats[c], time.Since(start))
				}
			}
		}()
	}
	time.Sleep(warm)
	recording.Store(true)
	begin := time.Now()
	time.Sleep(dur)
	recording.Store(false)
	elapsed := time.Since(begin)
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) == 0 {
		return result{errors: errs.Load()}
	}
	return result{
		writesPerSec: float64(len(all)) / elapsed.Seconds(),
		p50:          all[len(all)/2],
		p99:          all[len(all)*99/100],
		errors:       errs.Load(),
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// raftstore: an embedded nats-server, 3 in-process replicas with fsync on,
// each on its own NATS connection; clients share 4 connections.
type raftstoreTarget struct {
	ns      *server.Server
	nodes   []*raftstore.Node
	conns   []*nats.Conn
	clients []*raftstore.Client
}

func (r *raftstoreTarget) name() string { return "raftstore" }

func startRaftstore(ctx context.Context, dir string, noSync bool) (*raftstoreTarget, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("nats not ready")
	}
	r := &raftstoreTarget{ns: ns}
	var peers []raftstore.Peer
	for i := range 3 {
		peers = append(peers, raftstore.Peer{ID: fmt.Sprintf("s%d", i), Address: fmt.Sprintf("127.0.0.1:%d", freePort())})
	}
	for i := range 3 {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			return nil, err
		}
		r.conns = append(r.conns, nc)
		cfg := raftstore.DefaultConfig()
		cfg.ID, cfg.RaftAddr, cfg.Bootstrap, cfg.Conn = peers[i].ID, peers[i].Address, peers, nc
		if cfg.TLS, err = raftstoretest.EphemeralPeerTLS(); err != nil {
			return nil, err
		}
		cfg.DataDir = filepath.Join(dir, peers[i].ID)
		cfg.LogOutput = io.Discard
		cfg.NoSync = noSync
		n, err := raftstore.NewNode(cfg)
		if err != nil {
			return nil, err
		}
		if err := n.Start(ctx); err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, n)
	}
	for range 4 {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			return nil, err
		}
		r.conns = append(r.conns, nc)
		c, err := raftstore.NewClient(nc, raftstore.DefaultClientConfig())
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	// Wait for a leader to serve writes.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.clients[0].Txn(wctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: "/bench/ready"}}}); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *raftstoreTarget) put(ctx context.Context, client int, key string, val []byte) error {
	_, err := r.clients[client%len(r.clients)].Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: key, Value: val}}})
	return err
}

func (r *raftstoreTarget) close() {
	for _, n := range r.nodes {
		_ = n.Shutdown()
	}
	for _, nc := range r.conns {
		nc.Close()
	}
	r.ns.Shutdown()
}

// etcd: 3 embedded members on loopback with fsync on; clients share 4
// clientv3 connections, each to all endpoints.
type etcdTarget struct {
	members []*embed.Etcd
	clients []*clientv3.Client
}

func (e *etcdTarget) name() string { return "etcd" }

func startEtcd(dir string, noSync bool) (*etcdTarget, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	type urls struct{ peer, client url.URL }
	var us []urls
	var initial []string
	for i := range 3 {
		p := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort())}
		c := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort())}
		us = append(us, urls{p, c})
		initial = append(initial, fmt.Sprintf("e%d=%s", i, p.String()))
	}
	e := &etcdTarget{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var startErr error
	for i := range 3 {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("e%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{us[i].peer}, []url.URL{us[i].peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{us[i].client}, []url.URL{us[i].client}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "etcdbench"
		cfg.UnsafeNoFsync = noSync
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := embed.StartEtcd(cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				startErr = err
				return
			}
			e.members = append(e.members, m)
		}()
	}
	wg.Wait()
	if startErr != nil {
		e.close()
		return nil, startErr
	}
	for _, m := range e.members {
		select {
		case <-m.Server.ReadyNotify():
		case <-time.After(60 * time.Second):
			e.close()
			return nil, fmt.Errorf("etcd member %s not ready", m.Config().Name)
		}
	}
	var eps []string
	for _, u := range us {
		eps = append(eps, u.client.String())
	}
	for range 4 {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			e.close()
			return nil, err
		}
		e.clients = append(e.clients, c)
	}
	return e, nil
}

func (e *etcdTarget) put(ctx context.Context, client int, key string, val []byte) error {
	_, err := e.clients[client%len(e.clients)].Put(ctx, key, string(val))
	return err
}

func (e *etcdTarget) close() {
	for _, c := range e.clients {
		_ = c.Close()
	}
	for _, m := range e.members {
		m.Close()
	}
}
