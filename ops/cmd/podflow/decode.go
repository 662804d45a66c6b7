package main

import (
	"bytes"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podflow/podflow/bus"
)

func init() { register(newDecodeCmd) }

func newDecodeCmd() *cobra.Command {
	var pretty bool
	cmd := &cobra.Command{
		Use:   "decode",
		Short: "Print a bus event read from stdin (protobuf) as JSON",
		Long: `Read one message of podflow's event streams on stdin, as stored (protobuf,
possibly a node's report folding several steps), and print each event it
holds as JSON, one per line (--pretty: indented). Made for the stock nats
CLI, which runs it for each message:

  nats sub 'podflow.pod.>' --translate 'podflow decode'
  nats stream get PODFLOW_EVENTS 42 --translate 'podflow decode'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 8<<20))
			if err != nil {
				return err
			}
			envs, err := bus.DecodeEvents(bytes.TrimSuffix(data, []byte("\n")))
			if err != nil {
				envs, err = bus.DecodeEvents(data) // a newline may belong to the message
			}
			if err != nil {
				return fmt.Errorf("not a podflow event (%d bytes): %w", len(data), err)
			}
			opts := protojson.MarshalOptions{UseProtoNames: false, EmitUnpopulated: false}
			if pretty {
				opts.Multiline, opts.Indent = true, "  "
			}
			for _, env := range envs {
				b, err := opts.Marshal(env)
				if err != nil {
					return err
				}
				if !pretty {
					b = compact(b)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&pretty, "pretty", false, "indent the JSON")
	return cmd
}

// compact removes the random spaces protojson puts in its output.
func compact(b []byte) []byte {
	var out bytes.Buffer
	if err := jsonCompact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}
