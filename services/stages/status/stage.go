package status

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Config configures the status stage.
type Config struct {
	// EventTTL: Events last seen longer ago than this are deleted, as
	// kube-apiserver's --event-ttl. Default 1h.
	EventTTL time.Duration
	// EventCollectInterval: how often a replica looks for expired Events
	// (during its reconciliation). Default 1 minute.
	EventCollectInterval time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{EventTTL: events.DefaultTTL, EventCollectInterval: time.Minute}
}

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.EventTTL <= 0:
		return fmt.Errorf("status: EventTTL (%s) must be positive", c.EventTTL)
	case c.EventCollectInterval <= 0:
		return fmt.Errorf("status: EventCollectInterval (%s) must be positive", c.EventCollectInterval)
	}
	return nil
}

// Stage is one replica of the status stage: it applies node agents'
// status reports to the stored pods with compare-and-swap, records their
// Kubernetes Events (DeadlineExceeded once per pod, see onceEvents),
// removes pods their node finished deleting (releasing the node's
// accounted resources in the same transaction), and collects expired
// Events.
type Stage struct {
	env stage.Env
	cfg Config
	rec *events.Recorder
	now func() time.Time

	mu          sync.Mutex
	lastCollect time.Time // of expired Events
}

var _ stage.Reconciler = (*Stage)(nil)

// NewStage returns a status stage replica.
func NewStage(env stage.Env, cfg Config) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stage{
		env: env, cfg: cfg, now: time.Now,
		rec: &events.Recorder{Store: env.Store, Component: "kubelet", Instance: env.Replica},
	}, nil
}

// Handle applies one node report. NodeRestriction: an event is applied
// only when its envelope agrees with the subject it arrived on (the bus
// lets a node publish only on its own subjects), only to a pod bound to
// that node, and a deletion only to a pod being deleted; anything else is
// refused (stage.Refusal, dead-lettered).
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	env := d.Envelope
	switch {
	case env.GetPodStatusReport() != nil:
		if err := stage.CheckSubject(s.env.Log, d); err != nil {
			return err
		}
		return s.report(ctx, d)
	case env.GetPodDeleted() != nil:
		if err := stage.CheckSubject(s.env.Log, d); err != nil {
			return err
		}
		if env.GetNodeName() == "" {
			return nil // an unbound pod, removed by the api stage already
		}
		return s.finalizeDeletion(ctx, d)
	}
	return bus.Permanent(fmt.Errorf("status: unexpected event %s", env.Type()))
}

// report applies one PodStatusReport. The first attempt reads no more
// than it must: the pod with a stale read (any replica, no leader round)
// and the report's Events not at all — each written as its first
// occurrence (events.Recorder.First) — and its transaction compares the
// pod's revision even when it leaves the pod as it is, so it commits only
// on the state it read. Whatever that attempt cannot do on its own (the
// pod not found, another uid, not bound to the reporting node, a conflict:
// a stale copy, an Event stored already) is done again, and decided, on a
// linearizable read and the stored Events, as it always was.
func (s *Stage) report(ctx context.Context, d *bus.Delivery) error {
	env := d.Envelope
	rep := env.GetPodStatusReport()
	ns, name := env.GetNamespace(), env.GetPodName()
	rec := *s.rec
	rec.Instance = env.GetNodeName()
	for fast := true; ; fast = false {
		var opts []raftstore.ReadOption
		if fast {
			opts = append(opts, raftstore.Stale())
		}
		pod, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name, opts...)
		switch {
		case fast && (err != nil || pod.GetMetadata().GetUid() != env.GetPodUid() || pod.GetSpec().GetNodeName() != env.GetNodeName()):
			continue // decide that on a linearizable read
		case errors.Is(err, raftstore.ErrNotFound):
			return nil // the pod is gone; nothing to report on
		case err != nil:
			return err
		case pod.GetMetadata().GetUid() != env.GetPodUid():
			return nil
		}
		if err := stage.CheckBound(s.env.Log, d, pod); err != nil {
			return err // neither its status nor its Events
		}
		// The status and the report's Events go in one transaction: one
		// raft write per report, and never the one without the other.
		var txn objects.Txn
		applied := ApplyReport(pod, env.GetNodeName(), rep)
		if fast || applied {
			txn = txn.Unchanged(pod)
		}
		if applied {
			txn = txn.Put(pod)
		}
		if applied && terminal(pod.GetStatus().GetPhase()) {
			// A pod that finished holds nothing on its node (kubelet's
			// admission and kube-scheduler count no Succeeded or Failed
			// pod): its node's allocation releases it in this write.
			if txn, err = s.releaseAllocated(ctx, txn, pod); err != nil {
				return err
			}
		}
		ref := podrules.PodRef(pod)
		seen := map[string]bool{}
		for i, er := range rep.GetEvents() {
			cause := env.GetId() + "/" + strconv.Itoa(i)
			w, ok := rec.First(ref, er.GetType(), er.GetReason(), er.GetMessage(), cause), true
			if !fast {
				if w, ok, err = rec.Prepare(ctx, ref, er.GetType(), er.GetReason(), er.GetMessage(), cause); err != nil {
					return err
				}
				if onceEvents[er.GetReason()] && w.Revision != objects.Absent {
					continue // recorded for this pod already (the first attempt's conflict)
				}
			}
			if !ok || seen[w.Event.GetMetadata().GetName()] {
				continue // counted already, or the same occurrence twice in one report
			}
			seen[w.Event.GetMetadata().GetName()] = true
			txn = w.Add(txn)
		}
		if txn.Empty() {
			return nil
		}
		_, err = s.env.Store.Commit(ctx, txn)
		if errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return err
	}
}

