package objects

import (
	"context"

	"github.com/podflow/podflow/raftstore"
)

// KV is the part of the replicated store a Store needs: the raftstore
// client's reads, writes, transactions and watches, with raftstore's
// semantics and errors (raftstore.ErrNotFound, ErrAlreadyExists,
// ErrConflict naming the key, ErrGone, ...). RaftKV adapts a
// *raftstore.Client; objectstest.KV is an in-memory fake for unit tests.
// Implementations are safe for concurrent use.
type KV interface {
	Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error)
	List(ctx context.Context, prefix string, opts ...raftstore.ReadOption) ([]*raftstore.KV, int64, error)
	Create(ctx context.Context, key string, value []byte) (int64, error)
	Update(ctx context.Context, key string, value []byte, expectedModRev int64) (int64, error)
	Delete(ctx context.Context, key string, expectedModRev int64) (int64, error)
	Txn(ctx context.Context, t raftstore.Txn) (int64, error)
	Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (Watch, error)
}

// Watch is a stream of the changes under a prefix, in revision order with
// no gaps (see raftstore.Watch). Events is closed when the watch ends; Err
// then says why. Stop ends it and is idempotent.
type Watch interface {
	Events() <-chan raftstore.WatchEvent
	Err() error
	Stop()
}

var _ Watch = (*raftstore.Watch)(nil)

// raftKV is a *raftstore.Client as a KV: everything but Watch is the
// client's own method; Watch returns the interface.
type raftKV struct{ *raftstore.Client }

var _ KV = raftKV{}

// RaftKV returns the store client c as a KV.
func RaftKV(c *raftstore.Client) KV { return raftKV{c} }

func (c raftKV) Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (Watch, error) {
	w, err := c.Client.Watch(ctx, prefix, fromRev, opts...)
	if err != nil {
		return nil, err
	}
	return w, nil
}
