package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// printTable prints objs as kubectl's table for kind (-o wide adds columns).
func (p *Printer) printTable(kind objects.Kind, objs []objects.Object, header bool) error {
	tw := tabwriter.NewWriter(p.out, 3, 0, 3, ' ', 0)
	cols, row := p.table(kind)
	if p.allNamespaces {
		cols = append([]string{"NAMESPACE"}, cols...)
	}
	if header {
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	for _, o := range objs {
		r := row(o)
		if p.kindPrefix && len(r) > 0 { // several kinds: pod/web, as kubectl
			prefix := strings.ToLower(kind.Name)
			if kind.APIGroup != "" {
				prefix += "." + kind.APIGroup
			}
			r[0] = prefix + "/" + r[0]
		}
		if p.allNamespaces {
			r = append([]string{o.GetMetadata().GetNamespace()}, r...)
		}
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// table returns kubectl's columns for kind and a function printing a row.
func (p *Printer) table(kind objects.Kind) ([]string, func(objects.Object) []string) {
	wide := p.format == outputWide
	age := func(o objects.Object) string { return p.age(o.GetMetadata().GetCreationTimestamp().AsTime()) }
	switch kind.Name {
	case "Pod":
		cols := []string{"NAME", "READY", "STATUS", "RESTARTS", "AGE"}
		if wide {
			cols = append(cols, "IP", "NODE")
		}
		return cols, func(o objects.Object) []string {
			pod := o.(*corev1.Pod)
			ready, restarts := 0, int32(0)
			for _, cs := range pod.GetStatus().GetContainerStatuses() {
				if cs.GetReady() {
					ready++
				}
				restarts += cs.GetRestartCount()
			}
			r := []string{pod.GetMetadata().GetName(), fmt.Sprintf("%d/%d", ready, len(pod.GetSpec().GetContainers())),
				PodStatusString(pod), strconv.Itoa(int(restarts)), age(o)}
			if wide {
				r = append(r, OrNone(pod.GetStatus().GetPodIp()), OrNone(pod.GetSpec().GetNodeName()))
			}
			return r
		}
	case "Node":
		cols := []string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"}
		if wide {
			cols = append(cols, "INTERNAL-IP", "POD-CIDR", "PODS")
		}
		return cols, func(o objects.Object) []string {
			n := o.(*corev1.Node)
			st := "Unknown"
			if c := podrules.NodeCondition(n, podrules.NodeReady); c != nil {
				st = map[string]string{"True": "Ready", "False": "NotReady", "Unknown": "NotReady"}[c.GetStatus()]
			}
			if n.GetSpec().GetUnschedulable() {
				st += ",SchedulingDisabled"
			}
			r := []string{n.GetMetadata().GetName(), st, "<none>", age(o), OrNone(n.GetStatus().GetNodeInfo().GetKubeletVersion())}
			if wide {
				ip := "<none>"
				for _, a := range n.GetStatus().GetAddresses() {
					if a.GetType() == "InternalIP" {
						ip = a.GetAddress()
					}
				}
				r = append(r, ip, OrNone(n.GetSpec().GetPodCidr()), OrNone(n.GetStatus().GetAllocatable()["pods"]))
			}
			return r
		}
	case "Service":
		return []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}, func(o objects.Object) []string {
			s := o.(*corev1.Service)
			var ports []string
			for _, sp := range s.GetSpec().GetPorts() {
				ports = append(ports, fmt.Sprintf("%d/%s", sp.GetPort(), orDefault(sp.GetProtocol(), "TCP")))
			}
			return []string{s.GetMetadata().GetName(), orDefault(s.GetSpec().GetType(), "ClusterIP"), OrNone(s.GetSpec().GetClusterIp()), "<none>", strings.Join(ports, ","), age(o)}
		}
	case "EndpointSlice":
		return []string{"NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"}, func(o objects.Object) []string {
			s := o.(*corev1.EndpointSlice)
			var ports, addrs []string
			for _, ep := range s.GetPorts() {
				ports = append(ports, strconv.Itoa(int(ep.GetPort())))
			}
			for _, e := range s.GetEndpoints() {
				addrs = append(addrs, e.GetAddresses()...)
			}
			return []string{s.GetMetadata().GetName(), s.GetAddressType(), OrNone(strings.Join(ports, ",")), OrNone(summarize(addrs)), age(o)}
		}
	case "Event":
		return []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}, func(o objects.Object) []string {
			e := o.(*corev1.Event)
			obj := strings.ToLower(e.GetInvolvedObject().GetKind()) + "/" + e.GetInvolvedObject().GetName()
			seen := p.age(e.GetLastTimestamp().AsTime())
			if e.GetCount() > 1 {
				seen = fmt.Sprintf("%s (x%d over %s)", seen, e.GetCount(), p.age(e.GetFirstTimestamp().AsTime()))
			}
			return []string{seen, e.GetType(), e.GetReason(), obj, e.GetMessage()}
		}
	}
	return []string{"NAME", "AGE"}, func(o objects.Object) []string { return []string{o.GetMetadata().GetName(), age(o)} }
}

// summarize is kubectl's ENDPOINTS column: the first three addresses and
// how many more.
func summarize(addrs []string) string {
	if len(addrs) > 3 {
		return strings.Join(addrs[:3], ",") + fmt.Sprintf(" + %d more...", len(addrs)-3)
	}
	return strings.Join(addrs, ",")
}

// OrNone is s, or "<none>" when s is empty.
func OrNone(s string) string { return orDefault(s, "<none>") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// age prints a duration the way kubectl does (5s, 3m20s, 2d4h).
func (p *Printer) age(t time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return "<unknown>"
	}
	return HumanDuration(p.Now.Sub(t))
}

// HumanDuration prints d the way kubectl prints ages.
func HumanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int(d.Seconds())
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", s/60)
	case d < 8*time.Hour:
		return fmt.Sprintf("%dh%dm", s/3600, (s%3600)/60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", s/3600)
	default:
		return fmt.Sprintf("%dd%dh", s/86400, (s%86400)/3600)
	}
}