// onceEvents are the reasons recorded at most once per pod: when an Event
// of the reason is stored for the pod (its name holds the pod's uid), a
// new occurrence is not counted. A pod passes its activeDeadlineSeconds
// once, and kubelet records DeadlineExceeded once per pod worker; a node
// agent restarted while it was killing the pod reports it again.
var onceEvents = map[string]bool{eventsv1.ReasonDeadlineExceeded: true}

// finalizeDeletion removes a pod its node has finished with, and releases
// what the pod held in its node's allocation, in one transaction: only a
// pod bound to the node that reports it, and only once it is being deleted.
// A pod that still has finalizers stays, as kubelet's final delete (grace
// 0) leaves it to kube-apiserver: deletionGracePeriodSeconds 0 records
// that its node is done, a pod that was not Succeeded is Failed, and the
// writer that removes its last finalizer deletes it
// (stage.RemovePodFinalizer).
func (s *Stage) finalizeDeletion(ctx context.Context, d *bus.Delivery) error {
	ns, name, uid := d.Envelope.GetNamespace(), d.Envelope.GetPodName(), d.Envelope.GetPodUid()
	for {
		pod, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if pod.GetMetadata().GetUid() != uid {
			return nil // a new pod of the same name
		}
		if err := stage.CheckBound(s.env.Log, d, pod); err != nil {
			return err
		}
		if err := stage.CheckTerminating(s.env.Log, d, pod); err != nil {
			return err
		}
		txn := objects.Txn{}.Unchanged(pod).Delete(pod)
		if len(pod.GetMetadata().GetFinalizers()) > 0 {
			if !stage.HoldForFinalizers(pod) {
				txn = objects.Txn{}
			} else {
				txn = objects.Txn{}.Unchanged(pod).Put(pod)
			}
		}
		if txn, err = s.releaseAllocated(ctx, txn, pod); err != nil {
			return err
		}
		if txn.Empty() {
			return nil
		}
		_, err = s.env.Store.Commit(ctx, txn)
		if errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return err
	}
}

// releaseAllocated adds to txn the release of pod from its node's
// NodeAllocation, compared at the revision read, when the record holds it.
// The record is read linearizably even on a report's first attempt: a
// stale copy without the pod (a replica behind its bind) would let the
// write go without the release. txn writes the pod too, so the
// allocation changes at a revision that writes a pod, as every scheduler
// expects (its pod informer reaching the revision has seen the change);
// the pod's phase never leaves Succeeded or Failed, so the release is
// made once and never undone.
func (s *Stage) releaseAllocated(ctx context.Context, txn objects.Txn, pod *corev1.Pod) (objects.Txn, error) {
	node, uid := pod.GetSpec().GetNodeName(), pod.GetMetadata().GetUid()
	if node == "" {
		return txn, nil
	}
	alloc, err := objects.Get[*corev1.NodeAllocation](ctx, s.env.Store, "", node)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return txn, nil
	case err != nil:
		return txn, err
	}
	if _, held := alloc.GetPods()[uid]; !held {
		return txn, nil
	}
	delete(alloc.Pods, uid)
	return txn.Unchanged(alloc).Put(alloc), nil
}

// Reconcile deletes, every EventCollectInterval, the Events older than
// EventTTL. (Nodes whose heartbeats stopped are the node lifecycle
// controller's, services/stages/nodelifecycle, run beside the stage.)
func (s *Stage) Reconcile(ctx context.Context) error {
	return s.collectEvents(ctx, s.now())
}

func (s *Stage) collectEvents(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	due := now.Sub(s.lastCollect) >= s.cfg.EventCollectInterval
	if due {
		s.lastCollect = now
	}
	s.mu.Unlock()
	if !due {
		return nil
	}
	if _, err := events.Collect(ctx, s.env.Store, s.cfg.EventTTL, now); err != nil {
		return fmt.Errorf("status: collect expired events: %w", err)
	}
	return nil
}
