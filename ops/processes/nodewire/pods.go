package nodewire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PodWatch watches the store's pods and hands every update of a pod
// bound to its node that adds ephemeral containers (kubectl debug's write
// of pods/ephemeralcontainers, which no lifecycle event announces) to the
// agent's HandlePodBound at once, as kubelet's pod watch hands it to its
// pod worker; without it the node would learn of them at its next
// reconcile. As Kubernetes' NodeRestriction, the node acts only on its
// own pods: a pod of another node, one being deleted (PodDeleteRequested
// owns that) and a pod's first sight (PodScheduled owns that) are ignored.
//
// Its cache holds every pod of the cluster, so it keeps of each only what
// it compares (watchedPod); the agent is handed the pod read again from
// the store.
type PodWatch struct {
	inf  *informer.Informer[*corev1.Pod]
	st   *objects.Store
	ctx  context.Context // Run's, set before the informer runs
	a    Agent
	owns func(node string) bool
	log  *slog.Logger
}

// NewPodWatch returns the watch of node's pods over st for a; log may be
// nil.
func NewPodWatch(st *objects.Store, a Agent, node string, log *slog.Logger) (*PodWatch, error) {
	return NewPodWatchOf(st, a, func(n string) bool { return n == node }, log)
}

// NewPodWatchOf is NewPodWatch for an agent of several nodes (a simulated
// cluster): owns says which.
func NewPodWatchOf(st *objects.Store, a Agent, owns func(node string) bool, log *slog.Logger) (*PodWatch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &PodWatch{st: st, a: a, owns: owns, log: log}
	dec := &watchDecoder{}
	inf, err := informer.NewDecoding(st, "", informer.Handlers[*corev1.Pod]{OnUpdate: w.onUpdate}, dec.decode)
	if err != nil {
		return nil, err
	}
	w.inf = inf
	return w, nil
}

