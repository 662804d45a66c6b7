package garbagecollector

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// The index is the collector's graph of owners and dependents, as kube's
// GraphBuilder keeps one from its metadata informers: per stored object
// (but Events) its key, kind, uid, owner references, whether it is marked
// for deletion and with which of the collector's finalizers, and the
// revision it was last written at; by uid; and by owner uid, its
// dependents. It is built from a paginated list of each kind and kept by
// the watch of every key the collector runs (only the metadata is
// decoded: a pod costs a few hundred bytes). It says what to sync — a
// deleted owner's dependents, an owner marked with a finalizer, a
// dependent whose owner it does not hold — and what an owner's dependents
// are; every decision to delete or to drop a reference is taken on a
// fresh read of the store, so a stale index can delay, never mislead.
type index struct {
	mu      sync.RWMutex
	gen     uint64          // the kind registry's generation the listed kinds are of
	listed  map[string]bool // the key prefixes of the kinds listed
	byKey   map[string]*entry
	byUID   map[string]*entry
	byOwner map[string]map[*entry]struct{} // owner uid → its dependents
	strs    map[string]string              // interned apiVersions and kinds of references
}

// entry is what the index keeps of one object.
type entry struct {
	key   string
	kind  *kindInfo
	uid   string
	refs  []ownerRef
	rev   int64 // the revision it was last written at
	flags uint8
}

// The flags of an entry.
const (
	deleting      = 1 << iota // deletionTimestamp is set
	orphanFin                 // marked for deletion with the "orphan" finalizer
	foregroundFin             // marked for deletion with "foregroundDeletion"
)

// ownerRef is what the index keeps of an owner reference.
type ownerRef struct {
	apiVersion, kind, name, uid string
	block                       bool
}

func newIndex() *index {
	return &index{listed: map[string]bool{}, byKey: map[string]*entry{}, byUID: map[string]*entry{}, byOwner: map[string]map[*entry]struct{}{}, strs: map[string]string{}}
}

// gcFin reports whether e waits for one of the collector's finalizers.
func (e *entry) gcFin() bool { return e.flags&(orphanFin|foregroundFin) != 0 }

// namespace is e's namespace ("" for a cluster-scoped object).
func (e *entry) namespace() string {
	if !e.kind.kind.Namespaced {
		return ""
	}
	ns, _, _ := strings.Cut(strings.TrimPrefix(e.key, e.kind.prefix), "/")
	return ns
}

// kindInfo is a stored kind as the index reads it.
type kindInfo struct {
	kind        objects.Kind
	prefix      string
	scanned     bool             // the collector reads it (scanned)
	collectable bool             // the collector deletes it as a dependent
	metaField   protowire.Number // the field number of its metadata
}

// kindTable is every stored kind by key prefix, for one generation of
// the registry (custom resources come and go).
type kindTable struct {
	gen      uint64
	byPrefix map[string]*kindInfo
	byGK     map[[2]string]*kindInfo // group, kind
	all      []*kindInfo
}

var kinds atomic.Pointer[kindTable]

// kindTab is the table of the registry's current generation.
func kindTab() *kindTable {
	gen := objects.Generation()
	if t := kinds.Load(); t != nil && t.gen == gen {
		return t
	}
	t := &kindTable{gen: gen, byPrefix: map[string]*kindInfo{}, byGK: map[[2]string]*kindInfo{}}
	for _, k := range objects.Kinds() {
		ki := &kindInfo{kind: k, prefix: k.Prefix(""), scanned: scanned(k), collectable: collectable(k)}
		if fd := k.New().ProtoReflect().Descriptor().Fields().ByName("metadata"); fd != nil {
			ki.metaField = fd.Number()
		}
		t.byPrefix[ki.prefix] = ki
		if _, dup := t.byGK[[2]string{k.APIGroup, k.Name}]; !dup {
			t.byGK[[2]string{k.APIGroup, k.Name}] = ki
		}
		t.all = append(t.all, ki)
	}
	kinds.Store(t)
	return t
}

// kindOfKey is the kind whose prefix is the longest one key has.
func (t *kindTable) kindOfKey(key string) (*kindInfo, bool) {
	var best *kindInfo
	for i := len(watchPrefix); i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		if ki, ok := t.byPrefix[key[:i+1]]; ok {
			best = ki
		}
	}
	return best, best != nil
}

