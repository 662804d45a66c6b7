package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest object.
type Object struct {
	// APIVersion and Kind as written in the manifest ("v1", "Pod").
	APIVersion, Kind string
	// Message is the podflow proto object, e.g. *corev1.Pod from
	// github.com/podflow/podflow/proto/corev1.
	Message proto.Message
	// Warnings name fields Kubernetes knows but podflow does not keep
	// (spec.shareProcessNamespace, metadata.managedFields, ...): they were dropped.
	Warnings []string
}

// Decode parses a manifest: one or more YAML documents separated by "---",
// or one or more JSON objects (a JSON array, or a "kind: List", stands for
// its items). Each object is decoded strictly — an unknown or duplicate
// field is an error naming its path — and converted to its podflow proto.
// Empty documents are skipped. On error Decode returns no objects and an
// error wrapping a sentinel (ErrUnknownField, ...), with *Error details for
// errors.As; several problems in one document come back joined.
func Decode(data []byte, opts ...Option) ([]Object, error) {
	cfg := DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(data) > cfg.MaxBytes {
		return nil, &Error{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(data), cfg.MaxBytes)}
	}
	d := decoder{cfg: cfg}
	var err error
	if first := bytes.TrimLeft(data, " \t\r\n"); len(first) > 0 && (first[0] == '{' || first[0] == '[') {
		err = d.jsonStream(data)
		if errors.Is(err, errNotJSON) { // YAML flow style: {apiVersion: v1, ...}
			d = decoder{cfg: cfg}
			err = d.yamlStream(data)
		}
	} else {
		err = d.yamlStream(data)
	}
	if err != nil {
		return nil, err
	}
	return d.out, nil
}

// errNotJSON sends input that starts like JSON but is not to the YAML path.
var errNotJSON = errors.New("manifest: not JSON")

type decoder struct {
	cfg  Config
	doc  int // index of the current document
	objs int // objects so far, list items included
	out  []Object
}

func (d *decoder) jsonStream(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	for ; ; d.doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return nil
		} else if err != nil {
			var syntax *json.SyntaxError
			if d.doc == 0 && errors.As(err, &syntax) {
				return errNotJSON
			}
			return &Error{Doc: d.doc, Err: ErrMalformed, Detail: err.Error()}
		}
		if bytes.HasPrefix(raw, []byte("[")) {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				return &Error{Doc: d.doc, Err: ErrMalformed, Detail: err.Error()}
			}
			for i, item := range items {
				if err := d.object(item, fmt.Sprintf("[%d]", i), true); err != nil {
					return err
				}
			}
			continue
		}
		if err := d.object(raw, "", false); err != nil {
			return err
		}
	}
}

func (d *decoder) yamlStream(data []byte) error {
	if len(data) > 0 && data[len(data)-1] != '\n' {
		// apimachinery's YAMLReader silently drops a final unterminated line
		// whose length is a multiple of its 4096-byte buffer (the bug helm
		// fixed in helm/helm#32525); a trailing newline avoids it.
		data = append(data[:len(data):len(data)], '\n')
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		chunk, err := r.Read()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return &Error{Doc: d.doc, Err: ErrMalformed, Detail: err.Error()}
		}
		if bytes.IndexByte(chunk, '*') >= 0 { // only aliases can bomb
			if err := checkAliases(chunk, d.cfg.MaxAliasNodes); err != nil {
				err.Doc = d.doc
				return err
			}
		}
		j, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			e := &Error{Doc: d.doc, Err: ErrMalformed, Detail: err.Error()}
			if _, lenient := yaml.YAMLToJSON(chunk); lenient == nil {
				e.Err = ErrDuplicateField // only strictness failed: a key given twice
			}
			return e
		}
		if string(j) == "null" {
			continue // empty, or only comments
		}
		if err := d.object(j, "", false); err != nil {
			return err
		}
		d.doc++
	}
}

