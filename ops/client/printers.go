package client

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// Output formats of `podflow get -o`, as kubectl names them.
const (
	outputTable         = ""
	outputWide          = "wide"
	outputJSON          = "json"
	outputYAML          = "yaml"
	outputName          = "name"
	outputJSONPath      = "jsonpath"
	outputCustomColumns = "custom-columns"
)

// allowedFormats is kubectl's list in its "unable to match a Printer" error.
const allowedFormats = "custom-columns,json,jsonpath,name,wide,yaml"

// Printer prints objects the way kubectl get does for one -o value.
type Printer struct {
	out           io.Writer
	format        string               // one of the output* constants
	template      *jsonpath.JSONPath   // -o jsonpath=TEMPLATE
	columns       []string             // -o custom-columns headers
	parsers       []*jsonpath.JSONPath // -o custom-columns field specs
	allNamespaces bool
	// Now is the time ages are printed as of (NewPrinter: the time
	// it was made).
	Now time.Time
	// ShowManagedFields keeps metadata.managedFields in json, yaml and
	// jsonpath output (kubectl's --show-managed-fields; off by default).
	ShowManagedFields bool
	// kindPrefix names each row KIND/NAME (a get of several kinds).
	kindPrefix bool
}

// NewPrinter parses an -o value: wide, json, yaml, name,
// jsonpath=TEMPLATE or custom-columns=HEADER:FIELD,...
func NewPrinter(out io.Writer, output string, allNamespaces bool) (*Printer, error) {
	p := &Printer{out: out, format: output, allNamespaces: allNamespaces, Now: time.Now()}
	format, arg, hasArg := strings.Cut(output, "=")
	switch format {
	case outputTable, outputWide, outputJSON, outputYAML, outputName:
		if !hasArg {
			return p, nil
		}
	case outputJSONPath:
		p.format = format
		if arg == "" {
			return nil, fmt.Errorf("template format specified but no template given")
		}
		p.template = jsonpath.New("out").AllowMissingKeys(true)
		if err := p.template.Parse(arg); err != nil {
			return nil, fmt.Errorf("error parsing jsonpath %s, %w", arg, err)
		}
		return p, nil
	case outputCustomColumns:
		p.format = format
		if err := p.parseColumns(arg); err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("unable to match a Printer suitable for the output format %q, allowed formats are: %s", output, allowedFormats)
}

// parseColumns parses kubectl's custom-columns spec, HEADER:FIELD,...
func (p *Printer) parseColumns(spec string) error {
	if spec == "" {
		return fmt.Errorf("custom-columns format specified but no custom columns given")
	}
	for i, part := range strings.Split(spec, ",") {
		header, field, ok := strings.Cut(part, ":")
		if !ok {
			return fmt.Errorf("unexpected custom-columns spec: %s, expected <header>:<json-path-expr>", part)
		}
		expr, err := relaxedJSONPath(field)
		if err != nil {
			return err
		}
		j := jsonpath.New(fmt.Sprintf("column%d", i)).AllowMissingKeys(true)
		if err := j.Parse(expr); err != nil {
			return err
		}
		p.columns = append(p.columns, header)
		p.parsers = append(p.parsers, j)
	}
	return nil
}

var relaxedPath = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// relaxedJSONPath turns a custom-columns field (name1.name2, .name1.name2,
// {name1.name2} or {.name1.name2}) into a template, as kubectl's
// RelaxedJSONPathExpression.
func relaxedJSONPath(expr string) (string, error) {
	if expr == "" {
		return expr, nil
	}
	m := relaxedPath.FindStringSubmatch(expr)
	if m == nil {
		return "", fmt.Errorf("unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'")
	}
	if m[1] != "" {
		return "{." + m[1] + "}", nil
	}
	return "{." + m[2] + "}", nil
}

// print prints objs. With list they are one result, printed as kubectl
// prints a list (a List for json, yaml and jsonpath); without, each is
// printed on its own (a single object, or an object seen by a watch).
// header prints the table's header line.
func (p *Printer) Print(kind objects.Kind, objs []objects.Object, header, list bool) error {
	switch p.format {
	case outputJSON, outputYAML, outputJSONPath:
		if !p.ShowManagedFields {
			objs = withoutManagedFields(objs)
		}
		if list {
			tree, err := listTree(objs)
			if err != nil {
				return err
			}
			return p.printTree(tree)
		}
		for i, o := range objs {
			if p.format == outputYAML && (i > 0 || !header) {
				fmt.Fprintln(p.out, "---")
			}
			if err := p.printObject(o); err != nil {
				return err
			}
		}
		return nil
	case outputName:
		for _, o := range objs {
			fmt.Fprintf(p.out, "%s/%s\n", strings.ToLower(kind.Name), o.GetMetadata().GetName())
		}
		return nil
	case outputCustomColumns:
		return p.printColumns(objs, header)
	}
	return p.printTable(kind, objs, header)
}

// withoutManagedFields returns objs, copied without metadata.managedFields
// where they have any, as kubectl prints them without
// --show-managed-fields.
func withoutManagedFields(objs []objects.Object) []objects.Object {
	out, copied := objs, false
	for i, o := range objs {
		if len(o.GetMetadata().GetManagedFields()) == 0 {
			continue
		}
		if !copied {
			out, copied = slices.Clone(objs), true
		}
		c := proto.CloneOf(o)
		c.GetMetadata().ManagedFields = nil
		out[i] = c
	}
	return out
}

// printObject prints one object as json, yaml or through the template.
func (p *Printer) printObject(o objects.Object) error {
	if p.format == outputJSONPath {
		tree, err := kubeTree(o)
		if err != nil {
			return err
		}
		return p.printTree(tree)
	}
	f := manifest.FormatYAML
	if p.format == outputJSON {
		f = manifest.FormatJSON
	}
	b, err := manifest.Encode(o, f)
	if err != nil {
		return err
	}
	_, err = p.out.Write(b)
	return err
}

// printTree prints a Kubernetes JSON tree as json, yaml or through the
// template, byte for byte as kubectl's printers do.
func (p *Printer) printTree(tree map[string]any) error {
	if p.format == outputJSONPath {
		return p.template.Execute(p.out, tree)
	}
	j, err := json.MarshalIndent(tree, "", "    ")
	if err != nil {
		return err
	}
	j = append(j, '\n')
	if p.format == outputYAML {
		if j, err = yaml.JSONToYAML(j); err != nil {
			return err
		}
	}
	_, err = p.out.Write(j)
	return err
}

// printColumns prints objs under kubectl's custom columns: each field's
// values joined by commas, <none> for a field with none.
func (p *Printer) printColumns(objs []objects.Object, header bool) error {
	tw := tabwriter.NewWriter(p.out, 6, 4, 3, ' ', 0)
	if header {
		fmt.Fprintln(tw, strings.Join(p.columns, "\t"))
	}
	for _, o := range objs {
		tree, err := kubeTree(o)
		if err != nil {
			return err
		}
		row := make([]string, len(p.parsers))
		for i, j := range p.parsers {
			results, err := j.FindResults(tree)
			if err != nil {
				return err
			}
			var vals []string
			if len(results) == 0 || len(results[0]) == 0 {
				vals = append(vals, "<none>")
			}
			for _, rs := range results {
				for _, v := range rs {
					vals = append(vals, printable(v))
				}
			}
			row[i] = strings.Join(vals, ",")
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// terminalEscaper is kubectl's printers.EscapeTerminal.
var terminalEscaper = strings.NewReplacer("\x1b", "^[", "\r", "\\r")

// printable is a custom-columns value as kubectl prints it (%v), with
// terminal control characters escaped.
func printable(v reflect.Value) string {
	s := fmt.Sprintf("%v", v.Interface())
	return terminalEscaper.Replace(s)
}

// kubeTree is o in its Kubernetes JSON form (what the API server returns
// for it), decoded as client-go's unstructured objects are: integers as
// int64, other numbers as float64.
func kubeTree(o objects.Object) (map[string]any, error) {
	b, err := manifest.Encode(o, manifest.FormatJSON)
	if err != nil {
		return nil, err
	}
	tree := map[string]any{}
	if err := utiljson.Unmarshal(b, &tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// listTree is objs as the List kubectl prints for several objects.
func listTree(objs []objects.Object) (map[string]any, error) {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		t, err := kubeTree(o)
		if err != nil {
			return nil, err
		}
		items = append(items, t)
	}
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "List",
		"items":      items,
		"metadata":   map[string]any{"resourceVersion": ""},
	}, nil
}
