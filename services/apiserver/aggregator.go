package apiserver

// The aggregator's proxy (kube-aggregator's handler_proxy.go): a request
// under /apis/<group>/<version> whose APIService names a Service is
// authorized here, as kube-apiserver's filters authorize every request,
// then proxied over TLS to that Service — verified with the APIService's
// caBundle and the name <service>.<namespace>.svc, or not verified with
// insecureSkipTLSVerify — carrying the user as kube's front-proxy headers
// (X-Remote-User, X-Remote-Group, X-Remote-Extra-*), presented with the
// front-proxy client certificate (Config.ProxyClientCertFile) an
// extension API server trusts through its requestheader client CA. The
// user's own credentials (Authorization, Impersonate-*) never leave.
//
// A request to an APIService whose Available condition is not True gets
// kube-aggregator's plain-text 503 "service unavailable" (after
// authorization: a user without access gets 403 first).
//
// The Service is resolved to a Ready endpoint that is a pod podflow
// placed (kube-apiserver's --enable-aggregator-routing), or for an
// ExternalName Service to its name, as kube's ResolveEndpoint.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/version"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
)

// aggregatorRequestInfo parses a request's resource attributes as
// kube-apiserver's filters do (verb list, watch, deletecollection …).
var aggregatorRequestInfo = &genericapirequest.RequestInfoFactory{
	APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
}

// remoteAPIService is the APIService of group version gv ("group/version")
// when it names a Service (an extension API server's); nil otherwise.
// stale reads it from any store replica.
func (s *Server) remoteAPIService(ctx context.Context, gv string, stale bool) (*apiregistrationv1.APIService, error) {
	group, version, ok := strings.Cut(gv, "/")
	if !ok || group == "" || version == "" || s.store == nil {
		return nil, nil
	}
	var opts []raftstore.ReadOption
	if stale {
		opts = append(opts, raftstore.Stale())
	}
	obj, err := s.store.GetKind(ctx, objects.APIServices, "", version+"."+group, opts...)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	as, err := fromStored(obj)
	if err != nil || as.Spec.Service == nil {
		return nil, err
	}
	return as, nil
}

// servesCustom reports whether p ("group/version/...") is under a group
// version served for custom resources, which no extension API server
// takes over (an APIService of such a group version is a local one).
func (s *Server) servesCustom(p string) bool {
	parts := strings.SplitN(p, "/", 3)
	crs := s.customResources()
	return crs != nil && len(parts) >= 2 && crs.served[parts[0]+"/"+parts[1]] != nil
}

// serveAggregated authorizes user's request and proxies it to as's
// Service.
func (s *Server) serveAggregated(w http.ResponseWriter, r *http.Request, user *corev1.UserInfo, as *apiregistrationv1.APIService) {
	info, err := aggregatorRequestInfo.NewRequestInfo(r)
	if err != nil {
		writeStatus(w, badRequest("%v", err))
		return
	}
	if info.IsResourceRequest {
		attrs := auth.Attributes{User: user, Verb: info.Verb, Namespace: info.Namespace, APIGroup: info.APIGroup,
			Resource: info.Resource, Subresource: info.Subresource, Name: info.Name}
		if d := s.backend.Authorize(attrs); !d.Allowed {
			writeStatus(w, auth.Forbidden(attrs, d.Reason))
			return
		}
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// /apis/<group>/<version> itself: discovery, GET only (every
		// authenticated user may read it, kube's system:discovery).
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	// Only to a server the availability check passed, as kube-aggregator's
	// proxy handler: its plain-text 503 otherwise. as was read from any
	// store replica: one behind may not show yet the Available condition
	// a client has seen (its last request was proxied); the leader's
	// copy decides a refusal.
	if !apiServiceAvailable(as) {
		fresh, err := s.remoteAPIService(r.Context(), as.Spec.Group+"/"+as.Spec.Version, false)
		if err != nil || fresh == nil || !apiServiceAvailable(fresh) {
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			return
		}
		as = fresh
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	loc, st := s.apiServiceLocation(ctx, as)
	cancel()
	if st != nil {
		writeStatus(w, st)
		return
	}
	rt, err := s.apiServiceTransport(as)
	if err != nil {
		writeStatus(w, stage500("build the transport of APIService %q: %v", as.Name, err))
		return
	}
	loc.Path, loc.RawQuery = r.URL.Path, r.URL.RawQuery
	out := r.Clone(r.Context())
	out.URL, out.Host = loc, loc.Host
	out.Header.Del("Authorization")
	for k := range out.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-") {
			out.Header.Del(k)
		}
	}
	upgrade := httpstream.IsUpgradeRequest(r)
	// An upgrade dials directly, bypassing the round tripper: the headers
	// are set on the request too, as kube-aggregator does.
	transport.SetAuthProxyHeaders(out, user.GetUsername(), user.GetUid(), user.GetGroups(), nil)
	h := proxy.NewUpgradeAwareHandler(loc, transport.NewAuthProxyRoundTripper(user.GetUsername(), user.GetUid(), user.GetGroups(), nil, rt),
		true, upgrade, proxyErrors{})
	h.ServeHTTP(w, out)
}

