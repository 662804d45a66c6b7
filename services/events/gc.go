package events

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// DefaultTTL is how long an Event is kept after it was last seen:
// kube-apiserver's --event-ttl default.
const DefaultTTL = time.Hour

// collectPage bounds the Events read per store request while collecting
// (a variable for tests).
var collectPage = 500

// LastSeen is when e last happened: its lastTimestamp, or for Events that
// only carry them, its eventTime, firstTimestamp or creation time.
func LastSeen(e *corev1.Event) time.Time {
	for _, ts := range []*timestamppb.Timestamp{
		e.GetLastTimestamp(), e.GetEventTime(), e.GetFirstTimestamp(), e.GetMetadata().GetCreationTimestamp(),
	} {
		if ts != nil {
			return ts.AsTime()
		}
	}
	return time.Time{}
}

// Collect deletes every Event last seen (LastSeen) more than ttl before
// now, as kube-apiserver's --event-ttl does with etcd leases. It pages
// through the store and deletes each expired Event with compare-and-swap
// on the revision it read, so an Event recorded again in the meantime is
// fresh and stays, and replicas collecting at once delete each Event once.
// It returns how many Events it deleted.
func Collect(ctx context.Context, st *objects.Store, ttl time.Duration, now time.Time) (int, error) {
	if ttl <= 0 {
		return 0, errors.New("events: the TTL must be positive")
	}
	deadline := now.Add(-ttl)
	deleted, after := 0, ""
	for {
		opts := []raftstore.ReadOption{raftstore.WithLimit(collectPage)}
		if after != "" {
			opts = append(opts, raftstore.WithContinue(after))
		}
		page, _, err := objects.List[*corev1.Event](ctx, st, "", opts...)
		if err != nil {
			return deleted, err
		}
		for _, e := range page {
			md := e.GetMetadata()
			if seen := LastSeen(e); seen.IsZero() || !seen.Before(deadline) {
				continue
			}
			_, err := st.Delete(ctx, objects.Events, md.GetNamespace(), md.GetName(), objects.Revision(e))
			switch {
			case err == nil:
				deleted++
			case errors.Is(err, raftstore.ErrNotFound), errors.Is(err, raftstore.ErrConflict):
				// Collected by another replica, or recorded again: fresh.
			default:
				return deleted, err
			}
		}
		if len(page) < collectPage {
			return deleted, nil
		}
		last := page[len(page)-1].GetMetadata()
		after = objects.Events.Key(last.GetNamespace(), last.GetName())
	}
}
