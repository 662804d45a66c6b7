package ipalloc

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Prefix holds one store key per allocated ClusterIP (Prefix + the IP):
// the networking.k8s.io/v1 IPAddress naming the Service that holds it
// (objects.IPAddresses), as kube-apiserver's allocator stores them.
var Prefix = objects.IPAddresses.Prefix("")

// None is spec.clusterIP of a headless Service.
const None = "None"

// Sentinel errors; an *Error wraps the first four and the node port ones.
var (
	// ErrAllocated: a requested IP is held by another Service.
	ErrAllocated = errors.New("provided IP is already allocated")
	// ErrNotInRange: a requested IP is outside the service CIDR.
	ErrNotInRange = errors.New("provided IP is not in the valid range")
	// ErrImmutable: an update changes an allocated ClusterIP.
	ErrImmutable = errors.New("may not change once set")
	// ErrInvalid: spec.clusterIP(s) is not an IPv4 address, or the two
	// disagree, or asks for more than one family.
	ErrInvalid = errors.New("invalid cluster IP")
	// ErrFull: no free IP is left in the service CIDR.
	ErrFull = errors.New("ipalloc: range is full")
	// ErrPortAllocated: a requested node port is held by another Service
	// (kube-apiserver's portallocator.ErrAllocated).
	ErrPortAllocated = errors.New("provided port is already allocated")
	// ErrPortNotInRange: a requested node port is outside the node port
	// range.
	ErrPortNotInRange = errors.New("provided port is not in the valid range")
	// ErrPortsFull: no free node port is left.
	ErrPortsFull = errors.New("ipalloc: node port range is full")
)

// Error is a refused spec.clusterIP(s) or node port, worded as
// kube-apiserver words it.
type Error struct {
	Field string // "spec.clusterIPs", "spec.ports[0].nodePort"
	Value any    // the requested IPs ([]string) or port (int32)
	Err   error  // ErrAllocated, ErrNotInRange, ErrImmutable, ErrInvalid, ErrPortAllocated or ErrPortNotInRange
	CIDR  netip.Prefix
	Ports PortRange // the node port range (ErrPortNotInRange)
}

func (e *Error) Error() string {
	msg := e.Err.Error()
	ips, _ := e.Value.([]string)
	switch {
	case e.Err == ErrAllocated && len(ips) > 0:
		msg = fmt.Sprintf("failed to allocate IP %s: %v", ips[0], e.Err)
	case e.Err == ErrNotInRange && len(ips) > 0:
		msg = fmt.Sprintf("failed to allocate IP %s: the provided IP (%s) is not in the valid range. The range of valid IPs is %s", ips[0], ips[0], e.CIDR)
	case e.Err == ErrPortNotInRange:
		msg = fmt.Sprintf("%v. The range of valid ports is %s", e.Err, e.Ports)
	}
	return field.Invalid(field.NewPath(e.Field), e.Value, msg).Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Config configures an Allocator.
type Config struct {
	// CIDR is the service CIDR ClusterIPs come from (IPv4, /8 to /28), as
	// kube-apiserver's --service-cluster-ip-range.
	CIDR string
	// NodePorts is the range node ports come from, "min-max" inclusive
	// (kube-apiserver's --service-node-port-range); "" is the default,
	// 30000-32767.
	NodePorts string
}

// DefaultNodePorts is kube-apiserver's default node port range.
const DefaultNodePorts = "30000-32767"

// DefaultConfig returns Kubernetes' default service CIDR, 10.96.0.0/16,
// and node port range, 30000-32767.
func DefaultConfig() Config { return Config{CIDR: "10.96.0.0/16", NodePorts: DefaultNodePorts} }

// Validate checks the Config.
func (c Config) Validate() error {
	if _, err := ParsePortRange(cmp.Or(c.NodePorts, DefaultNodePorts)); err != nil {
		return err
	}
	p, err := netip.ParsePrefix(c.CIDR)
	if err != nil {
		return fmt.Errorf("ipalloc: CIDR %q: %w", c.CIDR, err)
	}
	if !p.Addr().Is4() {
		return fmt.Errorf("ipalloc: CIDR %q: only IPv4 service CIDRs are supported", c.CIDR)
	}
	if p.Bits() < 8 || p.Bits() > 28 {
		return fmt.Errorf("ipalloc: CIDR %q: prefix length %d must be between 8 and 28", c.CIDR, p.Bits())
	}
	if p.Masked() != p {
		return fmt.Errorf("ipalloc: CIDR %q has host bits set (want %s)", c.CIDR, p.Masked())
	}
	return nil
}

// Allocator hands out ClusterIPs. It holds no state of its own (the store
// does) and is safe for concurrent use.
type Allocator struct {
	cidr   netip.Prefix
	base   uint32 // the network address
	size   uint32 // addresses in the CIDR
	static uint32 // offsets 1..static are the band for requested IPs
	ports  PortRange
}

// New returns an Allocator for cfg.
func New(cfg Config) (*Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := netip.MustParsePrefix(cfg.CIDR)
	a := &Allocator{cidr: p, base: u32(p.Addr()), size: 1 << (32 - p.Bits())}
	a.static = min(max(a.size/16, 16), 256)
	a.ports, _ = ParsePortRange(cmp.Or(cfg.NodePorts, DefaultNodePorts))
	return a, nil
}

// CIDR returns the service CIDR.
func (a *Allocator) CIDR() netip.Prefix { return a.cidr }

// Key returns the store key of ip's reservation.
func Key(ip string) string { return Prefix + ip }

func u32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

func (a *Allocator) addr(off uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a.base+off)
	return netip.AddrFrom4(b)
}

