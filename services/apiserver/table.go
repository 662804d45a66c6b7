package apiserver

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	k8sdiscoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stage"
)

// wantsTable reports whether the client asked for meta.k8s.io Table, as
// kubectl get does (Accept: application/json;as=Table;v=v1;g=meta.k8s.io).
func wantsTable(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		params := strings.Split(a, ";")
		var as, g, v string
		for _, p := range params[1:] {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			switch k {
			case "as":
				as = val
			case "g":
				g = val
			case "v":
				v = val
			}
		}
		if as == "Table" && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1") {
			return true
		}
		if strings.TrimSpace(params[0]) == "application/json" && as == "" {
			return false // plain JSON preferred over a later Table
		}
	}
	return false
}

// mediaTypes are the media types the API serves objects as, in
// kube-apiserver's words when it refuses an Accept header.
const mediaTypes = "application/json, application/yaml, application/vnd.kubernetes.protobuf"

// acceptsObject reports whether the Accept header of r takes the object
// itself (no "as=" transformation): no header, or an entry whose type is
// one the API serves or a wildcard. kube-apiserver's negotiation falls
// back to such an entry when a transformation (as=Table) is not served.
func acceptsObject(r *http.Request) bool {
	accept := strings.TrimSpace(r.Header.Get("Accept"))
	if accept == "" {
		return true
	}
	for _, a := range strings.Split(accept, ",") {
		params := strings.Split(a, ";")
		transformed := false
		for _, p := range params[1:] {
			if k, _, _ := strings.Cut(strings.TrimSpace(p), "="); k == "as" {
				transformed = true
			}
		}
		if transformed {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(params[0])) {
		case "*/*", "application/*", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf":
			return true
		}
	}
	return false
}

// notAcceptableTable is kube-apiserver's 406 for a request that accepts
// only a Table from a resource without a table convertor (the reviews:
// create-only, not stored).
func notAcceptableTable(r *http.Request) *corev1.Status {
	if !wantsTable(r) || acceptsObject(r) {
		return nil
	}
	return stage.Failure(http.StatusNotAcceptable, "NotAcceptable", "", "", "only the following media types are accepted: %s", mediaTypes)
}

type table struct {
	metav1.Table
	now time.Time
	// printer prints generic kinds' rows, when it has their columns.
	printer Printer
}

func col(name, format, desc string, priority int32) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Format: format, Description: desc, Priority: priority}
}

var (
	nameCol = col("Name", "name", "Name must be unique within a namespace.", 0)
	ageCol  = col("Age", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0)
)

