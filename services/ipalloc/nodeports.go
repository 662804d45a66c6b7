package ipalloc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/validate"
)

// NodePortPrefix holds one store key per allocated node port
// (NodePortPrefix + the port number); its value names the Service that
// holds it, as a ClusterIP's reservation does.
const NodePortPrefix = "/registry/servicenodeports/"

// NodePortKey returns the store key of node port port's reservation.
func NodePortKey(port int32) string { return NodePortPrefix + strconv.Itoa(int(port)) }

// PortRange is a range of node ports, both ends included.
type PortRange struct{ Min, Max int32 }

// ParsePortRange parses "min-max" (kube-apiserver's
// --service-node-port-range form).
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return PortRange{}, fmt.Errorf("ipalloc: node port range %q must be min-max within 1-65535", s)
	}
	return PortRange{int32(a), int32(b)}, nil
}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Contains reports whether p is in the range.
func (r PortRange) Contains(p int32) bool { return p >= r.Min && p <= r.Max }

func (r PortRange) size() int32 { return r.Max - r.Min + 1 }

// static is the size of the band at the bottom of the range that dynamic
// allocation uses last, left for requested ports (kube's
// calculateRangeOffset: min(max(size/32, 16), 128), none for a range of
// 16 or fewer).
func (r PortRange) static() int32 {
	n := r.size()
	if n <= 16 {
		return 0
	}
	return min(max(n/32, 16), 128)
}

// portSlot is one node port a write reserves: a requested one, or one to
// pick (dynamic), for the service ports at members (-1:
// healthCheckNodePort).
type portSlot struct {
	fixed   bool
	port    int32
	members []int
}

// portPlan is what a Service write does to node ports.
type portPlan struct {
	reserve []*portSlot
	release []int32
	keep    map[int32]bool // held before and after
}

