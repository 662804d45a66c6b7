package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// aggregatedContentType is the media type of aggregated discovery
// (apidiscovery.k8s.io/v2), which kubectl asks for first: the whole API in
// two requests (/api and /apis) instead of one per group version.
const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func wantsAggregated(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		a = strings.ReplaceAll(a, " ", "")
		if strings.Contains(a, "as=APIGroupDiscoveryList") && strings.Contains(a, "g=apidiscovery.k8s.io") && strings.Contains(a, "v=v2") {
			return true
		}
		if strings.HasPrefix(a, "application/json") && !strings.Contains(a, "as=") {
			return false // plain JSON preferred
		}
	}
	return false
}

// aggregatedDiscovery is the APIGroupDiscoveryList of the core group
// (core true, for /api) or of every named group (for /apis).
func aggregatedDiscovery(core bool) *apidiscoveryv2.APIGroupDiscoveryList {
	l := &apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
	groups := groupOrder
	if core {
		groups = []string{""}
	}
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		if g == "" {
			gd.Versions = []apidiscoveryv2.APIVersionDiscovery{versionDiscovery(g, "v1", apiResourceList("v1"))}
		} else {
			for _, v := range apiGroup(g).Versions { // the preferred first, as kube-apiserver
				gd.Versions = append(gd.Versions, versionDiscovery(g, v.Version, apiResourceList(v.GroupVersion)))
			}
		}
		l.Items = append(l.Items, gd)
	}
	return l
}

// versionDiscovery is the aggregated discovery of one group version
// whose legacy discovery document is l.
func versionDiscovery(g, version string, l *metav1.APIResourceList) apidiscoveryv2.APIVersionDiscovery {
	vd := apidiscoveryv2.APIVersionDiscovery{Version: version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, ar := range l.APIResources {
		if strings.Contains(ar.Name, "/") {
			continue // subresources are listed under their resource
		}
		scope := apidiscoveryv2.ScopeCluster
		if ar.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		rd := apidiscoveryv2.APIResourceDiscovery{
			Resource: ar.Name, ResponseKind: &metav1.GroupVersionKind{Group: g, Version: version, Kind: ar.Kind},
			Scope: scope, SingularResource: ar.SingularName, Verbs: ar.Verbs, ShortNames: ar.ShortNames, Categories: ar.Categories,
		}
		vd.Resources = append(vd.Resources, rd)
	}
	for _, ar := range l.APIResources {
		res, sub, ok := strings.Cut(ar.Name, "/")
		if !ok {
			continue
		}
		kind := &metav1.GroupVersionKind{Group: g, Version: version, Kind: ar.Kind}
		if ar.Version != "" {
			kind.Group, kind.Version = ar.Group, ar.Version
		}
		for i := range vd.Resources {
			if vd.Resources[i].Resource == res {
				vd.Resources[i].Subresources = append(vd.Resources[i].Subresources,
					apidiscoveryv2.APISubresourceDiscovery{Subresource: sub, ResponseKind: kind, Verbs: ar.Verbs})
			}
		}
	}
	return vd
}

// writeAggregated writes the aggregated discovery of the core group (for
// /api) or of every named group (for /apis): the built-in groups, then
// the custom resources' groups, then the extension API servers'.
func (s *Server) writeAggregated(w http.ResponseWriter, ctx context.Context, core bool) {
	l := aggregatedDiscovery(core)
	if crs := s.customResources(); crs != nil && !core {
		l.Items = append(l.Items, crs.customAggregated()...)
	}
	if !core {
		l.Items = append(l.Items, s.remoteAggregated(ctx)...) // aggregator.go
	}
	b, err := json.Marshal(l)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", aggregatedContentType)
	w.Header().Set("Vary", "Accept")
	_, _ = w.Write(b)
}
