package objectstest

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Watch delivers every change under prefix with revision > fromRev, in
// revision order, until ctx ends or Stop is called (Err is then the ctx's
// error, context.Canceled after Stop), or the history it needs is
// compacted (raftstore.ErrGone). Changes under a prefix opts leave out
// (raftstore.WatchExcept) are not delivered.
func (k *KV) Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (objects.Watch, error) {
	if err := k.call(ctx, "Watch", prefix); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if fromRev < 0 {
		return nil, errorf(storev1.Code_CODE_INVALID, prefix, "watch from revision %d", fromRev)
	}
	if fromRev < k.compacted {
		return nil, errorf(storev1.Code_CODE_GONE, "", "revision %d is compacted (oldest watchable %d)", fromRev, k.compacted)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watch{kv: k, prefix: prefix, except: raftstore.WatchExceptOf(opts...), last: fromRev, events: make(chan raftstore.WatchEvent), cancel: cancel, done: make(chan struct{})}
	go w.run(wctx)
	return w, nil
}

type watch struct {
	kv     *KV
	prefix string
	except []string
	last   int64 // revision of the last event delivered (or the start)
	events chan raftstore.WatchEvent
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before events is closed
}

func (w *watch) Events() <-chan raftstore.WatchEvent { return w.events }

func (w *watch) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

func (w *watch) Stop() {
	w.cancel()
	<-w.done
}

func (w *watch) run(ctx context.Context) {
	defer close(w.done)
	defer close(w.events)
	for {
		batch, changed, err := w.next()
		if err != nil {
			w.err = err
			return
		}
		for _, ev := range batch {
			select {
			case w.events <- ev:
				w.last = ev.Revision
			case <-ctx.Done():
				w.err = ctx.Err()
				return
			}
		}
		if len(batch) > 0 {
			continue // there may be more already
		}
		select {
		case <-changed:
		case <-ctx.Done():
			w.err = ctx.Err()
			return
		}
	}
}

// next returns the first event after w.last under the prefix (a copy), if
// any, and the channel closed at the next change. One at a time: a watch
// holds no event it has not delivered but the one it is sending, so a
// watcher that falls behind gets ErrGone once the next event it needs is
// compacted, whatever the timing. Taking every event there was at once
// let a slow watcher hold, unseen, all it needed up to a compaction, and
// catch up without the relist a compaction behind it must cause
// (informer TestRelistAfterCompaction once failed so under make test).
func (w *watch) next() ([]raftstore.WatchEvent, <-chan struct{}, error) {
	k := w.kv
	k.mu.Lock()
	defer k.mu.Unlock()
	if w.last < k.compacted {
		return nil, nil, errorf(storev1.Code_CODE_GONE, "", "revision %d is compacted (oldest watchable %d)", w.last, k.compacted)
	}
	i := sort.Search(len(k.history), func(i int) bool { return k.history[i].Revision > w.last })
	var out []raftstore.WatchEvent
	for _, ev := range k.history[i:] {
		if strings.HasPrefix(ev.KV.Key, w.prefix) && !slices.ContainsFunc(w.except, func(p string) bool { return strings.HasPrefix(ev.KV.Key, p) }) {
			out = append(out, raftstore.WatchEvent{Type: ev.Type, KV: clone(ev.KV), Revision: ev.Revision})
			break
		}
	}
	return out, k.changed, nil
}
