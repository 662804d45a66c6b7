package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/plan"
)

func init() { register(newScaleCmd) }

func newScaleCmd() *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "scale STAGE=N...",
		Short: "Change a stage's replicas under a running `podflow up`",
		Long: `Start or stop replicas of a stage under the running ` + "`podflow up`" + `. New replicas
join the stage's durable consumer and take a share of the work at once;
removed replicas drain first, so no event is lost or handled twice.
` + "`podflow streams`" + ` shows the replicas working.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			for _, a := range args {
				stage, n, ok := strings.Cut(a, "=")
				v, err := strconv.Atoi(n)
				if !ok || err != nil {
					return fmt.Errorf("%q is not STAGE=N", a)
				}
				b, _ := json.Marshal(plan.ScaleRequest{Stage: stage, Replicas: v})
				msg, err := sess.Bus.NATS().Request(plan.ScaleSubject, b, 60*time.Second)
				if err != nil {
					return fmt.Errorf("scale %s: is `podflow up` running? %w", stage, err)
				}
				var resp plan.ScaleResponse
				if err := json.Unmarshal(msg.Data, &resp); err != nil {
					return err
				}
				if !resp.OK {
					return fmt.Errorf("scale %s: %s", stage, resp.Message)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stage/%s scaled to %d (%s)\n", stage, len(resp.Replicas), strings.Join(resp.Replicas, ", "))
			}
			return nil
		},
	}
	configFlag(cmd, &o.config)
	return cmd
}
