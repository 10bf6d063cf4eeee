//go:build linux

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// printFaults prints the fault pass's figures as a table, each goal beside its figure.
func printFaults(w io.Writer, e faultsEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "faults: real control plane (kubeadm etcd + kube-apiserver) behind the ARP VIP; lab boot %.1f s\n", e.BootSeconds)
	if h := e.HardKill; h != nil {
		fmt.Fprintf(tw, "hard_kill (%d trials)\tp50\tp99\tmax\tgoal\n", h.Trials)
		fmt.Fprintf(tw, "  new connection answered after kill (ms)\t%.0f\t%.0f\t%.0f\tp99 < %d\n", h.NewConnectionMS.P50, h.NewConnectionMS.P99, h.NewConnectionMS.Max, newConnGoalMS)
		fmt.Fprintf(tw, "  client-go on its kept connection (ms)\t%.0f\t%.0f\t%.0f\t\n", h.KeptConnectionMS.P50, h.KeptConnectionMS.P99, h.KeptConnectionMS.Max)
		fmt.Fprintf(tw, "  rebuild: etcd member out, fresh machine joined and promoted (s)\t%.1f\t%.1f\t%.1f\t\n", h.RebuildSeconds.P50, h.RebuildSeconds.P99, h.RebuildSeconds.Max)
		fmt.Fprintf(tw, "  client-go writes / failed / etcd refused\t%d / %d / %d\t\t\t\n", h.ClientGo.Writes, h.ClientGo.FailedWrites, h.ClientGo.EtcdRefusals)
		fmt.Fprintf(tw, "  informer lost events / relists\t%d / %d\t\t\t0 lost\n", h.ClientGo.LostEvents, h.ClientGo.Relists)
		fmt.Fprintf(tw, "  leader losses\t%d\t\t\t0\n", h.ClientGo.LeaderLosses)
		fmt.Fprintf(tw, "  streams reset\t%d\t\t\t\n", h.ClientGo.StreamsReset)
		fmt.Fprintf(tw, "  goal met\t%v\t\t\t%s\n", h.GoalMet, h.Goal)
	}
	if q := e.QuorumLoss; q != nil {
		fmt.Fprintf(tw, "quorum_loss (%d trials, 2 of 3 etcd killed)\tp50\tp99\tmax\tgoal\n", q.Trials)
		fmt.Fprintf(tw, "  etcd down (s)\t%.1f\t%.1f\t%.1f\t\n", q.EtcdDownSeconds.P50, q.EtcdDownSeconds.P99, q.EtcdDownSeconds.Max)
		fmt.Fprintf(tw, "  writes succeed again after the restart (s)\t%.1f\t%.1f\t%.1f\t\n", q.WriteRecoverySeconds.P50, q.WriteRecoverySeconds.P99, q.WriteRecoverySeconds.Max)
		fmt.Fprintf(tw, "  VIP samples during the loss: no owner / two owners\t%d: %d / %d\t\t\t0 no owner\n", q.Loss.Samples, q.Loss.NoOwner, q.Loss.TwoOwners)
		fmt.Fprintf(tw, "    of them once every agent failed (fail-open)\t%d: %d / %d\t\t\t0 / 0\n", q.Steady.Samples, q.Steady.NoOwner, q.Steady.TwoOwners)
		fmt.Fprintf(tw, "  while quorum returned: no owner / two owners\t%d: %d / %d\t\t\t0 no owner (two: a hand-over's drain)\n", q.Return.Samples, q.Return.NoOwner, q.Return.TwoOwners)
		fmt.Fprintf(tw, "  API server answered at the VIP (super-admin)\t%d of %d\t\t\t\n", q.APIAnswered, q.Trials)
		fmt.Fprintf(tw, "  client-go writes / failed / etcd refused\t%d / %d / %d\t\t\tfailed or refused > 0: no quorum\n", q.ClientGo.Writes, q.ClientGo.FailedWrites, q.ClientGo.EtcdRefusals)
		fmt.Fprintf(tw, "  informer lost events / relists\t%d / %d\t\t\t0 lost\n", q.ClientGo.LostEvents, q.ClientGo.Relists)
		fmt.Fprintf(tw, "  leader losses\t%d\t\t\texpected %d: etcd down > renew deadline (10 s)\n", q.ClientGo.LeaderLosses, q.LeaderLossesExpected)
		fmt.Fprintf(tw, "  goal met\t%v\t\t\t%s\n", q.GoalMet, q.Goal)
	}
	if e.Error != "" {
		fmt.Fprintf(tw, "error\t%s\t\t\t\n", e.Error)
	}
}