// inRange: in the CIDR and neither its network nor its broadcast address.
func (a *Allocator) inRange(ip netip.Addr) bool {
	if !a.cidr.Contains(ip) {
		return false
	}
	off := u32(ip) - a.base
	return off != 0 && off != a.size-1
}

// request is what a Service asks for: no IP (headless, ExternalName), a
// given IP, or any.
type request struct {
	none bool
	ip   string // "" = allocate
}

func (a *Allocator) request(svc *corev1.Service) (request, error) {
	spec := svc.GetSpec()
	ip, ips := spec.GetClusterIp(), spec.GetClusterIps()
	if spec.GetType() == "ExternalName" {
		return request{none: true}, nil
	}
	fail := func(err error) (request, error) {
		v := ips
		if len(v) == 0 {
			v = []string{ip}
		}
		return request{}, &Error{Field: "spec.clusterIPs", Value: v, Err: err, CIDR: a.cidr}
	}
	if len(ips) > 1 {
		return fail(fmt.Errorf("%w: only one IP family (IPv4) is supported", ErrInvalid))
	}
	if len(ips) == 1 {
		if ip != "" && ip != ips[0] {
			return fail(fmt.Errorf("%w: must match spec.clusterIP %q", ErrInvalid, ip))
		}
		ip = ips[0]
	}
	switch ip {
	case "":
		return request{}, nil
	case None:
		return request{none: true}, nil
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		return fail(fmt.Errorf("%w: must be a valid IPv4 address or %q", ErrInvalid, None))
	}
	if !a.inRange(addr) {
		return fail(ErrNotInRange)
	}
	return request{ip: addr.String()}, nil
}

// set writes the Service's allocated IP (or None) into its spec.
func set(svc *corev1.Service, ip string) {
	if svc.Spec == nil {
		svc.Spec = &corev1.ServiceSpec{}
	}
	switch {
	case svc.Spec.GetType() == "ExternalName":
		svc.Spec.ClusterIp, svc.Spec.ClusterIps = "", nil
	case ip == "":
		svc.Spec.ClusterIp, svc.Spec.ClusterIps = None, []string{None}
	default:
		svc.Spec.ClusterIp, svc.Spec.ClusterIps = ip, []string{ip}
	}
}

// held returns the IP a stored Service holds ("" for none).
func held(svc *corev1.Service) string {
	ip := svc.GetSpec().GetClusterIp()
	if ip == None || svc.GetSpec().GetType() == "ExternalName" {
		return ""
	}
	return ip
}

