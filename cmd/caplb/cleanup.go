package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/caplb/caplb/controllers"
)

// newCleanupCommand builds `caplb cleanup`: what to run after uninstalling the manager while
// LoadBalancers still exist (docs/install.md, "Uninstall").
func newCleanupCommand() *cobra.Command {
	var o controllers.CleanupOptions
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Release every hook, annotation and finalizer caplb placed (after uninstalling the manager)",
		Long: "Remove caplb's pre-drain hooks and member annotations from every Machine (and, with --nodes, Node), then\n" +
			"caplb's finalizer from every LoadBalancer, so that nothing waits on a manager that is gone. Stop the\n" +
			"manager first: a running one puts its marks back. Idempotent; --dry-run only reports.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("loading the kubeconfig: %w", err)
			}
			scheme := runtime.NewScheme()
			if err := controllers.AddToScheme(scheme); err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return err
			}
			return runCleanup(cmd.Context(), c, o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "only Machines and LoadBalancers of this namespace (default: all)")
	fs.BoolVar(&o.Nodes, "nodes", false, "also clean Nodes (Node targets of a manager that ran inside the cluster)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would change, change nothing")
	goFlags := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	ctrlconfig.RegisterFlags(goFlags) // --kubeconfig
	fs.AddGoFlagSet(goFlags)
	return cmd
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
