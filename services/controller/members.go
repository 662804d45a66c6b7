package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// Members is a controller stage's view of its live replicas and of which
// replica owns which key. Each replica holds a Lease
// (coordination.k8s.io/v1, in Config.LeaseNamespace, labelled
// LabelController) and renews it every RenewInterval; a Lease not renewed
// for LeaseDuration — measured on this replica's clock from when it saw
// the Lease change, as kube's leader election measures it — is a dead
// replica's. A key belongs to the live replica with the highest
// rendezvous hash of (replica, key), so a replica joining or leaving moves
// only its share of the keys.
//
// A key that moves waits for its previous owner to let go: when the
// previous owner is still live (a replica joined), the new owner takes the
// key only Settle after it saw the change; when it is gone (its Lease
// expired or was released), at once. A replica that could not renew its
// own Lease for RenewDeadline owns nothing until it can again, so it has
// stopped before the others see its Lease expire.
type Members struct {
	cfg   Config
	store *objects.Store
	self  string // holderIdentity: the replica
	name  string // our Lease's name
	now   func() time.Time
	inf   *informer.Informer[*corev1.Unstructured]

	mu        sync.Mutex
	leases    map[string]*leaseState // by Lease name
	cur, prev []string               // live replicas now and before the last change, sorted
	changedAt time.Time
	renewed   time.Time // our last successful renewal
	ownRev    int64     // our Lease's revision
	acquired  time.Time
	lapsed    bool   // Owns refused a key while our own Lease had lapsed
	onChange  func() // called (outside mu) when the live set changed, or keys were refused during a lapse that ended
}

// leaseState is what Members knows of one Lease.
type leaseState struct {
	holder   string
	rev      int64
	renew    time.Time // the Lease's renewTime (the holder's clock)
	duration time.Duration
	seen     time.Time // on our clock: when we saw rev
}

// LabelController labels the Leases of a controller stage's replicas with
// the stage's name.
const LabelController = "podflow.io/controller"

// leaseContent is the part of a Lease Members reads and writes.
type leaseContent struct {
	Spec struct {
		HolderIdentity       string `json:"holderIdentity,omitempty"`
		LeaseDurationSeconds int32  `json:"leaseDurationSeconds,omitempty"`
		AcquireTime          string `json:"acquireTime,omitempty"`
		RenewTime            string `json:"renewTime,omitempty"`
	} `json:"spec"`
}

// microTime is metav1.MicroTime's format.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

func newMembers(cfg Config, st *objects.Store) (*Members, error) {
	m := &Members{cfg: cfg, store: st, self: cfg.Replica, name: LeaseName(cfg.Stage, cfg.Replica), now: time.Now,
		leases: map[string]*leaseState{}}
	if cfg.Now != nil {
		m.now = cfg.Now
	}
	inf, err := informer.NewKind(st, objects.Leases, cfg.LeaseNamespace, informer.Handlers[*corev1.Unstructured]{
		OnAdd:    m.observe,
		OnUpdate: func(_, u *corev1.Unstructured) { m.observe(u) },
		OnDelete: m.forget,
	})
	if err != nil {
		return nil, err
	}
	m.inf = inf
	return m, nil
}

// LeaseName is the name of the Lease of a replica of stage: "podflow-",
// the stage, "-" and the replica's name made a DNS label (lower case,
// other characters as '-'), at most 253 characters.
func LeaseName(stage, replica string) string {
	var b strings.Builder
	b.WriteString("podflow-" + stage + "-")
	for _, r := range strings.ToLower(replica) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.TrimRight(b.String(), "-.")
	if len(s) > 253 {
		s = s[:253]
	}
	return s
}

// observe records a Lease of our stage as seen now.
func (m *Members) observe(u *corev1.Unstructured) {
	if u.GetMetadata().GetLabels()[LabelController] != m.cfg.Stage {
		return
	}
	var c leaseContent
	if err := json.Unmarshal(u.GetContent(), &c); err != nil || c.Spec.HolderIdentity == "" {
		return
	}
	renew, _ := time.Parse(microTime, c.Spec.RenewTime)
	rev := objects.Revision(u)
	m.mu.Lock()
	ls := m.leases[u.GetMetadata().GetName()]
	if ls == nil || ls.rev != rev {
		m.leases[u.GetMetadata().GetName()] = &leaseState{holder: c.Spec.HolderIdentity, rev: rev, renew: renew,
			duration: time.Duration(c.Spec.LeaseDurationSeconds) * time.Second, seen: m.now()}
	}
	changed := m.recomputeLocked()
	m.mu.Unlock()
	m.changed(changed)
}

