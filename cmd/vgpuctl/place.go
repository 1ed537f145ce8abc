package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// placeCmd shows or sets the placement, or explains a placement.
func placeCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("place", stderr)
	var (
		policy  = fs.String("policy", "", "set the placement policy: fewest, round-robin or interference")
		dataset = fs.String("dataset", "", "load a co-run dataset file (bench/interference writes one) and retrain the model")
		explain = fs.Bool("explain", false, "say where an instance of -profile would go, with each device's score")
		profile = fs.String("profile", "", "with -explain: the vGPU type")
		hosts   = fs.String("hosts", "", "with -explain: control sockets of several vgpud daemons, comma separated: score every device of every host")
		asJSON  = fs.Bool("json", false, "print JSON")
		hint    hintFlags
	)
	hint.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("place: unexpected arguments %q", fs.Args())
	}
	if *explain {
		if *profile == "" {
			return errors.New("place -explain: -profile is required")
		}
		if *policy != "" || *dataset != "" {
			return errors.New("place -explain: explains; it sets nothing (no -policy or -dataset)")
		}
		cs := hostClients(c, *hosts)
		h, err := hint.resolve(ctx, cs)
		if err != nil {
			return err
		}
		best, exps, err := placeAcross(ctx, cs, *profile, h, stderr)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(w, exps)
		}
		return printExplain(w, cs, exps, best)
	}
	if hint.set() || *profile != "" || *hosts != "" {
		return errors.New("place: -profile, -hosts, -workload and -like go with -explain")
	}
	var st mdev.PlacementStatus
	var err error
	if *policy != "" || *dataset != "" {
		body := control.PlacementBody{Policy: mdev.PlacementPolicy(*policy)}
		if *dataset != "" {
			if body.Dataset, err = interference.Load(*dataset); err != nil {
				return err
			}
		}
		st, err = c.SetPlacement(ctx, body)
	} else {
		st, err = c.Placement(ctx)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, st)
	}
	fmt.Fprintf(w, "policy: %s\n", st.Policy)
	fmt.Fprintf(w, "model:  %s on the %s features\n", st.Model.Kind, st.Model.Set)
	if d := st.Dataset; d != nil {
		fmt.Fprintf(w, "dataset: %d workloads, %d pairs, measured %s on %s\n", len(d.Workloads), d.Pairs, d.Measured, d.Device)
		fmt.Fprintf(w, "workloads: %s\n", strings.Join(d.Workloads, " "))
	} else {
		fmt.Fprintln(w, "dataset: none (vgpuctl place -dataset FILE)")
	}
	return nil
}

// hintFlags are the flags that say what a new instance will run.
type hintFlags struct{ workload, like string }

func (h *hintFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.workload, "workload", "", "the new instance runs this workload of the dataset")
	fs.StringVar(&h.like, "like", "", "the new instance runs what instance UUID runs (its measured features)")
}

func (h *hintFlags) set() bool { return h.workload != "" || h.like != "" }

// resolve turns the flags into a hint every host understands: -like's
// features are read from whichever host has the instance.
func (h *hintFlags) resolve(ctx context.Context, cs []*control.Client) (mdev.PlaceHint, error) {
	switch {
	case h.workload != "" && h.like != "":
		return mdev.PlaceHint{}, errors.New("give -workload or -like, not both")
	case h.workload != "":
		return mdev.PlaceHint{Workload: h.workload}, nil
	case h.like == "":
		return mdev.PlaceHint{}, nil
	}
	if len(cs) == 1 {
		return mdev.PlaceHint{Like: h.like}, nil
	}
	for _, c := range cs {
		if in, err := c.Instance(ctx, h.like); err == nil {
			f := in.Features
			return mdev.PlaceHint{Features: &f}, nil
		}
	}
	return mdev.PlaceHint{}, fmt.Errorf("-like %s: no host has the instance", h.like)
}

// hostClients are the clients of -hosts, or c alone.
func hostClients(c *control.Client, hosts string) []*control.Client {
	if hosts == "" {
		return []*control.Client{c}
	}
	var cs []*control.Client
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cs = append(cs, control.NewClient(h))
		}
	}
	return cs
}

// placeAcross asks every host where it would place an instance of profile
// and picks the host whose chosen device scores lowest (then has the
// fewest instances, then comes first). A host that does not answer is
// skipped with a note on stderr; hosts must agree on the policy, whose
// scores are what is compared. best is -1 when no host has room.
func placeAcross(ctx context.Context, cs []*control.Client, profile string, h mdev.PlaceHint, stderr io.Writer) (best int, exps []*mdev.Explanation, err error) {
	exps = make([]*mdev.Explanation, len(cs))
	best = -1
	var policy mdev.PlacementPolicy
	answered := 0
	for i, c := range cs {
		ex, err := c.Explain(ctx, profile, h)
		if err != nil {
			if len(cs) == 1 {
				return -1, nil, err
			}
			fmt.Fprintf(stderr, "vgpuctl: host %s skipped: %v\n", c.SocketPath(), err)
			continue
		}
		answered++
		if policy == "" {
			policy = ex.Policy
		} else if ex.Policy != policy {
			return -1, nil, fmt.Errorf("hosts place by different policies (%s: %s, others: %s): their scores do not compare", c.SocketPath(), ex.Policy, policy)
		}
		exps[i] = &ex
		if ex.Chosen < 0 {
			continue
		}
		if b := best; b < 0 || ex.Score < exps[b].Score ||
			(ex.Score == exps[b].Score && ex.Candidates[ex.Chosen].Instances < exps[b].Candidates[exps[b].Chosen].Instances) {
			best = i
		}
	}
	if answered == 0 {
		return -1, nil, errors.New("no host answered")
	}
	return best, exps, nil
}

func printExplain(w io.Writer, cs []*control.Client, exps []*mdev.Explanation, best int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, ex := range exps {
		if ex == nil {
			continue
		}
		if i == 0 || len(exps) > 1 {
			fmt.Fprintf(tw, "policy %s, newcomer from %s (kernel mean %.3f ms, device util %.2f, %.1f MB/s to device)\n",
				ex.Policy, ex.From, ex.Newcomer.KernelMeanMs, ex.Newcomer.DeviceUtil, ex.Newcomer.ToDevMBps)
			break
		}
	}
	fmt.Fprintln(tw, "HOST\tDEVICE\tINSTANCES\tROOM\tSCORE\tCHOSEN")
	for i, ex := range exps {
		if ex == nil {
			continue
		}
		for _, cand := range ex.Candidates {
			score, mark := "-", ""
			if cand.Room {
				score = fmt.Sprintf("%.4f", cand.Score)
				if cand.Score == math.MaxFloat64 {
					score = "(model failed)"
				}
			}
			if i == best && cand.Device == ex.Chosen {
				mark = "<-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%s\t%s\n", cs[i].SocketPath(), cand.Device, cand.Instances, cand.Room, score, mark)
		}
	}
	if best < 0 {
		fmt.Fprintln(tw, "no device has room for the instance")
	}
	return tw.Flush()
}