// kindOfRef is the kind an owner reference names, by the group of its
// apiVersion and its kind (as kindOf).
func (t *kindTable) kindOfRef(apiVersion, kind string) (*kindInfo, bool) {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group = ""
	}
	ki, ok := t.byGK[[2]string{group, kind}]
	return ki, ok
}

// splitKey is the namespace and name of a key of kind ki.
func (ki *kindInfo) splitKey(key string) (ns, name string) {
	rest := strings.TrimPrefix(key, ki.prefix)
	if !ki.kind.Namespaced {
		return "", rest
	}
	ns, name, _ = strings.Cut(rest, "/")
	return ns, name
}

// Field numbers of the metadata the index reads, from the descriptors.
var (
	metaUID, metaDeletion, metaFinalizers, metaOwners protowire.Number
	refAPIVersion, refKind, refName, refUID, refBlock protowire.Number
)

func init() {
	md := (&corev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields()
	metaUID = md.ByName("uid").Number()
	metaDeletion = md.ByName("deletion_timestamp").Number()
	metaFinalizers = md.ByName("finalizers").Number()
	metaOwners = md.ByName("owner_references").Number()
	rd := (&corev1.OwnerReference{}).ProtoReflect().Descriptor().Fields()
	refAPIVersion = rd.ByName("api_version").Number()
	refKind = rd.ByName("kind").Number()
	refName = rd.ByName("name").Number()
	refUID = rd.ByName("uid").Number()
	refBlock = rd.ByName("block_owner_deletion").Number()
}

// intern returns the index's copy of b (apiVersions and kinds repeat).
func (x *index) intern(b []byte) string {
	if s, ok := x.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	x.strs[s] = s
	return s
}

// parse decodes the entry of kv, of kind ki: the metadata's uid,
// deletionTimestamp, finalizers and owner references; the rest of the
// object is skipped unparsed. x.mu must be held (interning).
func (x *index) parse(kv *raftstore.KV, ki *kindInfo) (*entry, error) {
	e := &entry{key: kv.Key, kind: ki, rev: kv.ModRevision}
	b := kv.Value
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == ki.metaField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			if err := x.parseMeta(v, e); err != nil { // a repeated field merges, as proto.Unmarshal
				return nil, err
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if e.flags&deleting == 0 {
		e.flags &^= orphanFin | foregroundFin
	} else if e.flags&orphanFin != 0 {
		e.flags &^= foregroundFin // "orphan" first, as gcFinalizer
	}
	return e, nil
}

func (x *index) parseMeta(b []byte, e *entry) error {
	return vt.EachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case metaUID:
			e.uid = string(v)
		case metaDeletion:
			e.flags |= deleting
		case metaFinalizers:
			switch string(v) {
			case stage.FinalizerOrphan:
				e.flags |= orphanFin
			case stage.FinalizerForeground:
				e.flags |= foregroundFin
			}
		case metaOwners:
			ref, err := x.parseRef(v)
			if err != nil {
				return err
			}
			e.refs = append(e.refs, ref)
		}
		return nil
	})
}

func (x *index) parseRef(b []byte) (ownerRef, error) {
	var r ownerRef
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == refAPIVersion || num == refKind || num == refName || num == refUID):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return r, protowire.ParseError(n)
			}
			b = b[n:]
			switch num {
			case refAPIVersion:
				r.apiVersion = x.intern(v)
			case refKind:
				r.kind = x.intern(v)
			case refName:
				r.name = string(v)
			default:
				r.uid = string(v)
			}
		case typ == protowire.VarintType && num == refBlock:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return r, protowire.ParseError(n)
			}
			b = b[n:]
			r.block = v != 0
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return r, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return r, nil
}

// add puts e in the index, replacing old (the previous entry of its key,
// or nil).
func (x *index) add(old, e *entry) {
	if old != nil {
		x.remove(old)
	}
	x.byKey[e.key] = e
	if e.uid != "" {
		x.byUID[e.uid] = e
	}
	for _, r := range e.refs {
		deps := x.byOwner[r.uid]
		if deps == nil {
			deps = map[*entry]struct{}{}
			x.byOwner[r.uid] = deps
		}
		deps[e] = struct{}{}
	}
}