func (m *Members) forget(u *corev1.Unstructured) {
	m.mu.Lock()
	delete(m.leases, u.GetMetadata().GetName())
	changed := m.recomputeLocked()
	m.mu.Unlock()
	m.changed(changed)
}

func (m *Members) changed(changed bool) {
	if changed && m.onChange != nil {
		m.onChange()
	}
}

// alive reports whether a Lease is a live replica's at now: renewed
// (a change we saw) within its duration, and its renewTime not older than
// its duration and Config.MaxClockSkew (a Lease left by a replica that
// died before we started is dead at once).
func (m *Members) alive(ls *leaseState, now time.Time) bool {
	d := ls.duration
	if d <= 0 {
		d = m.cfg.LeaseDuration
	}
	if now.Sub(ls.seen) >= d {
		return false
	}
	return ls.renew.IsZero() || now.Sub(ls.renew) < d+m.cfg.MaxClockSkew
}

// recomputeLocked recomputes the live set; it reports whether it changed.
func (m *Members) recomputeLocked() bool {
	now := m.now()
	var live []string
	for _, ls := range m.leases {
		if ls.holder == m.self {
			continue // ourselves: by our own renewals
		}
		if m.alive(ls, now) && !slices.Contains(live, ls.holder) {
			live = append(live, ls.holder)
		}
	}
	if m.healthyLocked(now) {
		live = append(live, m.self)
	}
	slices.Sort(live)
	if slices.Equal(live, m.cur) && m.changedAt != (time.Time{}) {
		return false
	}
	if m.changedAt.IsZero() {
		// The first view: what we take over, others held until now.
		m.prev = slices.DeleteFunc(slices.Clone(live), func(s string) bool { return s == m.self })
	} else {
		m.prev = m.cur
	}
	m.cur, m.changedAt = live, now
	return true
}

func (m *Members) healthyLocked(now time.Time) bool {
	return !m.renewed.IsZero() && now.Sub(m.renewed) < m.cfg.RenewDeadline
}

// Live returns the live replicas, sorted (ourselves included while our
// Lease is renewed).
func (m *Members) Live() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.cur)
}

// Owner returns the replica among members that owns key ("" for none):
// the highest rendezvous hash of (replica, key), ties to the smaller name.
func Owner(members []string, key string) string {
	var best string
	var bestScore uint64
	for _, r := range members {
		h := fnv.New64a()
		h.Write([]byte(r))
		h.Write([]byte{0})
		h.Write([]byte(key))
		if s := mix(h.Sum64()); best == "" || s > bestScore || (s == bestScore && r < best) {
			best, bestScore = r, s
		}
	}
	return best
}

// mix is MurmurHash3's 64-bit finalizer: FNV's sums of inputs differing
// only in a few bytes are close, which would skew the rendezvous.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb93e1a85ec53
	h ^= h >> 33
	return h
}

// Owns reports whether this replica may sync key now. When the key is
// this replica's but its previous owner may still be finishing with it,
// Owns returns false and how long to wait.
func (m *Members) Owns(key string) (bool, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if !m.healthyLocked(now) {
		// Our Lease lapsed (a renewal slower than RenewDeadline): the key
		// waits until we renewed, when every key is queued again. The
		// live set need not change meanwhile (no recompute saw the
		// lapse), so nothing else would queue it.
		m.lapsed = true
		return false, 0
	}
	if Owner(m.cur, key) != m.self {
		return false, 0
	}
	prev := Owner(m.prev, key)
	if prev == "" || prev == m.self || !slices.Contains(m.cur, prev) {
		return true, 0
	}
	if wait := m.cfg.Settle - now.Sub(m.changedAt); wait > 0 {
		return false, wait
	}
	return true, 0
}

