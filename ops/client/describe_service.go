package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/endpoints"
)

// DescribeService reads Service ns/name, its EndpointSlice and the
// namespace's pods, and describes them as describeService does.
func (s *Session) DescribeService(ctx context.Context, w io.Writer, ns, name string) error {
	svc, err := objects.Get[*corev1.Service](ctx, s.Store, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("Error from server (NotFound): services %q not found", name)
	}
	if err != nil {
		return err
	}
	all, _, err := objects.List[*corev1.EndpointSlice](ctx, s.Store, ns)
	if err != nil {
		return err
	}
	sls := slices.DeleteFunc(all, func(sl *corev1.EndpointSlice) bool {
		return sl.GetMetadata().GetLabels()[endpoints.LabelServiceName] != name
	})
	pods, _, err := objects.List[*corev1.Pod](ctx, s.Store, ns)
	if err != nil {
		return err
	}
	describeService(w, svc, sls, pods)
	return nil
}

// describeService writes what kubectl describe service shows (ClusterIP,
// ports, endpoints from the slice) and, for each pod the selector
// selects, whether it is an endpoint and why (endpoints.Membership): the
// "Running but not receiving traffic" question answered.
func describeService(w io.Writer, svc *corev1.Service, sls []*corev1.EndpointSlice, pods []*corev1.Pod) {
	md, sp := svc.GetMetadata(), svc.GetSpec()
	kv := func(k, v string) { fmt.Fprintf(w, "%-18s%s\n", k+":", v) }
	kv("Name", md.GetName())
	kv("Namespace", md.GetNamespace())
	kv("Labels", mapLines(md.GetLabels(), 18))
	kv("Selector", strings.ReplaceAll(mapLines(sp.GetSelector(), 0), "\n", ","))
	kv("Type", cmp.Or(sp.GetType(), "ClusterIP"))
	kv("IP", OrNone(sp.GetClusterIp()))
	kv("IPs", OrNone(strings.Join(sp.GetClusterIps(), ",")))
	var ready, notReady []string
	for _, sl := range sls {
		for _, ep := range sl.GetEndpoints() {
			if c := ep.GetConditions(); c == nil || c.Ready == nil || c.GetReady() {
				ready = append(ready, ep.GetAddresses()...)
			} else {
				notReady = append(notReady, ep.GetAddresses()...)
			}
		}
	}
	for _, p := range sp.GetPorts() {
		proto := cmp.Or(p.GetProtocol(), "TCP")
		kv("Port", fmt.Sprintf("%s  %d/%s", orUnset(p.GetName()), p.GetPort(), proto))
		target := intOrString(p.GetTargetPort())
		if p.GetTargetPort() == nil {
			target = fmt.Sprint(p.GetPort())
		}
		kv("TargetPort", target+"/"+proto)
		// Each slice's ready addresses with its own number for the port
		// (a named targetPort may resolve differently per pod).
		var eps []string
		for _, sl := range sls {
			port := slicePort(sl, p.GetName())
			if port == 0 {
				continue
			}
			for _, ep := range sl.GetEndpoints() {
				if c := ep.GetConditions(); c == nil || c.Ready == nil || c.GetReady() {
					for _, a := range ep.GetAddresses() {
						eps = append(eps, fmt.Sprintf("%s:%d", a, port))
					}
				}
			}
		}
		slices.Sort(eps)
		kv("Endpoints", OrNone(strings.Join(eps, ",")))
	}
	if len(notReady) > 0 {
		kv("Not Ready", strings.Join(notReady, ","))
	}
	kv("Session Affinity", cmp.Or(sp.GetSessionAffinity(), "None"))
	fmt.Fprintln(w, "Pods:")
	var selected []*corev1.Pod
	others := 0
	for _, p := range pods {
		if endpoints.Selects(svc, p) {
			selected = append(selected, p)
		} else {
			others++
		}
	}
	if len(sp.GetSelector()) == 0 {
		fmt.Fprintln(w, "  <none> (no selector: endpoints are managed by hand)")
		return
	}
	if len(selected) == 0 {
		fmt.Fprintln(w, "  <none> selected")
	} else {
		slices.SortFunc(selected, func(a, b *corev1.Pod) int {
			return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
		})
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tIP\tENDPOINT\tWHY")
		for _, p := range selected {
			in, why := endpoints.Membership(svc, p)
			yes := "no"
			if in {
				yes = "yes"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.GetMetadata().GetName(), OrNone(p.GetStatus().GetPodIp()), yes, why)
		}
		tw.Flush()
	}
	if others > 0 {
		fmt.Fprintf(w, "  (%d other pod(s) in the namespace: labels do not match the selector)\n", others)
	}
}

// slicePort is the slice's port for the Service port named name.
func slicePort(sl *corev1.EndpointSlice, name string) int32 {
	for _, p := range sl.GetPorts() {
		if p.GetName() == name {
			return p.GetPort()
		}
	}
	return 0
}

func orUnset(s string) string { return cmp.Or(s, "<unset>") }