// Run watches until ctx is done; it returns nil then. Call it once.
func (w *PodWatch) Run(ctx context.Context) error {
	w.ctx = ctx
	err := w.inf.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// WaitForSync returns once the first list is in: from then on every
// write is seen as an update.
func (w *PodWatch) WaitForSync(ctx context.Context) error { return w.inf.WaitForSync(ctx) }

func (w *PodWatch) onUpdate(old, pod *corev1.Pod) {
	if !ephemeralAdded(w.owns, old, pod) {
		return
	}
	md := pod.GetMetadata()
	full, err := objects.Get[*corev1.Pod](w.ctx, w.st, md.GetNamespace(), md.GetName())
	switch {
	case errors.Is(err, raftstore.ErrNotFound) || (err == nil && full.GetMetadata().GetUid() != md.GetUid()):
		return // deleted since: PodDeleteRequested owns that
	case err == nil:
		err = bound(w.ctx, w.a, full)
	}
	if err != nil && !errors.Is(err, nodeagent.ErrStopped) && w.ctx.Err() == nil {
		w.log.Warn("hand a pod update to the agent", "pod", md.GetNamespace()+"/"+md.GetName(), "err", err)
	}
}

// watchDecoder decodes the pods of a PodWatch's cache keeping what
// onUpdate compares: identity, deletionTimestamp, node and ephemeral
// containers (BenchmarkPodWatchCache measures the difference). The spec
// of a pod without ephemeral containers holds only its node's name, so
// the pods of one node share one spec, never modified (the informer's
// objects are read-only): a PodSpec is ~500 bytes, and the cache holds
// every pod of the cluster. There is one shared spec per node name seen.
type watchDecoder struct {
	mu    sync.Mutex
	specs map[string]*corev1.PodSpec // by node name; read-only
}

// decode reads of the stored pod only the fields it keeps, walking the
// rest of the encoding without decoding it (a full decode of every pod
// of the cluster, most of it thrown away, was an eighth of the simulated
// nodes' CPU): metadata's name, namespace, uid and deletionTimestamp,
// spec's nodeName and ephemeral containers; resourceVersion is the
// key-value's revision, as objects.Decode sets it. Repeated fields merge
// as in proto.Unmarshal; a field of an unexpected wire type is skipped,
// as proto.Unmarshal keeps it unknown. The kept strings are checked to be
// UTF-8 and the ephemeral containers are decoded by vt.Unmarshal; bytes
// elsewhere in the pod are only walked (the store holds what writers
// encoded, and onUpdate reads the pod again in full before acting).
func (d *watchDecoder) decode(kv *raftstore.KV, obj objects.Object) error {
	p := obj.(*corev1.Pod)
	proto.Reset(p)
	var nodeName string
	var ephs []*corev1.EphemeralContainer
	err := walkFields(kv.Value, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // metadata
			if p.Metadata == nil {
				p.Metadata = &corev1.ObjectMeta{}
			}
			return decodeWatchedMeta(v, p.Metadata)
		case 2: // spec
			return walkFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case typ != protowire.BytesType:
				case num == 8: // node_name
					if !utf8.Valid(v) {
						return vt.ErrInvalidUTF8
					}
					nodeName = string(v)
				case num == 28: // ephemeral_containers
					ec := &corev1.EphemeralContainer{}
					if err := vt.Unmarshal(v, ec); err != nil {
						return err
					}
					ephs = append(ephs, ec)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decode %q: %w", kv.Key, err)
	}
	if p.Metadata == nil {
		return fmt.Errorf("decode %q: no metadata", kv.Key)
	}
	p.Metadata.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
	if len(ephs) > 0 {
		p.Spec = &corev1.PodSpec{NodeName: nodeName, EphemeralContainers: ephs}
	} else {
		p.Spec = d.nodeSpec(nodeName)
	}
	return nil
}

// decodeWatchedMeta merges into md the fields of an encoded ObjectMeta
// the watch keeps.
func decodeWatchedMeta(b []byte, md *corev1.ObjectMeta) error {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		var dst *string
		switch num {
		case 1:
			dst = &md.Name
		case 2:
			dst = &md.Namespace
		case 3:
			dst = &md.Uid
		case 9: // deletion_timestamp
			if md.DeletionTimestamp == nil {
				md.DeletionTimestamp = &timestamppb.Timestamp{}
			}
			ts := md.DeletionTimestamp
			return walkFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ != protowire.VarintType {
					return nil
				}
				n, _ := protowire.ConsumeVarint(v)
				switch num {
				case 1:
					ts.Seconds = int64(n)
				case 2:
					ts.Nanos = int32(n)
				}
				return nil
			})
		default:
			return nil
		}
		if !utf8.Valid(v) {
			return vt.ErrInvalidUTF8
		}
		*dst = string(v)
		return nil
	})
}

// encodedNodeName is the spec.nodeName of the encoded pod b, as a
// decode would set it (the last one, for a field repeated).
func encodedNodeName(b []byte) (string, error) {
	var node []byte
	err := walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 2 || typ != protowire.BytesType { // spec
			return nil
		}
		return walkFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num == 8 && typ == protowire.BytesType { // node_name
				node = v
			}
			return nil
		})
	})
	if err != nil {
		return "", err
	}
	if !utf8.Valid(node) {
		return "", vt.ErrInvalidUTF8
	}
	return string(node), nil
}

// listedStatus and listedSpec are the fields of a PodStatus and a PodSpec
// decodeListedPod keeps: of the status its phase (1), conditions (2) and
// start_time (9); of the spec all but the scheduling fields no node reads
// (affinity 14, tolerations 16, topology_spread_constraints 21,
// scheduling_gates 22), which the agent's own copy leaves out as well.
func listedStatus(num protowire.Number) bool { return num == 1 || num == 2 || num == 9 }

func listedSpec(num protowire.Number) bool { return num != 14 && num != 16 && num != 21 && num != 22 }