func (x *index) remove(e *entry) {
	delete(x.byKey, e.key)
	if x.byUID[e.uid] == e {
		delete(x.byUID, e.uid)
	}
	for _, r := range e.refs {
		if deps := x.byOwner[r.uid]; deps != nil {
			delete(deps, e)
			if len(deps) == 0 {
				delete(x.byOwner, r.uid)
			}
		}
	}
}

// dangling reports whether the owner r names, for a dependent in ns, is
// not in the index as named (kind, namespace, name, uid): the dependent is
// to be checked against the store (kube's virtual node). An owner of a
// kind the process does not know is taken to exist.
func (x *index) dangling(t *kindTable, ns string, r ownerRef) bool {
	k, ok := t.kindOfRef(r.apiVersion, r.kind)
	if !ok {
		return false
	}
	o := x.byUID[r.uid]
	if o == nil || o.kind.kind.Name != k.kind.Name || o.kind.kind.APIGroup != k.kind.APIGroup {
		return true
	}
	ons, name := o.kind.splitKey(o.key)
	return name != r.name || (k.kind.Namespaced && ons != ns)
}

// needsCheck reports whether dependent e is to be checked: an owner of it
// is not in the index.
func (x *index) needsCheck(t *kindTable, e *entry) bool {
	if len(e.refs) == 0 || e.flags&deleting != 0 || !e.kind.collectable {
		return false
	}
	ns := e.namespace()
	for _, r := range e.refs {
		if x.dangling(t, ns, r) {
			return true
		}
	}
	return false
}

// apply applies one watched change to the index and returns the keys to
// sync: an object newly marked with a collector finalizer; a dependent,
// new or with new references, whose owner the index does not hold; the
// dependents of a deleted object; an owner waiting for its finalizer
// whose dependent came, went or changed its references. A change older
// than the entry it would replace (a list and the watch replayed from
// before it) is ignored.
func (x *index) apply(t *kindTable, ev raftstore.WatchEvent) []string {
	if ev.KV == nil {
		return nil
	}
	ki, ok := t.kindOfKey(ev.KV.Key)
	if !ok || !ki.scanned {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.byKey[ev.KV.Key]
	var out []string
	owners := func(e *entry, keep []ownerRef) {
		for _, r := range e.refs {
			if o := x.byUID[r.uid]; o != nil && o.gcFin() && !slices.Contains(keep, r) {
				out = append(out, o.key)
			}
		}
	}
	if ev.Type == raftstore.EventDelete {
		if old == nil || old.rev >= ev.Revision {
			return nil
		}
		x.remove(old)
		for d := range x.byOwner[old.uid] {
			out = append(out, d.key)
		}
		owners(old, nil)
		return out
	}
	if old != nil && old.rev >= ev.KV.ModRevision {
		return nil
	}
	e, err := x.parse(ev.KV, ki)
	if err != nil {
		return nil // not an object the collector can read; a full decode would fail as well
	}
	if old != nil && old.uid == e.uid && old.flags == e.flags && slices.Equal(old.refs, e.refs) {
		old.rev = e.rev // most writes (a pod's status) change nothing the index holds
		return nil
	}
	x.add(old, e)
	if old != nil && old.uid != e.uid { // made again without the deletion seen
		for d := range x.byOwner[old.uid] {
			out = append(out, d.key)
		}
	}
	if e.gcFin() && (old == nil || old.uid != e.uid || old.flags != e.flags) {
		out = append(out, e.key)
	}
	if old == nil || old.uid != e.uid || !slices.Equal(old.refs, e.refs) {
		if x.needsCheck(t, e) {
			out = append(out, e.key)
		}
		owners(e, nil)
		if old != nil {
			owners(old, e.refs)
		}
	}
	return out
}

// scan is the keys to sync from the index alone: every object marked
// with a collector finalizer and every dependent whose owner it does not
// hold. It reads nothing from the store.
func (x *index) scan(t *kindTable) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	for _, e := range x.byKey {
		if e.gcFin() || x.needsCheck(t, e) {
			out = append(out, e.key)
		}
	}
	sort.Strings(out)
	return out
}

// listPage is the page size of the index's lists.
const listPage = 1000

