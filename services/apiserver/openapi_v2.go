package apiserver

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"

	"github.com/podflow/podflow/services/apiserver/openapigen"
	"github.com/podflow/podflow/services/stage"
)

// The media types of /openapi/v2, as kube-apiserver's (kube-openapi's
// handler): JSON, and the gnostic protobuf under its current and its
// deprecated name.
const (
	openAPIV2JSON          = "application/json"
	openAPIV2Proto         = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
	openAPIV2ProtoOldAlias = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
)

// openAPIV2Served is the /openapi/v2 document in both encodings, built
// once from the v3 documents (the same schemas and operations).
type openAPIV2Served struct {
	json, proto []byte
	etag        string
	err         error
}

var openAPIV2 = sync.OnceValue(func() openAPIV2Served {
	doc, err := openAPIV2Doc()
	if err != nil {
		return openAPIV2Served{err: err}
	}
	return encodeOpenAPIV2(doc)
})

// encodeOpenAPIV2 encodes a Swagger 2.0 document in both encodings.
func encodeOpenAPIV2(doc map[string]any) openAPIV2Served {
	j, err := json.Marshal(doc)
	if err != nil {
		return openAPIV2Served{err: err}
	}
	parsed, err := openapiv2.ParseDocument(j)
	if err != nil {
		return openAPIV2Served{err: fmt.Errorf("apiserver: the OpenAPI v2 document does not parse: %w", err)}
	}
	p, err := proto.Marshal(parsed)
	if err != nil {
		return openAPIV2Served{err: err}
	}
	return openAPIV2Served{json: j, proto: p, etag: fmt.Sprintf("%q", fmt.Sprintf("%X", sha512.Sum512(j)))}
}

// openAPIV2Doc is the Swagger 2.0 document of every group version served:
// the definitions kube-openapi's v2 builder makes of the generated ones
// (references into #/definitions, each definition once) and podflow's own
// kinds, the paths the operations podflow's v3 documents declare.
func openAPIV2Doc() (map[string]any, error) {
	var names []string
	for gv := range resources {
		names = append(names, openAPIKinds().names[gv]...)
	}
	sort.Strings(names)
	sw, err := builder.BuildOpenAPIDefinitionsForResources(&common.Config{Info: openAPIInfo,
		GetDefinitions: openapigen.GetOpenAPIDefinitions, GetDefinitionName: openAPIDefinitionName}, names...)
	if err != nil {
		return nil, fmt.Errorf("apiserver: the OpenAPI v2 definitions: %w", err)
	}
	defs, paths := map[string]any{}, map[string]any{}
	for name, s := range sw.Definitions {
		defs[name] = s
	}
	for gv := range resources {
		// podflow's own kinds' schemas are v2 schemas as they are.
		for name, s := range ownKindSchemas(gv) {
			defs[name] = s
		}
		doc, err := openAPIDoc(gv)
		if err != nil {
			return nil, err
		}
		for p, item := range doc["paths"].(map[string]any) {
			paths[p] = v3PathToV2(p, item.(map[string]any))
		}
	}
	return map[string]any{"swagger": "2.0", "info": map[string]any{"title": "Kubernetes", "version": versionInfo.GitVersion},
		"paths": paths, "definitions": defs}, nil
}

// v3PathToV2 rewrites one of podflow's v3 path items: a query parameter's
// type moves out of its schema, and the path's {parameters} are declared.
func v3PathToV2(p string, item map[string]any) map[string]any {
	out := map[string]any{}
	var pathParams []any
	for _, name := range []string{"namespace", "name"} {
		if strings.Contains(p, "{"+name+"}") {
			pathParams = append(pathParams, map[string]any{"name": name, "in": "path", "required": true, "type": "string", "uniqueItems": true})
		}
	}
	if len(pathParams) > 0 {
		out["parameters"] = pathParams
	}
	for method, op := range item {
		o := map[string]any{}
		for k, v := range op.(map[string]any) {
			o[k] = v
		}
		var params []any
		for _, q := range o["parameters"].([]any) {
			q := q.(map[string]any)
			v2 := map[string]any{}
			for k, v := range q {
				if k == "schema" {
					for sk, sv := range v.(map[string]any) {
						v2[sk] = sv
					}
					continue
				}
				v2[k] = v
			}
			params = append(params, v2)
		}
		o["parameters"] = params
		if params == nil {
			delete(o, "parameters")
		}
		out[method] = o
	}
	return out
}

// serveOpenAPIV2 answers /openapi/v2 in the media type asked for (JSON
// when any will do; 406 Not Acceptable when neither), with an ETag clients
// revalidate against. With custom resources it is the built-in document
// merged with theirs (crOpenAPIV2).
func (s *Server) serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	doc := openAPIV2()
	if crs := s.customResources(); crs != nil && doc.err == nil && len(crs.discovered) > 0 {
		doc = crs.crOpenAPIV2()
	}
	if doc.err != nil {
		writeStatus(w, stage.Internal(doc.err))
		return
	}
	w.Header().Add("Vary", "Accept")
	body, ctype := openAPIV2Negotiate(r.Header.Get("Accept"), doc)
	if body == nil {
		writeStatus(w, stage.Failure(http.StatusNotAcceptable, "NotAcceptable", "", "", "only the following media types are accepted: %s, %s", openAPIV2JSON, openAPIV2Proto))
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Etag", doc.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// openAPIV2Negotiate picks the encoding of the most preferred acceptable
// media type (by q, then in the client's order). The gnostic types carry
// "@" and "+", so the clauses are parsed here, not by mime.
func openAPIV2Negotiate(accept string, doc openAPIV2Served) ([]byte, string) {
	if strings.TrimSpace(accept) == "" {
		return doc.json, openAPIV2JSON
	}
	type clause struct {
		mt string
		q  float64
	}
	var cs []clause
	for _, c := range strings.Split(accept, ",") {
		mt, params, _ := strings.Cut(c, ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		if q > 0 {
			cs = append(cs, clause{strings.ToLower(strings.TrimSpace(mt)), q})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].q > cs[j].q })
	for _, c := range cs {
		switch c.mt {
		case openAPIV2Proto, openAPIV2ProtoOldAlias:
			return doc.proto, openAPIV2Proto
		case openAPIV2JSON, "application/*", "*/*":
			return doc.json, openAPIV2JSON
		}
	}
	return nil, ""
}