// renew creates or renews our Lease; a Lease of ours deleted meanwhile (a
// replica that thought us dead cleaned it up) is created again.
func (m *Members) renew(ctx context.Context) error {
	now := m.now()
	m.mu.Lock()
	rev, acquired := m.ownRev, m.acquired
	m.mu.Unlock()
	if rev == 0 {
		acquired = now
	}
	u := objects.Leases.New().(*corev1.Unstructured)
	var c leaseContent
	c.Spec.HolderIdentity = m.self
	c.Spec.LeaseDurationSeconds = int32(max(1, m.cfg.LeaseDuration/time.Second))
	c.Spec.AcquireTime = acquired.UTC().Format(microTime)
	c.Spec.RenewTime = now.UTC().Format(microTime)
	content, err := json.Marshal(c)
	if err != nil {
		return err
	}
	u.Content = content
	u.Metadata = &corev1.ObjectMeta{Namespace: m.cfg.LeaseNamespace, Name: m.name, Labels: map[string]string{LabelController: m.cfg.Stage}}
	if rev == 0 {
		u.Metadata.Uid, u.Metadata.CreationTimestamp, u.Metadata.Generation = uuid.NewString(), timestamppb.New(now), 1
		_, err = m.store.Create(ctx, u)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			err = m.adopt(ctx, u) // ours from before a restart under the same name
		}
	} else {
		objects.SetRevision(u, rev)
		_, err = m.store.Update(ctx, u)
		if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound) {
			m.mu.Lock()
			m.ownRev = 0
			m.mu.Unlock()
			return fmt.Errorf("renew lease %s: %w", m.name, err)
		}
	}
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", m.name, err)
	}
	m.mu.Lock()
	m.ownRev, m.acquired, m.renewed = objects.Revision(u), acquired, now
	changed := m.recomputeLocked()
	if m.lapsed && m.healthyLocked(m.now()) {
		m.lapsed, changed = false, true // queue what the lapse refused
	}
	m.mu.Unlock()
	m.changed(changed)
	return nil
}

// adopt takes over our Lease as stored (same name: this replica before a
// restart), writing u over it at its revision.
func (m *Members) adopt(ctx context.Context, u *corev1.Unstructured) error {
	cur, err := m.store.GetKind(ctx, objects.Leases, m.cfg.LeaseNamespace, m.name)
	if err != nil {
		return err
	}
	u.Metadata.Uid, u.Metadata.CreationTimestamp = cur.GetMetadata().GetUid(), cur.GetMetadata().GetCreationTimestamp()
	u.Metadata.Generation = cur.GetMetadata().GetGeneration()
	objects.SetRevision(u, objects.Revision(cur))
	_, err = m.store.Update(ctx, u)
	return err
}

// release deletes our Lease, so that the others take our keys at once.
func (m *Members) release(ctx context.Context) {
	m.mu.Lock()
	rev := m.ownRev
	m.ownRev, m.renewed = 0, time.Time{}
	m.mu.Unlock()
	if rev != 0 {
		_, _ = m.store.Delete(ctx, objects.Leases, m.cfg.LeaseNamespace, m.name, rev)
	}
}

// tick recomputes the live set (Leases expire as time passes) and deletes
// the Leases of replicas dead for long (ExpiredLeaseAge), so that restarted
// replicas under new names leave none behind.
func (m *Members) tick(ctx context.Context) {
	m.mu.Lock()
	changed := m.recomputeLocked()
	now := m.now()
	type stale struct {
		name string
		rev  int64
	}
	var gone []stale
	for name, ls := range m.leases {
		if ls.holder != m.self && now.Sub(ls.seen) > m.cfg.ExpiredLeaseAge && now.Sub(ls.renew) > m.cfg.ExpiredLeaseAge {
			gone = append(gone, stale{name, ls.rev})
		}
	}
	m.mu.Unlock()
	m.changed(changed)
	for _, s := range gone {
		_, _ = m.store.Delete(ctx, objects.Leases, m.cfg.LeaseNamespace, s.name, s.rev) // a conflict: it lives again
	}
}

// run renews our Lease every RenewInterval until ctx ends, then releases
// it (release is the caller's: after its workers stopped).
func (m *Members) run(ctx context.Context) {
	t := time.NewTicker(m.cfg.RenewInterval)
	defer t.Stop()
	for {
		if err := m.renew(ctx); err != nil && ctx.Err() == nil && m.cfg.Log != nil {
			m.cfg.Log.Warn("lease renewal failed", "lease", m.name, "err", err)
		}
		m.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