// object decodes one JSON object; prefix locates it inside its document
// ("items[3]"), inList forbids nested lists.
func (d *decoder) object(j []byte, prefix string, inList bool) error {
	if string(bytes.TrimSpace(j)) == "null" && prefix == "" {
		return nil
	}
	e := &Error{Doc: d.doc, Field: prefix}
	fail := func(sentinel error, detail string) error {
		e.Err, e.Detail = sentinel, detail
		return e
	}
	var generic any
	strict, err := sigsjson.UnmarshalStrict(j, &generic, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return fail(ErrMalformed, err.Error())
	}
	top, ok := generic.(map[string]any)
	if !ok {
		return fail(ErrMalformed, "not an object")
	}
	e.APIVersion, _ = top["apiVersion"].(string)
	e.Kind, _ = top["kind"].(string)
	if meta, ok := top["metadata"].(map[string]any); ok {
		e.Name, _ = meta["name"].(string)
		e.Namespace, _ = meta["namespace"].(string)
	}
	// A built-in generic kind's typed decoding reports its duplicate and
	// unknown fields together, in document order, as kube-apiserver's
	// strict decoder does (genericFromJSON); any other kind's duplicates
	// are reported here.
	typedGeneric := false
	if gk, ok := genericKind(e.APIVersion, e.Kind); ok && gk.APIVersion() == e.APIVersion && HasGoType(e.APIVersion, e.Kind) {
		typedGeneric = true
	}
	if err := fieldErrors(e, ErrDuplicateField, strict); err != nil && !typedGeneric {
		return err
	}
	if e.Kind == "List" && (e.APIVersion == "v1" || e.APIVersion == "") && !inList {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(j, &list); err != nil {
			return fail(ErrMalformed, err.Error())
		}
		for i, item := range list.Items {
			if err := d.object(item, joinPath(prefix, fmt.Sprintf("items[%d]", i)), true); err != nil {
				return err
			}
		}
		return nil
	}
	if d.objs++; d.objs > d.cfg.MaxDocuments {
		return fail(ErrTooLarge, fmt.Sprintf("more than %d objects", d.cfg.MaxDocuments))
	}
	k := kindByGVK[[2]string{e.APIVersion, e.Kind}]
	if k == nil {
		if gk, ok := genericKind(e.APIVersion, e.Kind); ok && gk.APIVersion() == e.APIVersion {
			u, warnings, err := genericFromJSON(j, e.APIVersion, e.Kind, e)
			if err != nil {
				return err
			}
			d.out = append(d.out, Object{APIVersion: e.APIVersion, Kind: e.Kind, Message: u, Warnings: warnings})
			return nil
		}
		return fail(ErrUnsupportedKind, fmt.Sprintf("apiVersion %q kind %q (supported: %s)",
			e.APIVersion, e.Kind, strings.Join(Kinds(), ", ")))
	}

	obj := k.newKube()
	strict, err = sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return fail(ErrMalformed, err.Error())
	}
	if err := fieldErrors(e, ErrUnknownField, strict); err != nil {
		return err
	}
	tree, err := kubeTree(obj)
	if err != nil {
		return fail(ErrMalformed, err.Error())
	}

	msg, drops, err := fromTree(k, tree, prefix)
	if err != nil {
		return fail(ErrMalformed, err.Error())
	}
	if k.kind == "Pod" {
		if errs := droppedPodFields(drops, prefix); len(errs) > 0 {
			return refusedError(e, errs)
		}
		drops = nil // status only: the system's, replaced on create
	}
	warnings := PodWarnings(msg)
	// A field podflow does not keep, sent with its zero value, loses
	// nothing: it is what podflow's own read returns for it (a Node's
	// status.daemonEndpoints, nodeInfo.bootID, sent back by kubectl
	// cordon, taint and drain), so it warrants no warning.
	drops = slices.DeleteFunc(drops, func(d dropped) bool { return zeroTree(d.value) })
	for _, p := range dropPaths(drops) {
		warnings = append(warnings, fmt.Sprintf("field %q is not supported by podflow and was dropped", p))
	}
	d.out = append(d.out, Object{APIVersion: k.apiVersion, Kind: k.kind, Message: msg, Warnings: warnings})
	return nil
}

