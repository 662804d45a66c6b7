package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
)

// The checkers below are pure functions over what chaos collected, so
// that each can be attacked with a constructed bad history
// (chaos_check_test.go); checkInvariants and runChaos feed them.

// podOutcomes is what the system did with the requested pods: the stored
// pod's uid and node by name, the names rejected (PodRejected), the uids
// persisted (PodPersisted) by name, and the nodes each uid was scheduled
// to (PodScheduled).
type podOutcomes struct {
	stored    map[string]storedPod
	rejected  map[string]bool
	persisted map[string]map[string]bool
	scheduled map[string]map[string]bool
}

type storedPod struct{ uid, node string }

// checkRequested returns the violations of "no acknowledged PodRequested
// lost, none persisted twice, none bound twice": every name in acked
// (publishes the stream acknowledged) ends as a stored pod or a
// rejection; no name was persisted under two uids; no uid was scheduled
// to two nodes, and a stored pod's node is the one it was scheduled to.
func checkRequested(acked []string, o podOutcomes) []string {
	var v []string
	for _, name := range acked {
		if _, ok := o.stored[name]; !ok && !o.rejected[name] {
			v = append(v, fmt.Sprintf("acknowledged PodRequested %s lost: neither stored nor rejected", name))
		}
	}
	for _, name := range sortedKeys(o.persisted) {
		if uids := o.persisted[name]; len(uids) > 1 {
			v = append(v, fmt.Sprintf("pod %s persisted %d times: uids %s", name, len(uids), strings.Join(sortedKeys(uids), ", ")))
		}
	}
	for _, name := range sortedKeys(o.stored) {
		p := o.stored[name]
		nodes := o.scheduled[p.uid]
		switch {
		case len(nodes) > 1:
			v = append(v, fmt.Sprintf("pod %s was bound to %d nodes: %s", name, len(nodes), strings.Join(sortedKeys(nodes), ", ")))
		case len(nodes) == 1 && !nodes[p.node]:
			v = append(v, fmt.Sprintf("pod %s is stored on %q but was scheduled to %s", name, p.node, strings.Join(sortedKeys(nodes), ", ")))
		}
	}
	return v
}

// consumerState is one durable consumer's backlog.
type consumerState struct {
	stream, name         string
	ackPending, pending  uint64
	redelivered, waiting int
}

// checkDrained returns a violation for every durable consumer with an
// event delivered and not acknowledged, or not yet delivered.
func checkDrained(cs []consumerState) []string {
	var v []string
	for _, c := range cs {
		if c.ackPending > 0 || c.pending > 0 {
			v = append(v, fmt.Sprintf("consumer %s/%s has %d event(s) unacknowledged and %d undelivered", c.stream, c.name, c.ackPending, c.pending))
		}
	}
	return v
}

// durableConsumers reads the backlog of every durable consumer of every
// stream.
func durableConsumers(ctx context.Context, js jetstream.JetStream) ([]consumerState, error) {
	var out []consumerState
	streams := js.StreamNames(ctx)
	for name := range streams.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			out = append(out, consumerState{stream: name, name: ci.Name, ackPending: uint64(ci.NumAckPending), pending: ci.NumPending,
				redelivered: ci.NumRedelivered, waiting: ci.NumWaiting})
		}
		if err := infos.Err(); err != nil {
			return nil, err
		}
	}
	if err := streams.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stream+"/"+out[i].name < out[j].stream+"/"+out[j].name })
	return out, nil
}