// heldPorts returns the node ports svc (as stored) holds.
func heldPorts(svc *corev1.Service) []int32 {
	var out []int32
	if t := svc.GetSpec().GetType(); t == validate.ServiceTypeNodePort || t == validate.ServiceTypeLoadBalancer {
		for _, p := range svc.GetSpec().GetPorts() {
			if p.GetNodePort() != 0 && !contains(out, p.GetNodePort()) {
				out = append(out, p.GetNodePort())
			}
		}
	}
	if hc := svc.GetSpec().GetHealthCheckNodePort(); hc != 0 && validate.NeedsHealthCheck(svc) && !contains(out, hc) {
		out = append(out, hc)
	}
	return out
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// planNodePorts computes the node ports svc reserves and, for an update
// of old, releases, as kube-apiserver's initNodePorts (create) and
// updateNodePorts (update) do: on create, service ports with the same
// port number share one node port; a port asked for is reserved, or
// refused; a Service that needs node ports gets one picked for every
// port that asks for none.
func (a *Allocator) planNodePorts(svc, old *corev1.Service) (*portPlan, error) {
	plan := &portPlan{keep: map[int32]bool{}}
	spec := svc.GetSpec()
	typ := spec.GetType()
	wants := typ == validate.ServiceTypeNodePort || typ == validate.ServiceTypeLoadBalancer
	var before []int32
	if old != nil {
		before = heldPorts(old)
	}
	fixed := func(i int, p int32) (*portSlot, error) {
		if !a.ports.Contains(p) {
			return nil, &Error{Field: fmt.Sprintf("spec.ports[%d].nodePort", i), Value: p, Err: ErrPortNotInRange, Ports: a.ports}
		}
		return &portSlot{fixed: true, port: p, members: []int{i}}, nil
	}
	if wants && old == nil {
		byPort := map[int32]*portSlot{} // service port number -> its node port
		for i, sp := range spec.GetPorts() {
			if sp.GetNodePort() == 0 && !validate.NeedsNodePorts(svc) {
				continue
			}
			slot := byPort[sp.GetPort()]
			switch {
			case slot == nil:
				np := int32(0)
				for _, o := range spec.GetPorts()[i:] {
					if o.GetPort() == sp.GetPort() && o.GetNodePort() != 0 {
						np = o.GetNodePort()
						break
					}
				}
				if np != 0 {
					s, err := fixed(i, np)
					if err != nil {
						return nil, err
					}
					slot = s
				} else {
					slot = &portSlot{members: []int{i}}
				}
				byPort[sp.GetPort()] = slot
				plan.reserve = append(plan.reserve, slot)
			case sp.GetNodePort() == 0 || sp.GetNodePort() == slot.port:
				slot.members = append(slot.members, i)
			default:
				s, err := fixed(i, sp.GetNodePort())
				if err != nil {
					return nil, err
				}
				plan.reserve = append(plan.reserve, s)
			}
		}
	} else if wants {
		taken := map[int32]bool{}
		for i, sp := range spec.GetPorts() {
			switch {
			case sp.GetNodePort() == 0 && !validate.NeedsNodePorts(svc):
			case sp.GetNodePort() == 0:
				plan.reserve = append(plan.reserve, &portSlot{members: []int{i}})
			case contains(before, sp.GetNodePort()):
				plan.keep[sp.GetNodePort()] = true
			case taken[sp.GetNodePort()]:
				// kube reserves a port once per update
				for _, s := range plan.reserve {
					if s.fixed && s.port == sp.GetNodePort() {
						s.members = append(s.members, i)
					}
				}
			default:
				s, err := fixed(i, sp.GetNodePort())
				if err != nil {
					return nil, err
				}
				taken[s.port] = true
				plan.reserve = append(plan.reserve, s)
			}
		}
	}
	if validate.NeedsHealthCheck(svc) {
		hc := spec.GetHealthCheckNodePort()
		switch {
		case hc != 0 && contains(before, hc):
			plan.keep[hc] = true
		case hc != 0:
			if !a.ports.Contains(hc) {
				return nil, &Error{Field: "spec.healthCheckNodePort", Value: hc, Err: ErrPortNotInRange, Ports: a.ports}
			}
			plan.reserve = append(plan.reserve, &portSlot{fixed: true, port: hc, members: []int{-1}})
		default:
			plan.reserve = append(plan.reserve, &portSlot{members: []int{-1}})
		}
	}
	for _, p := range before {
		if !plan.keep[p] {
			plan.release = append(plan.release, p)
		}
	}
	return plan, nil
}

// pickPort returns a free-looking node port: a random one above the
// static band, then in it; with taken (the listed reservations) the first
// free one from a random start.
func (a *Allocator) pickPort(taken map[int32]bool) (int32, bool) {
	r := a.ports
	lo := r.Min + r.static()
	if taken == nil {
		return lo + rand.Int32N(r.Max-lo+1), true
	}
	for _, band := range [][2]int32{{lo, r.Max}, {r.Min, lo - 1}} {
		if band[1] < band[0] {
			continue
		}
		n := band[1] - band[0] + 1
		start := rand.Int32N(n)
		for i := range n {
			p := band[0] + (start+i)%n
			if !taken[p] {
				return p, true
			}
		}
	}
	return 0, false
}

// setPort writes slot's port into svc at the slot's members.
func setPort(svc *corev1.Service, slot *portSlot) {
	for _, i := range slot.members {
		if i < 0 {
			svc.Spec.HealthCheckNodePort = slot.port
		} else {
			svc.Spec.Ports[i].NodePort = slot.port
		}
	}
}

// listPorts reads the node port reservations.
func (a *Allocator) listPorts(ctx context.Context, st *objects.Store) (map[int32]bool, error) {
	kvs, _, err := st.KV().List(ctx, NodePortPrefix)
	if err != nil {
		return nil, fmt.Errorf("list node port reservations: %w", err)
	}
	taken := make(map[int32]bool, len(kvs))
	for _, kv := range kvs {
		if p, err := strconv.Atoi(strings.TrimPrefix(kv.Key, NodePortPrefix)); err == nil {
			taken[int32(p)] = true
		}
	}
	return taken, nil
}

// AllocatedNodePorts returns the reserved node ports in the store, each
// with the Service ("ns/name") it names.
func AllocatedNodePorts(ctx context.Context, st *objects.Store) (map[int32]string, error) {
	kvs, _, err := st.KV().List(ctx, NodePortPrefix)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]string, len(kvs))
	for _, kv := range kvs {
		p, err := strconv.Atoi(strings.TrimPrefix(kv.Key, NodePortPrefix))
		if err != nil {
			continue
		}
		out[int32(p)] = parentOf(kv.Value)
	}
	return out, nil
}