// fieldErrors turns sigs.k8s.io/json strict errors into *Errors.
func fieldErrors(base *Error, sentinel error, strict []error) error {
	var errs []error
	for _, s := range strict {
		e := *base
		e.Err = sentinel
		if strings.HasPrefix(s.Error(), "duplicate field") {
			e.Err = ErrDuplicateField
		}
		var fe sigsjson.FieldError
		if errors.As(s, &fe) {
			e.Field = joinPath(base.Field, fe.FieldPath())
		} else {
			e.Detail = s.Error()
		}
		errs = append(errs, &e)
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// kubeTree re-marshals a typed Kubernetes object, which normalises it
// (quantities, IntOrString, times), into a generic JSON tree.
func kubeTree(obj runtime.Object) (any, error) {
	if s, ok := obj.(*corev1.Secret); ok && len(s.StringData) > 0 {
		// As the API server does: stringData is write-only sugar for data.
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return jsonTree(j)
}

func jsonTree(j []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// fromTree converts the Kubernetes JSON tree of kind k to its proto.
func fromTree(k *kind, tree any, prefix string) (proto.Message, []dropped, error) {
	if top, ok := tree.(map[string]any); ok {
		delete(top, "apiVersion")
		delete(top, "kind")
	}
	msg := k.newProto()
	var drops []dropped
	pj, err := json.Marshal(toProto(tree, msg.ProtoReflect().Descriptor(), k.shape, prefix, &drops))
	if err != nil {
		return nil, nil, err
	}
	if err := protojson.Unmarshal(pj, msg); err != nil {
		return nil, nil, err
	}
	return msg, drops, nil
}

// checkAliases parses doc without expanding aliases and refuses it if
// expanding them would add more than limit nodes.
func checkAliases(doc []byte, limit int) *Error {
	var root yaml3.Node
	if yaml3.Unmarshal(doc, &root) != nil {
		// Not countable: the real parse (go.yaml.in/yaml/v2, which has its
		// own alias-ratio check) reports the syntax error.
		return nil
	}
	c := aliasCounter{memo: map[*yaml3.Node]int{}, busy: map[*yaml3.Node]bool{}}
	literal := c.literal(&root)
	if expanded := c.expanded(&root); expanded-literal > limit {
		return &Error{Err: ErrTooLarge, Detail: fmt.Sprintf("YAML aliases expand to more than %d nodes", limit)}
	}
	return nil
}

type aliasCounter struct {
	memo map[*yaml3.Node]int
	busy map[*yaml3.Node]bool
}

const saturated = math.MaxInt / 4

func (c *aliasCounter) literal(n *yaml3.Node) int {
	total := 1
	for _, ch := range n.Content {
		total += c.literal(ch)
	}
	return total
}

// expanded counts the nodes of n with every alias replaced by its anchor's
// value; memoised per node, so it is linear in the document.
func (c *aliasCounter) expanded(n *yaml3.Node) int {
	if n.Kind == yaml3.AliasNode && n.Alias != nil {
		return c.expanded(n.Alias)
	}
	if v, ok := c.memo[n]; ok {
		return v
	}
	if c.busy[n] {
		return saturated // an alias inside its own anchor: infinite
	}
	c.busy[n] = true
	total := 1
	for _, ch := range n.Content {
		total = min(total+c.expanded(ch), saturated)
	}
	delete(c.busy, n)
	c.memo[n] = total
	return total
}

// zeroTree reports whether every leaf of a decoded JSON value is its
// type's zero value ("", 0, false, null, empty lists and objects).
func zeroTree(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case float64:
		return x == 0
	case int64:
		return x == 0
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case []any:
		for _, e := range x {
			if !zeroTree(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range x {
			if !zeroTree(e) {
				return false
			}
		}
		return true
	}
	return false
}
