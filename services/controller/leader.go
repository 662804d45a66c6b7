package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// ElectionConfig configures a leader election among the replicas of a
// controller stage that must act alone (kube-controller-manager's
// --leader-elect): client-go's leaderelection over a coordination.k8s.io
// Lease in the store.
type ElectionConfig struct {
	// Namespace and Name of the Lease (default kube-system and
	// "podflow-<stage>").
	Namespace, Name string
	// Identity is this replica's holderIdentity: the replica's name, "_"
	// and a random suffix, as kube's (a restarted replica is a new
	// candidate).
	Identity string
	// LeaseDuration: a standby takes over a Lease not renewed for this
	// long, measured on its own clock from when it saw the last change
	// (kube's --leader-elect-lease-duration, default 15s). RenewDeadline:
	// the leader stops acting when it could not renew for this long
	// (default 10s, less than LeaseDuration). RetryPeriod between tries
	// (default 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Log receives the election's transitions (nil: discarded).
	Log *slog.Logger
}

// DefaultElectionConfig returns the defaults documented on
// ElectionConfig for a replica of stage.
func DefaultElectionConfig(stage, replica string) ElectionConfig {
	return ElectionConfig{Namespace: "kube-system", Name: "podflow-" + stage, Identity: replica + "_" + uuid.NewString(),
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// FastElectionConfig shortens cfg's periods for tests: a dead leader is
// replaced within two seconds.
func FastElectionConfig(cfg *ElectionConfig) {
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 250*time.Millisecond
}

// Validate checks the ElectionConfig (client-go's rules among them).
func (c ElectionConfig) Validate() error {
	switch {
	case c.Namespace == "" || c.Name == "":
		return errors.New("controller: the election's Lease needs a Namespace and a Name")
	case c.Identity == "":
		return errors.New("controller: the election needs an Identity")
	case c.RetryPeriod <= 0:
		return fmt.Errorf("controller: RetryPeriod (%s) must be positive", c.RetryPeriod)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("controller: LeaseDuration (%s) must be longer than RenewDeadline (%s)", c.LeaseDuration, c.RenewDeadline)
	case float64(c.RenewDeadline) <= leaderelection.JitterFactor*float64(c.RetryPeriod):
		return fmt.Errorf("controller: RenewDeadline (%s) must be longer than RetryPeriod (%s) times %.1f", c.RenewDeadline, c.RetryPeriod, leaderelection.JitterFactor)
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("controller: LeaseDuration (%s) cannot be shorter than a second (leaseDurationSeconds)", c.LeaseDuration)
	}
	return nil
}

// Elector campaigns for a Lease and says whether this replica leads. Run
// is client-go's LeaderElector in a loop: a replica that lost the Lease
// stands by again (kube-controller-manager exits instead; a podflow stage
// stays up). Its methods are safe for concurrent use.
type Elector struct {
	cfg  ElectionConfig
	lock *LeaseLock

	mu      sync.Mutex
	round   int             // elections run
	leading context.Context // nil while not leading
}

// NewElector returns an Elector over the Lease of cfg in st.
func NewElector(st *objects.Store, cfg ElectionConfig) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Elector{cfg: cfg, lock: &LeaseLock{Store: st, Namespace: cfg.Namespace, Name: cfg.Name, ID: cfg.Identity}}, nil
}

// Identity is this replica's holderIdentity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Leading returns a context that ends when this replica stops leading,
// and whether it leads now.
func (e *Elector) Leading() (context.Context, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading, e.leading != nil && e.leading.Err() == nil
}

// Run campaigns until ctx ends; while it leads, Leading says so. When ctx
// ends it releases the Lease if it holds it, so a standby takes over at
// once: the caller ends ctx only after the work the Lease guards stopped.
func (e *Elector) Run(ctx context.Context) {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(e.cfg.Log.Handler()))
	for ctx.Err() == nil {
		// client-go calls OnStartedLeading on a goroutine of its own: one
		// late from an election before never overwrites this one's.
		e.mu.Lock()
		e.round++
		round := e.round
		e.mu.Unlock()
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: e.lock, LeaseDuration: e.cfg.LeaseDuration, RenewDeadline: e.cfg.RenewDeadline,
			RetryPeriod: e.cfg.RetryPeriod, ReleaseOnCancel: true, Name: e.cfg.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					e.mu.Lock()
					if e.round == round {
						e.leading = lctx
					}
					e.mu.Unlock()
					e.cfg.Log.Info("leading", "lease", e.lock.Describe(), "identity", e.cfg.Identity)
				},
				OnStoppedLeading: func() {
					e.mu.Lock()
					was := e.leading != nil
					e.leading = nil
					e.mu.Unlock()
					if was {
						e.cfg.Log.Info("stopped leading", "lease", e.lock.Describe(), "identity", e.cfg.Identity)
					}
				},
			},
		})
		if err != nil { // Validate checked what client-go checks
			e.cfg.Log.Error("leader election", "err", err)
			return
		}
		le.Run(ctx)
	}
}