// columns are the server-side printing columns, as kube-apiserver's
// printers define them for the kinds kubectl users look at most.
var columns = map[string][]metav1.TableColumnDefinition{
	"Pod": {nameCol, col("Ready", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
		col("Status", "", "The aggregate status of the containers in this pod.", 0),
		col("Restarts", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
		ageCol, col("IP", "", "IP address allocated to the pod.", 1), col("Node", "", "Name of the node the pod is assigned to.", 1),
		col("Nominated Node", "", "Nominated node name of the pod.", 1), col("Readiness Gates", "", "Readiness gates of the pod.", 1)},
	"Node": {nameCol, col("Status", "", "The status of the node", 0), col("Roles", "", "The roles of the node", 0), ageCol,
		col("Version", "", "Kubelet Version reported by the node.", 0), col("Internal-IP", "", "The internal IP of the node", 1),
		col("External-IP", "", "The external IP of the node", 1), col("OS-Image", "", "OS image reported by the node.", 1),
		col("Kernel-Version", "", "Kernel version reported by the node.", 1), col("Container-Runtime", "", "Container runtime version reported by the node.", 1)},
	"Namespace": {nameCol, col("Status", "", "The status of the namespace", 0), ageCol},
	"Service": {nameCol, col("Type", "", "The type of the service", 0), col("Cluster-IP", "", "The cluster IP of the service", 0),
		col("External-IP", "", "The external IP of the service", 0), col("Port(s)", "", "The ports of the service", 0), ageCol,
		col("Selector", "", "The selector of the service", 1)},
	"Endpoints": {nameCol, col("Endpoints", "", "Endpoints of the service", 0), ageCol},
	"EndpointSlice": {nameCol, col("AddressType", "", "Type of address carried by this EndpointSlice", 0),
		col("Ports", "", "Ports served by this EndpointSlice", 0), col("Endpoints", "", "Endpoints in this EndpointSlice", 0), ageCol},
	"Event": {col("Last Seen", "", "Time when this event was last seen.", 0), col("Type", "", "Type of this event.", 0),
		col("Reason", "", "Reason why this event was generated.", 0), col("Object", "", "The object this event is about.", 0),
		col("Message", "", "A human-readable description of the status of this event.", 0)},
}

func newTable(res *resource, withColumns bool, printer Printer) *table {
	t := &table{now: time.Now()}
	t.Kind, t.APIVersion = "Table", "meta.k8s.io/v1"
	t.Rows = []metav1.TableRow{}
	if res.cr != nil { // the definition's printer columns
		if withColumns {
			t.ColumnDefinitions = res.cr.TableColumns()
		}
		return t
	}
	cols, ok := columns[res.kind]
	if res.generic() {
		ok = false
		if printer != nil {
			if cols, ok = printer.TableColumns(res.gvk()); ok {
				t.printer = printer
			}
		}
	}
	if !ok || res.group == "events.k8s.io" {
		cols = []metav1.TableColumnDefinition{nameCol, ageCol}
	}
	if withColumns {
		t.ColumnDefinitions = cols
	}
	return t
}

func (t *table) age(ts metav1.Time) string {
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(t.now.Sub(ts.Time))
}

func (t *table) addRow(res *resource, k runtime.Object) {
	md := metaOf(k)
	var cells []any
	if u, ok := k.(*unstructured.Unstructured); ok && res.cr != nil {
		var err error
		if cells, err = res.cr.TableCells(u); err != nil {
			cells = make([]any, len(res.cr.TableColumns()))
			cells[0] = md.GetName()
		}
	} else if t.printer != nil {
		var err error
		if cells, err = t.printer.TableCells(k); err != nil {
			// Still a row of as many cells: its name, the rest empty.
			cols, _ := t.printer.TableColumns(res.gvk())
			cells = make([]any, max(len(cols), 1))
			cells[0] = md.GetName()
		}
	} else {
		cells = t.typedCells(res, k, md)
	}
	pom := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
	if m, ok := md.(*metav1.ObjectMeta); ok {
		pom.ObjectMeta = *m
	} else {
		pom.Name, pom.Namespace, pom.UID, pom.ResourceVersion = md.GetName(), md.GetNamespace(), md.GetUID(), md.GetResourceVersion()
		pom.Labels, pom.Annotations, pom.CreationTimestamp = md.GetLabels(), md.GetAnnotations(), md.GetCreationTimestamp()
	}
	t.Rows = append(t.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: pom}})
}