// PodStatusString is the STATUS column of kubectl get pods: the reason a
// container waits or terminated, Terminating, or the phase.
func PodStatusString(pod *corev1.Pod) string {
	st := pod.GetStatus()
	reason := orDefault(st.GetReason(), st.GetPhase())
	for i, cs := range st.GetInitContainerStatuses() {
		if t := cs.GetState().GetTerminated(); t != nil && t.GetExitCode() == 0 {
			continue
		}
		if w := cs.GetState().GetWaiting(); w != nil && w.GetReason() != "" && w.GetReason() != "PodInitializing" {
			reason = "Init:" + w.GetReason()
		} else {
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.GetSpec().GetInitContainers()))
		}
		break
	}
	if !strings.HasPrefix(reason, "Init:") {
		for _, cs := range st.GetContainerStatuses() {
			if w := cs.GetState().GetWaiting(); w != nil && w.GetReason() != "" {
				reason = w.GetReason()
			} else if t := cs.GetState().GetTerminated(); t != nil && t.GetReason() != "" {
				reason = t.GetReason()
			}
		}
	}
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		reason = "Terminating"
	}
	return orDefault(reason, "Pending")
}

// WaitGone waits until ns/name of kind is no longer stored.
func (s *Session) WaitGone(ctx context.Context, kind objects.Kind, ns, name string) error {
	key := kind.Key(ns, name)
	kv, err := s.Store.Client().Get(ctx, key)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	w, err := s.Store.Client().Watch(ctx, key, kv.ModRevision)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Type == raftstore.EventDelete && ev.KV.Key == key {
			return nil
		}
	}
	return w.Err()
}

// SortEvents orders events by last timestamp, as kubectl describe shows them.
func SortEvents(evs []*corev1.Event) {
	sort.SliceStable(evs, func(i, j int) bool {
		return evs[i].GetLastTimestamp().AsTime().Before(evs[j].GetLastTimestamp().AsTime())
	})
}

// GetOptions are a `get`'s: one kind, one object or all, where, how
// printed, and whether to watch after listing.
type GetOptions struct {
	Kind objects.Kind
	// Name is the object to get; "" lists.
	Name string
	// Namespace is where ("": every namespace, and for cluster-scoped
	// kinds).
	Namespace string
	// Watch prints every change after the listing, until ctx is done.
	Watch   bool
	Printer *Printer
}