type parentRef struct {
	Group     string `json:"group,omitempty"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ipAddressSpec is networking.k8s.io/v1 IPAddressSpec.
type ipAddressSpec struct {
	ParentRef parentRef `json:"parentRef"`
}

// reservation is the IPAddress object that reserves ip for svc, as
// kube-apiserver's ClusterIP allocator writes it: served as
// networking.k8s.io/v1 ipaddresses (objects.IPAddresses).
func reservation(svc *corev1.Service, ip string) ([]byte, error) {
	spec, err := json.Marshal(struct {
		Spec ipAddressSpec `json:"spec"`
	}{ipAddressSpec{parentRef{Resource: "services", Namespace: svc.GetMetadata().GetNamespace(), Name: svc.GetMetadata().GetName()}}})
	if err != nil {
		return nil, err
	}
	u := objects.IPAddresses.New().(*corev1.Unstructured)
	u.Metadata = &corev1.ObjectMeta{Name: ip, Uid: uuid.NewString(), CreationTimestamp: timestamppb.Now(), Generation: 1,
		Labels: map[string]string{"ipaddress.kubernetes.io/ip-family": "IPv4", "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}}
	u.Content = spec
	return objects.Encode(u)
}

// Create stores svc, a new Service, with its ClusterIP and node ports
// reserved in the same transaction, and sets spec.clusterIP(s), the node
// ports and its resourceVersion. A Service already stored is
// raftstore.ErrConflict on its key.
func (a *Allocator) Create(ctx context.Context, st *objects.Store, svc *corev1.Service) (int64, error) {
	req, err := a.request(svc)
	if err != nil {
		return 0, err
	}
	ports, err := a.planNodePorts(svc, nil)
	if err != nil {
		return 0, err
	}
	return a.commit(ctx, st, svc, objects.Absent, req, "", ports)
}

// Update replaces old (as read from the store) with svc at old's revision.
// An empty spec.clusterIP(s) keeps old's (as kube-apiserver carries
// allocated values forward); a different one is ErrImmutable. A Service
// that held no IP (stored before allocation, or turning from ExternalName)
// gets one; one turning into ExternalName releases its IP. Node ports
// svc asks for that old did not hold are reserved (a port of 0 that
// needs one gets one), those old held and svc no longer names are
// released.
func (a *Allocator) Update(ctx context.Context, st *objects.Store, old, svc *corev1.Service) (int64, error) {
	prev := held(old)
	if svc.GetSpec().GetType() != "ExternalName" && svc.GetSpec().GetClusterIp() == "" && len(svc.GetSpec().GetClusterIps()) == 0 {
		if svc.Spec == nil {
			svc.Spec = &corev1.ServiceSpec{}
		}
		svc.Spec.ClusterIp, svc.Spec.ClusterIps = old.GetSpec().GetClusterIp(), old.GetSpec().GetClusterIps()
	}
	req, err := a.request(svc)
	if err != nil {
		// An IP kept from before the service CIDR changed stays valid.
		if !errors.Is(err, ErrNotInRange) || prev == "" || svc.GetSpec().GetClusterIp() != prev {
			return 0, err
		}
		req = request{ip: prev}
	}
	if oldIP := old.GetSpec().GetClusterIp(); oldIP != "" && old.GetSpec().GetType() != "ExternalName" && svc.GetSpec().GetType() != "ExternalName" {
		newIP := req.ip
		if req.none {
			newIP = None
		}
		if newIP != oldIP {
			return 0, &Error{Field: "spec.clusterIPs", Value: []string{newIP}, Err: ErrImmutable, CIDR: a.cidr}
		}
	}
	ports, err := a.planNodePorts(svc, old)
	if err != nil {
		return 0, err
	}
	return a.commit(ctx, st, svc, objects.Revision(old), req, prev, ports)
}

// Delete deletes svc (as read from the store) at its revision, releasing
// its ClusterIP and node ports in the same transaction.
func (a *Allocator) Delete(ctx context.Context, st *objects.Store, svc *corev1.Service) (int64, error) {
	key, err := objects.KeyOf(svc)
	if err != nil {
		return 0, err
	}
	t := raftstore.Txn{
		Compares: []raftstore.Compare{{Key: key, ModRevision: objects.Revision(svc)}},
		Ops:      []raftstore.Op{{Type: raftstore.OpDelete, Key: key}},
	}
	if ip := held(svc); ip != "" {
		t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpDelete, Key: Key(ip)})
	}
	for _, p := range heldPorts(svc) {
		t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpDelete, Key: NodePortKey(p)})
	}
	return st.KV().Txn(ctx, t)
}

// maxProbes is how many random free-looking IPs (or node ports) commit
// tries before it lists the reservations to find a free one.
const maxProbes = 8

// commit writes svc at revision rev (objects.Absent: a create) with req's
// IP reserved and prev (an IP svc held, "" for none) released when it is
// not kept, and the node ports of ports reserved and released. An
// allocation that loses a race for an IP or a port tries another.
func (a *Allocator) commit(ctx context.Context, st *objects.Store, svc *corev1.Service, rev int64, req request, prev string, ports *portPlan) (int64, error) {
	key, err := objects.KeyOf(svc)
	if err != nil {
		return 0, err
	}
	var taken map[uint32]bool     // the IP reservations, once listed
	var takenPorts map[int32]bool // the node port reservations, once listed
	portProbes := 0               // node port picks that lost
	ip := req.ip                  // the IP this attempt reserves
	for probe := 0; ; probe++ {
		if !req.none && req.ip == "" && (probe == 0 || ip == "") {
			if probe >= maxProbes && taken == nil {
				if taken, err = a.list(ctx, st); err != nil {
					return 0, err
				}
			}
			off, ok := a.pick(taken)
			if !ok {
				return 0, fmt.Errorf("%w: failed to allocate a serviceIP in %s", ErrFull, a.cidr)
			}
			if taken != nil {
				taken[off] = true
			}
			ip = a.addr(off).String()
		}
		picked := map[int32]bool{}
		for _, slot := range ports.reserve {
			if slot.fixed {
				picked[slot.port] = true
			}
		}
		for _, slot := range ports.reserve {
			if slot.fixed || (slot.port != 0 && !picked[slot.port]) {
				setPort(svc, slot)
				picked[slot.port] = true
				continue
			}
			if portProbes >= maxProbes && takenPorts == nil {
				if takenPorts, err = a.listPorts(ctx, st); err != nil {
					return 0, err
				}
			}
			for {
				p, ok := a.pickPort(takenPorts)
				if !ok {
					return 0, fmt.Errorf("%w: failed to allocate a nodePort: range is full", ErrPortsFull)
				}
				if takenPorts != nil {
					takenPorts[p] = true
				}
				if !picked[p] && !ports.keep[p] {
					slot.port = p
					break
				}
			}
			picked[slot.port] = true
			setPort(svc, slot)
		}
		set(svc, ip)
		b, err := objects.Encode(svc)
		if err != nil {
			return 0, err
		}
		t := raftstore.Txn{
			Compares: []raftstore.Compare{{Key: key, ModRevision: rev}},
			Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: key, Value: b}},
		}
		if ip != "" && ip != prev {
			r, err := reservation(svc, ip)
			if err != nil {
				return 0, err
			}
			t.Compares = append(t.Compares, raftstore.Compare{Key: Key(ip), ModRevision: objects.Absent})
			t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpPut, Key: Key(ip), Value: r})
		}
		if prev != "" && ip != prev {
			t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpDelete, Key: Key(prev)})
		}
		for _, slot := range ports.reserve {
			t.Compares = append(t.Compares, raftstore.Compare{Key: NodePortKey(slot.port), ModRevision: objects.Absent})
			t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpPut, Key: NodePortKey(slot.port), Value: nodePortReservation(svc)})
		}
		for _, p := range ports.release {
			t.Ops = append(t.Ops, raftstore.Op{Type: raftstore.OpDelete, Key: NodePortKey(p)})
		}
		newRev, err := st.KV().Txn(ctx, t)
		var se *raftstore.Error
		if errors.As(err, &se) && errors.Is(err, raftstore.ErrConflict) && se.Key != key {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if se.Key == Key(ip) {
				if req.ip != "" {
					return 0, &Error{Field: "spec.clusterIPs", Value: []string{ip}, Err: ErrAllocated, CIDR: a.cidr}
				}
				ip = "" // lost a race (or probed a held IP): try another
				continue
			}
			lost := false
			for _, slot := range ports.reserve {
				if NodePortKey(slot.port) != se.Key {
					continue
				}
				lost = true
				if slot.fixed {
					field := fmt.Sprintf("spec.ports[%d].nodePort", slot.members[0])
					if slot.members[0] < 0 {
						field = "spec.healthCheckNodePort"
					}
					return 0, &Error{Field: field, Value: slot.port, Err: ErrPortAllocated, Ports: a.ports}
				}
				if takenPorts != nil {
					takenPorts[slot.port] = true
				}
				slot.port = 0 // pick again
				portProbes++
			}
			if !lost {
				return 0, fmt.Errorf("commit service %q: %w", key, err)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("commit service %q: %w", key, err)
		}
		objects.SetRevision(svc, newRev)
		return newRev, nil
	}
}

// pick returns a free-looking offset: a random one from the dynamic band
// (above the static band), then the static band; with taken (the listed
// reservations) the first free one from a random start.
func (a *Allocator) pick(taken map[uint32]bool) (uint32, bool) {
	lo, hi := a.static+1, a.size-2 // the dynamic band, inclusive
	if lo > hi {
		lo = 1
	}
	if taken == nil {
		return lo + rand.Uint32N(hi-lo+1), true
	}
	for _, band := range [][2]uint32{{lo, hi}, {1, lo - 1}} {
		if band[1] < band[0] {
			continue
		}
		n := band[1] - band[0] + 1
		start := rand.Uint32N(n)
		for i := range n {
			off := band[0] + (start+i)%n
			if !taken[off] {
				return off, true
			}
		}
	}
	return 0, false
}

// list reads the reservations in the CIDR, as offsets.
func (a *Allocator) list(ctx context.Context, st *objects.Store) (map[uint32]bool, error) {
	kvs, _, err := st.KV().List(ctx, Prefix)
	if err != nil {
		return nil, fmt.Errorf("list ClusterIP reservations: %w", err)
	}
	taken := make(map[uint32]bool, len(kvs))
	for _, kv := range kvs {
		ip, err := netip.ParseAddr(strings.TrimPrefix(kv.Key, Prefix))
		if err == nil && a.cidr.Contains(ip) {
			taken[u32(ip)-a.base] = true
		}
	}
	return taken, nil
}

// Allocated returns the reserved IPs in the store (any range), each with
// the Service ("ns/name") it names.
func Allocated(ctx context.Context, st *objects.Store) (map[string]string, error) {
	kvs, _, err := st.KV().List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		var v struct {
			Spec ipAddressSpec `json:"spec"`
		}
		u := objects.IPAddresses.New()
		if err := objects.Decode(kv, u); err == nil {
			_ = json.Unmarshal(u.(*corev1.Unstructured).GetContent(), &v)
		}
		out[strings.TrimPrefix(kv.Key, Prefix)] = v.Spec.ParentRef.Namespace + "/" + v.Spec.ParentRef.Name
	}
	return out, nil
}

// nodePortReservation is the value of a node port's key: the Service
// that holds it.
func nodePortReservation(svc *corev1.Service) []byte {
	b, _ := json.Marshal(struct {
		ParentRef parentRef `json:"parentRef"`
	}{parentRef{Resource: "services", Namespace: svc.GetMetadata().GetNamespace(), Name: svc.GetMetadata().GetName()}})
	return b
}

// parentOf reads the Service ("ns/name") a node port reservation names.
func parentOf(value []byte) string {
	var v struct {
		ParentRef parentRef `json:"parentRef"`
	}
	_ = json.Unmarshal(value, &v)
	return v.ParentRef.Namespace + "/" + v.ParentRef.Name
}
