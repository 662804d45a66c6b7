package raftstore

import (
	"strings"

	"github.com/podflow/podflow/proto/storev1"
)

// State is a read-only view of one replica's key space at a read, handed
// to Config.ReadFilter so that a read policy can follow relations between
// stored objects (a node reads the Secrets its pods reference). It is
// valid only during the call it is passed to.
type State interface {
	// Get returns key's value and whether key is stored.
	Get(key string) ([]byte, bool)
	// Scan calls fn with every stored key starting with prefix, in order,
	// until fn returns false.
	Scan(prefix string, fn func(key string, value []byte) bool)
}

// view is State over f's key space; its user holds f.mu.
type view struct{ f *fsm }

func (v view) Get(key string) ([]byte, bool) {
	kv := v.f.kvs[key]
	if kv == nil {
		return nil, false
	}
	return v.f.plain(key, kv.Value), true
}

func (v view) Scan(prefix string, fn func(key string, value []byte) bool) {
	v.f.keys.AscendGreaterOrEqual(prefix, func(k string) bool {
		return strings.HasPrefix(k, prefix) && fn(k, v.f.plain(k, v.f.kvs[k].Value))
	})
}

// keepFunc decides, under the fsm's read lock, whether a reader is shown
// kv (nil: everything).
type keepFunc func(key string, value []byte, st State) bool

// keeper returns the ReadFilter of the named reader of subject, or nil
// when there is none (no filter configured, or an unnamed reader).
func (n *Node) keeper(subject string) keepFunc {
	user, named := n.requester(subject)
	if !named || n.cfg.ReadFilter == nil {
		return nil
	}
	return func(key string, value []byte, st State) bool { return n.cfg.ReadFilter(user, key, value, st) }
}

// getKept is get, and whether keep (nil: always) allows the reader key,
// stored or not (value nil).
func (f *fsm) getKept(key string, keep keepFunc) (*storev1.KeyValue, int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	kv := f.kvs[key]
	if keep == nil {
		return kv, f.rev, true
	}
	var value []byte
	if kv != nil {
		value = f.plain(key, kv.Value)
	}
	return kv, f.rev, keep(key, value, view{f})
}

// checkCompares applies the read policy to a transaction's compares: a
// compare reads its key (whether it exists, its revision), so a writer may
// compare only what it may read (CODE_FORBIDDEN otherwise).
func (n *Node) checkCompares(subject string, cmd *storev1.Command) error {
	keep := n.keeper(subject)
	for _, cmp := range cmd.GetCompares() {
		if err := n.checkRead(subject, cmp.GetKey(), false); err != nil {
			return err
		}
		if _, _, ok := n.fsm.getKept(cmp.GetKey(), keep); !ok {
			return n.refuseRead(subject, cmp.GetKey())
		}
	}
	return nil
}

// refuseRead is the CODE_FORBIDDEN answer to a read of key ReadFilter
// refused.
func (n *Node) refuseRead(subject, key string) error {
	user, _ := n.requester(subject)
	n.log.Warn("read refused", "reader", user, "key", key, "by", "ReadFilter")
	return newError(storev1.Code_CODE_FORBIDDEN, key, "reader %q may not read %q", user, key)
}