// apiServiceAvailable reports whether as's Available condition is True.
func apiServiceAvailable(as *apiregistrationv1.APIService) bool {
	return slices.ContainsFunc(as.Status.Conditions, func(c apiregistrationv1.APIServiceCondition) bool {
		return c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue
	})
}

func stage500(format string, args ...any) *corev1.Status {
	return unavailableCode(http.StatusInternalServerError, "InternalError", format, args...)
}

func unavailableCode(code int32, reason, format string, args ...any) *corev1.Status {
	st := unavailable(format, args...)
	st.Code, st.Reason = code, reason
	return st
}

// apiServiceLocation is where as's requests go: its Service's Ready pod
// endpoint on the service port as names (443 by default), or an
// ExternalName Service's name on that port.
func (s *Server) apiServiceLocation(ctx context.Context, as *apiregistrationv1.APIService) (*url.URL, *corev1.Status) {
	ref := as.Spec.Service
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	svc, err := objects.Get[*corev1.Service](ctx, s.store, ref.Namespace, ref.Name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, unavailable("service unavailable: service %s/%s not found", ref.Namespace, ref.Name)
	}
	if err != nil {
		return nil, storeStatus(err, lookupResource("v1", "services"), ref.Name)
	}
	if svc.GetSpec().GetType() == "ExternalName" {
		return &url.URL{Scheme: "https", Host: net.JoinHostPort(svc.GetSpec().GetExternalName(), strconv.Itoa(int(port)))}, nil
	}
	loc, st := s.serviceLocation(ctx, ref.Namespace, ref.Name, "https", ref.Name, strconv.Itoa(int(port)))
	if st != nil {
		return nil, unavailable("service unavailable: %s", st.GetMessage())
	}
	return loc, nil
}

// apiServiceTransports caches each APIService's transport by its name,
// for its spec (caBundle, insecureSkipTLSVerify, service) as last seen.
type apiServiceTransports struct {
	mu sync.Mutex
	m  map[string]cachedTransport
}

type cachedTransport struct {
	key string
	rt  *http.Transport
}

// apiServiceTransport is the TLS transport to as's server.
func (s *Server) apiServiceTransport(as *apiregistrationv1.APIService) (*http.Transport, error) {
	key := fmt.Sprintf("%s/%s/%t/%x", as.Spec.Service.Namespace, as.Spec.Service.Name, as.Spec.InsecureSkipTLSVerify, as.Spec.CABundle)
	c := &s.aggTransports
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.m[as.Name]; ok && t.key == key {
		return t.rt, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
		ServerName: as.Spec.Service.Name + "." + as.Spec.Service.Namespace + ".svc"}
	if as.Spec.InsecureSkipTLSVerify {
		tc.InsecureSkipVerify = true //nolint:gosec // the APIService asks for it, as kube-aggregator honours
	} else {
		pool := x509.NewCertPool()
		if len(as.Spec.CABundle) > 0 && !pool.AppendCertsFromPEM(as.Spec.CABundle) {
			return nil, errors.New("spec.caBundle holds no PEM certificate")
		}
		tc.RootCAs = pool // an empty caBundle trusts no server, as kube's
	}
	if s.proxyClientCert != nil {
		tc.Certificates = []tls.Certificate{*s.proxyClientCert}
	}
	base := newProxyTransport(nil)
	base.TLSClientConfig = tc
	if c.m == nil {
		c.m = map[string]cachedTransport{}
	}
	if old, ok := c.m[as.Name]; ok {
		old.rt.CloseIdleConnections()
	}
	c.m[as.Name] = cachedTransport{key, base}
	return base, nil
}

