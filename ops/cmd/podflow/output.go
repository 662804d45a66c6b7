package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// dataOutput is the -o of a read command whose table has no Kubernetes
// kind (streams, store status, trace): "" for the table, json or yaml.
type dataOutput string

// outputFlag adds -o to cmd.
func outputFlag(cmd *cobra.Command, o *dataOutput) {
	cmd.Flags().StringVarP((*string)(o), "output", "o", "", "output format: json or yaml (default: a table)")
}

// validate refuses an unknown format before anything is read, with
// kubectl's words.
func (o dataOutput) validate() error {
	switch o {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json,yaml", string(o))
}

// print writes v as JSON or YAML; it reports false for the table.
func (o dataOutput) print(out io.Writer, v any) (bool, error) {
	switch o {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "    ")
		return true, enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = out.Write(b)
		return true, err
	}
	return false, nil
}

// jsonCompact is json.Compact.
func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