// awaitDrained polls the durable consumers until none has a backlog or
// limit passes, and returns the violations of the last reading.
func awaitDrained(ctx context.Context, js jetstream.JetStream, limit time.Duration) (n int, violations []string) {
	deadline := time.Now().Add(limit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cs, err := durableConsumers(rctx, js)
		cancel()
		if err == nil {
			violations = checkDrained(cs)
			n = len(cs)
		} else {
			violations = []string{fmt.Sprintf("read the consumers: %v", err)}
		}
		if len(violations) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n, violations
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// replicasAgree reports whether every replica of st (at least want)
// holds the same revision, applied index and content hash, with a
// description of what each holds.
func replicasAgree(st []*raftstore.Status, want int) (bool, string) {
	agree := len(st) >= want && len(st) > 0
	var parts []string
	for _, s := range st {
		parts = append(parts, fmt.Sprintf("%s rev %d applied %d hash %016x", s.ID, s.Revision, s.AppliedIndex, s.ContentHash))
		if s.Revision != st[0].Revision || s.AppliedIndex != st[0].AppliedIndex ||
			s.ContentHashRevision != st[0].ContentHashRevision || s.ContentHash != st[0].ContentHash {
			agree = false
		}
	}
	sort.Strings(parts)
	return agree, strings.Join(parts, ", ")
}

// watchRec is one change a watch delivered.
type watchRec struct {
	Rev    int64
	Key    string
	Delete bool
	ModRev int64 // the key's ModRevision in the event
}

func (r watchRec) String() string {
	op := "PUT"
	if r.Delete {
		op = "DELETE"
	}
	return fmt.Sprintf("%s %s@%d", op, r.Key, r.Rev)
}

// checkWatch returns the violations of the watch guarantees: the changes
// seen by a watcher started at from (across faults and restarts) come in
// strictly increasing revision order with none twice; replayed over the
// key space at from (initial: key → ModRevision) they give the key space
// at the end (final); and, when the store still had its history
// (history non-nil: a fresh watch from from after the heal), they are
// exactly that history, with no gap.
func checkWatch(from int64, seen, history []watchRec, initial, final map[string]int64) []string {
	var v []string
	last := from
	state := map[string]int64{}
	for k, r := range initial {
		state[k] = r
	}
	for i, r := range seen {
		if r.Rev <= last {
			v = append(v, fmt.Sprintf("watch: event %d (%s) after revision %d: out of order or twice", i, r, last))
		}
		if !r.Delete && r.ModRev != r.Rev {
			v = append(v, fmt.Sprintf("watch: event %d (%s) carries ModRevision %d", i, r, r.ModRev))
		}
		last = max(last, r.Rev)
		if r.Delete {
			delete(state, r.Key)
		} else {
			state[r.Key] = r.Rev
		}
	}
	for _, k := range sortedKeys(union(state, final)) {
		if state[k] != final[k] {
			v = append(v, fmt.Sprintf("watch: replaying what the watcher saw gives %s at revision %d, the store holds it at %d (0: absent)", k, state[k], final[k]))
		}
	}
	if history != nil {
		for i := 0; i < max(len(seen), len(history)); i++ {
			switch {
			case i >= len(seen):
				v = append(v, fmt.Sprintf("watch: the watcher missed %s (the store's history has %d changes, it saw %d)", history[i], len(history), len(seen)))
			case i >= len(history):
				v = append(v, fmt.Sprintf("watch: the watcher saw %s that the store's history does not have", seen[i]))
			case seen[i] != history[i]:
				v = append(v, fmt.Sprintf("watch: change %d seen as %s, the store's history has %s", i, seen[i], history[i]))
			default:
				continue
			}
			break // the first difference says it
		}
	}
	return v
}

// watchSource opens a watch of the changes after from: a channel of
// changes (a bookmark has Key ""), closed when the watch ends or ctx is
// done, and the watch's error once it is closed.
type watchSource func(ctx context.Context, from int64) (<-chan watchRec, func() error, error)

// storeWatch is the store client's watch of prefix.
func storeWatch(c *raftstore.Client, prefix string) watchSource {
	return func(ctx context.Context, from int64) (<-chan watchRec, func() error, error) {
		wt, err := c.Watch(ctx, prefix, from)
		if err != nil {
			return nil, nil, err
		}
		ch := make(chan watchRec)
		go func() {
			defer close(ch)
			defer wt.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-wt.Events():
					if !ok {
						return
					}
					select {
					case ch <- watchRec{Rev: e.Revision, Key: e.KV.Key, Delete: e.Type == raftstore.EventDelete, ModRev: e.KV.ModRevision}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
		return ch, wt.Err, nil
	}
}

// watcher follows a key prefix through a watch (the store client's, or
// the HTTPS API's) for the whole run, restarting its watch from the last
// revision it saw (or a later bookmark) whenever asked (after every heal)
// or when the watch ends by itself; the checker compares what it saw with
// the store afterwards.
type watcher struct {
	name   string // what watches, for the report
	open   watchSource
	prefix string
	from   int64

	mu       sync.Mutex
	seen     []watchRec
	restarts int
	errs     []string
	restart  chan struct{}
}

func newWatcher(name string, open watchSource, prefix string, from int64) *watcher {
	return &watcher{name: name, open: open, prefix: prefix, from: from, restart: make(chan struct{}, 1)}
}

// Restart asks the watcher to stop its watch and resume from its last
// revision.
func (w *watcher) Restart() {
	select {
	case w.restart <- struct{}{}:
	default:
	}
}

// run watches until ctx ends.
func (w *watcher) run(ctx context.Context) {
	last := w.from
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		ch, errf, err := w.open(wctx, last)
		if err != nil {
			cancel()
			w.note(fmt.Sprintf("watch from %d: %v", last, err))
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		last = w.follow(ctx, ch, errf, last)
		cancel()
		for range ch { // the source's goroutine ends
		}
		w.mu.Lock()
		w.restarts++
		w.mu.Unlock()
		// A watch that ends at once (compacted, the server gone) is not
		// reopened in a tight loop.
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// follow records the changes of ch until it ends or a restart is asked,
// and returns the revision to resume from.
func (w *watcher) follow(ctx context.Context, ch <-chan watchRec, errf func() error, last int64) int64 {
	for {
		select {
		case <-ctx.Done():
			return last
		case <-w.restart:
			return last
		case r, ok := <-ch:
			if !ok {
				if err := errf(); err != nil && ctx.Err() == nil {
					w.note(fmt.Sprintf("watch ended after %d: %v", last, err))
				}
				return last
			}
			if r.Key != "" {
				w.mu.Lock()
				w.seen = append(w.seen, r)
				w.mu.Unlock()
			}
			last = max(last, r.Rev)
		}
	}
}

func (w *watcher) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, s)
}

// lastRev is the revision of the last change the watcher saw.
func (w *watcher) lastRev() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return w.from
	}
	return w.seen[len(w.seen)-1].Rev
}

// keyRevs is the key space under prefix as key → ModRevision, and the
// revision it was read at.
func keyRevs(ctx context.Context, c *raftstore.Client, prefix string) (map[string]int64, int64, error) {
	kvs, rev, err := c.List(ctx, prefix)
	if err != nil {
		return nil, 0, err
	}
	m := map[string]int64{}
	for _, kv := range kvs {
		m[kv.Key] = kv.ModRevision
	}
	return m, rev, nil
}

// storeHistory reads the store's changes under prefix in (from, to] with
// a fresh watch; nil when the history is compacted (ErrGone).
func storeHistory(ctx context.Context, c *raftstore.Client, prefix string, from, to int64) ([]watchRec, error) {
	out := []watchRec{}
	if to <= from {
		return out, nil
	}
	wt, err := c.Watch(ctx, prefix, from)
	if err != nil {
		if errors.Is(err, raftstore.ErrGone) {
			return nil, nil
		}
		return nil, err
	}
	defer wt.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case e, ok := <-wt.Events():
			if !ok {
				if errors.Is(wt.Err(), raftstore.ErrGone) {
					return nil, nil
				}
				return out, wt.Err()
			}
			if e.Revision > to {
				return out, nil
			}
			out = append(out, watchRec{Rev: e.Revision, Key: e.KV.Key, Delete: e.Type == raftstore.EventDelete, ModRev: e.KV.ModRevision})
			if e.Revision == to {
				return out, nil
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func union(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// checkWatchRun ends the watcher's run: it writes a last ConfigMap
// (sentinel) under the watched prefix, waits up to a minute for the
// watcher to see it, and checks what it saw against the store's key space
// and history. It prints the verdict and returns the violations.
func checkWatchRun(ctx context.Context, sess *client.Session, w *watcher, initial map[string]int64, sentinel string, out io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(out, "  VIOLATION: "+format+"\n", args...)
		return 1
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	end, err := sess.Store.Create(cctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: sentinel}})
	if err != nil {
		return fail("watch check: write the sentinel ConfigMap: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for w.lastRev() < end && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	w.Restart() // end the current watch; the caller's stop ends the run
	w.mu.Lock()
	seen := slices.Clone(w.seen)
	restarts, errs := w.restarts, slices.Clone(w.errs)
	w.mu.Unlock()
	final, _, err := keyRevs(cctx, sess.Store.Client(), w.prefix)
	if err != nil {
		return fail("watch check: list %s: %v", w.prefix, err)
	}
	// What came after the sentinel is not the run's.
	for len(seen) > 0 && seen[len(seen)-1].Rev > end {
		seen = seen[:len(seen)-1]
	}
	history, err := storeHistory(cctx, sess.Store.Client(), w.prefix, w.from, end)
	if err != nil {
		return fail("watch check: read the store's history: %v", err)
	}
	vs := checkWatch(w.from, seen, history, initial, final)
	for _, v := range vs {
		fail("%s", v)
	}
	against := "the final list"
	if history != nil {
		against += fmt.Sprintf(" and the store's history (%d changes)", len(history))
	}
	fmt.Fprintf(out, "  check: the watcher (%s) saw %d changes of %s in order, once, with no gap, against %s, across %d watch restarts (%d watch errors)\n",
		w.name, len(seen), w.prefix, against, restarts, len(errs))
	return len(vs)
}

// settled sorts the acknowledged pods after the chaos: Running and Ready
// (ready, by name, of the stored pods), rejected (not stored, with a
// PodRejected carrying a code: the pipeline answered the request with a
// refusal, which is an end), or not settled yet. A stored pod is judged
// by its phase even when a rejection was also published for its name (a
// retried publish refused as AlreadyExists).
func settled(acked []string, ready map[string]bool, rejected map[string]int32) (running, refused int, unsettled []string) {
	for _, name := range acked {
		r, stored := ready[name]
		switch {
		case stored && r:
			running++
		case !stored && rejected[name] != 0:
			refused++
		default:
			unsettled = append(unsettled, name)
		}
	}
	return running, refused, unsettled
}

// rejectionCodes reads the code of every PodRejected for a pod named with
// prefix (the last one by name).
func rejectionCodes(ctx context.Context, js jetstream.JetStream, prefix string) (map[string]int32, error) {
	evs, err := streamEvents(ctx, js, "PodRejected")
	out := map[string]int32{}
	for _, e := range evs {
		if strings.HasPrefix(e.GetPodName(), prefix) {
			out[e.GetPodName()] = e.GetPodRejected().GetStatus().GetCode()
		}
	}
	return out, err
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

// checkRelayed checks, from the kernel's connection tables, that every
// connection to a store replica's raft address or a NATS server's route
// address ran through chaos's relays: a route a NATS server learnt by
// gossip and dialled directly would carry its traffic around every cut
// (what the refusing `nats --cluster-advertise` prevents). It returns the
// number of violations.
func checkRelayed(c *chaosNets, out io.Writer) int {
	violations := 0
	targets := []string{"store"}
	if c.nats != nil {
		targets = append(targets, "nats")
	}
	for _, t := range targets {
		what := map[string]string{"store": "raft", "nats": "NATS route"}[t]
		bp, err := c.of(t).Bypasses()
		if err != nil {
			fmt.Fprintf(out, "  VIOLATION: read the %s connections: %v\n", what, err)
			violations++
			continue
		}
		for _, b := range bp {
			fmt.Fprintf(out, "  VIOLATION: a %s connection around the relays: %s\n", what, b)
		}
		violations += len(bp)
		fmt.Fprintf(out, "  check: every %s connection runs through a relay (no direct route)\n", what)
	}
	return violations
}