// build fills x, empty, with every object of the kinds the collector
// reads, listed page by page; it returns the revision of the first page:
// a watch from there replays what changed during the list, which apply
// sorts out by revision.
func (x *index) build(ctx context.Context, kv objects.KV) (int64, error) {
	t := kindTab()
	x.gen = t.gen
	first, err := x.list(ctx, kv, t, t.all)
	return max(first, 0), err
}

// refreshKinds follows the registry to t, when its generation is not the
// one x was listed with: the objects of a kind registered since (a custom
// resource's, whose catalog registers it as it reads the definitions) are
// listed in — later writes and deletes of them are then applied by
// revision, as after build — and those of a kind gone from the registry
// are dropped as deleted. It returns the keys to sync: the dropped
// objects' dependents, and scan's keys when a kind was listed in (a
// dependent whose owner is of that kind was not checked before).
func (x *index) refreshKinds(ctx context.Context, kv objects.KV, t *kindTable) ([]string, error) {
	if x.gen == t.gen {
		return nil, nil
	}
	var added []*kindInfo
	for _, ki := range t.all {
		if ki.scanned && !x.listed[ki.prefix] {
			added = append(added, ki)
		}
	}
	if _, err := x.list(ctx, kv, t, added); err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gen = t.gen
	var out []string
	for p := range x.listed {
		if _, ok := t.byPrefix[p]; ok {
			continue
		}
		delete(x.listed, p)
		for _, e := range x.byKey {
			if e.kind.prefix != p {
				continue
			}
			x.remove(e)
			for d := range x.byOwner[e.uid] {
				out = append(out, d.key)
			}
		}
	}
	if len(added) > 0 { // their objects, and the dependents of those not there (a new kind's owners were taken to exist)
		for _, e := range x.byKey {
			if e.gcFin() || x.needsCheck(t, e) {
				out = append(out, e.key)
			}
		}
	}
	return out, nil
}

// list lists the objects of kinds into x, page by page, and returns the
// revision of the first page (-1 when nothing was listed).
func (x *index) list(ctx context.Context, kv objects.KV, t *kindTable, kinds []*kindInfo) (int64, error) {
	first := int64(-1)
	for _, ki := range kinds {
		if !ki.scanned {
			continue
		}
		after := ""
		for {
			opts := []raftstore.ReadOption{raftstore.WithLimit(listPage)}
			if after != "" {
				opts = append(opts, raftstore.WithContinue(after))
			}
			kvs, rev, err := kv.List(ctx, ki.prefix, opts...)
			if err != nil {
				return 0, fmt.Errorf("list %s: %w", ki.kind.Qualified(), err)
			}
			if first < 0 {
				first = rev
			}
			progress := false
			x.mu.Lock()
			for _, o := range kvs {
				if o.Key <= after {
					continue
				}
				progress = true
				if k2, ok := t.kindOfKey(o.Key); !ok || k2 != ki {
					continue // a longer prefix's kind (services/endpoints under services/)
				}
				if old := x.byKey[o.Key]; old != nil && old.rev >= o.ModRevision {
					continue
				}
				e, err := x.parse(o, ki)
				if err != nil {
					continue
				}
				x.add(x.byKey[e.key], e)
			}
			x.mu.Unlock()
			if len(kvs) < listPage || !progress {
				break
			}
			after = kvs[len(kvs)-1].Key
		}
		x.mu.Lock()
		x.listed[ki.prefix] = true
		x.mu.Unlock()
	}
	return first, nil
}

// dependent is what a sync reads of an owner's dependent in the index.
type dependent struct {
	key      string
	kind     *kindInfo
	deleting bool // its deletion is under way
	block    bool // its reference to the owner blocks the owner's deletion
	hasDeps  bool // it has dependents of its own
	cycle    bool // one of its dependents waits for its own in the foreground
}

// dependents are the objects the index holds that name owner uid.
func (x *index) dependents(uid string) []dependent {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]dependent, 0, len(x.byOwner[uid]))
	for e := range x.byOwner[uid] {
		d := dependent{key: e.key, kind: e.kind, deleting: e.flags&deleting != 0}
		for _, r := range e.refs {
			d.block = d.block || (r.uid == uid && r.block)
		}
		for dd := range x.byOwner[e.uid] {
			d.hasDeps = true
			d.cycle = d.cycle || dd.flags&foregroundFin != 0
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// size is the number of objects in the index.
func (x *index) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}