// remoteAPIServices are the APIServices naming a Service whose group
// podflow does not serve itself, by group, each group's versions in
// kube-aggregator's order (versionPriority, then the version's), the
// groups by groupPriorityMinimum (highest first), then name.
func (s *Server) remoteAPIServices(ctx context.Context) ([]string, map[string][]*apiregistrationv1.APIService) {
	if s.store == nil {
		return nil, nil
	}
	items, _, err := s.store.ListKind(ctx, objects.APIServices, "", raftstore.Stale())
	if err != nil {
		s.log.Warn("aggregator: list apiservices", "err", err)
		return nil, nil
	}
	byGroup := map[string][]*apiregistrationv1.APIService{}
	var groups []string
	for _, obj := range items {
		as, err := fromStored(obj)
		if err != nil || as.Spec.Service == nil || as.Spec.Group == "" {
			continue
		}
		if _, builtin := groupVersions[as.Spec.Group]; builtin {
			continue
		}
		if _, ok := byGroup[as.Spec.Group]; !ok {
			groups = append(groups, as.Spec.Group)
		}
		byGroup[as.Spec.Group] = append(byGroup[as.Spec.Group], as)
	}
	for _, vs := range byGroup {
		slices.SortStableFunc(vs, func(a, b *apiregistrationv1.APIService) int {
			if a.Spec.VersionPriority != b.Spec.VersionPriority {
				return int(b.Spec.VersionPriority) - int(a.Spec.VersionPriority)
			}
			return -version.CompareKubeAwareVersionStrings(a.Spec.Version, b.Spec.Version)
		})
	}
	slices.SortStableFunc(groups, func(a, b string) int {
		pa, pb := byGroup[a][0].Spec.GroupPriorityMinimum, byGroup[b][0].Spec.GroupPriorityMinimum
		if pa != pb {
			return int(pb) - int(pa)
		}
		return strings.Compare(a, b)
	})
	return groups, byGroup
}

// remoteGroup is the discovery document of an extension API server's
// group, from its APIServices (vs: remoteAPIServices' order).
func remoteGroup(group string, vs []*apiregistrationv1.APIService) metav1.APIGroup {
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group}
	for _, as := range vs {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + as.Spec.Version, Version: as.Spec.Version})
	}
	if len(g.Versions) > 0 {
		g.PreferredVersion = g.Versions[0]
	}
	return g
}

// aggregatorUser is who the aggregator's own discovery requests to an
// extension API server come from, as kube-aggregator's.
var aggregatorUser = &corev1.UserInfo{Username: "system:kube-aggregator", Groups: []string{"system:masters"}}

// remoteAggregated is the aggregated discovery of the extension API
// servers' groups: each version's resources, read from its server's
// /apis/<group>/<version> (a version whose server does not answer is
// listed Stale without resources, as kube-aggregator lists it).
func (s *Server) remoteAggregated(ctx context.Context) []apidiscoveryv2.APIGroupDiscovery {
	groups, byGroup := s.remoteAPIServices(ctx)
	var out []apidiscoveryv2.APIGroupDiscovery
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		for _, as := range byGroup[g] {
			l, err := s.remoteResourceList(ctx, as)
			if err != nil {
				s.log.Debug("aggregator: discovery", "apiservice", as.Name, "err", err)
				gd.Versions = append(gd.Versions, apidiscoveryv2.APIVersionDiscovery{Version: as.Spec.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessStale})
				continue
			}
			gd.Versions = append(gd.Versions, versionDiscovery(g, as.Spec.Version, l))
		}
		out = append(out, gd)
	}
	return out
}

