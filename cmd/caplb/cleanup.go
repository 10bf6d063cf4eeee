package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/caplb/caplb/controllers"
)

// newCleanupCommand builds `caplb cleanup`: what to run after uninstalling the manager while
// LoadBalancers still exist (docs/install.md, "Uninstall"), and, with --workload-kubeconfig,
// to remove the kube-vip fences an aborted takeover left in a workload cluster.
func newCleanupCommand() *cobra.Command {
	var o controllers.CleanupOptions
	var workloadKubeconfig, leaseNamespace string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Release every hook, annotation and finalizer caplb placed (after uninstalling the manager)",
		Long: "Remove caplb's pre-drain hooks and member annotations from every Machine (and, with --nodes, Node), then\n" +
			"caplb's finalizer from every LoadBalancer, so that nothing waits on a manager that is gone. Stop the\n" +
			"manager first: a running one puts its marks back. Idempotent; --dry-run only reports.\n\n" +
			"With --workload-kubeconfig it does only this instead, and needs no stopped manager: delete the kube-vip\n" +
			"fences (Leases held by \"caplb:<namespace>/<name>\") that a takeover left in that workload cluster when its\n" +
			"LoadBalancer was deleted or its takeOver removed while the manager could not reach the cluster. A fence\n" +
			"whose LoadBalancer (read through --kubeconfig, the management cluster) still takes the VIP over is kept.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if workloadKubeconfig == "" {
				if leaseNamespace != "" {
					return errors.New("--lease-namespace selects the workload cluster's Leases: give --workload-kubeconfig too")
				}
			} else if o.Nodes || o.Namespace != "" {
				// The fence cleanup is safe while a manager runs; the management cleanup is not, so
				// one command line never does both.
				return errors.New("--workload-kubeconfig removes fences only: --nodes and --namespace belong to the management " +
					"cleanup, run it separately (without --workload-kubeconfig)")
			}
			var wl client.Client
			if workloadKubeconfig != "" {
				// Before the management kubeconfig: a wrong path is the likelier mistake.
				var err error
				if wl, err = newWorkloadClient(workloadKubeconfig); err != nil {
					return err
				}
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("loading the management cluster's kubeconfig (--kubeconfig): %w", err)
			}
			scheme := runtime.NewScheme()
			if err := controllers.AddToScheme(scheme); err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("connecting to the management cluster: %w", err)
			}
			if wl != nil {
				return runFenceCleanup(cmd.Context(), c, wl, controllers.FenceCleanupOptions{LeaseNamespace: leaseNamespace, DryRun: o.DryRun},
					cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runCleanup(cmd.Context(), c, o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "only Machines and LoadBalancers of this namespace (default: all)")
	fs.BoolVar(&o.Nodes, "nodes", false, "also clean Nodes (Node targets of a manager that ran inside the cluster)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would change, change nothing")
	fs.StringVar(&workloadKubeconfig, "workload-kubeconfig", "", "instead, delete the kube-vip fences an aborted takeover left in the "+
		"workload cluster of this kubeconfig file (clusterctl get kubeconfig <cluster>)")
	fs.StringVar(&leaseNamespace, "lease-namespace", "", "with --workload-kubeconfig: only Leases of this namespace "+
		"(default: all namespaces, or kube-system if listing across them is forbidden)")
	goFlags := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	ctrlconfig.RegisterFlags(goFlags) // --kubeconfig
	fs.AddGoFlagSet(goFlags)
	return cmd
}

// newWorkloadClient builds a client of the workload cluster from the kubeconfig file at path.
func newWorkloadClient(path string) (client.Client, error) {
	// Read first, so that a missing or unreadable file gets its own message rather than
	// clientcmd's.
	if _, err := os.ReadFile(path); err != nil {
		return nil, fmt.Errorf("--workload-kubeconfig: %w; write the workload cluster's kubeconfig there first "+
			"(clusterctl get kubeconfig <cluster> > %s)", err, path)
	}
	// The loading rules resolve the file's relative certificate paths against its directory.
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--workload-kubeconfig %s is not a usable kubeconfig: %w; give the workload cluster's "+
			"(clusterctl get kubeconfig <cluster>)", path, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the workload cluster of --workload-kubeconfig %s: %w", path, err)
	}
	return c, nil
}

func runCleanup(ctx context.Context, c client.Client, o controllers.CleanupOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := controllers.Cleanup(ctx, c, o)
	verb := "removed"
	if o.DryRun {
		verb = "would remove"
	}
	for _, h := range rep.Hooks {
		fmt.Fprintf(out, "%s hook %s\n", verb, h)
	}
	fmt.Fprintf(out, "%s caplb annotations from %d member(s)\n", verb, rep.Marks)
	for _, f := range rep.Finalizers {
		fmt.Fprintf(out, "%s the finalizer of LoadBalancer %s\n", verb, f)
	}
	for _, f := range rep.ClassFinalizers {
		fmt.Fprintf(out, "%s the finalizer of LoadBalancerClass %s\n", verb, f)
	}
	return err
}

// runFenceCleanup removes the fences (controllers.CleanupFences) and prints one line per fence;
// a narrowed search is noted on errOut.
func runFenceCleanup(ctx context.Context, mgmt, wl client.Client, o controllers.FenceCleanupOptions, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := controllers.CleanupFences(ctx, mgmt, wl, o)
	if rep.Fallback != "" {
		fmt.Fprintf(errOut, "note: %s\n", rep.Fallback)
	}
	verb := "removed"
	if o.DryRun {
		verb = "would remove"
	}
	for _, f := range rep.Fences {
		if f.Removed {
			fmt.Fprintf(out, "%s fence Lease %s of LoadBalancer %s (%s)\n", verb, f.Lease, f.LoadBalancer, f.Reason)
		} else {
			fmt.Fprintf(out, "kept fence Lease %s: %s\n", f.Lease, f.Reason)
		}
	}
	if len(rep.Fences) == 0 && err == nil {
		fmt.Fprintf(out, "no caplb fence Lease in %s of the workload cluster\n", rep.Scope)
	}
	return err
}