// Get prints what kubectl get prints: one object or a list, then, with
// Watch, each change as it comes. An empty table listing says "No
// resources found" on errOut, as kubectl does.
func (s *Session) Get(ctx context.Context, o GetOptions, errOut io.Writer) error {
	kind, ns, p := o.Kind, o.Namespace, o.Printer
	var objs []objects.Object
	var rev int64
	if o.Name != "" {
		kv, err := s.Store.Client().Get(ctx, kind.Key(ns, o.Name))
		if errors.Is(err, raftstore.ErrNotFound) {
			return NotFound(kind, o.Name)
		}
		if err != nil {
			return err
		}
		obj := kind.New()
		if err := objects.Decode(kv, obj); err != nil {
			return err
		}
		objs, rev = []objects.Object{obj}, kv.ModRevision
	} else {
		kvs, r, err := s.Store.Client().List(ctx, kind.Prefix(ns))
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			obj := kind.New()
			if err := objects.Decode(kv, obj); err != nil {
				return err
			}
			objs = append(objs, obj)
		}
		rev = r
	}
	if len(objs) == 0 && !o.Watch && (p.format == outputTable || p.format == outputWide) {
		if ns == "" {
			fmt.Fprintf(errOut, "No resources found\n")
		} else {
			fmt.Fprintf(errOut, "No resources found in %s namespace.\n", ns)
		}
		return nil
	}
	// kubectl prints a List for a list, each object on its own
	// for one named or while watching.
	if err := p.Print(kind, objs, true, o.Name == "" && !o.Watch); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	prefix := kind.Prefix(ns)
	if o.Name != "" {
		prefix = kind.Key(ns, o.Name)
	}
	w, err := s.Store.Client().Watch(ctx, prefix, rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		obj := kind.New()
		if ev.Type == raftstore.EventDelete {
			if err := objects.Decode(ev.KV, obj); err != nil {
				continue
			}
		} else if err := objects.Decode(ev.KV, obj); err != nil {
			continue
		}
		if o.Name != "" && obj.GetMetadata().GetName() != o.Name {
			continue
		}
		p.Now = time.Now()
		if err := p.Print(kind, []objects.Object{obj}, false, false); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return w.Err()
}

// GetKinds is Get for several kinds (kubectl get svc,pods): a table (or
// names) per kind, a blank line between them; json, yaml and jsonpath
// print one List of every object, kind after kind, as kubectl does.
func (s *Session) GetKinds(ctx context.Context, kinds []objects.Kind, ns, name string, p *Printer, errOut io.Writer) error {
	if len(kinds) == 1 {
		return s.Get(ctx, GetOptions{Kind: kinds[0], Namespace: ns, Name: name, Printer: p}, errOut)
	}
	switch p.format {
	case outputJSON, outputYAML, outputJSONPath:
		var all []objects.Object
		for _, kind := range kinds {
			kvs, _, err := s.Store.Client().List(ctx, kind.Prefix(listNS(kind, ns)))
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				obj := kind.New()
				if err := objects.Decode(kv, obj); err != nil {
					return err
				}
				if name == "" || obj.GetMetadata().GetName() == name {
					all = append(all, obj)
				}
			}
		}
		return p.Print(kinds[0], all, true, true)
	}
	var empty []string
	printed := false
	for _, kind := range kinds {
		var buf, errs bytes.Buffer
		if err := s.Get(ctx, GetOptions{Kind: kind, Namespace: listNS(kind, ns), Name: name, Printer: p.to(&buf)}, &errs); err != nil {
			return err
		}
		if buf.Len() == 0 {
			empty = append(empty, kind.Resource)
			continue
		}
		if printed && p.format != outputName {
			fmt.Fprintln(p.out)
		}
		p.out.Write(buf.Bytes())
		printed = true
	}
	if !printed {
		if ns == "" {
			fmt.Fprintf(errOut, "No resources found\n")
		} else {
			fmt.Fprintf(errOut, "No resources found in %s namespace.\n", ns)
		}
	}
	return nil
}

// listNS is the namespace a kind is listed in: none for a cluster-scoped
// kind.
func listNS(kind objects.Kind, ns string) string {
	if !kind.Namespaced {
		return ""
	}
	return ns
}

// to is a copy of p writing to w, naming each object with its kind.
func (p *Printer) to(w io.Writer) *Printer {
	c := *p
	c.out, c.kindPrefix = w, true
	return &c
}
