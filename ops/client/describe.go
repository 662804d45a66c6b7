package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// DescribePod reads the pod ns/name and its Events and prints what kubectl
// describe pod prints.
func (s *Session) DescribePod(ctx context.Context, w io.Writer, ns, name string) error {
	pod, err := objects.Get[*corev1.Pod](ctx, s.Store, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return NotFound(objects.Pods, name)
	}
	if err != nil {
		return err
	}
	all, _, err := objects.List[*corev1.Event](ctx, s.Store, ns)
	if err != nil {
		return err
	}
	var evs []*corev1.Event
	for _, e := range all {
		if e.GetInvolvedObject().GetKind() == "Pod" && e.GetInvolvedObject().GetUid() == pod.GetMetadata().GetUid() {
			evs = append(evs, e)
		}
	}
	SortEvents(evs)
	describePod(w, pod, evs, time.Now())
	return nil
}

// describePod writes what kubectl describe pod shows of pod and its
// Events evs (sorted), with ages as of now.
func describePod(w io.Writer, pod *corev1.Pod, evs []*corev1.Event, now time.Time) {
	md, sp, st := pod.GetMetadata(), pod.GetSpec(), pod.GetStatus()
	kv := func(k, v string) { fmt.Fprintf(w, "%-18s%s\n", k+":", v) }
	kv("Name", md.GetName())
	kv("Namespace", md.GetNamespace())
	kv("Priority", fmt.Sprint(sp.GetPriority()))
	kv("Service Account", OrNone(sp.GetServiceAccountName()))
	node := OrNone(sp.GetNodeName())
	if st.GetHostIp() != "" {
		node += "/" + st.GetHostIp()
	}
	kv("Node", node)
	if t := st.GetStartTime(); t != nil {
		kv("Start Time", t.AsTime().Format(time.RFC1123Z))
	}
	kv("Labels", mapLines(md.GetLabels(), 18))
	kv("Annotations", mapLines(md.GetAnnotations(), 18))
	status := st.GetPhase()
	if md.GetDeletionTimestamp() != nil {
		status = "Terminating (lasts " + HumanDuration(now.Sub(md.GetDeletionTimestamp().AsTime())) + ")"
	}
	kv("Status", status)
	if st.GetReason() != "" {
		kv("Reason", st.GetReason())
	}
	if st.GetMessage() != "" {
		kv("Message", st.GetMessage())
	}
	kv("IP", OrNone(st.GetPodIp()))
	writeContainers(w, "Init Containers", sp.GetInitContainers(), st.GetInitContainerStatuses())
	writeContainers(w, "Containers", sp.GetContainers(), st.GetContainerStatuses())
	fmt.Fprintln(w, "Conditions:")
	if len(st.GetConditions()) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		fmt.Fprintf(w, "  %-28s %s\n", "Type", "Status")
		for _, c := range st.GetConditions() {
			line := fmt.Sprintf("  %-28s %s", c.GetType(), c.GetStatus())
			if c.GetReason() != "" {
				line += "   (" + c.GetReason() + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w, "Volumes:")
	if len(sp.GetVolumes()) == 0 {
		fmt.Fprintln(w, "  <none>")
	}
	for _, v := range sp.GetVolumes() {
		fmt.Fprintf(w, "  %s:\n    Type: %s\n", v.GetName(), volumeType(v))
	}
	kv("QoS Class", OrNone(st.GetQosClass()))
	kv("Node-Selectors", mapLines(sp.GetNodeSelector(), 18))
	var tols []string
	for _, t := range sp.GetTolerations() {
		s := t.GetKey()
		if t.GetValue() != "" {
			s += "=" + t.GetValue()
		}
		if t.GetOperator() == "Exists" && t.GetKey() != "" {
			s += " op=Exists"
		}
		if t.GetEffect() != "" {
			s += ":" + t.GetEffect()
		}
		tols = append(tols, s)
	}
	kv("Tolerations", OrNone(strings.Join(tols, "\n"+strings.Repeat(" ", 18))))
	fmt.Fprintln(w, "Events:")
	if len(evs) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	fmt.Fprintf(w, "  %-8s %-20s %-10s %-20s %s\n", "Type", "Reason", "Age", "From", "Message")
	fmt.Fprintf(w, "  %-8s %-20s %-10s %-20s %s\n", "----", "------", "----", "----", "-------")
	for _, e := range evs {
		age := HumanDuration(now.Sub(e.GetLastTimestamp().AsTime()))
		if e.GetCount() > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, e.GetCount(), HumanDuration(now.Sub(e.GetFirstTimestamp().AsTime())))
		}
		from := e.GetReportingComponent()
		if e.GetReportingInstance() != "" {
			from += "/" + e.GetReportingInstance()
		}
		fmt.Fprintf(w, "  %-8s %-20s %-10s %-20s %s\n", e.GetType(), e.GetReason(), age, from, e.GetMessage())
	}
}