// decodeListedPod decodes kv's pod into p as objects.Decode does, but for
// what the node agent never reads of a listed pod (see
// nodeagent.NodeStore.ListNodePods): of its status all but the phase,
// conditions and startTime, of its spec the scheduling fields
// (listedStatus, listedSpec). It returns buf for the next call to reuse
// (see decodeTrimmed).
func decodeListedPod(kv *raftstore.KV, p *corev1.Pod, buf []byte) ([]byte, error) {
	return decodeTrimmed(kv, p, buf, func(num protowire.Number) (keep func(protowire.Number) bool, drop bool) {
		switch num {
		case 2:
			return listedSpec, false
		case 3:
			return listedStatus, false
		}
		return nil, false
	})
}

// decodeTrimmed decodes kv's object into obj as objects.Decode does, with
// the top-level fields trimmed as trim says for each field number: drop
// leaves the field out, keep (a message field) keeps of it only the
// fields it is true for, neither keeps it whole. It encodes the object so
// trimmed into buf, which it returns for the next call to reuse (the
// decoded object holds copies).
func decodeTrimmed(kv *raftstore.KV, obj objects.Object, buf []byte, trim func(num protowire.Number) (keep func(protowire.Number) bool, drop bool)) ([]byte, error) {
	buf = buf[:0]
	err := walkRaw(kv.Value, func(num protowire.Number, field []byte) error {
		_, typ, n := protowire.ConsumeTag(field)
		keep, drop := trim(num)
		switch {
		case drop:
			return nil
		case keep == nil || typ != protowire.BytesType:
			buf = append(buf, field...)
			return nil
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		size := 0
		if err := walkRaw(v, func(num protowire.Number, f []byte) error {
			if keep(num) {
				size += len(f)
			}
			return nil
		}); err != nil {
			return err
		}
		buf = protowire.AppendTag(buf, num, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(size))
		return walkRaw(v, func(num protowire.Number, f []byte) error {
			if keep(num) {
				buf = append(buf, f...)
			}
			return nil
		})
	})
	if err != nil {
		return buf, fmt.Errorf("objects: decode %q: %w", kv.Key, err)
	}
	return buf, objects.Decode(&raftstore.KV{Key: kv.Key, Value: buf, ModRevision: kv.ModRevision}, obj)
}

// decodeListedNode decodes kv's node into n as objects.Decode does, but
// only its name and status (and resourceVersion): what a heartbeat reads
// of a listed node (see nodeagent.NodeLister). It returns buf for the
// next call to reuse (see decodeTrimmed).
func decodeListedNode(kv *raftstore.KV, n *corev1.Node, buf []byte) ([]byte, error) {
	return decodeTrimmed(kv, n, buf, func(num protowire.Number) (keep func(protowire.Number) bool, drop bool) {
		switch num {
		case 1: // metadata: the name (1)
			return func(num protowire.Number) bool { return num == 1 }, false
		case 2: // spec
			return nil, true
		}
		return nil, false
	})
}

// walkRaw calls f with the number and the whole encoding (tag and value)
// of each field of the encoded message b.
func walkRaw(b []byte, f func(num protowire.Number, field []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if err := f(num, b[:n+m]); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

// walkFields calls f with each field of the encoded message b: its
// number, wire type and value (a length-delimited field's content; a
// varint's encoding).
func walkFields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}

// nodeSpec returns the shared spec of the pods bound to node (and of no
// ephemeral container).
func (d *watchDecoder) nodeSpec(node string) *corev1.PodSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.specs[node]
	if s == nil {
		if d.specs == nil {
			d.specs = map[string]*corev1.PodSpec{}
		}
		s = &corev1.PodSpec{NodeName: node}
		d.specs[node] = s
	}
	return s
}

// ephemeralAdded reports whether pod, bound to a node owns, and not being
// deleted, has more ephemeral containers than old (the list only grows).
func ephemeralAdded(owns func(string) bool, old, pod *corev1.Pod) bool {
	return owns(pod.GetSpec().GetNodeName()) && pod.GetMetadata().GetDeletionTimestamp() == nil &&
		old.GetMetadata().GetUid() == pod.GetMetadata().GetUid() &&
		len(pod.GetSpec().GetEphemeralContainers()) > len(old.GetSpec().GetEphemeralContainers())
}