// typedCells are the cells of podflow's own printers (the proto kinds
// kubectl users look at most), name and age for any other.
func (t *table) typedCells(res *resource, k runtime.Object, md metav1.Object) []any {
	var cells []any
	switch o := k.(type) {
	case *k8scorev1.Pod:
		cells = t.podCells(o)
	case *k8scorev1.Node:
		cells = t.nodeCells(o)
	case *k8scorev1.Namespace:
		cells = []any{o.Name, string(o.Status.Phase), t.age(o.CreationTimestamp)}
	case *k8scorev1.Service:
		cells = t.serviceCells(o)
	case *k8sdiscoveryv1.EndpointSlice:
		var ports, addrs []string
		for _, p := range o.Ports {
			if p.Port != nil {
				ports = append(ports, fmt.Sprint(*p.Port))
			}
		}
		for _, e := range o.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		eps := strings.Join(addrs, ",")
		if len(addrs) > 3 {
			eps = strings.Join(addrs[:3], ",") + fmt.Sprintf(" + %d more...", len(addrs)-3)
		}
		cells = []any{o.Name, string(o.AddressType), orNone(strings.Join(ports, ",")), orNone(eps), t.age(o.CreationTimestamp)}
	case *k8scorev1.Endpoints:
		// kubectl's: ip:port for every address and port, 3 at most.
		var eps []string
		for _, ss := range o.Subsets {
			for _, a := range ss.Addresses {
				for _, p := range ss.Ports {
					eps = append(eps, net.JoinHostPort(a.IP, fmt.Sprint(p.Port)))
				}
				if len(ss.Ports) == 0 {
					eps = append(eps, a.IP)
				}
			}
		}
		list := strings.Join(eps, ",")
		if len(eps) > 3 {
			list = strings.Join(eps[:3], ",") + fmt.Sprintf(" + %d more...", len(eps)-3)
		}
		cells = []any{o.Name, orNone(list), t.age(o.CreationTimestamp)}
	case *k8scorev1.Event:
		last := o.LastTimestamp
		if last.IsZero() {
			last = metav1.Time{Time: o.EventTime.Time}
		}
		obj := strings.ToLower(o.InvolvedObject.Kind) + "/" + o.InvolvedObject.Name
		cells = []any{t.age(last), o.Type, o.Reason, obj, strings.TrimSpace(o.Message)}
	}
	if cells == nil || res.generic() {
		cells = []any{md.GetName(), t.age(md.GetCreationTimestamp())}
	}
	return cells
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// podCells follows kubectl's pod printer: the STATUS column is the most
// telling reason (a waiting or terminated container's, Terminating while
// being deleted), not only the phase.
func (t *table) podCells(p *k8scorev1.Pod) []any {
	restarts, ready := 0, 0
	var lastRestart time.Time
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	hasRunning := false
	for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
		c := p.Status.ContainerStatuses[i]
		restarts += int(c.RestartCount)
		if lt := c.LastTerminationState.Terminated; lt != nil && lt.FinishedAt.After(lastRestart) {
			lastRestart = lt.FinishedAt.Time
		}
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			reason = c.State.Waiting.Reason
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			reason = c.State.Terminated.Reason
		case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
			reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
		case c.State.Terminated != nil:
			reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
		case c.Ready && c.State.Running != nil:
			hasRunning = true
			ready++
		}
	}
	if reason == "Completed" && hasRunning {
		reason = "Running"
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
		if p.Status.Reason == "NodeLost" {
			reason = "Unknown"
		}
	}
	var restartCell any = int64(restarts)
	if restarts > 0 && !lastRestart.IsZero() {
		restartCell = fmt.Sprintf("%d (%s ago)", restarts, duration.HumanDuration(t.now.Sub(lastRestart)))
	}
	ip := p.Status.PodIP
	if ip == "" {
		ip = "<none>"
	}
	gates := "<none>"
	if n := len(p.Spec.ReadinessGates); n > 0 {
		gates = fmt.Sprintf("0/%d", n)
	}
	return []any{p.Name, fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), reason, restartCell, t.age(p.CreationTimestamp),
		ip, orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), gates}
}

func (t *table) nodeCells(n *k8scorev1.Node) []any {
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == k8scorev1.NodeReady {
			status = "NotReady"
			if c.Status == k8scorev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	var roles []string
	for l := range n.Labels {
		if r, ok := strings.CutPrefix(l, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	var internal, external string
	for _, a := range n.Status.Addresses {
		switch a.Type {
		case k8scorev1.NodeInternalIP:
			internal = a.Address
		case k8scorev1.NodeExternalIP:
			external = a.Address
		}
	}
	ni := n.Status.NodeInfo
	return []any{n.Name, status, orNone(strings.Join(roles, ",")), t.age(n.CreationTimestamp), ni.KubeletVersion,
		orNone(internal), orNone(external), orNone(ni.OSImage), orNone(ni.KernelVersion), orNone(ni.ContainerRuntimeVersion)}
}

func (t *table) serviceCells(s *k8scorev1.Service) []any {
	var ports []string
	for _, p := range s.Spec.Ports {
		pt := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort != 0 {
			pt = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
		ports = append(ports, pt)
	}
	var sel []string
	for k, v := range s.Spec.Selector {
		sel = append(sel, k+"="+v)
	}
	sort.Strings(sel)
	// kube's getServiceExternalIP: an ExternalName Service's name, a
	// LoadBalancer's address or <pending>, else the external IPs.
	ext := strings.Join(s.Spec.ExternalIPs, ",")
	switch s.Spec.Type {
	case k8scorev1.ServiceTypeExternalName:
		ext = s.Spec.ExternalName
	case k8scorev1.ServiceTypeLoadBalancer:
		if ext == "" {
			ext = "<pending>"
		}
	}
	typ := string(s.Spec.Type)
	if typ == "" {
		typ = "ClusterIP"
	}
	return []any{s.Name, typ, orNone(s.Spec.ClusterIP), orNone(ext), orNone(strings.Join(ports, ",")), t.age(s.CreationTimestamp),
		orNone(strings.Join(sel, ","))}
}