func writeContainers(w io.Writer, title string, cs []*corev1.Container, sts []*corev1.ContainerStatus) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w, title+":")
	byName := map[string]*corev1.ContainerStatus{}
	for _, s := range sts {
		byName[s.GetName()] = s
	}
	for _, c := range cs {
		s := byName[c.GetName()]
		fmt.Fprintf(w, "  %s:\n", c.GetName())
		fmt.Fprintf(w, "    Image:          %s\n", c.GetImage())
		if s.GetImageId() != "" {
			fmt.Fprintf(w, "    Image ID:       %s\n", s.GetImageId())
		}
		var ports []string
		for _, p := range c.GetPorts() {
			ports = append(ports, fmt.Sprintf("%d/%s", p.GetContainerPort(), orDefault(p.GetProtocol(), "TCP")))
		}
		fmt.Fprintf(w, "    Port:           %s\n", OrNone(strings.Join(ports, ", ")))
		writeState(w, "State", s.GetState())
		if ls := s.GetLastTerminationState(); ls.GetTerminated() != nil {
			writeState(w, "Last State", ls)
		}
		fmt.Fprintf(w, "    Ready:          %t\n", s.GetReady())
		fmt.Fprintf(w, "    Restart Count:  %d\n", s.GetRestartCount())
		if r := c.GetResources(); len(r.GetLimits()) > 0 {
			fmt.Fprintf(w, "    Limits:\n%s", resourceLines(r.GetLimits()))
		}
		if r := c.GetResources(); len(r.GetRequests()) > 0 {
			fmt.Fprintf(w, "    Requests:\n%s", resourceLines(r.GetRequests()))
		}
		for name, p := range map[string]*corev1.Probe{"Liveness": c.GetLivenessProbe(), "Readiness": c.GetReadinessProbe(), "Startup": c.GetStartupProbe()} {
			if p != nil {
				fmt.Fprintf(w, "    %-16s%s delay=%ds timeout=%ds period=%ds #success=%d #failure=%d\n", name+":", probeAction(p),
					p.GetInitialDelaySeconds(), p.GetTimeoutSeconds(), p.GetPeriodSeconds(), p.GetSuccessThreshold(), p.GetFailureThreshold())
			}
		}
	}
}

func writeState(w io.Writer, label string, s *corev1.ContainerState) {
	switch {
	case s.GetRunning() != nil:
		fmt.Fprintf(w, "    %-16sRunning\n      Started:      %s\n", label+":", s.GetRunning().GetStartedAt().AsTime().Format(time.RFC1123Z))
	case s.GetTerminated() != nil:
		t := s.GetTerminated()
		fmt.Fprintf(w, "    %-16sTerminated\n      Reason:       %s\n      Exit Code:    %d\n", label+":", t.GetReason(), t.GetExitCode())
	case s.GetWaiting() != nil:
		fmt.Fprintf(w, "    %-16sWaiting\n      Reason:       %s\n", label+":", s.GetWaiting().GetReason())
		if m := s.GetWaiting().GetMessage(); m != "" {
			fmt.Fprintf(w, "      Message:      %s\n", m)
		}
	default:
		fmt.Fprintf(w, "    %-16sWaiting\n", label+":")
	}
}

func probeAction(p *corev1.Probe) string {
	switch {
	case p.GetHttpGet() != nil:
		h := p.GetHttpGet()
		return fmt.Sprintf("http-get %s://:%s%s", strings.ToLower(orDefault(h.GetScheme(), "HTTP")), intOrString(h.GetPort()), h.GetPath())
	case p.GetTcpSocket() != nil:
		return "tcp-socket :" + intOrString(p.GetTcpSocket().GetPort())
	case p.GetExec() != nil:
		return "exec " + fmt.Sprint(p.GetExec().GetCommand())
	}
	return "<none>"
}

func intOrString(v *corev1.IntOrString) string {
	if s := v.GetStrVal(); s != "" {
		return s
	}
	return fmt.Sprint(v.GetIntVal())
}

func volumeType(v *corev1.Volume) string {
	switch {
	case v.GetEmptyDir() != nil:
		return "EmptyDir (a temporary directory that shares a pod's lifetime)"
	case v.GetConfigMap() != nil:
		return "ConfigMap (a volume populated by a ConfigMap)\n    Name: " + v.GetConfigMap().GetName()
	case v.GetSecret() != nil:
		return "Secret (a volume populated by a Secret)\n    SecretName: " + v.GetSecret().GetSecretName()
	case v.GetHostPath() != nil:
		return "HostPath (bare host directory volume)\n    Path: " + v.GetHostPath().GetPath()
	case v.GetPersistentVolumeClaim() != nil:
		return "PersistentVolumeClaim\n    ClaimName: " + v.GetPersistentVolumeClaim().GetClaimName()
	case v.GetCsi() != nil:
		return "CSI (a Container Storage Interface (CSI) volume source)\n    Driver: " + v.GetCsi().GetDriver()
	}
	return "<unknown>"
}

func resourceLines(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s:  %s\n", k, m[k])
	}
	return b.String()
}

func mapLines(m map[string]string, indent int) string {
	if len(m) == 0 {
		return "<none>"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = k + "=" + m[k]
	}
	return strings.Join(lines, "\n"+strings.Repeat(" ", indent))
}