// remoteResourceList reads as's server's discovery document of its group
// version, as the aggregator's user, within 5s.
func (s *Server) remoteResourceList(ctx context.Context, as *apiregistrationv1.APIService) (*metav1.APIResourceList, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	loc, st := s.apiServiceLocation(ctx, as)
	if st != nil {
		return nil, errors.New(st.GetMessage())
	}
	rt, err := s.apiServiceTransport(as)
	if err != nil {
		return nil, err
	}
	loc.Path = "/apis/" + as.Spec.Group + "/" + as.Spec.Version
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := transport.NewAuthProxyRoundTripper(aggregatorUser.Username, "", aggregatorUser.Groups, nil, rt).RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", loc.Path, resp.Status)
	}
	var l metav1.APIResourceList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&l); err != nil {
		return nil, err
	}
	return &l, nil
}

// checkAPIServices sets the Available condition of every APIService
// naming a Service, every APIServiceCheckPeriod until ctx ends, as
// kube-aggregator's remote availability controller: False while the
// Service, its port or a Ready endpoint is missing or its server does
// not answer discovery with a 2xx; True (Passed) otherwise. Every api
// replica runs it; each write is a compare-and-swap from a fresh read.
func (s *Server) checkAPIServices(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, byGroup := s.remoteAPIServices(ctx)
		for _, vs := range byGroup {
			for _, as := range vs {
				cond := s.apiServiceAvailable(ctx, as)
				if err := s.writeAPIServiceCondition(ctx, as.Name, cond); err != nil && ctx.Err() == nil {
					s.log.Warn("aggregator: apiservice status", "apiservice", as.Name, "err", err)
				}
			}
		}
		t.Reset(s.cfg.APIServiceCheckPeriod)
	}
}

// apiServiceAvailable is as's Available condition, with kube's reasons
// and messages.
func (s *Server) apiServiceAvailable(ctx context.Context, as *apiregistrationv1.APIService) apiregistrationv1.APIServiceCondition {
	ref := as.Spec.Service
	cond := apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionFalse}
	svc, err := objects.Get[*corev1.Service](ctx, s.store, ref.Namespace, ref.Name)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		cond.Reason, cond.Message = "ServiceNotFound", fmt.Sprintf("service/%s in %q is not present", ref.Name, ref.Namespace)
		return cond
	case err != nil:
		cond.Reason, cond.Message = "ServiceAccessError", fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err)
		return cond
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	if svc.GetSpec().GetType() != "ExternalName" {
		if !slices.ContainsFunc(svc.GetSpec().GetPorts(), func(p *corev1.ServicePort) bool { return p.GetPort() == port }) {
			cond.Reason, cond.Message = "ServicePortError", fmt.Sprintf("service/%s in %q is not listening on port %d", ref.Name, ref.Namespace, port)
			return cond
		}
	}
	if err := s.discoveryCheck(ctx, as); err != nil {
		cond.Reason, cond.Message = "FailedDiscoveryCheck", fmt.Sprintf("failing or missing response from %s: %v", as.Name, err)
		return cond
	}
	cond.Status, cond.Reason, cond.Message = apiregistrationv1.ConditionTrue, "Passed", "all checks passed"
	return cond
}

// discoveryAttempts is how many discovery requests one check of an
// APIService sends at once (kube-aggregator's available controller: 5).
const discoveryAttempts = 5

// discoveryCheck reads as's discovery document with discoveryAttempts
// requests at once, as kube's available controller: one answer is a
// pass, so a single lost or slow request on a busy server does not make
// the APIService unavailable (and its clients' requests 503s). The
// error is the last attempt's when none answers.
func (s *Server) discoveryCheck(ctx context.Context, as *apiregistrationv1.APIService) error {
	results := make(chan error, discoveryAttempts) // the others finish on their own
	for range discoveryAttempts {
		go func() {
			_, err := s.remoteResourceList(ctx, as)
			results <- err
		}()
	}
	var err error
	for range discoveryAttempts {
		if err = <-results; err == nil {
			return nil
		}
	}
	return err
}

// writeAPIServiceCondition writes cond into the APIService name's status
// unless it says that already.
func (s *Server) writeAPIServiceCondition(ctx context.Context, name string, cond apiregistrationv1.APIServiceCondition) error {
	return updateAPIService(ctx, s.store, name, func(as *apiregistrationv1.APIService) bool {
		if as.Spec.Service == nil {
			return false // made local meanwhile
		}
		cond.LastTransitionTime = metav1.Now()
		return setAPIServiceCondition(as, cond)
	})
}