// LeaseLock is client-go's resourcelock.LeaseLock over the store: a
// coordination.k8s.io/v1 Lease read with Get and written with
// compare-and-swap at the revision Get saw, so two candidates never both
// take it.
type LeaseLock struct {
	Store           *objects.Store
	Namespace, Name string
	ID              string

	mu    sync.Mutex
	lease *corev1.Unstructured // as last read or written
}

var _ resourcelock.Interface = (*LeaseLock)(nil)

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// leaseObject is the stored content of a Lease that a LeaseLock reads and
// writes (other fields are kept).
type leaseObject struct {
	Spec coordinationv1.LeaseSpec `json:"spec"`
}

// Get reads the Lease: a Kubernetes NotFound error when there is none.
func (l *LeaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	obj, err := l.Store.GetKind(ctx, objects.Leases, l.Namespace, l.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil, apierrors.NewNotFound(leaseResource, l.Name)
	}
	if err != nil {
		return nil, nil, err
	}
	u, ok := obj.(*corev1.Unstructured)
	if !ok {
		return nil, nil, fmt.Errorf("lease %s: stored as %T", l.Describe(), obj)
	}
	var c leaseObject
	if err := json.Unmarshal(u.GetContent(), &c); err != nil {
		return nil, nil, fmt.Errorf("lease %s: %w", l.Describe(), err)
	}
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&c.Spec)
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	l.lease = u
	l.mu.Unlock()
	return rec, raw, nil
}

// Create creates the Lease holding ler.
func (l *LeaseLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	u := objects.Leases.New().(*corev1.Unstructured)
	u.Metadata = &corev1.ObjectMeta{Namespace: l.Namespace, Name: l.Name, Uid: uuid.NewString(), CreationTimestamp: timestamppb.Now(), Generation: 1}
	if err := setSpec(u, ler); err != nil {
		return err
	}
	if _, err := l.Store.Create(ctx, u); err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = u
	l.mu.Unlock()
	return nil
}

// Update writes ler over the Lease as last read, with compare-and-swap.
func (l *LeaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	cur := l.lease
	l.mu.Unlock()
	if cur == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	u := proto.Clone(cur).(*corev1.Unstructured)
	if err := setSpec(u, ler); err != nil {
		return err
	}
	if _, err := l.Store.Update(ctx, u); err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = u
	l.mu.Unlock()
	return nil
}

// setSpec sets the spec of u's content to ler's, keeping its other fields.
func setSpec(u *corev1.Unstructured, ler resourcelock.LeaderElectionRecord) error {
	content := map[string]json.RawMessage{}
	if len(u.GetContent()) > 0 {
		if err := json.Unmarshal(u.GetContent(), &content); err != nil {
			return err
		}
	}
	spec, err := json.Marshal(resourcelock.LeaderElectionRecordToLeaseSpec(&ler))
	if err != nil {
		return err
	}
	content["spec"] = spec
	b, err := json.Marshal(content)
	if err != nil {
		return err
	}
	u.Content = b
	return nil
}

// RecordEvent records nothing: the transitions are logged by the Elector.
func (l *LeaseLock) RecordEvent(string) {}

// Identity is the candidate's holderIdentity.
func (l *LeaseLock) Identity() string { return l.ID }

// Describe names the Lease.
func (l *LeaseLock) Describe() string { return l.Namespace + "/" + l.Name }
