package client

import (
	"context"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// eventAbout reports whether e is about an object of kind and name (""
// matches any).
func eventAbout(e *corev1.Event, kind, name string) bool {
	o := e.GetInvolvedObject()
	return (kind == "" || o.GetKind() == kind) && (name == "" || o.GetName() == name)
}

// EventsFor lists the Events of namespace ns ("": every namespace) about
// objects of kind and name ("": any), in kubectl events' order, and the
// store revision they were read at (where FollowEvents goes on).
func (sess *Session) EventsFor(ctx context.Context, ns, kind, name string) ([]objects.Object, int64, error) {
	evs, rev, err := objects.List[*corev1.Event](ctx, sess.Store, ns)
	if err != nil {
		return nil, 0, err
	}
	var list []*corev1.Event
	for _, e := range evs {
		if eventAbout(e, kind, name) {
			list = append(list, e)
		}
	}
	SortEvents(list)
	sel := make([]objects.Object, 0, len(list))
	for _, e := range list {
		sel = append(sel, e)
	}
	return sel, rev, nil
}

// FollowEvents calls fn with each Event about kind and name written in ns
// after revision rev, until ctx ends (nil) or the watch or fn fails.
func (sess *Session) FollowEvents(ctx context.Context, ns, kind, name string, rev int64, fn func(*corev1.Event) error) error {
	w, err := sess.Store.Client().Watch(ctx, objects.Events.Prefix(ns), rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Type != raftstore.EventPut {
			continue
		}
		e := &corev1.Event{}
		if objects.Decode(ev.KV, e) != nil || !eventAbout(e, kind, name) {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return w.Err()
}
